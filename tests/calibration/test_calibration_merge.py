"""Merging calibrators of disjoint streams: exact across shards of device kinds, and coverage
within half a point of a calibrator that learned the whole stream."""

from __future__ import annotations

import math
import pickle
import random

import pytest

from predictor.calibration.conformal import ConformalCalibrator, ResidualWindow
from predictor.calibration.merge import (
    merge_conformal_calibrators,
    merge_shape_calibrators,
    merge_windows,
)
from predictor.calibration.shape import ShapeCalibrator
from predictor.calibration.shapes import QueryShape

SHAPE = QueryShape("overlap", False)
MODELS = {"mlp": 0.05, "bert": 0.3}  # each model's log-normal spread around its prediction


def outcome(rng: random.Random, model: str, count: int) -> tuple[float, float]:
    """(actual, predicted) of one answer: predictions biased by the co-runner count, noisy by model."""
    predicted = 10.0
    return predicted * math.exp(0.05 * count + rng.gauss(0.0, MODELS[model])), predicted


def feed(calibrator: ShapeCalibrator, kind: str, n: int, rng: random.Random) -> None:
    for _ in range(n):
        model, count = rng.choice(list(MODELS)), rng.randrange(4)
        actual, predicted = outcome(rng, model, count)
        calibrator.add(SHAPE if count else SHAPE.idle, kind, count, model, actual=actual, predicted=predicted)


def test_windows_merge_to_their_union_when_it_fits_and_keep_both_sides_recent_ends():
    a, b = ResidualWindow(10), ResidualWindow(10)
    for v in (1.0, 2.0, 3.0):
        a.add(v)
    for v in (10.0, 20.0):
        b.add(v)
    assert sorted(merge_windows(a, b).values()) == [1.0, 2.0, 3.0, 10.0, 20.0]
    small_a, small_b = ResidualWindow(4), ResidualWindow(4)
    for v in range(4):
        small_a.add(float(v))
        small_b.add(100.0 + v)
    merged = merge_windows(small_a, small_b)
    assert sorted(merged.values()) == [2.0, 3.0, 102.0, 103.0]  # the two most recent of each side


def test_shards_of_disjoint_device_kinds_merge_exactly():
    rng = random.Random(0)
    shards = {"A100": ShapeCalibrator(min_residuals=20), "EPYC": ShapeCalibrator(min_residuals=20)}
    for kind, calibrator in shards.items():
        feed(calibrator, kind, 3000, rng)
    before = pickle.dumps(shards)
    merged = merge_shape_calibrators(shards["A100"], shards["EPYC"])
    assert pickle.dumps(shards) == before  # the inputs are left as they were
    for kind, calibrator in shards.items():
        for count in range(4):
            shape = SHAPE if count else SHAPE.idle
            for model in MODELS:
                for confidence in (0.9, 0.95, 0.99):
                    assert merged.factors(shape, kind, count, model, confidence) == \
                        calibrator.factors(shape, kind, count, model, confidence)
    assert merged.n_added == 6000 and merged.knows_kind("A100") and merged.knows_kind("EPYC")


def coverage(calibrator: ShapeCalibrator, kind: str, confidence: float, n: int, seed: int) -> float:
    rng, covered = random.Random(seed), 0
    for _ in range(n):
        model, count = rng.choice(list(MODELS)), rng.randrange(4)
        actual, predicted = outcome(rng, model, count)
        bound = calibrator.bound(SHAPE if count else SHAPE.idle, kind, count, model, predicted, confidence)
        covered += actual <= bound.upper_ms
    return covered / n


@pytest.mark.parametrize("confidence", [0.95, 0.99])
def test_replicas_of_one_kind_merge_to_the_coverage_of_the_whole_stream(confidence):
    # A slow spread (its rate 0.002) so that the coverage of a frozen calibrator measures its
    # windows, not the last few residuals its running spread happened to see.
    rng = random.Random(1)
    first, second, whole = (ShapeCalibrator(window=4000, min_residuals=30, spread_rate=0.002) for _ in range(3))
    for i in range(16000):
        model, count = rng.choice(list(MODELS)), rng.randrange(4)
        actual, predicted = outcome(rng, model, count)
        shape = SHAPE if count else SHAPE.idle
        for calibrator in (whole, first if i % 2 else second):
            calibrator.add(shape, "cpu", count, model, actual=actual, predicted=predicted)
    merged = merge_shape_calibrators(first, second)
    for count in range(1, 4):
        held = first.n_residuals(SHAPE, "cpu", count) + second.n_residuals(SHAPE, "cpu", count)
        assert merged.n_residuals(SHAPE, "cpu", count) == min(held, 4000) == whole.n_residuals(SHAPE, "cpu", count)
    half = coverage(first, "cpu", confidence, 20000, seed=7)
    got, want = coverage(merged, "cpu", confidence, 20000, seed=7), coverage(whole, "cpu", confidence, 20000, seed=7)
    assert abs(got - want) <= 0.005, (got, want, half)
    assert got >= confidence - 0.005  # and valid, as the whole is


def test_conformal_calibrators_merge_exactly_across_kinds_and_as_the_whole_within_a_kind():
    rng = random.Random(2)
    gpu, cpu = ConformalCalibrator(), ConformalCalibrator()
    first, second, whole = (ConformalCalibrator(window=4000) for _ in range(3))
    for i in range(8000):
        actual = 10.0 * math.exp(rng.gauss(0.0, 0.2))
        (gpu if i % 2 else cpu).add("A100" if i % 2 else "EPYC", actual, 10.0)
        whole.add("EPYC", actual, 10.0)
        (first if i % 2 else second).add("EPYC", actual, 10.0)
    merged = merge_conformal_calibrators(gpu, cpu)
    assert merged.kinds() == ["A100", "EPYC"]
    for kind, own in (("A100", gpu), ("EPYC", cpu)):
        assert merged.upper_bound(10.0, kind, 0.99) == own.upper_bound(10.0, kind, 0.99)
    replicas = merge_conformal_calibrators(first, second)
    for confidence in (0.9, 0.95, 0.99):
        # The union of two halves of the same residuals: the very window of the whole.
        assert replicas.upper_bound(10.0, "EPYC", confidence) == whole.upper_bound(10.0, "EPYC", confidence)


def test_calibrators_configured_differently_are_refused_naming_the_setting():
    with pytest.raises(ValueError, match="window"):
        merge_shape_calibrators(ShapeCalibrator(window=100), ShapeCalibrator(window=200))
    with pytest.raises(ValueError, match="target"):
        merge_conformal_calibrators(ConformalCalibrator(target=0.99), ConformalCalibrator(target=0.95))
