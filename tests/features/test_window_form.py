"""A single query's answer as a quadratic of its moving co-runners' overlaps (the compiled fixed
point's input, :mod:`predictor.service.estimates.fixed_point_kernel`): the latency of the record built for
each window, up to rounding, and the same window at the fixed point as the per-window search."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import learnable_records, records

from predictor.features.extract import OverlapQuadratic
from predictor.features.window import at_window, overlap_at
from predictor.predictors import create
from predictor.predictors.base import QuadraticLatencies
from predictor.records.colocations import CoLocations
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.service.estimates import fixed_point_kernel, monotone

windows = st.one_of(st.floats(1e-3, 1e4), st.just(1e300))
remaining_ms = st.one_of(st.none(), st.just(0.0), st.floats(1e-3, 1e3))


def _latencies(form) -> QuadraticLatencies:
    """The form's quadratic as a one-row ``QuadraticLatencies`` (the definition the kernel follows)."""
    k = len(form.moving)
    quadratic = OverlapQuadratic(np.arange(k, dtype=np.intp).reshape(k, 1),
                                 fixed_point_kernel.window_coefficients(form).reshape(-1, 1))
    return QuadraticLatencies(quadratic, form.solo, form.low, form.high, form.log_target)


def _assert_each_window(predictor, form, record, remaining, data) -> None:
    """The form's quadratic answers, at a few windows, the prediction of the record built for each."""
    latencies = _latencies(form)
    for window in data.draw(st.lists(windows, min_size=1, max_size=4)):
        expected = predictor.predict_many([at_window(record, remaining, window)])[0]
        o = np.array([[overlap_at(ms, window)] for ms in form.remaining]).reshape(-1, 1)
        if any((overlap == 0.0) is not form.program.zero[i] for i, overlap in zip(form.moving, o[:, 0],
                                                                                  strict=True)):
            continue  # the names change at this window: the record's own path answers it
        assert latencies.latencies(o)[0] == pytest.approx(expected, rel=1e-9)


def _assert_the_per_window_fixed_point(predictor, form, record, remaining) -> None:
    """The form's grid is the predictor's, and its compiled search finds the per-window search's point."""
    solo, (low, high) = predictor.solo_latency(record), predictor._slowdown_range
    per_window = monotone.fixed_point_one(predictor.window_latency(record, remaining), solo, high, low)
    assert (form.solo, form.low, form.high) == (solo, low, high)
    assert fixed_point_kernel.window_of(form) == per_window


TRAIN = [Record("gpu0", BatchSpec("a", 2, {"l2": 0.5}), 10.0 + i, solo_latency_ms=9.0,
                co_runners=(CoRunner("b", 1 + i % 3, {"l2": 0.2 + 0.05 * i}, overlap=0.5),)) for i in range(12)]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(learnable_records, min_size=5, max_size=40),
    st.lists(records, min_size=1, max_size=6),
    st.sampled_from(["fine", "interactions"]),
    st.sampled_from([None, "model"]),
    st.booleans(),
    st.data(),
)
def test_the_quadratic_is_each_windows_prediction_and_finds_the_same_fixed_point(
        train, queries, features, split_by, log_target, data):
    predictor = create("rls", features=features, split_by=split_by, log_target=log_target).fit(train)
    for record in (*queries, *train[:3]):
        remaining = [data.draw(remaining_ms) for _ in record.co_runners]
        form = predictor.window_form(record, remaining)
        if form is None:
            assert (all(ms is None for ms in remaining) or predictor._models.get(predictor._key(record)) is None
                    or predictor.window_latency(record, remaining) is None
                    or not predictor._models[predictor._key(record)]._all_scaled)
            continue
        _assert_each_window(predictor, form, record, remaining, data)
        _assert_the_per_window_fixed_point(predictor, form, record, remaining)


