"""The pinned set of the non-negativity projection and its gain, compiled (numba).

:func:`find_gain` is :func:`predictor.regressors.pinned.find_gain` (the definition: see there
for the search and the bordered Cholesky factor), step for step, on the state the compiled RLS
run holds (:mod:`predictor.regressors.rls_kernel`): the upper triangle of ``S`` and its scale
``c``, the gain written into a preallocated array. The factor is kept as ``U = L'`` in a
row-major array, and every inner loop is an update of independent entries (``y -= a x`` over a
view, from index 0: :func:`_subtract`), never a running sum: in strict IEEE order (no
``fastmath``) a sum is one chain of dependent additions, while independent updates pipeline and
vectorise. The gain's two triangular solves run over all its right-hand sides at once, four rows
of the factor a pass (:func:`_solve_rows`).

Compiled on first use and cached on disk (``cache=True``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from predictor.regressors.pinned import ROUNDS


@njit(cache=True, nogil=True, inline="always")
def _covariance(s, c, mirrored):  # pragma: no cover
    """``P = c S`` in full from the upper triangle of ``S`` (Fortran order), as ``RLS.covariance``:
    each row from a contiguous column of ``S``, the rest mirrored by tiles; where ``mirrored`` (the
    lower triangle holds the upper's mirror, the same numbers), every row from its whole column."""
    d = s.shape[0]
    covariance = np.empty((d, d))
    if mirrored:
        for j in range(d):
            for i in range(d):
                covariance[j, i] = c * s[i, j]
        return covariance
    for j in range(d):
        for i in range(j + 1):
            covariance[j, i] = c * s[i, j]
    tile = 16
    for low in range(0, d, tile):
        for start in range(low, d, tile):
            for j in range(low, min(low + tile, d)):
                for i in range(max(start, j + 1), min(start + tile, d)):
                    covariance[j, i] = covariance[i, j]
    return covariance


@njit(cache=True, nogil=True, inline="always")
def _subtract(target, source, factor):  # pragma: no cover
    """``target -= factor * source`` (equal lengths; a loop from 0 over views, which vectorises)."""
    for i in range(target.size):
        target[i] -= factor * source[i]


@njit(cache=True, nogil=True, inline="always")
def _border(covariance, upper, order, known, new, added, column):  # pragma: no cover
    """Extend the factor ``upper`` (``U = L'`` of ``P`` on ``order[:known]``) by the columns
    ``new[:added]``, appended to ``order``; returns whether the new block was positive definite
    (when not, the leading ``known x known`` block is left as it was). ``column``: scratch."""
    total = known + added
    for a in range(added):
        order[known + a] = new[a]
    for a in range(known, total):  # C = L^-1 P[A, N] (U's block above the new one), column by column
        row = covariance[order[a]]
        for p in range(known):
            column[p] = row[order[p]]
        for j in range(known):
            column[j] /= upper[j, j]
            _subtract(column[j + 1 : known], upper[j, j + 1 : known], column[j])
        for p in range(known):
            upper[p, a] = column[p]
        for b in range(a, total):
            upper[a, b] = row[order[b]]
    for p in range(known):  # P[N, N] - C'C on the upper triangle
        for a in range(known, total):
            _subtract(upper[a, a:total], upper[p, a:total], upper[p, a])
    for j in range(known, total):  # its Cholesky factor, right-looking
        pivot = upper[j, j]
        if not pivot > 0.0:
            return False
        pivot = math.sqrt(pivot)
        upper[j, j] = pivot
        for i in range(j + 1, total):
            upper[j, i] /= pivot
        for q in range(j + 1, total):
            _subtract(upper[q, q:total], upper[j, q:total], upper[j, q])
    return True


@njit(cache=True, nogil=True, inline="always")
def _forward_tail(upper, vector, known, total):  # pragma: no cover
    """``L^-1 b`` on ``total`` columns from its first ``known`` entries (already solved) and ``b``
    in the rest of ``vector``, in place."""
    for j in range(total):
        if j >= known:
            vector[j] /= upper[j, j]
        start = max(j + 1, known)
        _subtract(vector[start:total], upper[j, start:total], vector[j])


@njit(cache=True, nogil=True, inline="always")
def _backward(upper, vector, total):  # pragma: no cover
    """``L'^-1 b`` in place (``vector`` holds ``b``)."""
    for j in range(total - 1, -1, -1):
        vector[j] /= upper[j, j]
        _subtract(vector[:j], upper[:j, j], vector[j])


@njit(cache=True, nogil=True, inline="always")
def _subtract_four(target, first, second, third, fourth, a, b, c, d):  # pragma: no cover
    """Four :func:`_subtract` in turn (the same operations on each entry, in one pass over ``target``)."""
    for i in range(target.size):
        target[i] = (((target[i] - a * first[i]) - b * second[i]) - c * third[i]) - d * fourth[i]


@njit(cache=True, nogil=True, inline="always")
def _solve_rows(upper, rows, k):  # pragma: no cover
    """``L'^-1 L^-1 B`` in place, ``rows`` holding ``B`` (``k`` rows, all columns at once).

    Substitution by blocks of four rows: each row is updated by a block's four in one pass, in the
    order row-by-row substitution would (the same numbers, a quarter of the passes)."""
    start = 0
    while start < k:  # L^-1
        stop = min(start + 4, k)
        for q in range(start, stop):
            rows[q] /= upper[q, q]
            for i in range(q + 1, stop):
                _subtract(rows[i], rows[q], upper[q, i])
        for i in range(stop, k):
            if stop - start == 4:
                _subtract_four(rows[i], rows[start], rows[start + 1], rows[start + 2], rows[start + 3],
                               upper[start, i], upper[start + 1, i], upper[start + 2, i], upper[start + 3, i])
            else:
                for q in range(start, stop):
                    _subtract(rows[i], rows[q], upper[q, i])
        start = stop
    stop = k
    while stop > 0:  # L'^-1
        start = max(stop - 4, 0)
        for q in range(stop - 1, start - 1, -1):
            rows[q] /= upper[q, q]
            for i in range(start, q):
                _subtract(rows[i], rows[q], upper[i, q])
        for i in range(start):
            if stop - start == 4:
                _subtract_four(rows[i], rows[stop - 1], rows[stop - 2], rows[stop - 3], rows[start],
                               upper[i, stop - 1], upper[i, stop - 2], upper[i, stop - 3], upper[i, start])
            else:
                for q in range(stop - 1, start - 1, -1):
                    _subtract(rows[i], rows[q], upper[i, q])
        stop = start


@njit(cache=True, nogil=True, inline="always")
def _negatives(values, mask, out):  # pragma: no cover
    """Writes the constrained columns (``mask``) whose value is below 0 into ``out``, ascending;
    returns how many."""
    n = 0
    for i in range(values.size):
        if mask[i] and values[i] < 0:
            out[n] = i
            n += 1
    return n


@njit(cache=True, nogil=True)
def find_gain(s, c, w, mask, pinned, gain, mirrored=False):  # pragma: no cover
    """:func:`predictor.regressors.pinned.find_gain` of ``P = c S`` (``S`` from its upper triangle, or
    from all of it where ``mirrored``: the lower triangle the upper's mirror, as the RLS run keeps it):
    writes the pinned set (ascending) into ``pinned`` and its gain into the first columns of
    ``gain``; returns how many are pinned."""
    d = w.size
    new = np.empty(d, dtype=np.int64)
    added = _negatives(w, mask, new)
    if not added:
        return 0
    covariance = _covariance(s, c, mirrored)
    upper = np.empty((d, d))
    order = np.empty(d, dtype=np.int64)
    forward = np.empty(d)
    solved = np.empty(d)
    moved = np.empty(d)
    column = np.empty(d)
    known = found = 0
    for _ in range(ROUNDS):
        if not _border(covariance, upper, order, known, new, added, column):
            break  # numerically singular: keep the last set found
        total = known + added
        for a in range(known, total):
            forward[a] = w[order[a]]
        _forward_tail(upper, forward, known, total)
        known = total
        solved[:total] = forward[:total]
        _backward(upper, solved, total)
        if not np.isfinite(solved[:total]).all():
            break
        found = total
        for i in range(d):
            moved[i] = w[i]
        for p in range(total):  # w - P[:, A] solved, column by column
            _subtract(moved, covariance[order[p]], solved[p])
        for p in range(total):
            moved[order[p]] = 0.0
        added = _negatives(moved, mask, new)
        if not added:
            break
    if not found:
        return 0
    k = found
    isfree = np.ones(d, dtype=np.bool_)
    for p in range(k):
        isfree[order[p]] = False
    free = np.flatnonzero(isfree)
    rows = np.empty((k, d - k))  # P[A, F], then L'^-1 L^-1 of it
    for p in range(k):
        row = covariance[order[p]]
        for f in range(d - k):
            rows[p, f] = row[free[f]]
    _solve_rows(upper, rows, k)
    if not np.isfinite(rows).all():
        return 0
    ascending = np.argsort(order[:k])
    for i in range(d):  # row by row (the RLS run keeps the gain row-major)
        for p in range(k):
            gain[i, p] = 0.0
    for p in range(k):
        source = ascending[p]
        pinned[p] = order[source]
        gain[pinned[p], p] = 1.0
        for f in range(d - k):
            gain[free[f], p] = rows[source, f]
    return k
