"""Poisoning: a burst of absurd latencies from one client must not wreck the model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from predictor.predictors import create
from predictor.prequential.evaluation import Scored, split_records, summarize
from predictor.records.importers.igniter import import_igniter
from predictor.service.guards.robust import OutlierGate


def feed(predictor, gate, records, source):
    for record in records:
        if gate.admit(predictor.predict_one(record), record.latency_ms, source):
            predictor.learn_one(record)


def mape(predictor, records):
    return summarize(Scored([predictor.predict_one(r) for r in records], [r.latency_ms for r in records]))["mape"]


@pytest.mark.parametrize("name", ["rls", "sgd"])
def test_thousand_poisoned_observations_leave_clean_error_within_ten_percent(igniter_config, name):
    train, test = split_records(list(import_igniter(igniter_config)), 0.75, seed=0)
    predictor, gate = create(name), OutlierGate()
    feed(predictor, gate, train, "clean")
    before = mape(predictor, test)
    rng = np.random.default_rng(0)
    poisoned = [
        dataclasses.replace(train[i % len(train)], latency_ms=train[i % len(train)].latency_ms * float(f))
        for i, f in enumerate(rng.choice([1000.0, 50.0, 0.02, 1e-3], size=1000))
    ]
    feed(predictor, gate, poisoned, "attacker")
    after = mape(predictor, test)
    assert gate.n_rejected >= 1000
    assert after <= 1.10 * before, (before, after)


def test_a_shift_seen_by_many_sources_is_learned():
    gate = OutlierGate(warmup=20, escape_window=50)
    for i in range(200):
        assert gate.admit(10.0, 10.0 * (1 + 0.01 * (i % 5)), "a")
    # every reporter now sees latencies 5x the prediction: after a while the gate lets them in
    decisions = [gate.admit(10.0, 50.0, "ab"[i % 2]) for i in range(120)]
    assert not decisions[0] and any(decisions) and gate.n_escapes >= 1
    # ...but the same shift from a single source stays out
    single = OutlierGate(warmup=20, escape_window=50)
    for _ in range(200):
        single.admit(10.0, 10.0, "a")
    assert not any(single.admit(10.0, 50.0, "evil") for _ in range(500))


def test_gate_arguments_are_validated():
    with pytest.raises(ValueError, match="min_ratio"):
        OutlierGate(min_ratio=1.0)
