"""NVML backend and sampler against an injected fake NVML with named scenarios.

NVML is the one thing faked in the tests: the fake mirrors the ``pynvml`` names
the backend uses, and each scenario is a situation real drivers produce.
"""

from __future__ import annotations

import time

import pytest
from fake_nvml import FakeNvml
from manual_clock import ManualClock

from collectors.nvml import FIELDS, Nvml
from collectors.nvml_sampler import NvmlSampler


def test_basic_reads_every_field_of_every_gpu() -> None:
    fake = FakeNvml("basic")
    nvml = Nvml(fake)
    assert nvml.available() and nvml.devices() == [0, 1] and nvml.name(0) == "Fake H100"
    first = nvml.read(0)
    assert "sm_occupancy" not in first  # GPM needs two samples
    second = nvml.read(0)
    assert set(second) == set(FIELDS) - {"other_gpu_util"}  # asked only with the workload's processes
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


def test_other_processes_gpu_utilisation_leaves_the_workload_out() -> None:
    fake = FakeNvml("basic")
    nvml = Nvml(fake, process_period_s=0)
    # GPU 0: pid 100 at 30% (the workload's), pid 200 at 20% then 40% (another job): 0.3 foreign
    assert nvml.read(0, own_pids={100})["other_gpu_util"] == pytest.approx(0.3)
    assert nvml.read(0, own_pids={100})["other_gpu_util"] == 0.0  # nothing new since that read
    assert nvml.read(1, own_pids={100})["other_gpu_util"] == 0.0  # no process on GPU 1
    # owning nothing, every process is foreign: 0.3 + 0.3
    assert Nvml(FakeNvml("basic")).read(0, own_pids=set())["other_gpu_util"] == pytest.approx(0.6)


def test_pcie_throughput_is_read_once_a_period_and_carried_in_between() -> None:
    fake, clock = FakeNvml("basic"), ManualClock(100.0)
    nvml = Nvml(fake, pcie_period_s=1.0, clock=clock)
    readings = []
    for _ in range(5):
        readings.append(nvml.read(0))
        clock.now += 0.3  # reads at 0, 0.3, 0.6, 0.9 (carried), 1.2 (refreshed)
    assert all(r["pcie_tx_mbps"] == 2.0 and r["pcie_rx_mbps"] == 4.0 for r in readings)
    assert fake.calls["pcie"] == 2 * 2  # tx and rx, at 0 and at 1.2
    assert fake.calls["util"] == 5  # the fast fields at every read
    nvml.read(1)
    assert fake.calls["pcie"] == 3 * 2  # each device has its own refresh


def test_other_processes_utilisation_refreshes_at_its_period_over_the_samples_since() -> None:
    fake, clock = FakeNvml("basic"), ManualClock(100.0)
    nvml = Nvml(fake, process_period_s=0.2, clock=clock)
    assert nvml.read(0, own_pids={100})["other_gpu_util"] == pytest.approx(0.3)
    clock.now += 0.1
    assert nvml.read(0, own_pids={100})["other_gpu_util"] == pytest.approx(0.3)  # carried
    assert fake.calls["process_util"] == 1
    clock.now += 0.15
    assert nvml.read(0, own_pids={100})["other_gpu_util"] == 0.0  # refreshed: nothing ran since
    assert fake.calls["process_util"] == 2


def test_a_period_of_zero_reads_every_time_and_a_negative_one_is_refused() -> None:
    fake = FakeNvml("basic")
    nvml = Nvml(fake, pcie_period_s=0, clock=ManualClock())
    for _ in range(3):
        nvml.read(0)
    assert fake.calls["pcie"] == 3 * 2
    with pytest.raises(ValueError, match="pcie_period_s"):
        Nvml(fake, pcie_period_s=-1)
    with pytest.raises(ValueError, match="process_period_s"):
        Nvml(fake, process_period_s=float("nan"))


def test_the_sampler_asks_for_the_workloads_processes_at_each_read() -> None:
    asked = []
    sampler = NvmlSampler(nvml=Nvml(FakeNvml("basic"), process_period_s=0),
                          own_pids=lambda: asked.append(1) or [200])
    sampler.sample_once()
    sampler.sample_once()
    t1 = time.monotonic()
    assert len(asked) == 2
    assert sampler.window("gpu0", t1 - 10, t1)["other_gpu_util"] == 0.0  # the first read only opens the interval; nothing ran since
    fake = FakeNvml("not_supported")
    quiet = NvmlSampler(nvml=fake, own_pids=lambda: [1])
    for _ in range(3):
        quiet.sample_once()
    assert "other_gpu_util" not in quiet.window("gpu0", 0.0, time.monotonic())
    assert fake.calls["process_util"] == 2  # once per GPU, then remembered as unsupported


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
