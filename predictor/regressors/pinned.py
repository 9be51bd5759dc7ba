"""The pinned set of the non-negativity projection and its gain, by a bordered Cholesky factor.

:meth:`RLS.predicting_weights <predictor.regressors.least_squares.RLS.predicting_weights>` moves the
weights by ``P[:, A] P[A, A]^-1 w[A]`` for a pinned set ``A`` of contention columns;
:func:`find_gain` searches ``A`` and computes that gain (the definition; the compiled
:func:`predictor.regressors.gain_kernel.find_gain` follows the same steps).

The search starts from the negative constrained weights and, at most :data:`ROUNDS` times,
solves ``P[A, A] v = w[A]``, moves the weights to ``w - P[:, A] v`` and adds to ``A`` the
constrained columns that this pushes below 0 (their union: the set only grows). ``P[A, A]``
is symmetric positive definite, so it is factored as ``L L'`` (Cholesky, half the flops of
LU), and since ``A`` only grows the factor is extended by the new columns ``N`` (bordered)
rather than refactored::

    L_new = [[L, 0], [C', chol(P[N, N] - C'C)]]   with   C = L^-1 P[A, N]

so the factor lists ``A`` in the order columns joined (not sorted), and ``L^-1 w[A]`` is
extended the same way. A factor that fails (a pivot not > 0: the block is numerically
singular) or a non-finite solve stops the search with the last set found, whose factor is
the leading block of the one last extended: the gain's rows outside ``A``,
``P[F, A] P[A, A]^-1``, are two triangular solves with it, no factorisation of their own.

Examples
--------
>>> import numpy as np
>>> covariance = np.array([[2.0, 1.0, 0.0], [1.0, 4.0, 1.0], [0.0, 1.0, 2.0]])
>>> pinned, gain = find_gain(covariance, np.array([1.0, -1.0, 0.5]), np.array([False, True, True]))
>>> pinned.tolist(), gain[:, 0].tolist()
([1], [0.25, 1.0, 0.25])
"""

from __future__ import annotations

import numpy as np
from scipy.linalg.blas import dtrsm, dtrsv
from scipy.linalg.lapack import dpotrf

ROUNDS = 8
"""The most candidate sets the search tries."""


def find_gain(covariance: np.ndarray, weights: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pinned set ``A`` (sorted) and its gain ``P[:, A] P[A, A]^-1`` (``d x |A|``).

    Parameters
    ----------
    covariance
        ``P``, ``d x d``, symmetric positive definite (both triangles read).
    weights
        The learned weights ``w``.
    mask
        Which columns are constrained to ``w >= 0``.

    Returns
    -------
    tuple
        The pinned columns, ascending, and the gain: column ``p`` holds ``P[:, A] P[A, A]^-1`` for
        the pinned column ``A[p]``, with the identity's rows on ``A`` (the projection sets ``w[A]``
        to 0 whatever they hold). Nothing pinned: empty arrays (``d x 0`` gain).
    """
    size = weights.size
    none = (np.zeros(0, dtype=np.intp), np.zeros((size, 0)))
    new = np.flatnonzero(mask & (weights < 0))
    order = np.zeros(0, dtype=np.intp)
    lower, forward = np.zeros((0, 0)), np.zeros(0)
    found = 0
    for _ in range(ROUNDS if new.size else 0):
        grown = _bordered(lower, forward, covariance, order, new, weights)
        if grown is None:  # numerically singular: keep the last set found
            break
        lower, forward = grown
        order = np.concatenate([order, new])
        solved = dtrsv(lower, forward, lower=1, trans=1)
        if not np.isfinite(solved).all():
            break
        found = order.size
        spread = np.zeros(size)
        spread[order] = solved
        moved = weights - covariance @ spread
        moved[order] = 0.0
        new = np.flatnonzero(mask & (moved < 0))
        if not new.size:
            break
    if not found:
        return none
    pinned, lower = order[:found], np.asfortranarray(lower[:found, :found])
    outside = np.ones(size, dtype=bool)
    outside[pinned] = False
    free = np.flatnonzero(outside)
    rows = dtrsm(1.0, lower, dtrsm(1.0, lower, covariance[np.ix_(pinned, free)], lower=1), lower=1, trans_a=1)
    if not np.isfinite(rows).all():
        return none
    ascending = np.argsort(pinned)
    gain = np.zeros((size, found))
    gain[free] = rows[ascending].T
    gain[pinned[ascending], np.arange(found)] = 1.0
    return pinned[ascending], gain


def _bordered(lower: np.ndarray, forward: np.ndarray, covariance: np.ndarray, order: np.ndarray,
              new: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The Cholesky factor of ``P`` on ``order`` then ``new`` from ``lower`` (on ``order``), and
    ``L^-1 w`` on them from ``forward``; ``None`` where the new block is not positive definite."""
    known, added = order.size, new.size
    cross = np.zeros((0, added))
    if known:
        cross = dtrsm(1.0, lower, covariance[np.ix_(order, new)], lower=1)
    corner, info = dpotrf(covariance[np.ix_(new, new)] - cross.T @ cross, lower=1, clean=1)
    if info:
        return None
    grown = np.zeros((known + added, known + added), order="F")
    grown[:known, :known] = lower
    grown[known:, :known] = cross.T
    grown[known:, known:] = corner
    tail = dtrsv(corner, weights[new] - cross.T @ forward, lower=1)
    return grown, np.concatenate([forward, tail])
