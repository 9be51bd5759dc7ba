"""A linear model's answer on a feature form's rows as a quadratic of their overlaps: compiled (numba).

:meth:`FeatureForm.quadratic <predictor.features.extract.FeatureForm.quadratic>` gives, per row, the
constant, linear and quadratic coefficients of ``values(o) @ weights + intercept`` in the row's
co-runners' overlaps ``o``. Here only the columns an overlap moves have a slope (the
overlap-weighted sums and their crosses), the pairs of crossed quantities enter as a list (the
``interactions`` products), and each step runs over all rows in its innermost loop. It is the
same quadratic as the feature matrix's with its terms summed in another order: equal up to rounding (``tests/features/test_overlap_quadratic.py`` checks it against the
feature matrix's answer at random overlaps).

Compiled on first use and cached on disk (``cache=True``; warmed before the first answer by
:func:`predictor.service.estimates.fixed_point_kernel.warm`), strict IEEE order (no ``fastmath``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def coefficients(width, fixed_at, fixed, summed_at, weighted, cross_at, source, own, at, first, second,
                 weights, intercept, overlaps, free, out):  # pragma: no cover (compiled; tested against the matrix)
    """Fill ``out`` (``1 + k + k * k`` x rows: the constant, the ``k`` linear, the ``k * k`` quadratic
    coefficients, ``k`` the most co-runners a row has) with each row's quadratic of its free
    overlaps, the others at ``overlaps`` (``free`` and ``overlaps``: k x rows; ``weighted``: each
    summed column's value per unit overlap of slot ``q``'s co-runner, columns x k x rows).

    The rows' columns (the first ``width`` of the names) at the fixed overlaps ``F``: the constant
    ones from ``fixed`` (at ``fixed_at``), the sums of the fixed co-runners' ``weighted`` values (at
    ``summed_at``), the crosses ``own * F[source]`` (at ``cross_at``). Slot ``q``'s slope ``S_q``:
    its ``weighted`` values where it is free, 0 elsewhere, crossed the same way; only those columns
    move. With ``fine`` the columns' weights (the crossed quantities' own columns, ``at``, adding
    theirs) and ``P`` the pairs' (``P[at[first[p]], at[second[p]]]``): the constant
    ``intercept + fine.F + F'PF``, the linear ``S_q.(fine + (P + P')F)``, the quadratic ``S_q'PS_l``.
    Each step runs over all rows at once (the innermost loop), so that it vectorises.
    """
    k, n = overlaps.shape
    pairs = first.size
    fine = weights[:width].copy()
    for q in range(at.size):
        fine[at[q]] += weights[width + pairs + q]
    left = np.empty(pairs, dtype=np.intp)
    right = np.empty(pairs, dtype=np.intp)
    for p in range(pairs):
        left[p] = at[first[p]]
        right[p] = at[second[p]]
    moves = np.full(width, -1, dtype=np.intp)  # each column's place among those the overlaps move
    for c in range(summed_at.size):
        moves[summed_at[c]] = c
    for c in range(cross_at.size):
        moves[cross_at[c]] = summed_at.size + c
    m = summed_at.size + cross_at.size
    columns = np.empty((width, n))
    for c in range(fixed_at.size):
        columns[fixed_at[c]] = fixed[c]
    for c in range(summed_at.size):
        row = columns[summed_at[c]]
        row[:] = 0.0
        for q in range(k):
            for j in range(n):
                if not free[q, j]:
                    row[j] += overlaps[q, j] * weighted[c, q, j]
    for c in range(cross_at.size):
        crossed, sourced = columns[cross_at[c]], columns[source[c]]
        for j in range(n):
            crossed[j] = own[c] * sourced[j]
    constant = out[0]
    constant[:] = intercept
    gradient = np.empty((m, n))  # fine + (P + P')F, of the columns that move
    for i in range(width):
        column = columns[i]
        for j in range(n):
            constant[j] += fine[i] * column[j]
        if moves[i] >= 0:
            gradient[moves[i]] = fine[i]
    for p in range(pairs):
        w = weights[width + p]
        a, b = columns[left[p]], columns[right[p]]
        for j in range(n):
            constant[j] += w * a[j] * b[j]
        if moves[left[p]] >= 0:
            g = gradient[moves[left[p]]]
            for j in range(n):
                g[j] += w * b[j]
        if moves[right[p]] >= 0:
            g = gradient[moves[right[p]]]
            for j in range(n):
                g[j] += w * a[j]
    slopes = np.empty((k, m, n))
    for q in range(k):
        for c in range(summed_at.size):
            for j in range(n):
                slopes[q, c, j] = weighted[c, q, j] if free[q, j] else 0.0
        for c in range(cross_at.size):
            crossed, sourced = slopes[q, summed_at.size + c], slopes[q, moves[source[c]]]
            for j in range(n):
                crossed[j] = own[c] * sourced[j]
        linear = out[1 + q]
        linear[:] = 0.0
        for c in range(m):
            slope, g = slopes[q, c], gradient[c]
            for j in range(n):
                linear[j] += slope[j] * g[j]
    for q in range(k):
        for r in range(k):
            quadratic = out[1 + k + q * k + r]
            quadratic[:] = 0.0
            for p in range(pairs):
                if moves[left[p]] >= 0 and moves[right[p]] >= 0:
                    w = weights[width + p]
                    a, b = slopes[q, moves[left[p]]], slopes[r, moves[right[p]]]
                    for j in range(n):
                        quadratic[j] += w * a[j] * b[j]


def warm() -> None:
    """Compile :func:`coefficients` now (or load it from the disk cache), on a one-row form with one
    co-runner, one crossed pair and the argument types a ranking passes."""
    index = np.zeros(1, dtype=np.intp)
    coefficients(2, index, np.ones((1, 1)), index + 1, np.ones((1, 1, 1)), index[:0], index[:0], np.zeros(0),
                 np.array([1], dtype=np.intp), index, index, np.ones(4), 0.0, np.ones((1, 1)),
                 np.ones((1, 1), dtype=bool), np.empty((3, 1)))
