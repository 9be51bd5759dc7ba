"""A stage's completion-time distribution on one device, from the service's calibrated answer.

The shape comes from the conformal residuals of the answer's cell
(:meth:`~predictor.calibration.shape.ShapeCalibrator.log_distribution`), or a log-normal when
the cell has none; its scale is set so that its quantile at the request's confidence is the
answer's own upper bound: the values above the centre are stretched (or shrunk) about it. A
pipeline of one stage so composes to the bound CheckDeadline gives, and the monotone and
adaptive adjustments of that bound carry over to the distribution.

Examples
--------
>>> import numpy as np
>>> factors = stage_factors(None, upper_log=np.log(1.5), confidence=0.99, n=2000)
>>> bool(abs(np.quantile(factors, 0.99) - 1.5) < 0.01), bool(abs(np.median(factors) - 1.0) < 0.01)
(True, True)
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from predictor.pipeline.compose import quantile_samples

_GRID = 4000


def stage_factors(log_values: np.ndarray | None, upper_log: float, confidence: float, n: int) -> np.ndarray:
    """``n`` factors on the raw prediction at the stratified probabilities, sorted, whose
    ``confidence`` quantile is ``exp(upper_log)`` (``log_values``: the cell's sorted log factors,
    ``None``: a standard log-normal shape centred on 1)."""
    if log_values is None or len(log_values) == 0:
        normal = NormalDist()
        values = np.array([normal.inv_cdf((j + 0.5) / _GRID) for j in range(_GRID)])
        centre = 0.0
    else:
        values = np.sort(np.asarray(log_values, dtype=float))
        centre = float(np.median(values))
    at = np.linspace(0.0, 1.0, values.size) if values.size > 1 else np.zeros(1)
    level = float(np.interp(confidence, at, values)) if values.size > 1 else float(values[0])
    if level > centre + 1e-12 and upper_log > centre:
        scale = (upper_log - centre) / (level - centre)
        values = np.where(values > centre, centre + (values - centre) * scale, values)
    else:
        values = values + (upper_log - level)
    return quantile_samples(values, n)
