"""The GPU collectors' costs: each NVML call, the NVML sampler at its rate, the CUDA-event timer.

On a machine with a CUDA GPU (``make gpu-check`` runs it), (a) and (b) while a thread keeps the GPU
busy with matrix products (some NVML calls cost more then), (c) with the GPU otherwise idle:

(a) each NVML call that :meth:`collectors.nvml.Nvml.read` makes, in microseconds of CPU and of
    wall time per call, then the whole read (with and without the workload's process ids);
(b) :class:`~collectors.nvml_sampler.NvmlSampler` at ``sample_hz`` for ``sampler_seconds``, twice
    each way: every field at every tick (``pcie_period_s=0, process_period_s=0``) against the
    defaults (the slow fields at their own period): reads made, ticks skipped, share of a core;
(c) the CUDA-event timer on two workload models at batch 8: the events' time beside the host's
    wall time around a synchronised batch, and the thread's CPU a timed batch takes beyond a plain
    one (the events, and the wait on the end event instead of ``torch.cuda.synchronize()``: both
    waits spin, so an upper bound on what the timer adds).

Run: ``PYTHONPATH=$PWD python -m experiments.bench.bench_gpu_collectors`` (about 30 s; exits with a
message where no CUDA device is).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from experiments.common import finish, start


@dataclasses.dataclass
class Config:
    """Options (each is a command-line flag)."""

    calls: int = 100
    sampler_seconds: float = 5.0
    sample_hz: float = 50.0
    timer_batches: int = 200


EVERY_TIME = {"pcie_period_s": 0, "process_period_s": 0}
"""The :class:`~collectors.nvml.Nvml` options that read every field at every read (as before the periods)."""


def _cost(fn: Callable[[], Any], n: int) -> dict[str, float] | str:
    """Mean µs of CPU and of wall time of ``fn`` over ``n`` calls, or why the first call failed."""
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
    for _ in range(n):
        try:
            fn()
        except Exception:
            pass
    return {"cpu_us": (time.thread_time_ns() - cpu0) / n / 1e3, "wall_us": (time.perf_counter_ns() - wall0) / n / 1e3}


def nvml_calls(nv: Any, n: int) -> dict[str, dict[str, float] | str]:
    """(a): each NVML call of a read, then :meth:`Nvml.read` whole."""
    from collectors.nvml import Nvml

    handle = nv.nvmlDeviceGetHandleByIndex(0)
    previous = [nv.nvmlGpmSampleGet(handle, nv.nvmlGpmSampleAlloc())]

    def gpm() -> None:
        sample = nv.nvmlGpmSampleGet(handle, nv.nvmlGpmSampleAlloc())
        nv.nvmlGpmSampleFree(previous[0])
        previous[0] = sample

    calls: dict[str, Callable[[], Any]] = {
        "utilization": lambda: nv.nvmlDeviceGetUtilizationRates(handle),
        "memory": lambda: nv.nvmlDeviceGetMemoryInfo(handle),
        "sm clock": lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM),
        "power": lambda: nv.nvmlDeviceGetPowerUsage(handle),
        "pcie tx": lambda: nv.nvmlDeviceGetPcieThroughput(handle, nv.NVML_PCIE_UTIL_TX_BYTES),
        "pcie rx": lambda: nv.nvmlDeviceGetPcieThroughput(handle, nv.NVML_PCIE_UTIL_RX_BYTES),
        "gpm sample get and free": gpm,
        "process utilization": lambda: nv.nvmlDeviceGetProcessUtilization(handle, 0),
    }
    out = {name: _cost(fn, max(1, n // 2) if name.startswith("pcie") else n) for name, fn in calls.items()}
    own = {os.getpid()}
    for label, kwargs in (("every field at every read", EVERY_TIME), ("defaults", {})):
        nvml = Nvml(**kwargs)
        nvml.read(0, own)
        out[f"Nvml.read, {label}"] = _cost(lambda nvml=nvml: nvml.read(0, own), n)
        nvml.close()
    return out


def sampler_rates(hz: float, seconds: float) -> list[dict[str, Any]]:
    """(b): the sampler's reads, skipped ticks and CPU, every field at every tick against the defaults."""
    from collectors.nvml import Nvml
    from collectors.nvml_sampler import NvmlSampler

    rows = []
    for label, kwargs in (("every field at every tick", EVERY_TIME), ("defaults", {})):
        for round_ in range(2):
            sampler = NvmlSampler(hz, nvml=Nvml(**kwargs), own_pids=lambda: [os.getpid()])
            sampler.start()
            time.sleep(seconds)
            sampler.stop()
            rows.append({
                "variant": label, "round": round_, "reads": sampler.reads, "skipped_ticks": sampler.skipped_ticks,
                "reads_per_s": sampler.reads / seconds, "core_share": sampler.cpu_time_s / seconds,
                "cpu_ms_per_read": 1e3 * sampler.cpu_time_s / max(sampler.reads, 1),
            })
    return rows


