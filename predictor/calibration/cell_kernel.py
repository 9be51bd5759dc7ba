"""Rows grouped by an integer code, groups in order of their first row, and the shape codes of a
ranking's rows: compiled (numba).

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


@njit(cache=True, nogil=True)
def row_shape_codes(offsets, has_overlap, has_remaining, signals):  # pragma: no cover (compiled; tested against NumPy)
    """Per row (co-runners ``offsets[i]:offsets[i + 1]``): its co-runner count ``n``, how many give an
    overlap ``o`` and how many a remaining time ``r``, and whether it gives signals ``s``, as one code
    ``((n * base + o) * base + r) * 2 + s`` with ``base`` one more than the largest count; the distinct
    codes ascending and each row's place among them (``np.unique(codes, return_inverse=True)``):
    ``(distinct, inverse, base)``."""
    rows = offsets.size - 1
    base = 1
    for i in range(rows):
        base = max(base, offsets[i + 1] - offsets[i] + 1)
    codes = np.empty(rows, dtype=np.int64)
    for i in range(rows):
        o = 0
        r = 0
        for j in range(offsets[i], offsets[i + 1]):
            o += has_overlap[j]
            r += has_remaining[j]
        codes[i] = (((offsets[i + 1] - offsets[i]) * base + o) * base + r) * 2 + (1 if signals[i] else 0)
    distinct = np.unique(codes)
    inverse = np.searchsorted(distinct, codes)
    return distinct, inverse, base


def warm() -> None:
    """Compile the kernels now (or load them from the disk cache), on three rows."""
    grouped(np.array([1, 0, 1], dtype=np.intp), 1)
    row_shape_codes(np.array([0, 1, 1, 3], dtype=np.int64), np.array([True, False, True]),
                    np.array([False, True, False]), np.array([False, True, False]))
