"""Batches whose solo latency nobody gives (and that never ran alone) get bounds learned from their
own observations, not the wide fallback; only a batch never observed at all gets the fallback.

A record's answers before its model and batch size were learned are guesses: their residuals are
kept out of the calibration, so one wild first guess does not skew a cell's later answers."""

from __future__ import annotations

import dataclasses

import numpy as np

from predictor.analysis.admission_replay import admission_query
from predictor.records.record import BatchSpec
from predictor.service import CoRunnerSource, Query, Service, ServiceConfig
from predictor.service.admission import record_shape
from predictor.service.synthetic import synthetic_records


def _unprofiled(n: int) -> list:
    """Synthetic records with at least one overlapping co-runner each (none ran alone), solo removed."""
    kept = [r for r in synthetic_records(n, seed=5) if any(c.overlap > 0 for c in r.co_runners)]
    return [dataclasses.replace(r, solo_latency_ms=None) for r in kept]


def test_learned_batches_without_solo_get_calibrated_bounds_and_unseen_ones_the_fallback():
    records = _unprofiled(3000)
    service = Service(ServiceConfig(snapshot_every_s=0, observation_log=False, outlier_gate=False))
    service.open()
    scored = []
    service.observe(records[0])  # nothing learned, no solo given: no basis for any answer yet
    for i, record in enumerate(records[1:], 1):
        answer = service.predict(admission_query(record), 0.95)
        if i >= len(records) // 2:
            scored.append((answer.fallback, answer.latency_ms / record.latency_ms,
                           record.latency_ms <= answer.upper_bound_ms, answer.upper_bound_ms / record.latency_ms))
        service.observe(record)
    fallback, ratio, covered, width = (np.array(column) for column in zip(*scored, strict=True))
    assert not fallback.any()  # every model and batch size of the second half was learned before
    assert 0.85 <= covered.mean() <= 0.995, covered.mean()
    assert np.median(width) < 2.0  # the fallback's bound is several times the latency
    assert 0.8 <= np.median(ratio) <= 1.25
    assert np.mean(np.abs(ratio - 1.0)) < 0.5  # no wild point answers from a cell skewed by guesses

    never = Query("sim0", BatchSpec(records[0].batch.model, 99, dict(records[0].batch.attrs)), device_kind="SimGPU",
                  co_runner_source=CoRunnerSource.EXPLICIT)
    answer = service.predict(never, 0.95)
    assert answer.fallback  # this batch size was never observed, and no solo latency is given


def test_a_guess_calibrates_nothing():
    records = _unprofiled(400)[:150]
    service = Service(ServiceConfig(snapshot_every_s=0, observation_log=False, outlier_gate=False))
    service.open()
    for record in records:
        service.observe(record)
    keys = {(r.batch.model, r.batch.batch_size) for r in records}
    calibrator = service.state.admission.calibrator
    own = sum(calibrator.n_residuals(shape, "SimGPU") for shape in {record_shape(r) for r in records})
    assert own == len(records) - len(keys)  # each key's first record was predicted by a guess
