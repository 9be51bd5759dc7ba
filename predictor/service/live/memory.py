"""Device memory, model footprints, load times and residency, learned from the batch reports.

* **Device memory**: the latest capacity and use the collectors read (:mod:`collectors.memory`),
  sent with ``ReportBatchStart`` (capacity, use) and ``ReportBatchEnd`` (use).
* **Footprint** of a model at a batch size: the largest peak memory reported at
  ``ReportBatchEnd`` for it. A batch size never seen is taken from the nearest larger one seen,
  else scaled linearly up from the largest smaller one (both err on the large side).
* **Weights** of a model (what stays when it is resident): the intercept of a line through
  its footprints over batch sizes, once two sizes are seen.
* **Load time** of a model: the mean ``load_ms`` reported at ``ReportBatchStart`` for it on that
  device kind (else on any kind).
* **Residency**: a model is resident on a device it started a batch on within
  ``resident_ttl_s``, unless the device's collector reported the models loaded there since
  (``resident_models``) without it.

:meth:`MemoryBook.need` gives, for a batch on a device, the memory it needs (its footprint, less
its weights when the model is resident), the memory free, and the load time to add.

Examples
--------
>>> now = [0.0]
>>> book = MemoryBook(clock=lambda: now[0])
>>> book.device_memory("gpu0", total_mb=16_000.0, used_mb=15_000.0)
>>> book.footprint("bert", 4, 1_200.0); book.footprint("bert", 8, 1_400.0)
>>> book.load_time("bert", "L4", 800.0)
>>> need = book.need("gpu0", "L4", "bert", 8)
>>> need.needed_mb, need.free_mb, need.fits, need.load_ms
(1400.0, 1000.0, False, 800.0)
>>> book.mark_resident("gpu0", "bert")
>>> need = book.need("gpu0", "L4", "bert", 8)  # weights (1000 MB) are already there
>>> need.needed_mb, need.fits, need.load_ms
(400.0, True, 0.0)
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from predictor.service.errors import ResourceExhausted


@dataclass(frozen=True, slots=True)
class MemoryNeed:
    """What a batch needs on a device."""

    needed_mb: float  # 0: no footprint learned
    free_mb: float | None  # None: the device's memory is unknown
    load_ms: float  # 0: resident, or no load time learned

    @property
    def fits(self) -> bool:
        """Whether the batch fits (unknown memory or footprint: assumed to fit)."""
        return self.free_mb is None or self.needed_mb <= self.free_mb

    def reason(self) -> str:
        """Why it does not fit ("" when it fits)."""
        if self.fits:
            return ""
        return f"memory: needs {self.needed_mb:.0f} MB, {self.free_mb:.0f} MB free"


@dataclass
class _Device:
    total_mb: float | None = None
    used_mb: float | None = None
    resident: dict[str, float] = field(default_factory=dict)  # model -> last start time


class MemoryBook:
    """Thread-safe memory state of devices and models.

    Parameters
    ----------
    clock
        Monotonic clock in seconds.
    resident_ttl_s
        A model not started on a device for longer than this is no longer resident there.
    max_devices, max_models
        Memory bounds; beyond them a report is refused with ``ResourceExhausted``.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        resident_ttl_s: float = 600.0,
        max_devices: int = 10_000,
        max_models: int = 10_000,
    ):
        self.clock = clock
        self.resident_ttl_s = resident_ttl_s
        self.max_devices = max_devices
        self.max_models = max_models
        self._devices: dict[str, _Device] = {}
        self._footprints: dict[str, dict[int, float]] = {}
        self._loads: dict[tuple[str, str], tuple[float, int]] = {}  # (model, kind or "") -> (sum, n)
        self._with_memory: set[str] = set()  # devices whose capacity is known
        self._lock = threading.Lock()

    def _device(self, device: str) -> _Device:
        state = self._devices.get(device)
        if state is None:
            if len(self._devices) >= self.max_devices:
                raise ResourceExhausted("device", f"the memory book already tracks {self.max_devices} devices")
            state = self._devices[device] = _Device()
        return state

    def _model_room(self, model: str, table: dict) -> None:
        if model not in table and len(table) >= self.max_models:
            raise ResourceExhausted("batch.model", f"the memory book already tracks {self.max_models} models")

    # ---------------------------------------------------------------- reports
    def device_memory(self, device: str, total_mb: float | None = None, used_mb: float | None = None) -> None:
        """The device's memory capacity and use as read by a collector (either may be omitted)."""
        with self._lock:
            state = self._device(device)
            if total_mb is not None:
                state.total_mb = total_mb
                self._with_memory.add(device)
            if used_mb is not None:
                state.used_mb = used_mb

    def footprint(self, model: str, batch_size: int, peak_mb: float) -> None:
        """A batch of ``model`` at ``batch_size`` peaked at ``peak_mb``."""
        with self._lock:
            self._model_room(model, self._footprints)
            sizes = self._footprints.setdefault(model, {})
            sizes[batch_size] = max(peak_mb, sizes.get(batch_size, 0.0))

    def load_time(self, model: str, device_kind: str, load_ms: float) -> None:
        """Loading ``model`` on a device of ``device_kind`` took ``load_ms``."""
        with self._lock:
            self._model_room(model, {m: None for m, _ in self._loads})
            for key in {(model, device_kind), (model, "")}:
                total, n = self._loads.get(key, (0.0, 0))
                self._loads[key] = (total + load_ms, n + 1)

    def set_resident(self, device: str, models: tuple[str, ...] | list[str]) -> None:
        """The models loaded on ``device`` now, as its collector reports them (the others were evicted)."""
        with self._lock:
            state = self._device(device)
            now = self.clock()
            state.resident = {m: state.resident.get(m, now) for m in models}

    def mark_resident(self, device: str, model: str) -> None:
        """``model`` started a batch on ``device`` now (it is loaded there)."""
        with self._lock:
            self._device(device).resident[model] = self.clock()

    # ---------------------------------------------------------------- queries
    def relevant(self, model: str, devices: Sequence[str]) -> bool:
        """Whether ``model`` on any of ``devices`` may need something (a footprint or load time of the
        model is known, or the memory of one of the devices); ``False``: every need is empty."""
        return (model in self._footprints or (model, "") in self._loads
                or (bool(self._with_memory) and not self._with_memory.isdisjoint(devices)))

    def is_resident(self, device: str, model: str) -> bool:
        """Whether ``model`` started on ``device`` within ``resident_ttl_s``."""
        with self._lock:
            return self._resident(device, model)

    def _resident(self, device: str, model: str) -> bool:
        state = self._devices.get(device)
        if state is None or model not in state.resident:
            return False
        return self.clock() - state.resident[model] <= self.resident_ttl_s

    def _footprint(self, model: str, batch_size: int) -> tuple[float, float]:
        """(footprint at ``batch_size``, weights) of ``model``; zeros when unknown."""
        sizes = self._footprints.get(model)
        if not sizes:
            return 0.0, 0.0
        keys = sorted(sizes)
        if batch_size in sizes:
            peak = sizes[batch_size]
        else:
            at = bisect.bisect_left(keys, batch_size)
            peak = sizes[keys[at]] if at < len(keys) else sizes[keys[-1]] * batch_size / keys[-1]
        weights = 0.0
        if len(keys) >= 2:
            xs = [float(k) for k in keys]
            ys = [sizes[k] for k in keys]
            mx, my = math.fsum(xs) / len(xs), math.fsum(ys) / len(ys)
            sxx = math.fsum((x - mx) ** 2 for x in xs)
            slope = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
            weights = min(max(my - slope * mx, 0.0), min(ys))
        return peak, weights

    def need(self, device: str, device_kind: str, model: str, batch_size: int) -> MemoryNeed:
        """The memory ``model`` at ``batch_size`` needs on ``device``, the memory free, and the load time."""
        with self._lock:
            peak, weights = self._footprint(model, batch_size)
            resident = self._resident(device, model)
            needed = peak - weights if resident else peak
            state = self._devices.get(device)
            free = None
            if state is not None and state.total_mb is not None:
                free = max(state.total_mb - (state.used_mb or 0.0), 0.0)
            load = 0.0
            if not resident:
                total, n = self._loads.get((model, device_kind)) or self._loads.get((model, ""), (0.0, 0))
                load = total / n if n else 0.0
            return MemoryNeed(needed, free, load)
