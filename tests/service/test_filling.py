"""Filling what a query leaves out: signals from the device's smoothed recent signals, overlaps
from the observed mean per (device kind, co-runner count); the answer names what it estimated
(``Prediction.estimated``, also through a real gRPC server)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.rpc.client import InterferenceClient
from predictor.rpc.server import create_server, stop_server
from predictor.service import (
    Candidate,
    CoRunnerSource,
    Deadline,
    PlannedCoRunner,
    Query,
    Service,
    ServiceConfig,
)
from predictor.service.estimates.filling import MAX_COUNT, MIN_OBSERVATIONS, OverlapStats

KIND = "SimCPU"
BATCH = BatchSpec("bert", 2, {"gflops": 0.3})
RUNNER = CoRunner("mlp", 2, {"gflops": 0.2})


def _log(n: int = 600, seed: int = 0) -> list[Record]:
    """Latency rises with a device signal (``busy``: high on cpu0, low on cpu1) and with the
    co-runner's overlap (about 0.3 whenever there is one)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        device = f"cpu{i % 2}"
        busy = float(np.clip(rng.normal(0.8 if device == "cpu0" else 0.1, 0.05), 0, 1))
        runners = (CoRunner(RUNNER.model, RUNNER.batch_size, RUNNER.attrs, float(rng.uniform(0.2, 0.4))),) \
            if rng.random() < 0.5 else ()
        slowdown = 1.0 + 1.5 * busy + sum(2.0 * r.overlap for r in runners)
        out.append(Record(device, BATCH, 5.0 * slowdown * float(np.exp(rng.normal(0, 0.02))), device_kind=KIND,
                          solo_latency_ms=5.0, co_runners=runners, signals={"busy": busy}))
    return out


def _service(fill: bool = True) -> Service:
    service = Service(ServiceConfig(fill_missing=fill, observation_log=False))
    service.open()
    for record in _log():
        service.observe(record)
    return service


def _admission(device: str, runners: tuple[PlannedCoRunner, ...] = ()) -> Query:
    return Query(device, BATCH, KIND, runners, CoRunnerSource.EXPLICIT, solo_latency_ms=5.0)


def test_missing_signals_come_from_the_device_and_are_named():
    filled, blind = _service(True), _service(False)
    busy, calm = filled.predict(_admission("cpu0")), filled.predict(_admission("cpu1"))
    assert busy.estimated == ("signals.busy",) and calm.estimated == ("signals.busy",)
    # The busy device's answer is near what it runs at (about 5 * (1 + 1.5 * 0.8) = 11 ms) ...
    assert busy.latency_ms == pytest.approx(11.0, rel=0.1) and calm.latency_ms == pytest.approx(5.75, rel=0.1)
    # ... where answering with no signals cannot tell the two apart.
    assert blind.predict(_admission("cpu0")).estimated == ()
    # What the query says wins.
    told = filled.predict(Query("cpu0", BATCH, KIND, (), CoRunnerSource.EXPLICIT, {"busy": 0.1}, 5.0))
    assert told.estimated == () and told.latency_ms == pytest.approx(calm.latency_ms, rel=0.05)


def test_a_device_never_observed_gets_its_kinds_signals():
    service = _service()
    assert service.predict(_admission("cpu7")).estimated == ("signals.busy",)


def test_missing_overlaps_come_from_the_observed_mean():
    service = _service()
    runner = PlannedCoRunner(RUNNER.model, RUNNER.batch_size, RUNNER.attrs)
    answer = service.predict(_admission("cpu0", (runner,)))
    assert answer.co_runners[0].overlap == pytest.approx(0.3, abs=0.03)
    assert set(answer.estimated) == {"signals.busy", "co_runners[0].overlap"}
    given = service.predict(_admission("cpu0", (PlannedCoRunner(RUNNER.model, 2, RUNNER.attrs, overlap=0.3),)))
    assert "co_runners[0].overlap" not in given.estimated
    assert answer.latency_ms == pytest.approx(given.latency_ms, rel=0.05)
    assert answer.latency_ms == pytest.approx(5.0 * (1 + 1.5 * 0.8 + 2.0 * 0.3), rel=0.1)  # what it runs at
    # Without filling (the signal given, so that only the overlap differs) it counts a full overlap.
    blind = _service(False).predict(
        Query("cpu0", BATCH, KIND, (runner,), CoRunnerSource.EXPLICIT, {"busy": 0.8}, 5.0))
    assert blind.co_runners[0].overlap == 1.0 and blind.latency_ms > answer.latency_ms * 1.3


