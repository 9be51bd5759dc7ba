"""The compiled window term of a ranking's probabilities equals its NumPy definition, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from predictor import probability_kernel

finite = st.floats(-50, 50, allow_nan=False)
xs = hnp.arrays(np.float64, st.integers(1, 30),
                elements=st.one_of(finite, st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0])))


@pytest.fixture(autouse=True, scope="module")
def compiled():
    probability_kernel.warm()  # compiled before hypothesis times its examples


def numpy_term(x, centre, s, phi, ordered, out):
    raw = np.searchsorted(ordered, (x - centre) / s, side="right") / (ordered.size + 1)
    return np.minimum(out, np.clip(1.0 - (1.0 - raw) / phi, 0.0, 1.0))


@given(xs, finite, st.floats(1e-3, 10), st.floats(0.05, 20),
       hnp.arrays(np.float64, st.integers(0, 40), elements=finite), st.data())
def test_window_term_is_numpys(x, centre, s, phi, residuals, data):
    ordered = np.sort(np.concatenate([residuals, residuals[: len(residuals) // 3]]))  # ties too
    out = data.draw(hnp.arrays(np.float64, x.shape, elements=st.one_of(st.floats(0, 1), st.just(np.nan))))
    want = numpy_term(x, centre, s, phi, ordered, out)
    got = out.copy()
    probability_kernel.window_term(x, centre, s, phi, ordered, got)
    np.testing.assert_array_equal(got, want)  # NaNs where NumPy has them, the other values to the bit


@given(hnp.arrays(np.float64, st.integers(1, 20), elements=st.integers(-5, 5).map(float)), st.floats(0.05, 20))
def test_a_value_equal_to_residuals_counts_them_all(residuals, phi):
    ordered = np.sort(residuals)
    x = np.concatenate([ordered, ordered - 0.5, [np.nan]])  # on each residual, between them, and a NaN
    want = numpy_term(x, 0.0, 1.0, phi, ordered, np.ones(x.size))
    got = np.ones(x.size)
    probability_kernel.window_term(x, 0.0, 1.0, phi, ordered, got)
    np.testing.assert_array_equal(got, want)
