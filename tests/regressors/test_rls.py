"""The RLS regressor against a batch least-squares reference, and its guards."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from predictor.regressors.least_squares import (
    MIN_SEARCH_GAP,
    PROJECT_EVERY,
    RLS,
    SEARCH_COLUMNS,
    search_schedule,
)

values = st.floats(min_value=-10, max_value=10, allow_nan=False, allow_infinity=False)


def feed(rls: RLS, matrix: np.ndarray, target: np.ndarray) -> None:
    for row, y in zip(matrix, target, strict=True):
        rls.learn_one({f"x{i}": float(v) for i, v in enumerate(row)}, float(y))


@settings(max_examples=50, deadline=None)
@given(
    data=arrays(np.float64, st.tuples(st.integers(1, 40), st.integers(1, 5)), elements=values),
    weights=arrays(np.float64, 6, elements=values),
    delta=st.sampled_from([0.1, 1.0, 10.0]),
)
def test_no_forgetting_equals_ridge(data, weights, delta):
    """With forgetting 1, RLS equals ridge least squares (intercept included).

    Features enter scaled by the first non-zero magnitude seen in their column and
    the prior is ``delta * I`` on the scaled weights, so on the raw weights
    the ridge penalty of column k is ``s_k^2 / delta`` with ``s_k`` the first
    non-zero magnitude of that column (at least 1e-3; 1 for the intercept).
    """
    n, d = data.shape
    target = data @ weights[:d] + weights[5]
    rls = RLS(forgetting=1.0, delta=delta, max_trace=1e12)
    feed(rls, data, target)
    design = np.hstack([np.ones((n, 1)), data])
    first = np.array([max(next((abs(v) for v in column if v != 0), 1.0), 1e-3) for column in design.T])
    reference = np.linalg.solve(design.T @ design + np.diag(first**2) / delta, design.T @ target)
    learned = np.array([rls.weights["intercept"]] + [rls.weights.get(f"x{i}", 0.0) for i in range(d)])
    np.testing.assert_allclose(learned, reference, rtol=1e-5, atol=1e-5 * (1 + np.abs(reference).max()))


@settings(max_examples=40, deadline=None)
@given(
    data=arrays(np.float64, st.tuples(st.integers(1, 60), st.integers(1, 6)), elements=values),
    forgetting=st.sampled_from([0.9, 0.98, 0.999, 1.0]),
)
def test_covariance_stays_symmetric_positive_definite(data, forgetting):
    rls = RLS(forgetting=forgetting, delta=100.0, max_trace=1e4)
    feed(rls, data, data.sum(axis=1))
    cov = rls.covariance
    np.testing.assert_array_equal(cov, cov.T)
    assert np.linalg.eigvalsh(cov).min() > 0
    assert np.trace(cov) <= 1e4 * (1 + 1e-9)


@pytest.mark.parametrize("forgetting", [0.95, 0.99, 0.999])
def test_constant_input_does_not_wind_up(forgetting):
    """Thousands of identical inputs excite one direction only; the trace bound holds P."""
    rls = RLS(forgetting=forgetting, delta=10.0, max_trace=1e3)
    for _ in range(5000):
        rls.learn_one({"a": 1.0, "b": 2.0}, 3.0)
    cov = rls.covariance
    assert np.all(np.isfinite(cov)) and np.trace(cov) <= 1e3 * (1 + 1e-9)
    assert np.linalg.eigvalsh(cov).min() > 0
    assert rls.predict_one({"a": 1.0, "b": 2.0}) == pytest.approx(3.0, abs=1e-6)
    # and it still learns after the long flat stretch
    for _ in range(200):
        rls.learn_one({"a": 1.0, "b": 0.0}, 5.0)
    assert rls.predict_one({"a": 1.0, "b": 0.0}) == pytest.approx(5.0, abs=1e-2)


def test_forgetting_tracks_a_change():
    rls = RLS(forgetting=0.95, delta=10.0)
    for i in range(300):
        rls.learn_one({"x": float(i % 7)}, 2.0 * (i % 7))
    for i in range(300):
        rls.learn_one({"x": float(i % 7)}, -1.0 * (i % 7) + 4.0)
    assert rls.predict_one({"x": 3.0}) == pytest.approx(1.0, abs=1e-3)


def test_features_are_bounded_and_unseen_ignored():
    rls = RLS(max_features=3)
    rls.learn_one({f"f{i}": 1.0 for i in range(10)}, 1.0)
    assert len(rls.weights) == 4
    assert np.isfinite(rls.predict_one({"never": 5.0}))


def test_non_finite_update_is_refused():
    rls = RLS()
    rls.learn_one({"x": 1.0}, 1.0)
    before = rls.weights
    rls.learn_one({"x": 1e308}, 1e308)
    assert rls.weights == before and rls.n_refused == 1


@pytest.mark.parametrize("kwargs", [{"forgetting": 0.0}, {"forgetting": 1.5}, {"delta": 0}, {"max_trace": -1}])
def test_bad_hyperparameters_are_rejected(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        RLS(**kwargs)


@settings(max_examples=30, deadline=None)
@given(
    data=arrays(np.float64, st.tuples(st.integers(1, 30), st.integers(1, 4)), elements=values),
    delta=st.sampled_from([0.1, 1.0, 10.0]),
)
def test_unscaled_no_forgetting_equals_plain_ridge(data, delta):
    """Without feature scaling, the penalty is 1/delta on every weight (river's BayesianLinearRegression)."""
    n, d = data.shape
    target = data.sum(axis=1) + 0.5
    rls = RLS(forgetting=1.0, delta=delta, max_trace=1e300, scale_features=False)
    feed(rls, data, target)
    design = np.hstack([np.ones((n, 1)), data])
    reference = np.linalg.solve(design.T @ design + np.eye(d + 1) / delta, design.T @ target)
    learned = np.array([rls.weights["intercept"]] + [rls.weights.get(f"x{i}", 0.0) for i in range(d)])
    np.testing.assert_allclose(learned, reference, rtol=1e-5, atol=1e-5 * (1 + np.abs(reference).max()))


def _projection_by_full_solves(model: RLS) -> np.ndarray:
    """The projection as first defined: the whole gain ``P[:, A] P[A, A]^-1`` solved for every candidate set."""
    mask, weights, covariance = model._constrained_columns(), model._weights, model.covariance
    active, found = np.flatnonzero(mask & (weights < 0)), None
    for _ in range(8) if active.size else ():
        matrix = np.linalg.solve(covariance[np.ix_(active, active)], covariance[active, :]).T
        found = (active, matrix)
        moved = weights - matrix @ weights[active]
        moved[active] = 0.0
        more = np.flatnonzero(mask & (moved < 0))
        if not more.size:
            break
        active = np.union1d(active, more)
    projected = weights.copy()
    if found is not None:
        projected = weights - found[1] @ weights[found[0]]
        projected[found[0]] = 0.0
    return np.where(mask, np.maximum(projected, 0.0), projected)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), width=st.integers(2, 24), contention=st.integers(1, 24),
       n=st.integers(32, 200), forgetting=st.sampled_from([1.0, 0.998, 0.95]))
