"""Calibrated upper bounds: online conformal quantiles of a predictor's own residuals.

- :mod:`~predictor.calibration.conformal`: the per-device-kind calibrator.
- :mod:`~predictor.calibration.shapes`, :mod:`~predictor.calibration.shape`: a calibrator per
  query shape (what the query knew), with its compiled walks (``*_kernel``) and its block form
  (:mod:`~predictor.calibration.shape_block`).
- :mod:`~predictor.calibration.merge`: calibrators learned apart, merged.

May import :mod:`predictor.runtime`.
"""
