"""The probability that latencies stay within a limit, by one calibration window: compiled (numba).

:meth:`ShapeCalibrator.probabilities <predictor.shape_calibration.ShapeCalibrator.probabilities>`
reads each row's probability from every window a cell's bound is made of and keeps the least. In
NumPy that was five array operations per window (the normalised residual, a ``searchsorted``, the
adaptive-conformal rescaling, a clip and a minimum), each a few microseconds on a ranking's rows:
most of a ranking's bounds. :func:`window_term` does one window's steps for every row in one call,
in the same floating-point operations in the same order (the same bits:
``tests/test_probability_kernel.py``). Compiled on first use and cached on disk
(``cache=True``; :func:`warm` before the first answer), strict IEEE order (no ``fastmath``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def window_term(x, centre, s, phi, ordered, out):  # pragma: no cover (compiled; tested against NumPy)
    """``out = np.minimum(out, np.clip(1 - (1 - cdf((x - centre) / s)) / phi, 0, 1))`` in place, ``cdf``
    the conformal one of the sorted residuals ``ordered``: those at or below a value over their
    count plus one (``np.searchsorted(ordered, v, side="right")``, a NaN after every residual, as
    NumPy places it). A NaN in ``out`` stays, as ``np.minimum`` keeps it."""
    n = ordered.size
    for i in range(x.size):
        v = (x[i] - centre) / s
        if v != v:
            below = n
        else:
            lo, hi = 0, n
            while lo < hi:  # the first residual above v
                mid = (lo + hi) >> 1
                if ordered[mid] <= v:
                    lo = mid + 1
                else:
                    hi = mid
            below = lo
        p = 1.0 - (1.0 - below / (n + 1)) / phi
        if p < 0.0:
            p = 0.0
        elif p > 1.0:
            p = 1.0
        if p < out[i]:
            out[i] = p


def warm() -> None:
    """Compile the kernel now (or load it from the disk cache), on two rows."""
    window_term(np.zeros(2), 0.0, 1.0, 1.0, np.array([-1.0, 1.0]), np.ones(2))