def timer_overhead(torch: Any, batches: int) -> list[dict[str, Any]]:
    """(c): CUDA events against the host's clock around a synchronised batch, and the timer's CPU."""
    from collectors.models import build
    from collectors.timers import make_timer

    timer = make_timer("cuda")
    rows = []
    for name in ("resnet", "bert"):
        model, x = build(name, 8, device="cuda")
        wall, events, cpu_timed, cpu_plain = [], [], [], []
        with torch.inference_mode():
            for _ in range(20):
                model(x)
            torch.cuda.synchronize()
            for _ in range(batches):
                cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
                model(x)
                torch.cuda.synchronize()
                wall.append((time.perf_counter_ns() - wall0) / 1e6)
                cpu_plain.append(time.thread_time_ns() - cpu0)
                cpu0 = time.thread_time_ns()
                span = timer.begin()
                model(x)
                timer.end(span)
                events.append(span.elapsed_ms())
                cpu_timed.append(time.thread_time_ns() - cpu0)
        rows.append({
            "model": name, "batch": 8, "host_wall_ms": statistics.median(wall), "events_ms": statistics.median(events),
            "timer_cpu_us": (statistics.median(cpu_timed) - statistics.median(cpu_plain)) / 1e3,
        })
    return rows


def main() -> None:
    """Measure (a), (b) and (c) with the GPU kept busy, print them and write ``results.json``."""
    config, out = start("bench_gpu_collectors", Config(), __doc__.splitlines()[0])
    import torch

    from collectors.nvml import load_pynvml

    nv = load_pynvml()
    if not torch.cuda.is_available() or nv is None:
        sys.exit("bench_gpu_collectors needs a CUDA GPU, torch built for CUDA and nvidia-ml-py")
    nv.nvmlInit()
    stop = threading.Event()

    def keep_busy() -> None:
        x = torch.randn(2048, 2048, device="cuda")
        while not stop.is_set():
            for _ in range(50):
                x = x @ x / 2048.0
            torch.cuda.synchronize()

    busy = threading.Thread(target=keep_busy, daemon=True)
    busy.start()
    time.sleep(1.0)
    try:
        results = {
            "device": torch.cuda.get_device_name(0),
            "nvml_calls": nvml_calls(nv, config.calls),
            "sampler": sampler_rates(config.sample_hz, config.sampler_seconds),
        }
    finally:
        stop.set()
        busy.join()
    results["timer"] = timer_overhead(torch, config.timer_batches)
    print(f"== {results['device']}; NVML with the GPU kept busy")
    for name, cost in results["nvml_calls"].items():
        shown = cost if isinstance(cost, str) else f"{cost['cpu_us']:9.1f} us CPU {cost['wall_us']:9.1f} us wall"
        print(f"{name:38s} {shown}")
    for row in results["sampler"]:
        print(f"sampler at {config.sample_hz:g} Hz, {row['variant']}: {row['reads_per_s']:.1f} reads a second "
              f"({row['skipped_ticks']} ticks skipped in {config.sampler_seconds:g} s), "
              f"{100 * row['core_share']:.2f}% of a core, {row['cpu_ms_per_read']:.2f} ms CPU a read")
    print("== the CUDA-event timer, the GPU otherwise idle")
    for row in results["timer"]:
        print(f"{row['model']} batch 8: host wall {row['host_wall_ms']:.3f} ms, CUDA events {row['events_ms']:.3f} ms "
              f"(ratio {row['events_ms'] / row['host_wall_ms']:.3f}); the event timer adds "
              f"{row['timer_cpu_us']:.1f} us of CPU a batch")
    finish(out, results)


if __name__ == "__main__":
    main()
