"""The compiled RLS block kernel (:mod:`predictor.regressors.rls_kernel`) equals the reference class."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.regressors import rls_kernel
from predictor.regressors.rls import RLS
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


def _reference(model: RLS, names, values, targets) -> np.ndarray:
    predictions = []
    for row, target in zip(values, targets, strict=True):
        vector = model.vectorize(dict(zip(names, row.tolist(), strict=True)), grow=True)
        predictions.append(model.predict_vector(vector))
        model.learn_vector(vector, float(target))
    return np.array(predictions)


def _assert_same(a: RLS, b: RLS) -> None:
    assert (a.n_updates, a.n_refused, a.index.columns) == (b.n_updates, b.n_refused, b.index.columns)
    assert a.__dict__.get("n_resets", 0) == b.__dict__.get("n_resets", 0)
    np.testing.assert_allclose(a._weights, b._weights, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(a.covariance, b.covariance, rtol=1e-9, atol=1e-9 * max(1.0, b.delta))
    np.testing.assert_allclose([a._scale, a._trace_s], [b._scale, b._trace_s], rtol=1e-9)
    np.testing.assert_array_equal(a._column_scale, b._column_scale)


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


@settings(max_examples=60, deadline=None)
@given(stream=streams(), forgetting=st.sampled_from([1.0, 0.999, 0.98, 0.9]),
       delta=st.sampled_from([0.01, 1.0, 100.0, 1e6]), max_trace=st.sampled_from([None, 10.0, 1e4]),
       block=st.integers(1, 50), mirrored=MIRRORED)
def test_block_kernel_equals_reference_on_random_streams(stream, forgetting, delta, max_trace, block, mirrored):
    names, values, targets = stream
    fast, slow = RLS(forgetting, delta, max_trace), RLS(forgetting, delta, max_trace)
    with _mirroring(mirrored):
        predicted = np.concatenate([learn_block(fast, names, values[i : i + block], targets[i : i + block])
                                    for i in range(0, len(values), block)])
    expected = _reference(slow, names, values, targets)
    _assert_same(fast, slow)
    np.testing.assert_allclose(predicted, expected, rtol=1e-9, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(stream=streams(), forgetting=st.sampled_from([1.0, 0.998, 0.95]), delta=st.sampled_from([0.01, 1.0, 100.0]),
       block=st.integers(1, 80), contention=st.integers(1, 14), long=st.booleans(), mirrored=MIRRORED)
def test_block_kernel_projects_like_the_reference_on_random_streams(stream, forgetting, delta, block, contention,
                                                                     long, mirrored):
    """With ``non_negative_contention``: the same predictions (from the projected weights), the same
    pinned set and gain, searched anew every PROJECT_EVERY updates inside the compiled run."""
    names, values, targets = stream
    names = tuple(f"co:{name}" if i < contention else name for i, name in enumerate(names))
    if long:  # several searches of the pinned set
        values, targets = np.tile(values, (4, 1)), np.tile(targets, 4)
    targets = targets - values.sum(axis=1)  # pushes the contention weights below 0
    fast, slow = (RLS(forgetting, delta, non_negative_contention=True) for _ in range(2))
    with _mirroring(mirrored):
        predicted = np.concatenate([learn_block(fast, names, values[i : i + block], targets[i : i + block])
                                    for i in range(0, len(values), block)])
    expected = _reference(slow, names, values, targets)
    _assert_same(fast, slow)
    np.testing.assert_allclose(predicted, expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.predicting_weights(), slow.predicting_weights(), rtol=1e-9, atol=1e-9)
    gains = [m.__dict__.get("_gain") for m in (fast, slow)]
    assert (gains[0] is None) == (gains[1] is None)
    if gains[1] is not None:
        np.testing.assert_array_equal(gains[0][0], gains[1][0])
        np.testing.assert_allclose(gains[0][1], gains[1][1], rtol=1e-9, atol=1e-9)


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
