"""The probability that latencies stay within a limit, by a calibration cell's windows: compiled (numba).

:meth:`ShapeCalibrator.probabilities <predictor.calibration.shape.ShapeCalibrator.probabilities>`
reads each row's probability from every window a cell's bound is made of and keeps the least.
:func:`cell_terms` does every window's steps (the normalised residual, the conformal cdf's
search, the adaptive-conformal rescaling, the clip and the minimum) for a cell's rows in one call
(the windows packed into one array), in NumPy's floating-point operations in NumPy's order (the
same bits: ``tests/calibration/test_probability_kernel.py``). Compiled on first use and cached on disk
(``cache=True``; :func:`warm` before the first answer), strict IEEE order (no ``fastmath``)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def cell_terms(x, at, centre, scales, phis, ordered, offsets, out):  # pragma: no cover (compiled; tested against NumPy)
    """For each row ``i`` of ``at``: ``out[i]`` the least over the cell's windows ``t``, in order,
    of ``clip(1 - (1 - cdf_t((x[i] - centre) / scales[t])) / phis[t], 0, 1)``, starting from 1;
    ``cdf_t`` the conformal one of the sorted residuals ``ordered[offsets[t]:offsets[t + 1]]``:
    those at or below a value over their count plus one (``np.searchsorted(..., side="right")``,
    a NaN after every residual, as NumPy places it). Rows not in ``at`` are left as they are."""
    for k in range(at.size):
        i = at[k]
        least = 1.0
        for t in range(scales.size):
            first, end = offsets[t], offsets[t + 1]
            n = end - first
            v = (x[i] - centre) / scales[t]
            if v != v:
                below = n
            else:
                lo, hi = first, end
                while lo < hi:  # the first residual above v
                    mid = (lo + hi) >> 1
                    if ordered[mid] <= v:
                        lo = mid + 1
                    else:
                        hi = mid
                below = lo - first
            p = 1.0 - (1.0 - below / (n + 1)) / phis[t]
            if p < 0.0:
                p = 0.0
            elif p > 1.0:
                p = 1.0
            if p < least:
                least = p
        out[i] = least


def warm() -> None:
    """Compile the kernel now (or load it from the disk cache), on two rows and one window."""
    cell_terms(np.zeros(2), np.arange(2), 0.0, np.ones(1), np.ones(1), np.array([-1.0, 1.0]),
               np.array([0, 2]), np.ones(2))
