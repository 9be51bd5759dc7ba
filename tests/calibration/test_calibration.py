"""Conformal calibration: coverage on exchangeable data, bound/probability agreement, fallbacks."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.calibration.conformal import (
    BoundSource,
    ConformalCalibrator,
    ResidualWindow,
    conformal_rank,
)
from predictor.records.rules import check_confidence


def _prequential_coverage(
    cal: ConformalCalibrator, actual: np.ndarray, predicted: np.ndarray, c: float
) -> float:
    hits = 0
    counted = 0
    for a, p in zip(actual, predicted, strict=True):
        bound = cal.upper_bound(p, "k", c)
        if bound.source is BoundSource.DEVICE_KIND:
            hits += a <= bound.upper_ms
            counted += 1
        cal.add("k", a, p)
    return hits / counted


DISTRIBUTIONS = {
    "lognormal": lambda rng, n: np.exp(rng.normal(0.0, 0.3, n)),
    "heavy": lambda rng, n: np.exp(0.1 * rng.standard_t(2, n)),
    "skewed": lambda rng, n: 1.0 + rng.exponential(0.5, n),
}


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    distribution=st.sampled_from(sorted(DISTRIBUTIONS)),
    confidence=st.sampled_from([0.8, 0.9, 0.95]),
)
def test_coverage_on_exchangeable_data_is_close_to_confidence(seed, distribution, confidence):
    rng = np.random.default_rng(seed)
    n = 4000
    predicted = rng.uniform(1.0, 50.0, n)
    actual = predicted * DISTRIBUTIONS[distribution](rng, n)
    coverage = _prequential_coverage(
        ConformalCalibrator(window=1000, min_residuals=50), actual, predicted, confidence
    )
    sd = math.sqrt(confidence * (1 - confidence) / n)
    assert abs(coverage - confidence) < 5 * sd + 0.003


def test_coverage_of_99_bound_on_exchangeable_data():
    rng = np.random.default_rng(7)
    n = 20000
    predicted = rng.uniform(1.0, 50.0, n)
    actual = predicted * np.exp(rng.normal(0.05, 0.2, n))
    for adapt in (0.0, 0.005):
        cal = ConformalCalibrator(window=2000, adapt=adapt)
        coverage = _prequential_coverage(cal, actual, predicted, 0.99)
        assert 0.985 <= coverage <= 0.995, (adapt, coverage)


def test_adaptive_conformal_tracks_the_target_under_drift():
    rng = np.random.default_rng(3)
    n = 8000
    predicted = np.full(n, 10.0)
    scale = np.linspace(0.05, 0.6, n)  # the residuals widen steadily: not exchangeable
    actual = predicted * np.exp(rng.normal(0.0, 1.0, n) * scale)
    plain = _prequential_coverage(ConformalCalibrator(window=2000), actual, predicted, 0.95)
    adaptive = _prequential_coverage(
        ConformalCalibrator(window=2000, adapt=0.01, target=0.95), actual, predicted, 0.95
    )
    assert abs(adaptive - 0.95) < abs(plain - 0.95)
    assert abs(adaptive - 0.95) < 0.01


def test_conformal_rank_has_the_finite_sample_correction():
    assert conformal_rank(99, 0.99) == 99
    assert conformal_rank(19, 0.9) == 18  # ceil(20 * 0.9)
    assert conformal_rank(9, 0.95) == 10  # more than n: no finite quantile
    window = ResidualWindow(100)
    for r in range(9):
        window.add(float(r))
    assert math.isinf(window.quantile(0.95))
    assert window.quantile(0.5) == 4.0  # ceil(10 * 0.5) = 5th smallest


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-3, 3, allow_nan=False), min_size=1, max_size=300), st.integers(1, 50))
def test_residual_window_matches_a_sort_of_the_last_values(values, size):
    window = ResidualWindow(size)
    for v in values:
        window.add(v)
    expected = sorted(values[-size:])
    assert window.sorted_array().tolist() == expected
    assert window.values() == values[-size:]
    clone = pickle.loads(pickle.dumps(window))
    assert clone.sorted_array().tolist() == expected


def _same_window(a: ResidualWindow, b: ResidualWindow) -> None:
    """Every reading of ``a`` and ``b`` is the same."""
    assert len(a) == len(b)
    assert a.sorted_array().tolist() == b.sorted_array().tolist()
    for confidence in (0.1, 0.5, 0.9, 0.99):
        assert a.quantile(confidence) == b.quantile(confidence)
        assert a.supports(confidence) == b.supports(confidence)
        assert a.supported_quantile(confidence) == b.supported_quantile(confidence)
    for x in (-1.0, 0.0, 0.5):
        assert a.cdf(x) == b.cdf(x)
    xs = np.linspace(-3.0, 3.0, 40)
    assert a.cdf_many(xs).tolist() == b.cdf_many(xs).tolist()
    assert a.values() == b.values()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-3, 3, allow_nan=False), min_size=1, max_size=120), st.integers(1, 40),
       st.integers(0, 120), st.lists(st.floats(-3, 3, allow_nan=False), max_size=60), st.integers(0, 39))
def test_a_window_kept_as_arrays_reads_as_the_one_made_by_adding(values, size, cut, more, head):
    # the shape calibrator's block path leaves a window as arrays (take_arrays): what a ring of the
    # residuals in arrival order and their sorted copy give must read, copy, pickle and go on
    # learning exactly as the window that added them one by one
    cut = min(cut, len(values))
    added = ResidualWindow(size)
    for v in values:
        added.add(v)
    kept = ResidualWindow(size)
    for v in values[:cut]:
        kept.add(v)
    order = added.values()
    head = head % size if len(order) == size else 0
    ring = np.zeros(size)
    for at, value in enumerate(order):  # the oldest at head once full
        ring[(head + at) % size] = value
    kept.take_arrays(len(values) - cut, ring, head, np.array(sorted(order)))
    assert kept.adds == added.adds
    copy_before = kept.clone()  # shares the arrays; reads them without making the lists
    _same_window(copy_before, added)
    _same_window(pickle.loads(pickle.dumps(kept)), added)
    _same_window(kept, added)
    for v in more:
        added.add(v)
        kept.add(v)
        copy_before.add(v)
    _same_window(kept, added)
    _same_window(copy_before, added)

@settings(max_examples=40, deadline=None)
@given(
    residuals=st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=60, max_size=400),
    deadline_factor=st.floats(0.3, 4.0),
    confidence=st.sampled_from([0.5, 0.8, 0.9, 0.95]),
    adapt=st.sampled_from([0.0, 0.02]),
)
def test_feasible_bound_and_probability_agree(residuals, deadline_factor, confidence, adapt):
    cal = ConformalCalibrator(window=500, min_residuals=50, adapt=adapt, target=0.9)
    for r in residuals:
        cal.add("k", 10.0 * math.exp(r), 10.0)
    deadline = 10.0 * deadline_factor
    bound = cal.upper_bound(10.0, "k", confidence)
    probability = cal.probability_within(10.0, deadline, "k", confidence)
    if bound.source is BoundSource.DEVICE_KIND and abs(math.log(deadline / bound.upper_ms)) > 1e-9:
        assert (bound.upper_ms <= deadline) == (probability >= confidence - 1e-12)
    vector = cal.probabilities_within(np.array([10.0]), np.array([deadline]), ["k"], confidence)
    assert vector[0] == pytest.approx(probability)


def test_fallback_is_wide_and_says_so():
    cal = ConformalCalibrator(min_residuals=50, fallback_sigma=0.5)
    bound = cal.upper_bound(10.0, "new", 0.99)
    assert bound.source is BoundSource.FALLBACK and bound.n == 0
    assert bound.upper_ms == pytest.approx(10.0 * math.exp(2.3263 * 0.5), rel=1e-3)
    assert cal.probability_within(10.0, 10.0, "new") == pytest.approx(0.5)


def test_new_kind_uses_the_pool_until_it_has_enough_residuals():
    cal = ConformalCalibrator(window=300, min_residuals=50)
    for i in range(200):
        cal.add("a", 10.0 + i % 7, 10.0)
    assert cal.upper_bound(10.0, "b", 0.9).source is BoundSource.POOLED
    for _ in range(60):
        cal.add("b", 10.0, 10.0)
    bound = cal.upper_bound(10.0, "b", 0.9)
    assert bound.source is BoundSource.DEVICE_KIND and bound.upper_ms == pytest.approx(10.0)
    assert cal.n_residuals("a") == 200 and cal.kinds() == ["a", "b"]


def test_window_is_bounded_and_vector_bounds_match_scalar_ones():
    cal = ConformalCalibrator(window=100, min_residuals=10)
    rng = np.random.default_rng(0)
    for a in rng.uniform(5, 20, 1000):
        cal.add("k", float(a), 10.0)
    assert cal.n_residuals("k") == 100
    predicted = rng.uniform(1, 30, 50)
    uppers, bounds = cal.upper_bounds(predicted, ["k"] * 25 + ["other"] * 25, 0.9)
    for p, u, kind in zip(predicted, uppers, ["k"] * 25 + ["other"] * 25, strict=True):
        assert u == pytest.approx(cal.upper_bound(p, kind, 0.9).upper_ms)
    assert bounds[0].source is BoundSource.DEVICE_KIND and bounds[-1].source is BoundSource.POOLED


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5, math.nan, math.inf])
def test_confidence_is_validated(bad):
    with pytest.raises(ValueError, match="confidence"):
        check_confidence(bad)


def test_constructor_arguments_are_validated():
    with pytest.raises(ValueError, match="window"):
        ConformalCalibrator(window=0)
    with pytest.raises(ValueError, match="adapt"):
        ConformalCalibrator(adapt=1.0)
    with pytest.raises(ValueError, match="actual and predicted"):
        ConformalCalibrator().add("k", -1.0, 1.0)
