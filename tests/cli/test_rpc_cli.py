"""``predictor serve`` as a real process, ``predictor query`` against it, a clean stop on SIGTERM."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from serve_process import start_server

from predictor.cli import main
from predictor.records.logio import write_records
from predictor.rpc.client import InterferenceClient
from predictor.service.synthetic import synthetic_records


@pytest.fixture
def server(tmp_path):
    log = tmp_path / "warm.jsonl"
    write_records(log, synthetic_records(300, seed=2, devices=("cpu0",)))
    state = tmp_path / "state"
    served = start_server(tmp_path, "--state", str(state), "--warm-start", str(log))
    with InterferenceClient(served.target) as client:
        client.wait_ready(30)
    yield served, state
    served.kill()


def test_serve_query_and_stop(server, capsys):
    served, state = server
    lines = served.wait_for("; SERVING").splitlines()
    assert any("warm start" in line and "300 records read" in line for line in lines), lines
    target = ["--target", served.target]
    assert main(["query", *target, "status"]) == 0
    out = capsys.readouterr().out
    assert "300 observations learned" in out and "SimGPU" in out
    assert (
        main(
            [
                "query",
                *target,
                "predict",
                "--device",
                "cpu0",
                "--model",
                "bert",
                "--batch-size",
                "4",
                "--co-runner",
                "mlp:2:0.5",
                "--attr",
                "l2_util=0.5",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "predicted latency" in out and "mlp×2 (0.50)" in out
    assert (
        main(
            [
                "query",
                *target,
                "deadline",
                "--device",
                "cpu0",
                "--model",
                "bert",
                "--batch-size",
                "4",
                "--deadline-ms",
                "1000",
            ]
        )
        == 0
    )
    assert "feasible" in capsys.readouterr().out
    assert (
        main(
            [
                "query",
                *target,
                "rank",
                "--devices",
                "cpu0",
                "--model",
                "mlp",
                "--batch-size",
                "2",
                "--deadline-ms",
                "50",
            ]
        )
        == 0
    )
    assert "cpu0" in capsys.readouterr().out
    assert main(["query", *target, "predict", "--device", "gpu7", "--model", "m", "--batch-size", "1"]) == 1
    assert "NotFound" in capsys.readouterr().out
    returncode = served.stop()  # SIGTERM
    output = served.output()
    assert returncode == 0, output
    assert "state saved" in output
    assert (state / "service.snapshot").exists()


SERVER_SIDE = ("numba", "scipy", "predictor.predictors", "predictor.service.core", "predictor.rpc.candidate_wire")
"""What a client of the service never loads: the compiled kernels, BLAS, the learners, the service."""


def test_a_client_asks_without_loading_the_learners(server):
    """``predictor query`` in a fresh interpreter answers from the real server, and neither it nor
    ``from predictor import InterferenceClient, Query`` loads what only the service computes with."""
    served, _ = server
    code = ("import json, sys\nfrom predictor import BatchSpec, InterferenceClient, Query\n"
            "from predictor.cli.main import main\n"
            f"status = main(['query', '--target', {served.target!r}, 'deadline', '--device', 'cpu0', '--model', 'bert',"
            " '--batch-size', '4', '--deadline-ms', '1000'])\n"
            f"with InterferenceClient({served.target!r}) as client:\n"
            "    answer = client.predict(Query('cpu0', BatchSpec('bert', 4)))\n"
            f"print(json.dumps([status, answer.latency_ms, [m for m in {SERVER_SIDE!r} if m in sys.modules]]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "feasible" in done.stdout
    status, latency, loaded = json.loads(done.stdout.splitlines()[-1])
    assert status == 0 and latency > 0
    assert loaded == []


def test_serve_refuses_a_corrupt_snapshot(tmp_path):
    (tmp_path / "service.snapshot").write_bytes(b"not a snapshot")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "predictor.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--metrics-port",
            "0",
            "--state",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "not a predictor snapshot" in result.stderr

