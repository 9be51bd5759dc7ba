"""The static model's one fit: its matrix is the vectors a record at a time would give (columns,
values and dropped names alike), and the reduced bounded least squares has the full problem's minimiser."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import lsq_linear

from predictor.predictors.static import StaticPredictor, _reduced
from predictor.regressors.feature_index import FeatureIndex

feature_maps = st.dictionaries(st.sampled_from("abcdefgh"), st.floats(-1e3, 1e3), max_size=6)


@settings(max_examples=150, deadline=None)
@given(st.lists(feature_maps, min_size=1, max_size=40), st.integers(1, 9))
def test_the_pending_matrix_is_the_vectors_built_a_record_at_a_time(pending, cap):
    reference = FeatureIndex(max_features=cap)
    for features in pending:
        reference.vector(features, grow=True)
    expected = np.stack([reference.vector(features, grow=False) for features in pending])
    predictor = StaticPredictor()
    predictor._index = FeatureIndex(max_features=cap)
    predictor._pending = [(features, 1.0) for features in pending]
    matrix = predictor._pending_matrix()
    assert predictor._index.columns == reference.columns
    assert predictor._index.dropped == reference.dropped
    np.testing.assert_array_equal(matrix, expected)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(0, 60), st.integers(0, 2**32 - 1))
def test_the_reduced_problem_has_the_same_bounded_minimiser(columns, extra_rows, seed):
    rng = np.random.default_rng(seed)
    rows = columns + extra_rows
    matrix = rng.normal(size=(rows, columns)) * rng.uniform(0.1, 10, size=columns)
    target = rng.normal(size=rows)
    lower = np.where(rng.random(columns) < 0.5, 0.0, -np.inf)
    reduced_matrix, reduced_target = _reduced(matrix, target)
    assert reduced_matrix.shape == ((columns, columns) if rows > columns + 1 else (rows, columns))
    full = lsq_linear(matrix, target, bounds=(lower, np.inf), tol=1e-12).x
    reduced = lsq_linear(reduced_matrix, reduced_target, bounds=(lower, np.inf), tol=1e-12).x
    cost = lambda x: float(np.sum((matrix @ x - target) ** 2))  # noqa: E731
    assert cost(reduced) <= cost(full) * (1 + 1e-9) + 1e-12
    np.testing.assert_allclose(reduced, full, rtol=1e-6, atol=1e-6 * (1 + np.abs(full).max()))