def test_the_projection_equals_the_constrained_solution_by_full_solves(seed, width, contention, n, forgetting):
    """The gain search with one right-hand side per candidate set, and the gain solved only on the
    rows outside the pinned set, gives the projection of the search with whole gains."""
    rng = np.random.default_rng(seed)
    names = [f"co:f{i}" if i < contention else f"f{i}" for i in range(width)]
    model = RLS(forgetting, 1.0, non_negative_contention=True)
    values = rng.normal(size=(n, width))
    targets = values @ rng.normal(size=width) - values.sum(axis=1) + 0.3 * rng.normal(size=n)
    for row, target in zip(values, targets, strict=True):
        model.learn_one(dict(zip(names, row.tolist(), strict=True)), float(target))
    model._gain = model._find_gain(model._constrained_columns())  # the pinned set of the current weights
    model._projected = None
    np.testing.assert_allclose(model.predicting_weights(), _projection_by_full_solves(model), rtol=1e-9, atol=1e-12)


def _unclipped_projection(model: RLS) -> np.ndarray:
    """``w - gain @ w[A]`` with the pinned columns at 0, before any clipping (the whole vector)."""
    weights, gain = model._weights, model._gain
    if gain is None or not gain[0].size:
        return weights.copy()
    active, matrix = gain
    matrix = np.vstack([matrix, np.zeros((weights.size - matrix.shape[0], active.size))])
    moved = weights - matrix @ weights[active]
    moved[active] = 0.0
    return moved


