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

import itertools
import math
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from predictor.regressors.drift_detector import Adwin
from predictor.service.types import DriftAlarm, ShapeStats

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
    detector: Adwin = field(default_factory=Adwin)


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


REPLAY = "replay"
"""Answers the service gave itself, at ingest, for the admission-time forms of an observed batch."""
LINKED = "linked"
"""Answers really given to queries that carried a batch id, scored when its observation arrived."""
ANY = ""
"""In a :class:`ShapeStats` key: every device kind, every model (``count`` -1: every count)."""


class ShapeMonitor:
    """Admission-time error and bound coverage per query shape, device kind, model and co-runner count.

    Cumulative counts per ``(source, shape, kind, model, count)`` (at most ``max_keys`` keys;
    further ones count only in their shape's totals) and a rolling window per
    ``(source, shape)``.

    Examples
    --------
    >>> m = ShapeMonitor()
    >>> m.update("replay", "unknown/nosig", "cpu", "mlp", 1, actual=10.0, predicted=8.0, covered=True)
    >>> m.update("replay", "unknown/nosig", "cpu", "mlp", 2, actual=10.0, predicted=12.0, covered=False)
    >>> s = m.summary("replay", "unknown/nosig")
    >>> s.observations, s.coverage, round(s.mape, 1)
    (2, 0.5, 20.0)
    >>> m.summary("replay", "unknown/nosig", count=2).coverage
    0.0
    """

    def __init__(self, window: int = 2000, max_keys: int = 20_000):
        self.window = window
        self.max_keys = max_keys
        # (answers, covered, sum of APE) per cell and per (source, shape): tuples, replaced on update, so
        # that a copy of the dicts is a view of the counts as they stand (frozen)
        self._counts: dict[tuple[str, str, str, str, int], tuple[int, int, float]] = {}
        self._totals: dict[tuple[str, str], tuple[int, int, float]] = {}
        self._recent: dict[tuple[str, str], deque] = {}

    def update(self, source: str, shape: str, kind: str, model: str, count: int, *, actual: float,
               predicted: float, covered: bool, calibrated: bool = True) -> None:
        """Score one answer (``calibrated``: its bound came from residuals, not a guess)."""
        ape = abs(actual - predicted) / actual * 100.0
        key, hit = (source, shape, kind, model, count), bool(covered)
        n, hits, total = self._totals.get((source, shape), (0, 0, 0.0))
        self._totals[(source, shape)] = (n + 1, hits + hit, total + ape)
        cell = self._counts.get(key)
        if cell is not None or len(self._counts) < self.max_keys:
            n, hits, total = (0, 0, 0.0) if cell is None else cell
            self._counts[key] = (n + 1, hits + hit, total + ape)
        recent = self._recent.setdefault((source, shape), deque(maxlen=self.window))
        recent.append((bool(covered), ape))

    def frozen(self) -> ShapeMonitor:
        """A copy of the counts as they stand, for :meth:`summary` and :meth:`slices` later (a copy of
        two dicts: their entries are never changed in place); its rolling windows are left empty."""
        twin = ShapeMonitor(self.window, self.max_keys)
        twin._counts, twin._totals = dict(self._counts), dict(self._totals)
        return twin

    def sources(self) -> list[tuple[str, str]]:
        """``(source, shape)`` pairs scored so far, sorted."""
        return sorted(self._totals)

    def summary(self, source: str, shape: str, kind: str = ANY, model: str = ANY, count: int = -1) -> ShapeStats:
        """Cumulative totals of a slice (``ANY`` / -1: every value of that key)."""
        if kind == ANY and model == ANY and count == -1:
            n, hits, ape = self._totals.get((source, shape), (0, 0, 0.0))
        else:
            n = hits = 0
            ape = 0.0
            for (src, shp, k, m, c), (cn, ch, ca) in self._counts.items():
                if src == source and shp == shape and kind in (ANY, k) and model in (ANY, m) and count in (-1, c):
                    n, hits, ape = n + cn, hits + ch, ape + ca
        n = int(n)
        return ShapeStats(source, shape, kind, model, count, n,
                          hits / n if n else None, ape / n if n else None)

    def rolling(self, source: str, shape: str) -> ShapeStats:
        """Totals over the last ``window`` answers of a shape."""
        recent = self._recent.get((source, shape), ())
        n = len(recent)
        hits = sum(h for h, _ in recent)
        ape = sum(a for _, a in recent)
        return ShapeStats(source, shape, ANY, ANY, -1, n, hits / n if n else None, ape / n if n else None)

    def slices(self, max_rows: int = 400) -> list[ShapeStats]:
        """Per source and shape: all answers, then per co-runner count, per device kind and per model
        (the first ``max_rows`` of them)."""
        # one pass over the cells, each slice summed in the order :meth:`summary` sums it
        sliced: dict[tuple[str, str], tuple[dict, dict, dict]] = {}
        for (source, shape, kind, model, count), (n, hits, ape) in self._counts.items():
            per = sliced.get((source, shape))
            if per is None:
                per = sliced[(source, shape)] = ({}, {}, {})
            by_count, by_kind, by_model = per
            total = by_count.get(count)
            if total is None:
                by_count[count] = [n, hits, 0.0 + ape]
            else:
                total[0] += n
                total[1] += hits
                total[2] += ape
            total = by_kind.get(kind)
            if total is None:
                by_kind[kind] = [n, hits, 0.0 + ape]
            else:
                total[0] += n
                total[1] += hits
                total[2] += ape
            total = by_model.get(model)
            if total is None:
                by_model[model] = [n, hits, 0.0 + ape]
            else:
                total[0] += n
                total[1] += hits
                total[2] += ape
        return list(itertools.islice(self._slice_rows(sliced), max_rows))

    def _slice_rows(self, sliced: dict[tuple[str, str], tuple[dict, dict, dict]]) -> Iterator[ShapeStats]:
        """:meth:`slices`'s rows in order, from the per-slice totals ``sliced``."""
        for source, shape in self.sources():
            yield self.summary(source, shape)
            by_count, by_kind, by_model = sliced.get((source, shape), ({}, {}, {}))
            for c in sorted(by_count):
                yield _stats(source, shape, ANY, ANY, c, by_count[c])
            for kd in sorted(by_kind):  # ANY names no kind: summary's own answer, the totals
                yield (self.summary(source, shape, kind=kd) if kd == ANY else
                       _stats(source, shape, kd, ANY, -1, by_kind[kd]))
            for m in sorted(by_model):
                yield (self.summary(source, shape, model=m) if m == ANY else
                       _stats(source, shape, ANY, m, -1, by_model[m]))


def _stats(source: str, shape: str, kind: str, model: str, count: int, total: list) -> ShapeStats:
    """The :class:`ShapeStats` of a slice from its ``[answers, covered, sum of APE]``."""
    n, hits, ape = int(total[0]), total[1], total[2]
    return ShapeStats(source, shape, kind, model, count, n, hits / n if n else None, ape / n if n else None)
