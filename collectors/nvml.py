"""NVML access: the only module that imports ``pynvml`` (package ``nvidia-ml-py``).

Importing this module never touches the driver. :class:`Nvml` initialises
NVML on first use; with no library or no driver it reports itself
unavailable instead of raising. Each device read returns the fields that
device supports: an unsupported field is absent (never 0) and is not asked
again; a GPU that is lost is dropped and the others go on.

Fields of :meth:`Nvml.read`, per device:

================= ============================================================
``gpu_util``       fraction of time a kernel was running (``nvmlDeviceGetUtilizationRates``)
``mem_util``       fraction of time device memory was read or written
``mem_used_mb``    device memory in use, MB
``sm_clock_mhz``   SM clock
``power_w``        board power draw
``pcie_tx_mbps``   PCIe transmit throughput, MB/s
``pcie_rx_mbps``   PCIe receive throughput, MB/s
``sm_occupancy``   GPM: active warps over the theoretical maximum, fraction (Hopper and newer)
``dram_bw_util``   GPM: DRAM bandwidth used over the peak, fraction (Hopper and newer)
``other_gpu_util`` SM utilisation of processes not of the workload, fraction: the sum over
                   the other processes of their mean ``smUtil`` since the previous read
                   (``nvmlDeviceGetProcessUtilization``; only when ``read`` is given the
                   workload's process ids; 0 when no process ran a kernel since then)
================= ============================================================

Process ids are those of the driver's PID namespace: in a container that does not share the
host's, ``other_gpu_util`` counts the workload's own processes as others (set the container's PID
namespace to the host's, or leave ``own_pids`` out).

Two readings are slow, so each is refreshed at its own, longer period and its last values are
carried by the reads in between: ``nvmlDeviceGetPcieThroughput`` measures over 20 ms and blocks
that long (per direction), and ``nvmlDeviceGetProcessUtilization`` scans the driver's
per-process samples (milliseconds of CPU while kernels run). Read at every tick, they would
hold a 50 Hz sampler to fewer than 20 reads a second (``docs/gpu.md``).

Tests pass a fake module object with the same names as ``pynvml``; NVML is
never faked outside tests.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Collection
from types import ModuleType
from typing import Any

FIELDS = (
    "gpu_util",
    "mem_util",
    "mem_used_mb",
    "sm_clock_mhz",
    "power_w",
    "pcie_tx_mbps",
    "pcie_rx_mbps",
    "sm_occupancy",
    "dram_bw_util",
    "other_gpu_util",
)
GPM_FIELDS = ("sm_occupancy", "dram_bw_util")
PCIE_PERIOD_S = 1.0
"""Default seconds between two reads of the PCIe throughput (each blocks 20 ms per direction)."""
PROCESS_PERIOD_S = 0.2
"""Default seconds between two reads of the other processes' utilisation (milliseconds of CPU each while kernels run)."""


