"""The compiled fixed point of many rows (:mod:`predictor.service.estimates.fixed_point_kernel`) finds, for
every row, the grid point the single-row search finds (:func:`monotone.fixed_point_one`) on the
same latencies (:meth:`QuadraticLatencies.latencies`), to the last bit; and a ranking whose
candidates have co-runners given by remaining time goes through it with each candidate's answer
that of its query alone (also held by ``tests/service/test_rank_vectorised.py``).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.features.extract import OverlapQuadratic
from predictor.features.window import FineProgram, WindowForm
from predictor.predictors.base import QuadraticLatencies, WeightedLatencies
from predictor.service.estimates import monotone
from predictor.service.estimates.fixed_point_kernel import fixed_points, window_of


@st.composite
def quadratic_rows(draw) -> tuple[QuadraticLatencies, np.ndarray, float, float, float]:
    """Rows whose latency does not fall with crowding: non-negative coefficients on the overlaps."""
    n = draw(st.integers(1, 12))
    k = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    constant = rng.normal(0.0, 0.3, n)
    linear = rng.uniform(0.0, 1.5, (k, n)) * (rng.random((k, n)) < 0.8)
    quadratic = rng.uniform(0.0, 0.8, (k, k, n)) * (rng.random((k, k, n)) < 0.5)
    remaining = rng.uniform(0.0, 60.0, (k, n)) * (rng.random((k, n)) < 0.7)  # 0: an overlap that does not move
    solo = draw(st.floats(0.05, 200.0))
    low = draw(st.floats(0.05, 0.9))
    high = draw(st.floats(1.5, 40.0))
    log_target = draw(st.booleans())
    if not log_target:  # a raw slowdown: around 1
        constant = 1.0 + constant
    gather = np.arange(k * n).reshape(k, n)
    rows = QuadraticLatencies(OverlapQuadratic.of(gather, constant, linear, quadratic), solo, low, high, log_target)
    return rows, remaining, solo, high, low


@settings(max_examples=300, deadline=None)
@given(problem=quadratic_rows())
def test_each_row_finds_the_single_row_searchs_point(problem):
    rows, remaining, solo, high, low = problem
    found = fixed_points(rows, remaining, solo, high, low)
    for i in range(remaining.shape[1]):

        def latency(window: float, i: int = i) -> float:
            overlaps = np.minimum(remaining[:, i:i + 1] / window, 1.0) if window > 0 else np.ones((remaining.shape[0], 1))
            return float(rows.latencies(overlaps, np.array([i]))[0])

        assert float(found[i]) == monotone.fixed_point_one(latency, solo, high, low)


@settings(max_examples=300, deadline=None)
@given(problem=quadratic_rows(), other=quadratic_rows(), share=st.floats(0.05, 0.95))
def test_each_row_of_a_weighted_pair_finds_the_single_row_searchs_point(problem, other, share):
    """An ensemble's rows (:class:`WeightedLatencies` of two experts' quadratics of the same rows and
    co-runners): the grid point the single-row search finds on the definition."""
    first, remaining, solo, high, low = problem
    second = other[0]
    k, n = remaining.shape
    coefficients = np.resize(second.quadratic.coefficients, first.quadratic.coefficients.shape)
    second = QuadraticLatencies(OverlapQuadratic(first.quadratic.gather, coefficients), second.solo, second.low,
                                second.high, second.log_target)
    rows = WeightedLatencies((share, 1.0 - share), (first, second))
    found = fixed_points(rows, remaining, solo, high, low)
    for i in range(n):

        def latency(window: float, i: int = i) -> float:
            overlaps = np.minimum(remaining[:, i:i + 1] / window, 1.0) if window > 0 else np.ones((k, 1))
            return float(rows.latencies(overlaps, np.array([i]))[0])

        assert float(found[i]) == monotone.fixed_point_one(latency, solo, high, low)


@settings(max_examples=200, deadline=None)
@given(problem=quadratic_rows(), other=quadratic_rows(), share=st.floats(0.05, 0.95), seed=st.integers(0, 2**32 - 1))
def test_rows_whose_overlaps_do_not_move_get_the_definitions_latency_and_the_others_their_own_search(
        problem, other, share, seed):
    """A ranking's rows, some with co-runners given by remaining time (searched) and some without
    (their quadratic a constant): the searched rows find the points they find alone, the others get
    their latency by :meth:`WeightedLatencies.latencies`, at any overlaps, to the last bits."""
    first, remaining, solo, high, low = problem
    k, n = remaining.shape
    rng = np.random.default_rng(seed)
    still = np.flatnonzero(rng.random(n) < 0.5)
    coefficients = first.quadratic.coefficients.copy()
    coefficients[1:, still] = 0.0  # a still row: its linear and quadratic terms 0
    first = QuadraticLatencies(OverlapQuadratic(first.quadratic.gather, coefficients), first.solo, first.low,
                               first.high, first.log_target)
    second = other[0]
    resized = np.resize(second.quadratic.coefficients, coefficients.shape)
    resized[1:, still] = 0.0
    second = QuadraticLatencies(OverlapQuadratic(first.quadratic.gather, resized), second.solo, second.low,
                                second.high, second.log_target)
    flagged = np.zeros(n, dtype=bool)
    flagged[still] = True
    for rows in (first, WeightedLatencies((share, 1.0 - share), (first, second))):
        got = fixed_points(rows, remaining, solo, high, low, flagged)
        expected = rows.latencies(rng.random((k, still.size)), still)
        np.testing.assert_allclose(got[still], expected, rtol=1e-14, atol=0.0)
        assert got[~flagged].tolist() == fixed_points(rows, remaining, solo, high, low)[~flagged].tolist()


def test_the_compiled_latency_is_the_definitions():
    """The raw answers the kernel maps are those of :meth:`OverlapQuadratic.raw`, NaN and overflow included."""
    gather = np.arange(2).reshape(1, 2)
    q = OverlapQuadratic.of(gather, np.array([np.nan, 50.0]), np.zeros((1, 2)), np.zeros((1, 1, 2)))
    rows = QuadraticLatencies(q, 10.0, 0.5, 12.0, True)
    # NaN: slowdown 1; exp(min(50, 10)) clipped at 12
    assert rows.latencies(np.zeros((1, 2))).tolist() == [10.0, 120.0]
    found = fixed_points(rows, np.zeros((1, 2)), 10.0, 12.0, 0.5)
    for i, latency in enumerate((10.0, 120.0)):
        assert float(found[i]) == monotone.fixed_point_one(lambda w, v=latency: v, 10.0, 12.0, 0.5)


def _every_search(latency: float, solo: float, high: float, low: float) -> list[float]:
    """The window each search finds for a row whose slowdown is ``latency / solo`` whatever its window:
    the compiled one on rows and on a single query's form, the column-wise one and the single-row one."""
    rows = QuadraticLatencies(OverlapQuadratic.of(np.zeros((1, 1), dtype=np.intp), np.array([latency / solo]),
                                                  np.zeros((1, 1)), np.zeros((1, 1, 1))), solo, low, high, False)
    program = FineProgram(("own", "co"), (0.0, 0.0), ((1, 0, 1.0),), (), (False,))
    form = WindowForm(program, None, latency / solo, np.zeros(2), (0.0,), (0,), (0.0,), solo, low, high, False)
    latency = float(rows.latencies(np.zeros((1, 1)))[0])  # clamped to solo * [low, high]
    return [float(fixed_points(rows, np.zeros((1, 1)), solo, high, low)[0]),
            window_of(form),
            float(monotone.fixed_point(lambda w: np.full(w.shape, latency), np.ones(1, dtype=bool), solo, high,
                                       low)[0]),
            monotone.fixed_point_one(lambda w: latency, solo, high, low)]


