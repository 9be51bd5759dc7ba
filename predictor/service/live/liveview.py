"""The live view: what runs on each device now, from batch start and end reports.

A batch enters when it is reported started (with the latency predicted for
it then) and leaves when it is reported ended, when an observation names its
id, or when it has run longer than ``stale_after_s`` (its worker probably
died). For a new batch, each running batch's remaining time is its predicted
latency minus its elapsed time (a batch already past its prediction is
assumed to need ``overrun_fraction`` of it more), which gives its expected
overlap with the new batch's predicted window.

Examples
--------
>>> from predictor.records.record import BatchSpec
>>> now = [0.0]
>>> view = LiveView(clock=lambda: now[0])
>>> view.start("gpu0", "L4", "b1", BatchSpec("bert", 4), predicted_ms=20.0)
1
>>> now[0] = 0.005  # 5 ms later
>>> [(r.batch.model, round(ms, 3)) for r, ms in view.running("gpu0")]
[('bert', 15.0)]
>>> view.end("gpu0", "b1")
(True, 0)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from predictor.records.record import BatchSpec
from predictor.service.errors import InvalidArgument, NotFound, ResourceExhausted


class Journal(Protocol):
    """Where a durable view logs its starts and ends (:class:`~predictor.service.durability.livelog.LiveLog`)."""

    def started(
        self, device: str, kind: str, batch_id: str, batch: BatchSpec, predicted_ms: float, elapsed_ms: float
    ) -> None:
        """A batch entered the view."""
        ...

    def ended(self, device: str, batch_id: str) -> None:
        """A batch left the view by an end report."""
        ...


@dataclass(frozen=True, slots=True)
class RunningBatch:
    """A batch executing on a device, as reported."""

    batch_id: str
    batch: BatchSpec
    started_at: float  # on the view's clock, seconds
    predicted_ms: float


@dataclass
class DeviceState:
    """One device: its kind and its running batches."""

    device_kind: str = ""
    running: dict[str, RunningBatch] = field(default_factory=dict)
    last_seen: float = 0.0


class LiveView:
    """Thread-safe map from device to running batches.

    Parameters
    ----------
    clock
        Monotonic clock in seconds.
    stale_after_s
        Running longer than this without an end report: dropped.
    overrun_fraction
        Remaining time assumed, as a fraction of the prediction, for a batch past it.
    max_devices, max_running_per_device
        Memory bounds; beyond them a report is refused with ``ResourceExhausted``.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        stale_after_s: float = 60.0,
        overrun_fraction: float = 0.1,
        max_devices: int = 10_000,
        max_running_per_device: int = 256,
    ):
        self.clock = clock
        self.stale_after_s = stale_after_s
        self.overrun_fraction = overrun_fraction
        self.max_devices = max_devices
        self.max_running_per_device = max_running_per_device
        self._devices: dict[str, DeviceState] = {}
        self._lock = threading.Lock()
        self.n_expired = 0
        self.journal: Journal | None = None  # told every start and end (the side log of a durable view)

    # ---------------------------------------------------------------- updates
    def _device(self, device: str, device_kind: str, now: float) -> DeviceState:
        state = self._devices.get(device)
        if state is None:
            if len(self._devices) >= self.max_devices:
                raise ResourceExhausted("device", f"the live view already tracks {self.max_devices} devices")
            state = self._devices[device] = DeviceState()
        if device_kind:
            state.device_kind = device_kind
        state.last_seen = now
        return state

    def touch(self, device: str, device_kind: str = "") -> None:
        """Make ``device`` known (and record its kind, when given)."""
        with self._lock:
            self._device(device, device_kind, self.clock())

    def start(
        self,
        device: str,
        device_kind: str,
        batch_id: str,
        batch: BatchSpec,
        predicted_ms: float,
        elapsed_ms: float = 0.0,
    ) -> int:
        """Record a batch as running; returns how many run on the device now."""
        if not batch_id:
            raise InvalidArgument("batch_id", "must be a non-empty string")
        with self._lock:
            now = self.clock()
            state = self._device(device, device_kind, now)
            self._expire(state, now)
            if batch_id not in state.running and len(state.running) >= self.max_running_per_device:
                raise ResourceExhausted(
                    "batch_id", f"{self.max_running_per_device} batches already run on {device!r}"
                )
            state.running[batch_id] = RunningBatch(batch_id, batch, now - elapsed_ms / 1000.0, predicted_ms)
            if self.journal is not None:
                self.journal.started(device, state.device_kind, batch_id, batch, predicted_ms, elapsed_ms)
            return len(state.running)

    def end(self, device: str, batch_id: str, *, required: bool = True) -> tuple[bool, int]:
        """Remove a running batch; returns (whether it was running, how many still run)."""
        with self._lock:
            state = self._devices.get(device)
            if state is None:
                if required:
                    raise NotFound("device", f"unknown device {device!r}")
                return False, 0
            state.last_seen = self.clock()
            found = state.running.pop(batch_id, None) is not None
            if found and self.journal is not None:
                self.journal.ended(device, batch_id)
            return found, len(state.running)

    def _expire(self, state: DeviceState, now: float) -> None:
        stale = [k for k, r in state.running.items() if now - r.started_at > self.stale_after_s]
        for key in stale:
            del state.running[key]
        self.n_expired += len(stale)

    # ---------------------------------------------------------------- queries
    def knows(self, device: str) -> bool:
        """Whether anything was reported on ``device`` (or it was restored after a restart)."""
        return device in self._devices

    def kind_of(self, device: str) -> str:
        """The device kind last reported for ``device`` ("" when unknown)."""
        state = self._devices.get(device)
        return state.device_kind if state is not None else ""

    def running(self, device: str) -> list[tuple[RunningBatch, float]]:
        """Batches running on ``device`` with their estimated remaining time in ms."""
        with self._lock:
            state = self._devices.get(device)
            if state is None:
                return []
            now = self.clock()
            self._expire(state, now)
            out = []
            for batch in state.running.values():
                elapsed_ms = (now - batch.started_at) * 1000.0
                remaining = batch.predicted_ms - elapsed_ms
                floor = self.overrun_fraction * batch.predicted_ms
                out.append((batch, max(remaining, floor)))
            return out

    def devices(self) -> dict[str, str]:
        """Known devices and their kinds."""
        with self._lock:
            return {d: s.device_kind for d, s in self._devices.items()}

    def running_count(self) -> int:
        """How many batches run, over all devices."""
        with self._lock:
            return sum(len(s.running) for s in self._devices.values())

    def restore_devices(self, kinds: dict[str, str]) -> None:
        """Make devices known again after a restart (nothing is running)."""
        with self._lock:
            now = self.clock()
            for device, kind in list(kinds.items())[: self.max_devices]:
                self._device(device, kind, now)
