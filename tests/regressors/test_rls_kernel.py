"""The compiled RLS block kernel (:mod:`predictor.regressors.rls_kernel`) equals the reference class."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.regressors import rls_kernel
from predictor.regressors.least_squares import RLS
from predictor.regressors.rls_kernel import learn_block, learn_rows

MIRRORED = st.sampled_from([True, False])
"""Both ways the kernel computes ``S x``: over the non-zero columns with the lower triangle kept as
the upper's mirror, or over every column (which one a run takes depends on the model's width)."""


@contextlib.contextmanager
def _mirroring(mirrored: bool) -> Iterator[None]:
    """Runs of the block inside take the mirrored path (or not) whatever the model's width."""
    before = rls_kernel.MIRROR_FROM
    rls_kernel.MIRROR_FROM = 0 if mirrored else 1 << 30
    try:
        yield
    finally:
        rls_kernel.MIRROR_FROM = before


def _reference(model: RLS, names, values, targets, magnitudes: list[float] | None = None) -> np.ndarray:
    """The reference's prequential predictions; each one's ``sum |w_i x_i|`` into ``magnitudes``."""
    predictions = []
    for row, target in zip(values, targets, strict=True):
        vector = model.vectorize(dict(zip(names, row.tolist(), strict=True)), grow=True)
        predictions.append(model.predict_vector(vector))
        if magnitudes is not None:
            magnitudes.append(float(np.abs(vector) @ np.abs(model.predicting_weights()[: vector.size])))
        model.learn_vector(vector, float(target))
    return np.array(predictions)


def _assert_predictions_agree(predicted: np.ndarray, expected: np.ndarray, magnitudes: list[float],
                              rtol: float) -> None:
    """Each prediction within ``rtol`` of the size of its terms: a dot product's rounding is relative to
    ``sum |w_i x_i|``, not to the sum itself (a prediction near 0 made of large terms that cancel)."""
    np.testing.assert_array_equal(np.isfinite(predicted), np.isfinite(expected))
    finite = np.isfinite(expected)
    scale = np.maximum(np.abs(expected), magnitudes)[finite]
    apart = np.abs(predicted[finite] - expected[finite])
    far = np.flatnonzero(apart > 1e-9 + rtol * scale)
    assert far.size == 0, (f"{far.size} of {apart.size} predictions differ by more than {rtol:g} of their terms' "
                           f"size: the first, {apart[far[0]]:.3g} apart of {scale[far[0]]:.3g}")


def _assert_vectors_agree(a: np.ndarray, b: np.ndarray, rtol: float) -> None:
    """``a`` within ``rtol`` of ``b`` normwise: a small component of a large vector rounds as the vector
    does (found: a weight of 3e195 beside 6e198, 2e-7 apart relative to itself, 1e-10 to the vector)."""
    np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
    finite = np.isfinite(b)
    apart, size = (float(np.max(np.abs(v), initial=0.0)) for v in (a[finite] - b[finite], b[finite]))  # no overflow
    assert apart <= 1e-9 + rtol * size, f"{apart:.3g} apart, more than {rtol:g} of {size:.3g}"


def _assert_same(a: RLS, b: RLS, rtol: float = 1e-9) -> None:
    assert (a.n_updates, a.n_refused, a.index.columns) == (b.n_updates, b.n_refused, b.index.columns)
    assert a.n_resets == b.n_resets
    _assert_vectors_agree(a._weights, b._weights, rtol)
    np.testing.assert_allclose(a.covariance, b.covariance, rtol=rtol, atol=1e-9 * max(1.0, b.delta))
    np.testing.assert_allclose(a._scale, b._scale, rtol=rtol)
    # The trace is kept as a running sum of each step's change (it bounds the trace, max_trace): it
    # rounds as the largest trace it passed through, not as what is left, so the two sums drift apart
    # by more than 1e-9 of what is left (found: 1.0e-9 from 2e6 down to 0.149; 5e-6 and 1e-4 with
    # forgetting 0.95). What the sum decides, the scale, is compared above, as is the covariance.
    assert np.isfinite(a._trace_s) and a._trace_s > 0
    np.testing.assert_array_equal(a._column_scale, b._column_scale)


def _tolerance(targets: np.ndarray, usual: float) -> float:
    """How closely kernel and reference agree on a stream: ``usual``; 1e-4 where a target of 1e200 was
    absorbed (weights of 1e198 follow, whose every later step cancels most of their digits: measured
    worst 5e-6). The guards' decisions (refusals, re-openings, which values are finite) agree exactly."""
    return 1e-4 if np.abs(targets).max(initial=0.0) > 1e100 else usual


@st.composite
def streams(draw):
    width = draw(st.integers(1, 14))
    n = draw(st.integers(1, 120))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    density = draw(st.floats(0.2, 1.0))
    values = rng.normal(size=(n, width)) * draw(st.sampled_from([1e-3, 1.0, 1e3]))
    values *= rng.random((n, width)) < density  # zeros: columns whose scale is set late
    truth = rng.normal(size=width)
    targets = values @ truth + rng.normal(size=n) * draw(st.floats(0.0, 1.0))
    if draw(st.booleans()):  # an absurd observation, which the guards refuse or absorb
        targets[rng.integers(n)] = draw(st.sampled_from([1e200, -1e200, 1e-300]))
    return tuple(f"f{i}" for i in range(width)), values, targets


