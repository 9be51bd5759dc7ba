"""NVML backend and sampler against an injected fake NVML with named scenarios.

NVML is the one thing faked in the tests: the fake mirrors the ``pynvml`` names
the backend uses, and each scenario is a situation real drivers produce.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from collectors.nvml import FIELDS, Nvml
from collectors.nvml_sampler import NvmlSampler


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNvml:
    """A ``pynvml``-shaped module object.

    Scenarios
    ---------
    basic
        Two GPUs; every field supported; GPM on both (Hopper).
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
        self._check(handle)
        if self.scenario == "not_supported":
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return 2_000 if counter == self.NVML_PCIE_UTIL_TX_BYTES else 4_000

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


def test_basic_reads_every_field_of_every_gpu() -> None:
    fake = FakeNvml("basic")
    nvml = Nvml(fake)
    assert nvml.available() and nvml.devices() == [0, 1] and nvml.name(0) == "Fake H100"
    first = nvml.read(0)
    assert "sm_occupancy" not in first  # GPM needs two samples
    second = nvml.read(0)
    assert set(second) == set(FIELDS)
    assert second["gpu_util"] == 0.5 and second["mem_util"] == 0.2
    assert second["mem_used_mb"] == 8000.0 and second["sm_clock_mhz"] == 1755.0
    assert second["power_w"] == 350.0
    assert second["pcie_tx_mbps"] == 2.0 and second["pcie_rx_mbps"] == 4.0
    assert second["sm_occupancy"] == 0.4 and second["dram_bw_util"] == 0.25
    assert nvml.read(1)["gpu_util"] == 0.6
    nvml.close()
    assert not fake.initialised and fake.freed >= 1


def test_basic_sampler_window_per_device() -> None:
    sampler = NvmlSampler(hz=100, nvml=FakeNvml("basic"))
    for _ in range(4):
        sampler.sample_once()
        time.sleep(0.005)
    t1 = time.monotonic()
    gpu0 = sampler.window("gpu0", t1 - 1.0, t1)
    gpu1 = sampler.window("gpu1", t1 - 1.0, t1)
    assert gpu0["gpu_util"] == pytest.approx(0.5) and gpu1["gpu_util"] == pytest.approx(0.6)
    assert gpu0["sm_occupancy"] == pytest.approx(0.4)
    assert sampler.window("gpu7", t1 - 1.0, t1) == {}


def test_gpu_lost_mid_run_does_not_stop_the_others() -> None:
    fake = FakeNvml("gpu_lost", lose_after=3)
    sampler = NvmlSampler(hz=200, nvml=fake).start()
    time.sleep(0.25)
    assert sampler.nvml.devices() == [0]
    sampler.stop()
    assert sampler.nvml.lost == {1}
    samples = sampler.buffer.samples()
    assert any("gpu1.gpu_util" in s for _, _, s in samples[:2])
    late = samples[-10:]
    assert all("gpu0.gpu_util" in s and not any(k.startswith("gpu1.") for k in s) for _, _, s in late)
    assert sampler.errors == 0 and len(samples) > 20


def test_unsupported_field_is_missing_never_zero_and_not_asked_again() -> None:
    fake = FakeNvml("not_supported")
    sampler = NvmlSampler(nvml=fake)
    for _ in range(5):
        sampler.sample_once()
    t1 = time.monotonic()
    gpu0 = sampler.window("gpu0", t1 - 10, t1)
    assert "power_w" not in gpu0 and "pcie_tx_mbps" not in gpu0 and "sm_occupancy" not in gpu0
    assert gpu0["gpu_util"] == pytest.approx(0.5) and gpu0["mem_used_mb"] == 8000.0
    assert fake.calls["power"] == 2  # once per GPU, then remembered as unsupported


def test_transient_error_drops_the_field_from_one_reading_only() -> None:
    nvml = Nvml(FakeNvml("flaky"))
    assert "gpu_util" in nvml.read(0)
    assert "gpu_util" not in nvml.read(0)  # UNKNOWN error on the second call
    assert "gpu_util" in nvml.read(0)


def test_no_driver_is_unavailable_and_the_sampler_records_nothing() -> None:
    nvml = Nvml(FakeNvml("no_driver"))
    assert not nvml.available()
    assert "NVML initialisation failed" in nvml.reason
    assert nvml.devices() == [] and nvml.read(0) == {} and nvml.name(0) == ""
    sampler = NvmlSampler(hz=100, nvml=nvml).start()
    time.sleep(0.05)
    sampler.stop()
    assert sampler.errors == 0
    assert all(s == {} for _, _, s in sampler.buffer.samples())
    assert sampler.window("gpu0", 0.0, time.monotonic()) == {}


def test_the_real_pynvml_imports_and_fails_softly_without_a_driver() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    nvml = Nvml()
    assert nvml.available() is False
    assert nvml.reason


@pytest.mark.gpu
def test_real_nvml_reads_a_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    nvml = Nvml()
    assert nvml.available() and nvml.devices()
    fields = nvml.read(nvml.devices()[0])
    assert "gpu_util" in fields and 0.0 <= fields["gpu_util"] <= 1.0
    assert all(value == value for value in fields.values())
    nvml.close()
