"""The compiled terms of a calibration cell's probabilities equal their NumPy definition, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from predictor.calibration import probability_kernel

finite = st.floats(-50, 50, allow_nan=False)
xs = hnp.arrays(np.float64, st.integers(1, 30),
                elements=st.one_of(finite, st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0])))


@pytest.fixture(autouse=True, scope="module")
def compiled():
    probability_kernel.warm()  # compiled before hypothesis times its examples


def numpy_term(x, centre, s, phi, ordered, out):
    raw = np.searchsorted(ordered, (x - centre) / s, side="right") / (ordered.size + 1)
    return np.minimum(out, np.clip(1.0 - (1.0 - raw) / phi, 0.0, 1.0))


def numpy_cell(x, at, centre, windows, out):
    """Each window's term in turn over the rows ``at`` (as the calibrator did, a window at a time)."""
    got = out.copy()
    least = np.ones(at.size)
    for s, phi, ordered in windows:
        least = numpy_term(x[at], centre, s, phi, ordered, least)
    got[at] = least
    return got


def packed(windows):
    return (np.array([s for s, _, _ in windows]), np.array([phi for _, phi, _ in windows]),
            np.concatenate([o for _, _, o in windows]), np.cumsum([0] + [o.size for _, _, o in windows]))


window = st.tuples(st.floats(1e-3, 10), st.floats(0.05, 20),
                   hnp.arrays(np.float64, st.integers(0, 40), elements=finite).map(
                       lambda r: np.sort(np.concatenate([r, r[: len(r) // 3]]))))  # ties too


@given(xs, finite, st.lists(window, min_size=1, max_size=5), st.data())
def test_cell_terms_are_numpys_window_by_window(x, centre, windows, data):
    at = np.array(sorted(data.draw(st.sets(st.integers(0, x.size - 1), min_size=1))), dtype=np.intp)
    out = data.draw(hnp.arrays(np.float64, x.shape, elements=st.one_of(st.floats(0, 1), st.just(np.nan))))
    want = numpy_cell(x, at, centre, windows, out)
    got = out.copy()
    probability_kernel.cell_terms(x, at, centre, *packed(windows), got)
    np.testing.assert_array_equal(got, want)  # rows outside ``at`` untouched, the others to the bit


@given(hnp.arrays(np.float64, st.integers(1, 20), elements=st.integers(-5, 5).map(float)), st.floats(0.05, 20))
def test_a_value_equal_to_residuals_counts_them_all(residuals, phi):
    ordered = np.sort(residuals)
    x = np.concatenate([ordered, ordered - 0.5, [np.nan]])  # on each residual, between them, and a NaN
    windows = [(1.0, phi, ordered), (2.0, phi, ordered[: ordered.size // 2])]
    at = np.arange(x.size)
    want = numpy_cell(x, at, 0.0, windows, np.ones(x.size))
    got = np.ones(x.size)
    probability_kernel.cell_terms(x, at, 0.0, *packed(windows), got)
    np.testing.assert_array_equal(got, want)
