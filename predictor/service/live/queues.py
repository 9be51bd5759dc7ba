"""Each device's queue: batches reported queued, arrival rate and service-time moments.

The queue book learns, per device, from the batch reports:

* ``ReportBatchQueued`` puts a batch in the device's queue (with the latency the service
  predicted for it then); ``ReportBatchStart`` with the same id takes it out (it left the
  queue), ``ReportBatchEnd`` with that id too (it was dropped);
* an **arrival** is a batch reported queued, or one reported started without having been
  queued; the arrival rate is the number of arrivals over the span of the last ``window``;
* a **service time** is the time from a batch's start report to its end report (the first
  two moments of the last ``window``);
* the device's **concurrency** ``c`` is the most batches it was seen running at once over the
  last ``window`` starts: a device that co-locates is an M/G/c queue.

From these :meth:`QueueBook.wait` estimates the wait of a batch placed on a device now: from the
queue reported, else from the rates (:mod:`predictor.service.live.queueing`), else none. The
book's state is its own (the live view says what runs; this book what waits and how fast the
device serves), bounded like the live view.

Examples
--------
>>> from predictor.records.record import BatchSpec
>>> now = [0.0]
>>> book = QueueBook(clock=lambda: now[0])
>>> book.queued("gpu0", "b1", BatchSpec("bert", 4), predicted_ms=20.0)
(1, 0.0)
>>> book.queued("gpu0", "b2", BatchSpec("bert", 4), predicted_ms=20.0)
(2, 20.0)
>>> w = book.wait("gpu0", running_remaining=[5.0], confidence=0.99, bound_factor=1.5)
>>> w.source, w.mean_ms, w.bound_ms
(<WaitSource.QUEUE: 'queue'>, 45.0, 67.5)
"""

from __future__ import annotations

import enum
import heapq
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from predictor.records.record import BatchSpec
from predictor.service.errors import InvalidArgument, ResourceExhausted
from predictor.service.live.queueing import mgc_wait


class WaitSource(enum.Enum):
    """How a wait was estimated."""

    NONE = "none"  # no queue known: no wait
    QUEUE = "queue"  # the batches queued ahead
    RATES = "rates"  # M/G/1 Pollaczek-Khinchine from the arrival rate and service moments


@dataclass(frozen=True, slots=True)
class WaitEstimate:
    """The wait of a batch placed on a device now."""

    source: WaitSource
    mean_ms: float  # inf when saturated
    bound_ms: float  # at the confidence asked; inf when saturated
    saturated: bool = False
    utilisation: float | None = None  # from rates, when < 1

    @classmethod
    def none(cls) -> WaitEstimate:
        """No wait known."""
        return cls(WaitSource.NONE, 0.0, 0.0)


NO_WAIT = WaitEstimate.none()


@dataclass(frozen=True, slots=True)
class QueueWhatIf:
    """A query's what-if: the device's wait at these rates instead of the learned ones.

    Each field left ``None`` is the learned value (the service time's standard deviation, with the mean
    given: the learned coefficient of variation, else that of an exponential service, 1). ``prefix`` is
    the path of the fields in the request, for the errors naming them.

    Examples
    --------
    >>> QueueWhatIf(arrival_rate_per_s=50.0, service_mean_ms=10.0, service_sd_ms=10.0).rates(None)
    (0.05, 10.0, 200.0, 1)
    """

    arrival_rate_per_s: float | None = None
    service_mean_ms: float | None = None
    service_sd_ms: float | None = None
    prefix: str = "query."

    def validate(self, limit: float) -> None:
        """Raise :class:`InvalidArgument` naming the first field that is not finite, is negative (the
        rate, the deviation) or not positive (the mean), or lies beyond ``limit``."""
        for name, value, positive in (("arrival_rate_per_s", self.arrival_rate_per_s, False),
                                      ("service_mean_ms", self.service_mean_ms, True),
                                      ("service_sd_ms", self.service_sd_ms, False)):
            if value is None:
                continue
            if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
                raise InvalidArgument(f"{self.prefix}{name}",
                                      f"must be a finite number {'>' if positive else '>='} 0, got {value!r}")
            if value > limit:
                raise InvalidArgument(f"{self.prefix}{name}", f"magnitude {value:g} is beyond the limit of {limit:g}")

    def rates(self, learned: tuple[float, float, float, int] | None) -> tuple[float, float, float, int]:
        """``(arrival rate per ms, E[S] ms, E[S^2] ms^2, concurrency)`` with the what-if's values in place
        of ``learned`` (:meth:`QueueBook.rates`, ``None``: none learned); :class:`InvalidArgument` naming
        a field that is needed because nothing is learned in its place."""
        if self.arrival_rate_per_s is not None:
            rate = self.arrival_rate_per_s / 1000.0
        elif learned is not None:
            rate = learned[0]
        else:
            raise InvalidArgument(f"{self.prefix}arrival_rate_per_s", "is needed: no arrival rate is learned for "
                                  "the device (too few batches reported)")
        if self.service_mean_ms is not None:
            mean = self.service_mean_ms
            if self.service_sd_ms is not None:
                cv2 = (self.service_sd_ms / mean) ** 2
            else:
                cv2 = max(learned[2] / learned[1] ** 2 - 1.0, 0.0) if learned is not None else 1.0
            second = (1.0 + cv2) * mean * mean
        elif learned is not None:
            mean = learned[1]
            second = learned[2] if self.service_sd_ms is None else self.service_sd_ms ** 2 + mean * mean
        else:
            raise InvalidArgument(f"{self.prefix}service_mean_ms", "is needed: no service time is learned for the "
                                  "device (too few batches reported)")
        return rate, mean, second, learned[3] if learned is not None else 1


