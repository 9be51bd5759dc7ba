"""What a query does not say, estimated from what the service has observed.

A scheduler asks before it dispatches: it rarely knows the device's signals, nor how much
each co-runner will overlap the batch. Answering as if the signals were 0 and every
co-runner overlapped fully predicts from inputs unlike any the model learned from. So:

* **signals** (:class:`SignalView`): each signal the query leaves out comes from the device's
  recent observations, smoothed by an EWMA per device (per device kind for a device never seen);
* **overlaps** (:class:`OverlapStats`): a co-runner given with neither an overlap nor a remaining
  time gets the mean overlap observed with as many co-runners on that device kind (else on any
  kind; else 1), made non-decreasing in the number of co-runners, so that adding a co-runner
  never lowers the overlap filled in for the others (the answer stays monotone in crowding).

The answer names the fields it estimated (``Prediction.estimated``): ``signals.K`` and
``co_runners[i].overlap``.

Examples
--------
>>> from predictor.records.record import BatchSpec, CoRunner, Record
>>> filling = Filling(alpha=0.5)
>>> def observed(sm, overlap):
...     return Record("gpu0", BatchSpec("a", 1), 5.0, device_kind="L4", signals={"sm": sm},
...                   co_runners=(CoRunner("b", 1, overlap=overlap),))
>>> for _ in range(5):
...     filling.observe(observed(0.4, 0.5)); filling.observe(observed(0.8, 0.7))
>>> filling.signals.fill("gpu0", "L4", {})  # 0.4 and 0.8 alternating, smoothed by halves
({'sm': 0.6664062500000001}, ('signals.sm',))
>>> filling.signals.fill("gpu9", "L4", {"sm": 0.1})  # what the query says wins
({'sm': 0.1}, ())
>>> round(filling.overlaps.fill("L4", 1), 3), round(filling.overlaps.fill("other", 3), 3)
(0.6, 0.6)
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping

from predictor.records.record import Record
from predictor.records.rules import OUTCOME_SIGNALS

MAX_COUNT = 16
"""Co-runner counts from this one up share one overlap statistic."""
MIN_OBSERVATIONS = 10
"""Records a (kind, count) needs before its mean overlap is used."""


class SignalView:
    """Per device (and per device kind) EWMA of the signals of observed records.

    Parameters
    ----------
    alpha
        Weight of the newest observation, in (0, 1].
    max_devices
        Devices tracked (beyond them, only their kind's view learns).
    """

    def __init__(self, alpha: float = 0.3, max_devices: int = 10_000):
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1], got {alpha!r}")
        self.alpha = alpha
        self.max_devices = max_devices
        self._devices: dict[str, dict[str, float]] = {}
        self._kinds: dict[str, dict[str, float]] = {}

    def _smooth(self, table: dict[str, dict[str, float]], key: str, signals: Mapping[str, float]) -> None:
        state = table.get(key)
        if state is None:
            table[key] = dict(signals)
            return
        a = self.alpha
        b = 1 - a
        state = dict(state)  # a new view, never one changed in place: copies share the views (copy)
        get = state.get
        for name, value in signals.items():
            previous = get(name)
            state[name] = value if previous is None else a * value + b * previous
        table[key] = state

    def observe(self, device: str, kind: str, signals: Mapping[str, float]) -> None:
        """Smooth an observed record's signals into its device's and its kind's views."""
        if not signals:
            return
        if device in self._devices or len(self._devices) < self.max_devices:
            self._smooth(self._devices, device, signals)
        self._smooth(self._kinds, kind, signals)

    def copy(self) -> SignalView:
        """An independent copy (the views are never changed in place: shared)."""
        twin = copy.copy(self)
        twin._devices, twin._kinds = dict(self._devices), dict(self._kinds)
        return twin

    def view(self, device: str, kind: str) -> Mapping[str, float]:
        """The smoothed signals of ``device`` (else of its ``kind``; else none)."""
        return self._devices.get(device) or self._kinds.get(kind) or {}

    def fill(self, device: str, kind: str, given: Mapping[str, float]) -> tuple[Mapping[str, float], tuple[str, ...]]:
        """The query's signals completed from the view, and the paths of those filled in."""
        view = self.view(device, kind)
        missing = [k for k in view if k not in given]
        if not missing:
            return given, ()
        filled = dict(given)
        for key in missing:
            filled[key] = view[key]
        return filled, tuple(f"signals.{k}" for k in missing)


class OverlapStats:
    """Mean observed overlap of co-runners per (device kind, co-runner count), and pooled per count."""

    def __init__(self) -> None:
        self._sums: dict[tuple[str | None, int], list[float]] = {}  # (kind or None: pooled, count) -> [n, sum]

    def _add(self, key: tuple[str | None, int], value: float) -> None:
        entry = self._sums.setdefault(key, [0.0, 0.0])
        entry[0] += 1
        entry[1] += value

    def observe(self, kind: str, overlaps: list[float]) -> None:
        """Learn the overlaps of an observed record's co-runners."""
        if not overlaps:
            return
        count = min(len(overlaps), MAX_COUNT)
        mean = sum(overlaps) / len(overlaps)
        self._add((kind, count), mean)
        self._add((None, count), mean)

    def copy(self) -> OverlapStats:
        """An independent copy (a few entries per device kind)."""
        twin = copy.copy(self)
        twin._sums = {key: list(entry) for key, entry in self._sums.items()}
        return twin

    def _mean(self, kind: str, count: int) -> float | None:
        for key in ((kind, count), (None, count)):
            entry = self._sums.get(key)
            if entry is not None and entry[0] >= MIN_OBSERVATIONS:
                return entry[1] / entry[0]
        return None

    def fill(self, kind: str, count: int) -> float:
        """The overlap to assume for each of ``count`` co-runners given without one, on ``kind``:
        the running maximum over counts up to ``count`` of the known means (the first known one
        below it), 1 when nothing is known; non-decreasing in ``count``."""
        best = None
        for k in range(1, MAX_COUNT + 1):
            mean = self._mean(kind, k)
            if mean is not None and (best is None or mean > best):
                best = mean
            if k >= count and best is not None:
                break
        return 1.0 if best is None else min(max(best, 0.0), 1.0)


class Filling:
    """The service's estimates of what queries leave out (thread-safe): signals and overlaps."""

    def __init__(self, alpha: float = 0.3, max_devices: int = 10_000):
        self.signals = SignalView(alpha, max_devices)
        self.overlaps = OverlapStats()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def copy(self) -> Filling:
        """An independent copy: what this one fills in now, whatever it learns afterwards."""
        with self._lock:
            twin = Filling.__new__(Filling)
            twin.signals = self.signals.copy()
            twin.overlaps = self.overlaps.copy()
        twin._lock = threading.Lock()
        return twin

    def observe(self, record: Record, kind: str | None = None) -> None:
        """Learn from an observed record: its device signals (not those measured on the batch itself,
        :data:`~predictor.records.rules.OUTCOME_SIGNALS`) and its co-runners' overlaps."""
        kind = record.device_kind if kind is None else kind
        signals = record.signals
        if not OUTCOME_SIGNALS.isdisjoint(signals):
            signals = {k: v for k, v in signals.items() if k not in OUTCOME_SIGNALS}
        with self._lock:
            self.signals.observe(record.device, kind, signals)
            self.overlaps.observe(kind, [c.overlap for c in record.co_runners])

    def has_signals(self) -> bool:
        """Whether any signal was observed (else there is nothing to fill signals from)."""
        return bool(self.signals._kinds)

    def fill_signals(
        self, device: str, kind: str, given: Mapping[str, float]
    ) -> tuple[Mapping[str, float], tuple[str, ...]]:
        """See :meth:`SignalView.fill`."""
        with self._lock:
            return self.signals.fill(device, kind, given)

    def overlap(self, kind: str, count: int) -> float:
        """See :meth:`OverlapStats.fill`."""
        with self._lock:
            return self.overlaps.fill(kind, count)
