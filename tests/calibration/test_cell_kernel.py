"""The compiled grouping of a ranking's rows by calibration cell equals NumPy's sort-based one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from predictor.calibration import cell_kernel


@pytest.fixture(autouse=True, scope="module")
def compiled():
    cell_kernel.warm()  # compiled before hypothesis times its examples


def numpy_groups(codes: np.ndarray) -> list[np.ndarray]:
    """Each distinct code's rows ascending, groups in order of first row (a stable sort)."""
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    groups = np.split(order, np.flatnonzero(ordered[1:] != ordered[:-1]) + 1)
    return sorted(groups, key=lambda rows: rows[0])


@given(hnp.arrays(np.intp, st.integers(1, 300), elements=st.integers(0, 40)), st.integers(0, 20))
def test_groups_are_numpys(codes, spare):
    order, bounds, firsts = cell_kernel.grouped(codes, int(codes.max()) + spare)
    got = [order[bounds[g]:bounds[g + 1]] for g in range(firsts.size)]
    want = numpy_groups(codes)
    assert len(got) == len(want)
    for rows, expected, first in zip(got, want, firsts.tolist(), strict=True):
        np.testing.assert_array_equal(rows, expected)
        assert first == rows[0]
    assert bounds[-1] == codes.size