@dataclass(slots=True)
class _Queued:
    batch_id: str
    batch: BatchSpec
    predicted_ms: float
    queued_at: float


@dataclass
class _Device:
    queue: OrderedDict[str, _Queued] = field(default_factory=OrderedDict)
    queue_reported_at: float = -math.inf
    arrivals: deque = field(default_factory=deque)  # times, s
    services: deque = field(default_factory=deque)  # durations, ms
    started: dict[str, float] = field(default_factory=dict)  # batch id -> start time, s
    in_flight: deque = field(default_factory=deque)  # batches running at each start
    waits: deque = field(default_factory=deque)  # observed queue waits (queued -> started), ms


class QueueBook:
    """Thread-safe per-device queues, arrival rates and service-time moments.

    Parameters
    ----------
    clock
        Monotonic clock in seconds (the live view's).
    window
        Arrivals and service times remembered per device.
    min_samples
        Arrivals and service times needed before the rates are used.
    stale_after_s
        A queued (or started) batch older than this is forgotten; a device whose last queue
        report is older falls back to its rates.
    max_devices, max_queued_per_device
        Memory bounds; beyond them a report is refused with ``ResourceExhausted``.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        window: int = 512,
        min_samples: int = 20,
        stale_after_s: float = 60.0,
        max_devices: int = 10_000,
        max_queued_per_device: int = 4096,
    ):
        self.clock = clock
        self.window = window
        self.min_samples = min_samples
        self.stale_after_s = stale_after_s
        self.max_devices = max_devices
        self.max_queued_per_device = max_queued_per_device
        self._devices: dict[str, _Device] = {}
        self._active: set[str] = set()  # devices with a queue reported or enough samples for rates
        self._waits: deque[float] = deque(maxlen=window)  # observed queue waits, all devices, ms
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- reports
    def _device(self, device: str) -> _Device:
        state = self._devices.get(device)
        if state is None:
            if len(self._devices) >= self.max_devices:
                raise ResourceExhausted("device", f"the queue book already tracks {self.max_devices} devices")
            state = self._devices[device] = _Device(arrivals=deque(maxlen=self.window),
                                                    services=deque(maxlen=self.window),
                                                    in_flight=deque(maxlen=self.window),
                                                    waits=deque(maxlen=self.window))
        return state

    def _expire(self, state: _Device, now: float) -> None:
        horizon = now - self.stale_after_s
        while state.queue:
            first = next(iter(state.queue.values()))
            if first.queued_at >= horizon:
                break
            state.queue.popitem(last=False)
        if len(state.started) > self.max_queued_per_device:
            for key in [k for k, t in state.started.items() if t < horizon]:
                del state.started[key]

    def queued(self, device: str, batch_id: str, batch: BatchSpec, predicted_ms: float,
               ago_ms: float = 0.0) -> tuple[int, float]:
        """A batch joined ``device``'s queue ``ago_ms`` before now (the report's own delay, when the
        client said when it happened); returns how many are queued and its expected wait (ms)."""
        if not batch_id:
            raise InvalidArgument("batch_id", "must be a non-empty string")
        with self._lock:
            now = self.clock() - ago_ms / 1000.0
            state = self._device(device)
            self._expire(state, now)
            if batch_id not in state.queue and len(state.queue) >= self.max_queued_per_device:
                raise ResourceExhausted("batch_id", f"{self.max_queued_per_device} batches already queued on {device!r}")
            ahead = math.fsum(q.predicted_ms for k, q in state.queue.items() if k != batch_id)
            if batch_id not in state.queue:
                state.arrivals.append(now)
            state.queue[batch_id] = _Queued(batch_id, batch, predicted_ms, now)
            state.queue_reported_at = now
            self._active.add(device)
            return len(state.queue), ahead

    def started(self, device: str, batch_id: str, elapsed_ms: float = 0.0) -> None:
        """A batch started on ``device`` ``elapsed_ms`` before now: it leaves the queue (or arrives, when
        it was never queued); its wait ends, and its service time starts, at that instant."""
        with self._lock:
            now = self.clock() - elapsed_ms / 1000.0
            state = self._device(device)
            self._expire(state, now)
            queued = state.queue.pop(batch_id, None)
            if queued is None:
                state.arrivals.append(now)
            else:
                waited = max(now - queued.queued_at, 0.0) * 1000.0
                state.waits.append(waited)
                self._waits.append(waited)
            if len(state.started) < self.max_queued_per_device or batch_id in state.started:
                state.started[batch_id] = now
            state.in_flight.append(len(state.started))

    def ended(self, device: str, batch_id: str, ago_ms: float = 0.0) -> tuple[bool, float | None]:
        """A batch ended (or was dropped) on ``device`` ``ago_ms`` before now.

        Returns whether it was queued (dropped before starting) and its service time in ms
        (``None`` when it was not seen starting).
        """
        with self._lock:
            state = self._devices.get(device)
            if state is None:
                return False, None
            if state.queue.pop(batch_id, None) is not None:
                return True, None
            started = state.started.pop(batch_id, None)
            if started is None:
                return False, None
            service_ms = max(self.clock() - ago_ms / 1000.0 - started, 0.0) * 1000.0
            state.services.append(service_ms)
            if min(len(state.services), len(state.arrivals)) >= self.min_samples:
                self._active.add(device)
            return False, service_ms

    # ---------------------------------------------------------------- queries
    def active_among(self, devices: Sequence[str]) -> bool:
        """Whether any of ``devices`` may have a wait (a queue reported, or enough samples for rates);
        ``False``: every wait of theirs is none."""
        return bool(self._active) and not self._active.isdisjoint(devices)

    def summary(self) -> dict[str, int]:
        """Batches queued over all devices, and devices saturated by their rates (for metrics)."""
        with self._lock:
            now = self.clock()
            queued = saturated = 0
            for state in self._devices.values():
                self._expire(state, now)
                queued += len(state.queue)
                rates = self._rates(state)
                saturated += rates is not None and rates[0] * rates[1] >= rates[3]
            return {"queued": queued, "saturated": saturated}

    def queue_length(self, device: str) -> int:
        """Batches queued on ``device`` now."""
        with self._lock:
            state = self._devices.get(device)
            if state is None:
                return 0
            self._expire(state, self.clock())
            return len(state.queue)

    def observed_wait(self, devices: Sequence[str], quantile: float) -> tuple[float | None, int]:
        """The ``quantile`` of the queue waits observed (queued to started, ms) on ``devices``, pooled,
        else on every device when they have fewer than ``min_samples``; and how many it is of
        (``None``: fewer than ``min_samples`` anywhere)."""
        with self._lock:
            waits = [w for d in devices if (s := self._devices.get(d)) is not None for w in s.waits]
            if len(waits) < self.min_samples:
                waits = list(self._waits)
        if len(waits) < self.min_samples:
            return None, len(waits)
        return float(np.quantile(waits, quantile)), len(waits)

    def rates(self, device: str) -> tuple[float, float, float, int] | None:
        """``(arrival rate per ms, E[S] ms, E[S^2] ms^2, concurrency)`` of ``device``, once ``min_samples`` of each."""
        with self._lock:
            state = self._devices.get(device)
            if state is None:
                return None
            return self._rates(state)

    def _rates(self, state: _Device) -> tuple[float, float, float, int] | None:
        arrivals, services = state.arrivals, state.services
        n = min(len(arrivals), len(services))
        if n < max(self.min_samples, 2):
            return None
        span_ms = (arrivals[-1] - arrivals[0]) * 1000.0
        if span_ms <= 0:
            return None
        rate = (len(arrivals) - 1) / span_ms
        m1 = math.fsum(services) / len(services)
        m2 = math.fsum(s * s for s in services) / len(services)
        return rate, m1, m2, max(state.in_flight, default=1)

    def wait(
        self,
        device: str,
        running_remaining: Sequence[float] | Callable[[], Sequence[float]],
        confidence: float,
        bound_factor: float,
        what_if: QueueWhatIf | None = None,
    ) -> WaitEstimate:
        """The wait of a batch placed on ``device`` now.

        * **queue known** (the device reported a queue within ``stale_after_s``): the batches
          queued ahead played forward at their predicted latencies on the device's concurrency
          (each starts in the first slot a running or earlier batch frees; with one slot, the
          running batch that ends first and then the batches ahead one after another); its
          bound scales that by the device kind's calibration factor;
        * **rates known** (at least ``min_samples`` arrivals and service times, no queue
          reported): the M/G/1 Pollaczek-Khinchine mean wait (M/G/c, Allen-Cunneen, for a device
          seen running ``c > 1`` batches at once), with its tail quantile at the confidence as the
          bound (:mod:`predictor.service.live.queueing`); at utilisation >= 1 the device is
          *saturated*;
        * otherwise no wait.

        ``running_remaining``: the remaining times (ms) of the batches running there (the live
        view), or a function giving them (called only when a queue is waiting); ``bound_factor``:
        the calibration factor of the device kind (bound / prediction); ``what_if``: the wait from
        rates, with its values in place of the learned ones (a reported queue is then not used).
        """
        if what_if is not None:
            with self._lock:
                state = self._devices.get(device)
                learned = self._rates(state) if state is not None else None
            return _from_rates(what_if.rates(learned), confidence)
        with self._lock:
            state = self._devices.get(device)
            if state is None:
                return NO_WAIT
            now = self.clock()
            self._expire(state, now)
            if now - state.queue_reported_at <= self.stale_after_s:
                if not state.queue:
                    return WaitEstimate(WaitSource.QUEUE, 0.0, 0.0)
                ahead = [q.predicted_ms for q in state.queue.values()]
                if callable(running_remaining):
                    running_remaining = running_remaining()
                mean = _play_forward(running_remaining, ahead, max(state.in_flight, default=1))
                return WaitEstimate(WaitSource.QUEUE, mean, mean * max(bound_factor, 1.0))
            rates = self._rates(state)
        if rates is None:
            return NO_WAIT
        return _from_rates(rates, confidence)


def _play_forward(running_remaining: Sequence[float], ahead: Sequence[float], concurrency: int) -> float:
    """When a batch queued behind ``ahead`` (predicted latencies, in queue order) starts on a device
    that runs up to ``concurrency`` batches at once and now runs batches ending in ``running_remaining``
    ms: each batch ahead takes the first slot to free. A slot free while a queue waits is blocked by
    something else (memory): it is taken as freeing when the first running batch ends.

    >>> _play_forward([5.0], [20.0, 20.0], 1), _play_forward([5.0, 8.0, 30.0, 40.0], [20.0, 20.0], 4)
    (45.0, 25.0)
    """
    first_end = min(running_remaining) if len(running_remaining) else 0.0
    slots = [*running_remaining, *[first_end] * max(concurrency - len(running_remaining), 0)] or [0.0]
    heapq.heapify(slots)
    for latency in ahead:
        heapq.heappush(slots, heapq.heappop(slots) + latency)
    return slots[0]


def _from_rates(rates: tuple[float, float, float, int], confidence: float) -> WaitEstimate:
    """The M/G/c wait of ``(arrival rate per ms, E[S], E[S^2], servers)``; saturated at utilisation >= 1."""
    rate, m1, m2, servers = rates
    wait = mgc_wait(rate, m1, m2, servers)
    if wait.saturated:
        return WaitEstimate(WaitSource.RATES, math.inf, math.inf, saturated=True)
    return WaitEstimate(WaitSource.RATES, wait.mean_ms, wait.quantile(confidence), utilisation=wait.utilisation)
