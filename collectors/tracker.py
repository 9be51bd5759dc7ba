"""The co-location tracker: batch begin/end reports in, one ``coloc/v1`` record per batch out.

Workers report when each batch begins and ends. When a batch has ended, its
co-runners are the other batches on the same device whose execution window
intersects its own, finished or still running, and each co-runner's
``overlap`` is the fraction of this batch's window during which it executed::

    overlap(x, y) = (min(x.end, y.end) - max(x.start, y.start)) / (x.end - x.start)

Only co-runners with a positive overlap are listed (touching windows do not
co-run); a batch of zero duration has none.

A finished batch is emitted ``lag_s`` after its end (reports from several processes can arrive
out of order, and the samplers need a read after the window closes); finished batches are kept
while another may overlap them, within bounds. The tracker is not thread-safe: feed it from one
thread.

Examples
--------
>>> out = []
>>> tracker = Tracker(out.append, lag_s=0.0)
>>> tracker.begin(1, "cpu0", "resnet", 4, start_s=10.0, solo_latency_ms=8.0)
>>> tracker.begin(2, "cpu0", "bert", 2, start_s=10.005)
>>> tracker.end(1, end_s=10.010)
>>> tracker.poll(now=10.010)
1
>>> r = out[0]
>>> r.batch.model, round(r.latency_ms, 3), round(r.slowdown, 3)
('resnet', 10.0, 1.25)
>>> [(c.model, round(c.overlap, 3)) for c in r.co_runners]
[('bert', 0.5)]
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

from predictor.records.record import MAX_CO_RUNNERS, MAX_NUMERIC_KEYS, BatchSpec, CoRunner, Record

Sink = Callable[[Record], None]
SignalSource = Callable[[str, float, float], Mapping[str, float]]


@dataclass(slots=True)
class _Batch:
    key: Hashable
    device: str
    model: str
    batch_size: int
    start_s: float
    attrs: Mapping[str, float] = field(default_factory=dict)
    solo_latency_ms: float | None = None
    device_kind: str = ""
    end_s: float | None = None
    latency_ms: float | None = None
    own_signals: Mapping[str, float] = field(default_factory=dict)


class _Finished:
    """Finished batches of one device, sorted by end time, so co-runner searches stay short."""

    __slots__ = ("ends", "batches")

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.batches: list[_Batch] = []

    def __len__(self) -> int:
        return len(self.ends)

    def add(self, batch: _Batch, cap: int) -> None:
        assert batch.end_s is not None
        i = bisect.bisect_right(self.ends, batch.end_s)  # reports come nearly in end order: i is near the end
        self.ends.insert(i, batch.end_s)
        self.batches.insert(i, batch)
        if len(self.ends) > cap:
            del self.ends[0], self.batches[0]

    def ending_after(self, t: float) -> list[_Batch]:
        """Batches that ended strictly after ``t``."""
        return self.batches[bisect.bisect_right(self.ends, t) :]

    def drop_until(self, t: float) -> None:
        """Forget the batches that ended at or before ``t``."""
        i = bisect.bisect_right(self.ends, t)
        del self.ends[:i], self.batches[:i]


def overlap_fraction(start: float, end: float, other_start: float, other_end: float) -> float:
    """Fraction of ``[start, end]`` during which ``[other_start, other_end]`` also runs.

    Examples
    --------
    >>> overlap_fraction(0.0, 10.0, 5.0, math.inf)
    0.5
    >>> overlap_fraction(0.0, 10.0, 10.0, 12.0)
    0.0
    """
    width = end - start
    if width <= 0.0:
        return 0.0
    shared = min(end, other_end) - max(start, other_start)
    return min(1.0, max(0.0, shared / width))


class Tracker:
    """Turns begin/end reports into ``coloc/v1`` records with co-runners, overlaps and signals.

    Parameters
    ----------
    sink
        Called with each finished :class:`~predictor.records.record.Record` (a log writer, a stream).
    signals
        ``signals(device, t0, t1)``: device signals averaged over a window (e.g. a sampler's ``window``).
    source
        The records' ``source`` field (``"cpu"``, ``"nvml"``...).
    lag_s
        Delay between a batch's end and its emission (report reordering, sampler coverage).
    history_s
        Finished batches are kept at least this long, for late reports.
    max_history
        Hard cap on finished batches kept per device.
    stale_s
        A batch running longer than this is presumed lost (a crashed worker) and dropped.
    clock
        Monotonic clock in seconds, for :meth:`poll` without an explicit ``now``.
    """

    def __init__(
        self,
        sink: Sink,
        *,
        signals: SignalSource | None = None,
        source: str = "",
        lag_s: float = 0.1,
        history_s: float = 1.0,
        max_history: int = 10_000,
        stale_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if lag_s < 0 or history_s < lag_s or max_history < 1 or stale_s <= 0:
            raise ValueError("need lag_s >= 0, history_s >= lag_s, max_history >= 1, stale_s > 0")
        self.sink = sink
        self.signals = signals
        self.source = source
        self.lag_s = lag_s
        self.history_s = history_s
        self.max_history = max_history
        self.stale_s = stale_s
        self.clock = clock
        self._running: dict[Hashable, _Batch] = {}
        self._history: dict[str, _Finished] = {}
        self._last_prune = -math.inf
        self._pending: list[tuple[float, int, _Batch]] = []
        self._seq = itertools.count()
        self.emitted = 0
        self.unknown_ends = 0
        self.stale_dropped = 0
        self.invalid = 0
        self.signal_errors = 0

    # ---------------------------------------------------------------- reports

    def begin(
        self,
        key: Hashable,
        device: str,
        model: str,
        batch_size: int,
        start_s: float,
        *,
        attrs: Mapping[str, float] | None = None,
        solo_latency_ms: float | None = None,
        device_kind: str = "",
    ) -> None:
        """A batch started on ``device`` at ``start_s`` (``time.monotonic`` seconds)."""
        self._running[key] = _Batch(
            key,
            device,
            model,
            int(batch_size),
            float(start_s),
            dict(attrs or {}),
            solo_latency_ms,
            device_kind,
        )

    def end(
        self,
        key: Hashable,
        end_s: float,
        *,
        start_s: float | None = None,
        latency_ms: float | None = None,
        own_signals: Mapping[str, float] | None = None,
    ) -> None:
        """Batch ``key`` ended at ``end_s``.

        Parameters
        ----------
        start_s
            The exact start, when the begin report carried an earlier approximation.
        latency_ms
            The timer's measurement; by default ``(end_s - start_s)`` in ms.
        own_signals
            Signals measured on the batch itself (its CPU time), added to the
            device's window signals in its record.
        """
        batch = self._running.pop(key, None)
        if batch is None:
            self.unknown_ends += 1
            return
        if start_s is not None:
            batch.start_s = float(start_s)
        batch.end_s = max(float(end_s), batch.start_s)
        batch.latency_ms = latency_ms if latency_ms is not None else (batch.end_s - batch.start_s) * 1e3
        if own_signals:
            batch.own_signals = dict(own_signals)
        self._history.setdefault(batch.device, _Finished()).add(batch, self.max_history)
        heapq.heappush(self._pending, (batch.end_s, next(self._seq), batch))

    # --------------------------------------------------------------- emitting

    @property
    def running(self) -> int:
        """Batches begun and not yet ended."""
        return len(self._running)

    @property
    def pending(self) -> int:
        """Batches ended and not yet emitted."""
        return len(self._pending)

    def history_size(self) -> int:
        """Finished batches kept for overlap, over all devices."""
        return sum(len(h) for h in self._history.values())

    def poll(self, now: float | None = None) -> int:
        """Emit every batch that ended at least ``lag_s`` before ``now``; returns how many."""
        now = self.clock() if now is None else now
        count = 0
        while self._pending and self._pending[0][0] + self.lag_s <= now:
            count += self._emit(heapq.heappop(self._pending)[2])
        self._drop_stale(now)
        self._prune(now)
        return count

    def flush(self) -> int:
        """Emit every finished batch now, however recent; returns how many."""
        count = 0
        while self._pending:
            count += self._emit(heapq.heappop(self._pending)[2])
        return count

    def co_runners(self, batch: _Batch) -> list[CoRunner]:
        """Co-runners of a finished batch, largest overlap first."""
        assert batch.end_s is not None
        if batch.end_s <= batch.start_s:
            return []
        found: list[CoRunner] = []
        history = self._history.get(batch.device)
        finished = history.ending_after(batch.start_s) if history is not None else []
        others = itertools.chain(finished, self._running.values())
        for other in others:
            if other.start_s >= batch.end_s or other is batch or other.device != batch.device:
                continue  # (most candidates started after this batch ended)
            other_end = math.inf if other.end_s is None else other.end_s
            share = overlap_fraction(batch.start_s, batch.end_s, other.start_s, other_end)
            if share > 0.0:
                found.append(CoRunner(other.model, other.batch_size, other.attrs, share))
        found.sort(key=lambda c: -c.overlap)
        return found[:MAX_CO_RUNNERS]

    def _emit(self, batch: _Batch) -> int:
        assert batch.end_s is not None
        if batch.latency_ms is None or not (math.isfinite(batch.latency_ms) and batch.latency_ms > 0):
            self.invalid += 1
            return 0
        signals: dict[str, float] = {}
        if self.signals is not None:
            try:
                raw = self.signals(batch.device, batch.start_s, batch.end_s)
                signals = {k: float(v) for k, v in raw.items() if math.isfinite(v)}
            except Exception:
                self.signal_errors += 1
        signals.update({k: float(v) for k, v in batch.own_signals.items() if math.isfinite(v)})
        if len(signals) > MAX_NUMERIC_KEYS:
            signals = dict(sorted(signals.items())[:MAX_NUMERIC_KEYS])
        record = Record(
            device=batch.device,
            batch=BatchSpec(batch.model, batch.batch_size, batch.attrs),
            latency_ms=batch.latency_ms,
            device_kind=batch.device_kind,
            start_s=batch.start_s,
            solo_latency_ms=batch.solo_latency_ms,
            co_runners=tuple(self.co_runners(batch)),
            signals=signals,
            source=self.source,
        )
        self.sink(record)
        self.emitted += 1
        return 1

    def _drop_stale(self, now: float) -> None:
        stale = [key for key, b in self._running.items() if now - b.start_s > self.stale_s]
        for key in stale:
            del self._running[key]
            self.stale_dropped += 1

    def _prune(self, now: float) -> None:
        """Forget finished batches that no unemitted or future batch can overlap (at most every 50 ms)."""
        if 0.0 <= now - self._last_prune < 0.05:
            return
        self._last_prune = now
        horizon = now - self.history_s
        for batch in self._running.values():
            horizon = min(horizon, batch.start_s)
        for _, _, batch in self._pending:
            horizon = min(horizon, batch.start_s)
        for history in self._history.values():
            history.drop_until(horizon)
