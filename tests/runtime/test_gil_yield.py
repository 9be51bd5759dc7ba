"""The learner's pauses for answers (predictor.runtime.gil_yield): where a block of ingest pauses, that the
pauses change no result, and how ``predictor serve`` sets them."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from reference_answers import answers_of
from serve_process import ROOT, start_server

from predictor.runtime import gil_yield
from predictor.runtime.gil_yield import asked, check_period_ms, paused, point, yielding
from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.synthetic import synthetic_records


def test_a_point_pauses_once_a_period_has_passed_and_never_when_off(monkeypatch) -> None:
    monkeypatch.setattr(gil_yield, "_asked_ns", -(1 << 62))  # no answer before (an earlier test's server may have given one)
    with yielding(50.0):
        point()
        assert paused() == 0  # nothing asked of the service: the learner never pauses
        asked()
        point()
        assert paused() == 1  # none before: a whole period has passed
        point()
        point()
        assert paused() == 1  # within the period
        time.sleep(0.06)
        point()
        assert paused() == 2
        gil_yield._asked_ns -= gil_yield._ASKED_WITHIN_NS  # the last question long ago
        time.sleep(0.06)
        point()
        assert paused() == 2
    with yielding(0):
        asked()
        for _ in range(1000):
            point()
        assert paused() == 0
    assert gil_yield._period_ns == 0  # restored: off, as in every process by default


@pytest.mark.parametrize("bad", [-1, 1001])
def test_a_period_out_of_range_is_refused_naming_the_option(bad: float) -> None:
    with pytest.raises(ValueError, match="--learner-yield-ms"):
        check_period_ms(bad)


def _ingest(records, period_ms: float, asking: bool = True) -> tuple[list[float], int, list[int]]:
    """The answers to the reference queries of a service that learned ``records`` in messages of 128
    (each message just after a question when ``asking``), the pauses made, and each message's count
    of records accepted."""
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open()
    with yielding(period_ms):
        accepted = []
        for at in range(0, len(records), 128):
            if asking:
                asked()
            else:
                gil_yield._asked_ns -= gil_yield._ASKED_WITHIN_NS
            accepted.append(service.report_observations([(r, "") for r in records[at:at + 128]]).accepted)
        count = paused()
    return answers_of(service.predict), count, accepted


def test_a_block_of_ingest_pauses_and_learns_the_same() -> None:
    """With a period shorter than anything, every point of a block pauses: the replay's groups and
    the calibrator's block reach them; the service learns exactly what it learns without pauses."""
    records = list(synthetic_records(512, seed=4))
    expected, none, accepted = _ingest(records, 0)
    got, many, accepted_pausing = _ingest(records, 1e-6)
    assert none == 0 and many > len(records)  # per record in the replay and the calibrator, and more
    assert accepted_pausing == accepted and sum(accepted) > 400
    assert got == expected  # to the bit: a pause changes when, never what
    unasked, never, _ = _ingest(records, 1e-6, asking=False)
    assert never == 0 and unasked == expected  # a service nobody asks learns without pausing


def _started(tmp_path, *args: str) -> str:
    server = start_server(tmp_path, *args)
    try:
        return server.wait_for("; SERVING")
    finally:
        server.stop()


def test_a_one_process_server_pauses_its_learner_by_default_and_never_when_told_zero(tmp_path) -> None:
    assert "learner: pauses for answers every 0.5 ms of a block" in _started(tmp_path / "a")
    assert "learner: never pauses for answers" in _started(tmp_path / "b", "--learner-yield-ms", "0")


def test_a_bad_period_stops_the_server_naming_the_option() -> None:
    done = subprocess.run([sys.executable, "-m", "predictor.cli", "serve", "--port", "0", "--learner-yield-ms", "-1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and "--learner-yield-ms" in done.stderr, done.stderr


def test_a_server_notes_each_question_and_sets_its_learner_s_pauses(tmp_path) -> None:
    """A one-process server in this process: its learner pauses every 0.5 ms while it serves (restored
    after); a PredictLatency call is noted as a question, a stream of observations is not."""
    from reference_answers import QUERIES
    from serve_process import serving_in_thread

    from predictor.rpc.client import InterferenceClient
    from predictor.rpc.processes.options import ServeOptions
    from predictor.service import ServiceConfig

    options = ServeOptions(host="127.0.0.1", port=0, metrics_port=0, port_file=str(tmp_path / "port"), grace_s=0.1)
    with serving_in_thread(ServiceConfig(snapshot_every_s=0), options) as target:
        assert gil_yield._period_ns == 500_000
        with InterferenceClient(target) as client:
            gil_yield._asked_ns = -(1 << 62)
            client.report_observations(list(synthetic_records(64, seed=5)))
            assert gil_yield._asked_ns < 0  # learning is not a question
            before = time.perf_counter_ns()
            client.predict(QUERIES[0])
            assert gil_yield._asked_ns >= before
    assert gil_yield._period_ns == 0