def _search_stream(seed: int, width: int, contention: int, forgetting: float, n: int):
    """Learn a stream whose target falls with some contention features; per update: whether the row
    clipped a weight as predicted (by the whole projection), whether the pinned set was searched
    after it, the update's number and how many updates it came after the previous search."""
    rng = np.random.default_rng(seed)
    names = [f"co:f{i}" if i < contention else f"f{i}" for i in range(width)]
    model = RLS(forgetting, 1.0, non_negative_contention=True)
    signs = np.where(rng.random(width) < 0.5, -1.0, 1.0)
    steps = []
    for _ in range(n):
        row = np.where(rng.random(width) < 0.6, rng.normal(size=width), 0.0)
        features = dict(zip(names, row.tolist(), strict=True))
        vector = model.vectorize(features, grow=True)
        mask = model._constrained_columns()
        clipped = bool(np.any(mask & (vector != 0) & (_unclipped_projection(model) < 0)))
        assert model._clips(vector) == clipped
        gain, updates, last = model._gain, model.n_updates, model.searched_at()
        model.learn_vector(vector, float(row @ signs + 0.1 * rng.normal()))
        if model.n_updates > updates:
            searched = model._gain is not gain
            assert model.searched_at() == (model.n_updates if searched else last)
            steps.append((clipped, searched, model.n_updates, model.n_updates - last))
    return steps


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), width=st.integers(2, 12), contention=st.integers(1, 12),
       forgetting=st.sampled_from([1.0, 0.98]))
def test_the_pinned_set_is_searched_on_schedule_and_after_a_clipped_row(seed, width, contention, forgetting):
    """The pinned set is searched anew after every PROJECT_EVERY-th update, and after exactly the
    updates whose row was predicted with one of its own contention weights clipped that come
    MIN_SEARCH_GAP updates or more after the previous search."""
    for clipped, searched, updates, gap in _search_stream(seed, width, contention, forgetting, 3 * PROJECT_EVERY):
        expected = updates % PROJECT_EVERY == 0 or clipped and gap >= MIN_SEARCH_GAP
        assert searched == expected, (updates, clipped, gap, searched)


def test_a_model_wider_than_search_columns_searches_less_often():
    """Past SEARCH_COLUMNS columns the schedule and the gap grow with the square of the columns
    (``search_schedule``): a wide model is searched on the longer schedule and after clipped rows the
    longer gap after the previous search, and never between."""
    width = SEARCH_COLUMNS + 30
    every, gap_needed = search_schedule(width)
    assert (every, gap_needed) == (2 * PROJECT_EVERY, 2 * MIN_SEARCH_GAP)
    steps = _search_stream(seed=3, width=width, contention=width - 10, forgetting=0.98, n=3 * every)
    for clipped, searched, updates, gap in steps:
        assert searched == (updates % every == 0 or clipped and gap >= gap_needed), (updates, clipped, gap, searched)
    assert any(searched and updates % every for _, searched, updates, _ in steps)  # a clipped row's search
    assert any(updates % PROJECT_EVERY == 0 and updates % every and not searched for _, searched, updates, _ in steps)


def test_a_clipped_row_searches_between_the_scheduled_searches():
    steps = _search_stream(seed=3, width=8, contention=6, forgetting=0.98, n=4 * PROJECT_EVERY)
    off_schedule = [(clipped, gap) for clipped, searched, updates, gap in steps if searched and updates % PROJECT_EVERY]
    assert off_schedule and all(clipped and gap >= MIN_SEARCH_GAP for clipped, gap in off_schedule)
    # and a clipped row too soon after a search waits for a later one
    assert any(clipped and not searched and gap < MIN_SEARCH_GAP for clipped, searched, _, gap in steps)


def test_predicting_leaves_a_models_pickled_state_unchanged():
    # a refused outlier is predicted (to gate it) but must change nothing of the model's state;
    # the feature index's layout cache is not state
    from predictor.predictors.registry import create
    from predictor.service.synthetic import synthetic_records
    from predictor.snapshot import dump_state

    predictor = create("rls")
    records = list(synthetic_records(300, seed=1))
    for record in records[:250]:
        predictor.learn_one(record)
    before = dump_state([predictor])
    for record in records[250:]:
        predictor.predict_one(record)
    assert dump_state([predictor]) == before