def test_remaining_time_overlaps_are_named_estimated():
    service = _service()
    runner = PlannedCoRunner(RUNNER.model, RUNNER.batch_size, RUNNER.attrs, remaining_ms=2.0)
    answer = service.predict(_admission("cpu0", (runner,)))
    assert "co_runners[0].overlap" in answer.estimated and 0 < answer.co_runners[0].overlap < 1


def test_rankings_fill_and_name_per_candidate_through_grpc():
    service = Service(ServiceConfig(observation_log=False))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    try:
        for record in _log():
            service.observe(record)
        client = InterferenceClient(f"127.0.0.1:{port}")
        client.wait_ready(10)
        runner = PlannedCoRunner(RUNNER.model, RUNNER.batch_size, RUNNER.attrs)
        prediction = client.predict(_admission("cpu0", (runner,)))
        assert set(prediction.estimated) == {"signals.busy", "co_runners[0].overlap"}
        ranking = client.rank_placements(
            BATCH,
            [Candidate("cpu0", KIND, (runner,), CoRunnerSource.EXPLICIT),
             Candidate("cpu1", KIND, (), CoRunnerSource.EXPLICIT, {"busy": 0.1})],
            1000.0, solo_latency_ms=5.0,
        )
        estimated = {p.device: set(p.prediction.estimated) for p in ranking.placements}
        assert estimated == {"cpu0": {"signals.busy", "co_runners[0].overlap"}, "cpu1": set()}
        assert ranking.placements[0].device == "cpu1"  # calm and idle
        direct = service.rank_placements(BATCH, [Candidate("cpu0", KIND, (runner,), CoRunnerSource.EXPLICIT)],
                                         Deadline(ms=1000.0), solo_latency_ms=5.0)
        assert direct.placements[0].prediction.latency_ms == pytest.approx(prediction.latency_ms)
        client.close()
    finally:
        stop_server(server, service, grace=0.5)


def test_filling_survives_a_snapshot(tmp_path):
    service = _service()
    before = service.predict(_admission("cpu0"))
    path = service.save_snapshot(tmp_path / "s.snapshot")
    fresh = Service(ServiceConfig(observation_log=False))
    fresh.restore_snapshot(path)
    fresh.mark_ready()
    after = fresh.predict(_admission("cpu0"))
    assert after.estimated == before.estimated and after.latency_ms == pytest.approx(before.latency_ms)


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.lists(st.floats(0, 1), min_size=1, max_size=20)),
                max_size=300))
def test_filled_overlap_never_falls_with_more_co_runners(observations):
    """Adding an overlap-less co-runner never lowers the overlap filled in for the others."""
    stats = OverlapStats()
    for kind, overlaps in observations:
        stats.observe(kind, overlaps)
    for kind in ("a", "b", "c"):
        fills = [stats.fill(kind, k) for k in range(1, MAX_COUNT + 5)]
        assert fills == sorted(fills) and all(0.0 <= f <= 1.0 for f in fills)


def test_overlap_statistics_need_enough_observations():
    stats = OverlapStats()
    for _ in range(MIN_OBSERVATIONS - 1):
        stats.observe("a", [0.2])
    assert stats.fill("a", 1) == 1.0
    stats.observe("a", [0.2])
    assert stats.fill("a", 1) == pytest.approx(0.2)
