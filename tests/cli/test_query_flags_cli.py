"""``predictor query`` against a real server (port 0): co-runners from flags, fallback guesses
flagged or refused, estimated signals shown, errors naming flags, a status table that fits 80 columns."""

from __future__ import annotations

import dataclasses

import pytest

from predictor.cli import main
from predictor.rpc.server import create_server, stop_server
from predictor.service import Service, ServiceConfig
from predictor.service.synthetic import synthetic_records


@pytest.fixture(scope="module")
def target():
    """A service that learned cpu0 only (kind SimGPU), with two device signals on every record."""
    service = Service(ServiceConfig(observation_log=False))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    for i, record in enumerate(synthetic_records(400, seed=5, devices=("cpu0",))):
        service.observe(dataclasses.replace(record, signals={"busy": 0.1 + (i % 7) / 10, "run_queue": i % 3}))
    yield f"127.0.0.1:{port}"
    stop_server(server, service, grace=0.5)


@pytest.fixture
def query(target, capsys, monkeypatch):
    """``query(*args)``: the exit status of ``predictor query --target T *args`` and its output,
    whitespace folded (rich wraps at 80 columns)."""
    monkeypatch.setenv("COLUMNS", "80")

    def run(*args: str) -> tuple[int, str]:
        status = main(["query", "--target", target, *args])
        captured = capsys.readouterr()
        return status, " ".join((captured.out + captured.err).split())

    return run


BATCH = ("--model", "resnet", "--batch-size", "4")


def test_rank_and_plan_work_for_devices_the_service_has_not_seen(query):
    status, out = query("rank", "--devices", "cpu0,cpu1", *BATCH, "--deadline-ms", "500")
    assert status == 1
    assert "--devices (its 2nd device, 'cpu1')" in out and "--idle" in out and "--co-runner" in out
    assert "co_runner_source" not in out and "candidates[1]" not in out

    # cpu1 idle but of no kind the service knows: answered, flagged as a guess, its kind asked for.
    status, out = query("rank", "--devices", "cpu0,cpu1", "--idle", *BATCH, "--deadline-ms", "500")
    assert status == 0, out
    assert out.startswith("UNKNOWN MODEL: fallback guess") and "GUESS" in out
    assert "give it with --device-kind (learned kinds: 'SimGPU')" in out

    status, out = query("rank", "--devices", "cpu0,cpu1", "--idle", "--device-kind", "SimGPU", *BATCH,
                        "--deadline-ms", "500")
    assert status == 0, out
    assert "cpu0" in out and "cpu1" in out and "GUESS" not in out and "UNKNOWN MODEL" not in out

    # cpu1 runs two batches, cpu0 nothing: cpu0 ranks first.
    status, out = query("rank", "--devices", "cpu1,cpu0", "--co-runner", "cpu1=bert:8:1",
                        "--co-runner", "cpu1=bert:8:1", "--idle", "--device-kind", "SimGPU", *BATCH,
                        "--deadline-ms", "500")
    assert status == 0, out
    assert out.index("│ 1 │ cpu0") < out.index("│ 2 │ cpu1")

    status, out = query("rank", "--devices", "cpu0,cpu1", "--co-runner", "gpu3=bert:8", *BATCH,
                        "--deadline-ms", "500")
    assert status == 2 and "--co-runner 'gpu3=bert:8'" in out and "--devices" in out

    status, out = query("plan", "--stage", "resnet:4", "--stage", "bert:2", "--edge", "0:1",
                        "--devices", "cpu0,cpu1", "--idle", "--device-kind", "SimGPU", "--deadline-ms", "900")
    assert status == 0, out
    assert "pipeline:" in out and "resnet" in out and "bert" in out
    status, out = query("plan", "--stage", "resnet:4", "--devices", "cpu0,cpu1", "--deadline-ms", "900")
    assert status == 1 and "--devices (its 2nd device, 'cpu1')" in out


def test_a_fallback_guess_is_flagged_loudly_or_refused(query):
    unknown = ("--device", "cpu0", "--model", "llama", "--batch-size", "4", "--idle")
    status, out = query("predict", *unknown)
    assert status == 0
    assert out.startswith("UNKNOWN MODEL: fallback guess")
    assert "FALLBACK GUESS" in out

    status, out = query("deadline", *unknown, "--deadline-ms", "50")
    assert status == 0 and "UNKNOWN MODEL: fallback guess" in out and "(from a fallback guess)" in out

    status, out = query("predict", *unknown, "--learned-only")
    assert status == 1
    assert out.startswith("FailedPrecondition: --model:") and "--solo-ms" in out
    assert "solo_latency_ms" not in out and "UNKNOWN MODEL" not in out

    status, out = query("rank", "--devices", "cpu0", "--idle", "--model", "llama", "--batch-size", "4",
                        "--deadline-ms", "50", "--learned-only")
    assert status == 1 and "FailedPrecondition" in out

    status, out = query("plan", "--stage", "resnet:4", "--stage", "llama:4", "--devices", "cpu0", "--idle",
                        "--deadline-ms", "900", "--learned-only")
    assert status == 1 and "--learned-only" in out and "1 llama" in out

    status, out = query("predict", "--device", "cpu0", *BATCH, "--idle", "--learned-only")
    assert status == 0 and "UNKNOWN MODEL" not in out and "FALLBACK" not in out


def test_predict_idle_shows_what_the_service_filled_in(query):
    status, out = query("predict", "--device", "cpu0", *BATCH, "--idle")
    assert status == 0, out
    assert "none (--idle: runs nothing else)" in out
    assert "estimated by the service │ 2 signals (" in out and "busy" in out and "run_queue" in out

    status, out = query("predict", "--device", "cpu0", *BATCH, "--co-runner", "bert:2")
    assert status == 0 and "(--co-runner)" in out and "overlap of co-runner" in out

    status, out = query("predict", "--device", "cpu0", *BATCH, "--co-runner", "bert:2:0.5", "--co-runner", "mlp:1:3")
    assert status == 1
    assert "InvalidArgument: --co-runner (the 2nd, its OVERLAP):" in out and "co_runners" not in out


def test_errors_name_flags_not_request_fields(query):
    status, out = query("predict", "--device", "gpu7", *BATCH)
    assert status == 1
    assert out.startswith("NotFound: --device: unknown device 'gpu7'")
    assert "--idle (nothing) or --co-runner MODEL:BATCH[:OVERLAP]" in out and "co_runner_source" not in out

    status, out = query("deadline", "--device", "cpu0", *BATCH, "--idle", "--deadline-ms", "40", "--confidence", "1.5")
    assert status == 1 and out.startswith("InvalidArgument: --confidence:")


def test_status_fits_80_columns_without_cutting_a_header(target, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["query", "--target", target, "status"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "observations" in out and "residuals" in out and "SimGPU" in out