def test_a_query_with_remaining_times_is_answered_through_the_form():
    train = TRAIN
    predictor = create("rls").fit(train)
    assert predictor.window_form(train[0], [None]) is None  # nothing moves
    form = predictor.window_form(train[0], [3.0])
    assert form is not None and form.moving == (0,) and form.remaining == (3.0,)
    assert create("solo").fit(train).window_form(train[0], [3.0]) is None  # no form: the per-window path
    low, high = predictor._slowdown_range
    assert form.solo == predictor.solo_latency(train[0]) and (form.low, form.high) == (low, high)
    window = fixed_point_kernel.window_of(form)
    assert window == monotone.fixed_point_one(predictor.window_latency(train[0], [3.0]), form.solo, high, low)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(learnable_records, min_size=5, max_size=40),
    st.lists(records, min_size=1, max_size=6),
    st.sampled_from(["sgd", "ensemble:experts='rls,sgd'"]),
    st.data(),
)
def test_sgd_and_the_default_ensemble_find_the_per_window_fixed_point(train, queries, spec, data):
    """``sgd``'s form (its fine program, each weight over its column's largest magnitude) and the default
    ensemble's (its experts' forms, weighted): the window the per-window search finds, and for ``sgd``
    each window's prediction up to rounding."""
    predictor = create(spec).fit(train)
    for record in (*queries, *train[:3]):
        remaining = [data.draw(remaining_ms) for _ in record.co_runners]
        form = predictor.window_form(record, remaining)
        if form is None:
            continue
        if spec == "sgd":
            _assert_each_window(predictor, form, record, remaining, data)
        _assert_the_per_window_fixed_point(predictor, form, record, remaining)


def test_the_default_ensemble_answers_a_query_with_remaining_times_through_its_experts_forms():
    train = TRAIN
    predictor = create("ensemble:experts='rls,sgd'").fit(train)
    assert predictor.window_form(train[0], [None]) is None  # nothing moves
    form = predictor.window_form(train[0], [3.0])
    assert form is not None and [part.moving for part in form.parts] == [(0,), (0,)]
    assert form.weights == pytest.approx(tuple(predictor.weights.values()))
    assert create("ensemble:experts='rls,solo'").fit(train).window_form(train[0], [3.0]) is None  # solo has none
    window = fixed_point_kernel.window_of(form)
    low, high = predictor._slowdown_range
    assert window == monotone.fixed_point_one(predictor.window_latency(train[0], [3.0]), form.solo, high, low)


def test_sgd_has_no_form_where_a_weight_over_its_largest_magnitude_overflows():
    """A column whose largest magnitude is subnormal (an overlap of 5e-324): its weight over that magnitude
    is not finite, so ``sgd`` has no window form nor ranking quadratic, and the per-window path answers
    (hypothesis found the compiled search's window 1.0003 against the per-window 1.1340 before)."""
    attrs = {"l2_util": 0.0, "dram_util": 0.0}

    def record(latency, *overlaps):
        return Record("gpu0", BatchSpec("resnet", 1, attrs), latency, device_kind="kind", signals={"sm_util": 0.0},
                      co_runners=tuple(CoRunner("resnet", 1, attrs, overlap=o) for o in overlaps))

    train = [record(1.0), record(1.0, 0.0), record(2.0, 0.0, 5e-324, 0.0), record(1.0), record(1.0)]
    for spec in ("sgd", "ensemble:experts='rls,sgd'"):
        predictor = create(spec).fit(train)
        assert predictor.window_form(train[2], [None, None, 0.0]) is None
        rows = CoLocations.from_records([train[2], train[2]])
        assert predictor.colocation_quadratic(rows, np.arange(2), np.ones(rows.overlaps.size, dtype=bool)) is None
        solo, (low, high) = predictor.solo_latency(train[2]), predictor._slowdown_range
        window = monotone.fixed_point_one(predictor.window_latency(train[2], [None, None, 0.0]), solo, high, low)
        assert np.isfinite(window) and window >= solo * low


def test_sgd_has_no_form_where_a_largest_magnitude_is_subnormal():
    """A column whose largest magnitude is subnormal but whose weight over it is finite (an overlap of
    2.2e-311): the form's order (the weight over the magnitude first) and the model's (the value over it
    first) differ by more than rounding there, so ``sgd`` has no window form and the per-window path
    answers (hypothesis found the compiled search's window 1.1460 against the per-window 1.1253 before)."""
    attrs = {"l2_util": 0.0, "dram_util": 0.0}

    def record(latency, *overlaps):
        return Record("gpu0", BatchSpec("resnet", 1, attrs), latency, device_kind="kind", signals={"sm_util": 0.0},
                      co_runners=tuple(CoRunner("resnet", 1, attrs, overlap=o) for o in overlaps))

    train = [record(1.0), record(1.0), record(1.0, 0.0, 0.0, 2.225073858507e-311), *[record(1.0)] * 5, record(2.0)]
    for spec in ("sgd", "ensemble:experts='rls,sgd'"):
        predictor = create(spec).fit(train)
        remaining = [None, None, 1.0]
        assert predictor.window_form(train[2], remaining) is None
        solo, (low, high) = predictor.solo_latency(train[2]), predictor._slowdown_range
        window = monotone.fixed_point_one(predictor.window_latency(train[2], remaining), solo, high, low)
        assert np.isfinite(window) and window >= solo * low