def load_pynvml() -> ModuleType | None:
    """The ``pynvml`` module, or ``None`` when ``nvidia-ml-py`` is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


class Nvml:
    """Lazily initialised NVML session reading per-device fields.

    Parameters
    ----------
    module
        An object with the ``pynvml`` API; by default the real ``pynvml``.
    pcie_period_s
        Seconds between two reads of ``pcie_tx_mbps`` and ``pcie_rx_mbps``; a read in between
        returns the last values. 0 reads them every time.
    process_period_s
        The same for ``other_gpu_util``: a refresh averages the samples since the previous one.
    clock
        Monotonic seconds (``time.monotonic``); tests pass their own.

    Examples
    --------
    >>> nvml = Nvml()
    >>> nvml.available() in (True, False)
    True
    """

    def __init__(self, module: Any = None, *, pcie_period_s: float = PCIE_PERIOD_S,
                 process_period_s: float = PROCESS_PERIOD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        for name, period in (("pcie_period_s", pcie_period_s), ("process_period_s", process_period_s)):
            if not period >= 0:
                raise ValueError(f"{name} must be >= 0, got {period!r}")
        self._module = module
        self._periods = {"pcie": float(pcie_period_s), "process": float(process_period_s)}
        self._clock = clock
        self._carried: dict[tuple[int, str], tuple[float, dict[str, float]]] = {}
        self._nv: Any = None
        self._state = "new"  # new | ready | unavailable | closed
        self.reason = ""
        self._handles: dict[int, Any] = {}
        self._names: dict[int, str] = {}
        self._unsupported: dict[int, set[str]] = {}
        self._gpm_prev: dict[int, Any] = {}
        self._seen_us: dict[int, int] = {}  # per device: newest process-utilisation sample read
        self.lost: set[int] = set()

    # ---------------------------------------------------------------- session

    def available(self) -> bool:
        """Initialise NVML if needed; ``False`` when there is no library, driver or device."""
        if self._state == "new":
            self._init()
        return self._state == "ready"

    def _init(self) -> None:
        nv = self._module if self._module is not None else load_pynvml()
        if nv is None:
            self._unavailable("nvidia-ml-py (pynvml) is not installed")
            return
        self._nv = nv
        try:
            nv.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, OSError...
            self._unavailable(f"NVML initialisation failed: {exc}")
            return
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            self._unavailable(f"NVML device count failed: {exc}")
            return
        for index in range(count):
            try:
                self._handles[index] = nv.nvmlDeviceGetHandleByIndex(index)
            except Exception:
                self.lost.add(index)
                continue
            self._unsupported[index] = set()
            try:
                name = nv.nvmlDeviceGetName(self._handles[index])
                self._names[index] = name.decode() if isinstance(name, bytes) else str(name)
            except Exception:
                self._names[index] = "NVIDIA GPU"
        self._state = "ready"

    def _unavailable(self, reason: str) -> None:
        self._state = "unavailable"
        self.reason = reason

    def close(self) -> None:
        """Shut NVML down (idempotent)."""
        if self._state == "ready":
            for sample in self._gpm_prev.values():
                self._call(lambda s=sample: self._nv.nvmlGpmSampleFree(s))
            try:
                self._nv.nvmlShutdown()
            except Exception:
                pass
        if self._state != "new":
            self._state = "closed"

    def devices(self) -> list[int]:
        """Indices of the devices still readable."""
        if not self.available():
            return []
        return [i for i in self._handles if i not in self.lost]

    def name(self, index: int) -> str:
        """Product name of device ``index`` (e.g. ``"NVIDIA H100 80GB HBM3"``)."""
        return self._names.get(index, "NVIDIA GPU") if self.available() else ""

    # ----------------------------------------------------------------- fields

    def _code(self, name: str) -> int | None:
        value = getattr(self._nv, name, None)
        return value if isinstance(value, int) else None

    def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:
            return None

    def read(self, index: int, own_pids: Collection[int] | None = None) -> dict[str, float]:
        """The supported fields of device ``index`` now; ``{}`` once the device is lost.

        With ``own_pids`` (the workload's processes), ``other_gpu_util`` too. The PCIe fields and
        ``other_gpu_util`` are those of their last refresh (see ``pcie_period_s``, ``process_period_s``)."""
        if not self.available() or index not in self._handles or index in self.lost:
            return {}
        handle = self._handles[index]
        nv = self._nv
        out: dict[str, float] = {}

        def util() -> dict[str, float]:
            rates = nv.nvmlDeviceGetUtilizationRates(handle)
            return {"gpu_util": rates.gpu / 100.0, "mem_util": rates.memory / 100.0}

        def pcie(field: str, counter: int) -> Callable[[], dict[str, float]]:
            return lambda: {field: nv.nvmlDeviceGetPcieThroughput(handle, counter) / 1e3}

        # (fields, reader, cadence): a cadence names the period of a slow reading, None is every read
        readers: list[tuple[tuple[str, ...], Callable[[], dict[str, float]], str | None]] = [
            (("gpu_util", "mem_util"), util, None),
            (("mem_used_mb",), lambda: {"mem_used_mb": nv.nvmlDeviceGetMemoryInfo(handle).used / 1e6}, None),
            (
                ("sm_clock_mhz",),
                lambda: {"sm_clock_mhz": float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM))},
                None,
            ),
            (("power_w",), lambda: {"power_w": nv.nvmlDeviceGetPowerUsage(handle) / 1e3}, None),
            (("pcie_tx_mbps",), pcie("pcie_tx_mbps", nv.NVML_PCIE_UTIL_TX_BYTES), "pcie"),
            (("pcie_rx_mbps",), pcie("pcie_rx_mbps", nv.NVML_PCIE_UTIL_RX_BYTES), "pcie"),
            (GPM_FIELDS, lambda: self._gpm(index, handle), None),
        ]
        if own_pids is not None:
            readers.append((("other_gpu_util",), lambda: self._foreign(index, handle, own_pids), "process"))
        now = self._clock()
        for fields, reader, cadence in readers:
            if set(fields) <= self._unsupported[index]:
                continue
            if cadence is not None:
                carried = self._carried.get((index, fields[0]))
                if carried is not None and now - carried[0] < self._periods[cadence]:
                    out.update(carried[1])
                    continue
            try:
                values = reader()
                out.update(values)
                if cadence is not None:
                    self._carried[(index, fields[0])] = (now, values)
            except Exception as exc:
                code = getattr(exc, "value", None)
                if code is not None and code == self._code("NVML_ERROR_GPU_IS_LOST"):
                    self.lost.add(index)
                    return {}
                if code is not None and code in (
                    self._code("NVML_ERROR_NOT_SUPPORTED"),
                    self._code("NVML_ERROR_FUNCTION_NOT_FOUND"),
                    self._code("NVML_ERROR_NO_PERMISSION"),
                ):
                    self._unsupported[index].update(fields)
                # any other error: the fields are missing from this reading only
        return out

    def memory(self, index: int) -> tuple[float, float] | None:
        """Device ``index``'s memory ``(total_mb, used_mb)`` (``nvmlDeviceGetMemoryInfo``); ``None``
        when unavailable, lost or unreadable."""
        if not self.available() or index not in self._handles or index in self.lost:
            return None
        info = self._call(lambda: self._nv.nvmlDeviceGetMemoryInfo(self._handles[index]))
        if info is None:
            return None
        return info.total / 1e6, info.used / 1e6

    def _foreign(self, index: int, handle: Any, own_pids: Collection[int]) -> dict[str, float]:
        """SM utilisation of the processes not in ``own_pids`` since the previous read."""
        nv = self._nv
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(handle, self._seen_us.get(index, 0))
        except Exception as exc:
            if getattr(exc, "value", None) == self._code("NVML_ERROR_NOT_FOUND"):
                return {"other_gpu_util": 0.0}  # no process ran a kernel since the previous read
            raise
        per_pid: dict[int, list[float]] = {}
        for sample in samples:
            self._seen_us[index] = max(self._seen_us.get(index, 0), int(sample.timeStamp))
            if sample.pid not in own_pids:
                per_pid.setdefault(int(sample.pid), []).append(float(sample.smUtil))
        busy = sum(sum(values) / len(values) for values in per_pid.values()) / 100.0
        return {"other_gpu_util": min(1.0, max(0.0, busy))}

    def _gpm(self, index: int, handle: Any) -> dict[str, float]:
        """GPM metrics between the previous GPM sample and a new one (empty on the first call)."""
        nv = self._nv
        if index not in self._gpm_prev:
            support = nv.nvmlGpmQueryDeviceSupport(handle)
            if not support.isSupportedDevice:
                self._unsupported[index].update(GPM_FIELDS)
                return {}
            self._gpm_prev[index] = nv.nvmlGpmSampleGet(handle, nv.nvmlGpmSampleAlloc())
            return {}
        sample = nv.nvmlGpmSampleGet(handle, nv.nvmlGpmSampleAlloc())
        prev, self._gpm_prev[index] = self._gpm_prev[index], sample
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 2
        request.sample1 = prev
        request.sample2 = sample
        request.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_OCCUPANCY
        request.metrics[1].metricId = nv.NVML_GPM_METRIC_DRAM_BW_UTIL
        try:
            result = nv.nvmlGpmMetricsGet(request)
        finally:
            self._call(lambda: nv.nvmlGpmSampleFree(prev))
        out: dict[str, float] = {}
        success = self._code("NVML_SUCCESS") or 0
        for i, name in enumerate(GPM_FIELDS):
            metric = result.metrics[i]
            if metric.nvmlReturn == success:
                out[name] = float(metric.value) / 100.0
        return out
