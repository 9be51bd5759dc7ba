"""Smoke tests of the experiment scripts: the scheduler simulation over a real gRPC channel,
the drift study's change points and recovery times (seconds, synthetic data)."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from experiments.studies import new_device_kind
from experiments.studies.drift import change_points, recovery
from experiments.studies.scheduler_sim import Config, Dispatcher, LatencyPool, run
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.service.synthetic import synthetic_records


def test_dispatcher_parse():
    assert Dispatcher.parse("online=rls/bound/learn") == Dispatcher("online", "rls", "bound", True)
    assert Dispatcher.parse("x=solo/point") == Dispatcher("x", "solo", "point", False)
    with pytest.raises(ValueError):
        Dispatcher.parse("x=solo/maybe")


def test_latency_pool_matches_co_runners_then_falls_back():
    def rec(latency, *co):
        return Record("d", BatchSpec("a", 1), latency, co_runners=tuple(CoRunner(m, 1) for m in co))

    pool = LatencyPool([rec(1.0), rec(2.0, "b"), rec(3.0, "c"), rec(4.0, "b", "c")])
    rng = random.Random(0)
    assert pool.draw("a", 1, (), rng) == 1.0
    assert pool.draw("a", 1, ("b",), rng) == 2.0
    assert pool.draw("a", 1, ("c", "b"), rng) == 4.0
    assert pool.draw("a", 1, ("b", "b"), rng) == 4.0  # same count
    assert pool.draw("a", 1, ("b", "b", "b"), rng) == 4.0  # nearest count
    assert set(pool.levels) == {"same co-runner models", "same number of co-runners", "nearest number of co-runners"}


def test_scheduler_simulation_over_grpc():
    records = synthetic_records(400, seed=3, devices=("cpu0",))
    config = Config(devices=2, slots=2, loads=(0.5, 1.5), arrivals=120, slo_factor=1.3)
    results = run(config, records)
    assert set(results["loads"]) == {"0.5", "1.5"}
    for run_ in results["loads"].values():
        assert set(run_["dispatchers"]) == {"oblivious", "static", "static-bound", "online", "online-point"}
        for r in run_["dispatchers"].values():
            assert r["placed"] + r["rejected_full"] + r["rejected_infeasible"] == 120
            assert 0 <= r["utilisation"] <= 1 and 0 <= r["slot_occupancy"] <= 1
            assert r["rank_rpc_ms"] > 0
    # The oblivious dispatcher believes every batch meets a deadline above its solo latency.
    assert results["loads"]["0.5"]["dispatchers"]["oblivious"]["rejected_infeasible"] == 0


def test_drift_change_points_and_recovery():
    base = [Record("d", BatchSpec("a" if t < 10 else "b", 1), 1.0, start_s=100.0 + t) for t in np.arange(0, 20, 0.5)]
    points = change_points(base, "0:a@10;10:b@10")
    assert points[0]["index"] == 20 and points[0]["used_s"] == pytest.approx(10.0)
    curve = np.array([1.0] * 10 + [3.0, 2.0, 1.1, 1.0])
    assert recovery(curve, 10, 14, 1.2) == 3
    assert recovery(curve, 12, 14, 1.2) == 0
    assert recovery(np.array([1.0, 2.0, 2.0]), 1, 3, 1.2) is None
    assert dataclasses.is_dataclass(Config)


def test_new_device_kind_arms_see_the_same_arrivals_and_the_new_kind_leaves_the_fallback():
    """The study's two arms decide the same arrivals; only the new kind's first answers are
    fallbacks, and the known kind's never are."""
    records = synthetic_records(700, seed=5, devices=("cpu0", "cpu1"))
    config = new_device_kind.Config(phases=(50,), seed=1)
    results = new_device_kind.run(config, records)
    assert results["warm_records"] == 350 and results["arrivals"] == 350
    known, new = results["arms"]["known"], results["arms"]["new"]
    assert list(known["by_phase"]) == list(new["by_phase"]) == ["0-50", "50-350"]
    assert known["by_phase"]["0-50"]["fallback"] == 0.0
    assert new["by_phase"]["0-50"]["fallback"] > 0.0 and new["by_phase"]["50-350"]["fallback"] == 0.0
    for arm in (known, new):
        assert sum(row["decisions"] for row in arm["by_phase"].values()) == 350
        assert 0.0 <= arm["by_phase"]["50-350"]["admitted"] <= 1.0
