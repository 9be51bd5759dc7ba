"""A fake ``pynvml`` with named scenarios (basic, one GPU lost, field not supported, no driver...).

NVML is the one thing faked in the tests: the fake mirrors the ``pynvml`` names the backend
uses, and each scenario is a situation real drivers produce.
"""

from __future__ import annotations

from types import SimpleNamespace

PROCESS_SAMPLES = ((100, 1_000, 30), (200, 1_000, 20), (200, 2_000, 40))
"""``(pid, timestamp in µs, SM %)`` of GPU 0's processes in the basic scenario."""


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNvml:
    """A ``pynvml``-shaped module object.

    Scenarios
    ---------
    basic
        Two GPUs; every field supported; GPM on both (Hopper); on GPU 0 two processes run kernels
        (:data:`PROCESS_SAMPLES`), on GPU 1 none.
    gpu_lost
        GPU 1 falls off the bus after ``lose_after`` utilisation reads.
    not_supported
        Power and PCIe raise NOT_SUPPORTED, GPM unsupported (a consumer or pre-Hopper board).
    no_driver
        ``nvmlInit`` fails with DRIVER_NOT_LOADED.
    flaky
        One utilisation read fails with UNKNOWN.
    """

    NVML_SUCCESS = 0
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_UNKNOWN = 999
    NVML_CLOCK_SM = 1
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    NVMLError = FakeNVMLError

    def __init__(self, scenario: str = "basic", *, lose_after: int = 3) -> None:
        self.scenario = scenario
        self.lose_after = lose_after
        self.calls: dict[str, int] = {}
        self.initialised = False
        self.util_reads = {0: 0, 1: 0}
        self.freed = 0

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def _check(self, handle: int) -> None:
        if self.scenario == "gpu_lost" and handle == 1 and self.util_reads[1] >= self.lose_after:
            raise FakeNVMLError(self.NVML_ERROR_GPU_IS_LOST)

    # session
    def nvmlInit(self) -> None:
        if self.scenario == "no_driver":
            raise FakeNVMLError(self.NVML_ERROR_DRIVER_NOT_LOADED)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"Fake H100"

    # fields
    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        self._count("util")
        self._check(handle)
        self.util_reads[handle] += 1
        if self.scenario == "flaky" and self.calls["util"] == 2:
            raise FakeNVMLError(self.NVML_ERROR_UNKNOWN)
        return SimpleNamespace(gpu=50 + 10 * handle, memory=20)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        self._check(handle)
        return SimpleNamespace(used=8_000_000_000, total=80_000_000_000, free=72_000_000_000)

    def nvmlDeviceGetClockInfo(self, handle: int, kind: int) -> int:
        self._check(handle)
        assert kind == self.NVML_CLOCK_SM
        return 1755

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        self._count("power")
        self._check(handle)
        if self.scenario == "not_supported":
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return 350_000

    def nvmlDeviceGetPcieThroughput(self, handle: int, counter: int) -> int:
        self._count("pcie")
        self._check(handle)
        if self.scenario == "not_supported":
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return 2_000 if counter == self.NVML_PCIE_UTIL_TX_BYTES else 4_000

    def nvmlDeviceGetProcessUtilization(self, handle: int, last_seen_us: int) -> list[SimpleNamespace]:
        self._count("process_util")
        self._check(handle)
        if self.scenario == "not_supported":
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        samples = [SimpleNamespace(pid=pid, timeStamp=t, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
                   for pid, t, sm in PROCESS_SAMPLES if handle == 0 and t > last_seen_us]
        if not samples:
            raise FakeNVMLError(self.NVML_ERROR_NOT_FOUND)  # what NVML says when no process ran since then
        return samples

    # GPM
    def nvmlGpmQueryDeviceSupport(self, handle: int) -> SimpleNamespace:
        self._check(handle)
        return SimpleNamespace(isSupportedDevice=int(self.scenario != "not_supported"))

    def nvmlGpmSampleAlloc(self) -> dict:
        return {}

    def nvmlGpmSampleGet(self, handle: int, sample: dict) -> dict:
        self._check(handle)
        sample["handle"] = handle
        return sample

    def nvmlGpmSampleFree(self, sample: dict) -> None:
        self.freed += 1

    class c_nvmlGpmMetricsGet_t:
        def __init__(self) -> None:
            self.version = 0
            self.numMetrics = 0
            self.sample1 = self.sample2 = None
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=-1, value=0.0) for _ in range(8)]

    def nvmlGpmMetricsGet(self, request: c_nvmlGpmMetricsGet_t) -> c_nvmlGpmMetricsGet_t:
        assert request.version == self.NVML_GPM_METRICS_GET_VERSION
        values = {self.NVML_GPM_METRIC_SM_OCCUPANCY: 40.0, self.NVML_GPM_METRIC_DRAM_BW_UTIL: 25.0}
        for metric in request.metrics[: request.numMetrics]:
            metric.value = values[metric.metricId]
            metric.nvmlReturn = self.NVML_SUCCESS
        return request
