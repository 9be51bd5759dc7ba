"""Rows grouped by an integer code, groups in order of their first row: compiled (numba).

A ranking's rows are calibrated per cell (query shape, device kind, co-runner count), each cell
given as one integer per row (:func:`predictor.service.answering._cells`). :func:`grouped` numbers
the cells as their first rows come and places each row after the earlier rows of its cell, in two
passes over the rows: the groups a stable sort of the codes gives, ordered by first row
(``tests/calibration/test_cell_kernel.py``). Compiled on first use and cached on disk
(``cache=True``; warmed before the first answer by :func:`predictor.service.estimates.fixed_point_kernel.warm`).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def grouped(codes, most):  # pragma: no cover (compiled; tested against NumPy)
    """The rows of each distinct code of ``codes`` (integers in ``[0, most]``), groups numbered
    in order of their first row, rows ascending within a group: ``(order, bounds, firsts)``, group
    ``g``'s rows ``order[bounds[g]:bounds[g + 1]]``, its first row ``firsts[g]``."""
    n = codes.size
    group_of_code = np.full(most + 1, -1, dtype=np.intp)
    group_of_row = np.empty(n, dtype=np.intp)
    sizes = np.zeros(n + 1, dtype=np.intp)
    firsts = np.empty(n, dtype=np.intp)
    groups = 0
    for i in range(n):
        g = group_of_code[codes[i]]
        if g < 0:
            g = groups
            group_of_code[codes[i]] = g
            firsts[g] = i
            groups += 1
        group_of_row[i] = g
        sizes[g + 1] += 1
    bounds = np.cumsum(sizes[: groups + 1])
    placed = bounds[:groups].copy()
    order = np.empty(n, dtype=np.intp)
    for i in range(n):
        g = group_of_row[i]
        order[placed[g]] = i
        placed[g] += 1
    return order, bounds, firsts[:groups]


def warm() -> None:
    """Compile the kernel now (or load it from the disk cache), on three rows."""
    grouped(np.array([1, 0, 1], dtype=np.intp), 1)
