"""Prequential monitoring: rolling error, bound coverage and drift alarms per device kind.

Every observation is scored *before* the model learns from it: its absolute
percentage error, and whether it fell within the upper bound at the tracked
confidence. An ADWIN detector per device kind watches the absolute
percentage errors and raises a drift alarm when their level changes.

Examples
--------
>>> monitor = ErrorMonitor(error_window=3)
>>> for actual in (10.0, 11.0, 12.0, 13.0):
...     monitor.update("cpu", actual=actual, predicted=10.0, covered=actual < 12.5)
>>> round(monitor.mape("cpu"), 2), round(monitor.coverage("cpu"), 2)
(16.28, 0.75)
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from river import drift

from predictor.service.types import DriftAlarm

MAX_ALARMS = 20
ALL = "*"


@dataclass
class _KindStats:
    errors: deque
    hits: deque
    observations: int = 0
    covered_total: int = 0
    calibrated_total: int = 0  # observations whose bound came from residuals (not the fallback)
    calibrated_covered: int = 0
    alarms: int = 0
    error_sum: float = 0.0
    detector: drift.ADWIN = field(default_factory=drift.ADWIN)


class ErrorMonitor:
    """Rolling prequential error and coverage per device kind (and over all kinds).

    Parameters
    ----------
    error_window
        Observations the rolling MAPE is computed over.
    coverage_window
        Observations the coverage is computed over.
    warmup
        Observations of a kind before its drift alarms count.
    """

    def __init__(self, error_window: int = 500, coverage_window: int = 2000, warmup: int = 100):
        self.error_window = error_window
        self.coverage_window = coverage_window
        self.warmup = warmup
        self._kinds: dict[str, _KindStats] = {}
        self.alarms: deque[DriftAlarm] = deque(maxlen=MAX_ALARMS)
        self.n_observations = 0

    def _stats(self, kind: str) -> _KindStats:
        stats = self._kinds.get(kind)
        if stats is None:
            stats = self._kinds[kind] = _KindStats(
                errors=deque(maxlen=self.error_window), hits=deque(maxlen=self.coverage_window)
            )
        return stats

    def update(
        self, kind: str, *, actual: float, predicted: float, covered: bool, calibrated: bool = True
    ) -> DriftAlarm | None:
        """Score one observation; returns the drift alarm it raised, if any.

        ``calibrated`` says whether its bound came from residuals rather than the fallback.
        """
        ape = abs(actual - predicted) / actual * 100.0
        self.n_observations += 1
        alarm = None
        for key in (kind, ALL):
            stats = self._stats(key)
            if len(stats.errors) == stats.errors.maxlen:
                stats.error_sum -= stats.errors[0]
            stats.errors.append(ape)
            stats.error_sum += ape
            stats.hits.append(bool(covered))
            stats.observations += 1
            stats.covered_total += bool(covered)
            stats.calibrated_total += bool(calibrated)
            stats.calibrated_covered += bool(covered and calibrated)
            if key == ALL:
                continue
            stats.detector.update(ape)
            if stats.detector.drift_detected and stats.observations > self.warmup:
                stats.alarms += 1
                alarm = DriftAlarm(kind, self.n_observations, time.time(), self.mape(kind))
                self.alarms.append(alarm)
        return alarm

    def mape(self, kind: str = ALL) -> float:
        """Rolling mean absolute percentage error (%), NaN before any observation."""
        stats = self._kinds.get(kind)
        if stats is None or not stats.errors:
            return math.nan
        return max(stats.error_sum, 0.0) / len(stats.errors)

    def coverage(self, kind: str = ALL) -> float:
        """Rolling fraction of observations within their bound, NaN before any."""
        stats = self._kinds.get(kind)
        if stats is None or not stats.hits:
            return math.nan
        return sum(stats.hits) / len(stats.hits)

    def cumulative_coverage(self, kind: str = ALL, *, calibrated_only: bool = False) -> float:
        """Fraction of all observations so far within their bound (NaN before any)."""
        stats = self._kinds.get(kind)
        if stats is None:
            return math.nan
        if calibrated_only:
            return stats.calibrated_covered / stats.calibrated_total if stats.calibrated_total else math.nan
        return stats.covered_total / stats.observations if stats.observations else math.nan

    def calibrated_observations(self, kind: str = ALL) -> int:
        """Observations of ``kind`` (default: all kinds) whose bound came from residuals, not the fallback."""
        stats = self._kinds.get(kind)
        return stats.calibrated_total if stats is not None else 0

    def observations(self, kind: str = ALL) -> int:
        """Observations scored for ``kind`` (default: all kinds)."""
        stats = self._kinds.get(kind)
        return stats.observations if stats is not None else 0

    def alarm_count(self, kind: str) -> int:
        """Drift alarms raised for ``kind`` so far."""
        stats = self._kinds.get(kind)
        return stats.alarms if stats is not None else 0

    def kinds(self) -> list[str]:
        """The device kinds scored so far, sorted."""
        return sorted(k for k in self._kinds if k != ALL)