def _learn_both_agree(fast: RLS, slow: RLS, names, values, targets, block: int, mirrored: bool, rtol: float) -> None:
    """``fast`` learns the stream by compiled blocks of ``block``, ``slow`` by the reference; their
    states and predictions agree within ``rtol``."""
    with _mirroring(mirrored):
        predicted = np.concatenate([learn_block(fast, names, values[i : i + block], targets[i : i + block])
                                    for i in range(0, len(values), block)])
    magnitudes: list[float] = []
    expected = _reference(slow, names, values, targets, magnitudes)
    _assert_same(fast, slow, rtol)
    _assert_predictions_agree(predicted, expected, magnitudes, rtol)


@settings(max_examples=60, deadline=None)
@given(stream=streams(), forgetting=st.sampled_from([1.0, 0.999, 0.98, 0.9]),
       delta=st.sampled_from([0.01, 1.0, 100.0, 1e6]), max_trace=st.sampled_from([None, 10.0, 1e4]),
       block=st.integers(1, 50), mirrored=MIRRORED)
def test_block_kernel_equals_reference_on_random_streams(stream, forgetting, delta, max_trace, block, mirrored):
    """Within 1e-9; with a prior of 1e6 within 1e-7: its first update, ``S = d I - d^2 x x' / (1 + d |x|^2)``,
    cancels about six digits, which the two orders of additions then round differently (measured worst
    2.3e-8 over 1,500 random streams; 5.4e-10 over 2,500 with the other priors)."""
    names, values, targets = stream
    rtol = _tolerance(targets, 1e-7 if delta > 100 else 1e-9)
    fast, slow = RLS(forgetting, delta, max_trace), RLS(forgetting, delta, max_trace)
    _learn_both_agree(fast, slow, names, values, targets, block, mirrored, rtol)


@settings(max_examples=60, deadline=None)
@given(stream=streams(), forgetting=st.sampled_from([1.0, 0.998, 0.95]), delta=st.sampled_from([0.01, 1.0, 100.0]),
       block=st.integers(1, 80), contention=st.integers(1, 14), long=st.booleans(), mirrored=MIRRORED)
def test_block_kernel_projects_like_the_reference_on_random_streams(stream, forgetting, delta, block, contention,
                                                                     long, mirrored):
    """With ``non_negative_contention``: the same predictions (from the projected weights), the same
    pinned set and gain, searched anew every PROJECT_EVERY updates inside the compiled run. Within 1e-8:
    the projection solves through ``P[A, A]``, whose conditioning multiplies the rounding of the
    two orders of additions (measured worst 2.9e-9 over 2,500 random streams)."""
    rtol = _tolerance(stream[2], 1e-8)
    names, values, targets = stream
    names = tuple(f"co:{name}" if i < contention else name for i, name in enumerate(names))
    if long:  # several searches of the pinned set
        values, targets = np.tile(values, (4, 1)), np.tile(targets, 4)
    targets = targets - values.sum(axis=1)  # pushes the contention weights below 0
    fast, slow = (RLS(forgetting, delta, non_negative_contention=True) for _ in range(2))
    _learn_both_agree(fast, slow, names, values, targets, block, mirrored, rtol)
    _assert_vectors_agree(fast.predicting_weights(), slow.predicting_weights(), rtol)
    gains = [m._gain for m in (fast, slow)]
    assert (gains[0] is None) == (gains[1] is None)
    if gains[1] is not None:
        np.testing.assert_array_equal(gains[0][0], gains[1][0])
        np.testing.assert_allclose(gains[0][1], gains[1][1], rtol=rtol, atol=1e-9)


@pytest.mark.parametrize("mirrored", [True, False])
def test_kernel_refuses_a_non_finite_step_and_reopens_lost_definiteness_like_the_reference(mirrored):
    names = ("a", "b")
    fast, slow = RLS(), RLS()
    values = np.array([[1.0, 2.0], [2.0, 1.0], [1.0, 1.0], [3.0, -1.0]])
    targets = np.array([1.0, 2.0, 1e308, 0.5])
    with _mirroring(mirrored):
        learn_block(fast, names, values, targets)
    _reference(slow, names, values, targets)
    _assert_same(fast, slow)
    assert fast.n_refused == 1
    # a covariance made indefinite by hand: both re-open it and skip the step
    for model in (fast, slow):
        model._s[0, 0] = -50.0
    row = fast.vectorize({"a": 1.0, "b": 0.0}, grow=True)
    with _mirroring(mirrored):
        learn_rows(fast, row[None, :], np.array([1.0]))
    slow.learn_vector(row, 1.0)
    _assert_same(fast, slow)
    assert fast.n_refused == 2


def test_learn_rows_checks_the_shape():
    model = RLS()
    model.learn_one({"a": 1.0}, 1.0)
    with pytest.raises(ValueError, match="rows must be n x 2"):
        learn_rows(model, np.ones((3, 5)), np.ones(3))


@settings(max_examples=40, deadline=None)
@given(stream=streams(), forgetting=st.sampled_from([1.0, 0.98]), delta=st.sampled_from([0.01, 1.0, 1e6]))
def test_the_kernels_lower_triangle_stays_the_exact_mirror_of_the_upper(stream, forgetting, delta):
    """The kernel reads rows of the upper triangle down the lower one: the two must stay equal bit for bit
    (the same products, added in the same order), over refusals, re-openings and rescalings alike."""
    names, values, targets = stream
    model = RLS(forgetting, delta)
    model.learn_one(dict(zip(names, np.ones(len(names)).tolist(), strict=True)), 1.0)  # every column scaled
    model._s[np.tril_indices(model._s.shape[0], -1)] = np.nan  # stale below, as the reference leaves it
    rows = np.stack([model.vectorize(dict(zip(names, row.tolist(), strict=True)), grow=False) for row in values])
    with _mirroring(True):
        learn_rows(model, rows, targets)
    assert np.array_equal(np.triu(model._s), np.tril(model._s).T)
