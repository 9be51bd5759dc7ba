"""The service's configuration: one validated, immutable dataclass.

Examples
--------
>>> ServiceConfig(max_candidates=0)
Traceback (most recent call last):
...
ValueError: max_candidates must be >= 1, got 0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from predictor.calibration import check_confidence


@dataclass(frozen=True)
class ServiceConfig:
    """Everything the service can be tuned by.

    Parameters
    ----------
    predictor
        Registry spec of the predictor, e.g. ``"rls"`` or ``"rls:forgetting=0.99"``.
    default_confidence
        Confidence of bounds and deadline checks when a request gives none.
    coverage_confidence
        Confidence at which the status tracks the coverage of the bounds.
    calibration_window
        Residuals kept per device kind by the conformal calibrator.
    min_residuals
        Residuals a device kind needs before its own window calibrates its bounds.
    fallback_sigma
        Log-normal spread of the wide bound used before any residuals exist.
    adapt
        Step of the one-sided adaptive-conformal adjustment, which widens the bounds of a
        device kind whose recent misses exceed ``1 - coverage_confidence`` (0 disables it).
    error_window
        Recent observations the rolling MAPE is computed over (per device kind).
    coverage_window
        Recent observations the status coverage is computed over (per device kind).
    max_candidates
        Most candidate devices in one ``RankPlacements`` call.
    max_stream_records
        Most records in one ``ReportObservations`` stream.
    max_rejections_reported
        Rejections listed (all are counted) in one ``ReportObservations`` answer.
    max_devices, max_running_per_device
        Bounds on the live view.
    stale_after_s
        A batch running longer than this without an end report leaves the live view.
    overrun_remaining_fraction
        A running batch already past its predicted latency is assumed to need this
        fraction of its prediction more.
    overlap_iterations
        Fixed-point iterations between predicted latency and co-runner overlap.
    snapshot_every_s
        Period of snapshots when a state directory is given (0 disables periodic ones).
    """

    predictor: str = "rls"
    default_confidence: float = 0.99
    coverage_confidence: float = 0.99
    calibration_window: int = 2000
    min_residuals: int = 50
    fallback_sigma: float = 0.5
    adapt: float = 0.002
    error_window: int = 500
    coverage_window: int = 2000
    max_candidates: int = 1024
    max_stream_records: int = 1_000_000
    max_rejections_reported: int = 100
    max_devices: int = 10_000
    max_running_per_device: int = 256
    stale_after_s: float = 60.0
    overrun_remaining_fraction: float = 0.1
    overlap_iterations: int = 3
    snapshot_every_s: float = 60.0

    def __post_init__(self) -> None:
        check_confidence(self.default_confidence)
        check_confidence(self.coverage_confidence)
        for name in (
            "calibration_window",
            "min_residuals",
            "error_window",
            "coverage_window",
            "max_candidates",
            "max_stream_records",
            "max_devices",
            "max_running_per_device",
            "overlap_iterations",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        if self.max_rejections_reported < 0:
            raise ValueError(f"max_rejections_reported must be >= 0, got {self.max_rejections_reported!r}")
        for name in ("fallback_sigma", "stale_after_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if not 0.0 < self.overrun_remaining_fraction <= 1.0:
            raise ValueError(
                f"overrun_remaining_fraction must lie in (0, 1], got {self.overrun_remaining_fraction!r}"
            )
        if not (math.isfinite(self.snapshot_every_s) and self.snapshot_every_s >= 0):
            raise ValueError(f"snapshot_every_s must be >= 0, got {self.snapshot_every_s!r}")
        if not 0.0 <= self.adapt < 1.0:
            raise ValueError(f"adapt must lie in [0, 1), got {self.adapt!r}")