def test_a_latency_clamped_at_the_grids_bottom_is_answered_alike_by_every_search():
    """A constant latency clamped at ``solo * low`` ties with the grid's lowest point, which NumPy's
    ``exp`` rounds an ulp below it here (``math.exp`` does not): every search moves one point up."""
    solo, low, high = 79.0, 0.5, 2.0
    windows = monotone.grid_windows(solo, high, low)
    assert windows[0] < solo * low < windows[1]  # the tie this guards
    assert _every_search(solo * low, solo, high, low) == [windows[1]] * 4
    assert _every_search(0.1 * solo, solo, high, low) == [windows[1]] * 4  # clamped to the same latency


def test_a_latency_on_a_grid_point_is_answered_by_that_point_in_every_search():
    """At each grid point where NumPy's ``exp`` and ``math.exp`` round apart, a constant latency
    equal to its window (solo 1: the latency is the raw slowdown itself) is answered by that point."""
    solo, low, high = 1.0, 0.5, 2.0
    windows = monotone.grid_windows(solo, high, low)
    grid_low, scale, _ = monotone.grid(solo, high, low)
    apart = [j for j in range(windows.size - 1) if math.exp(grid_low + scale * j) != windows[j]]
    assert len(apart) > 10  # the rounding this guards
    for j in apart[:: max(len(apart) // 40, 1)]:
        assert _every_search(float(windows[j]), solo, high, low) == [windows[j]] * 4, j
