"""Collector overhead: what timers, reports and the tracker add to a batch, and what the sampler costs.

Measured, with the real pieces (a spawned worker process, ``multiprocessing``
queues, :class:`~collectors.tracker.Tracker`, :class:`~collectors.cpu_sampler.CpuSampler`,
a gzip :class:`~predictor.records.logio.RecordWriter`):

(a) per batch, in the worker: publishing the begin in the shared-memory slot,
    the timer and the end report written to the pipe (everything the
    collection adds to the worker's hot path, all of it outside the timed
    window but the timer's two clock reads), in microseconds,
    and as a fraction of the solo latency of each model at batch size 1 and 8;
    plus an A/B run of a real model with and without the instrumentation
    (interleaved blocks, so drift hits both alike);
(b) per batch, in the parent: the tracker's work (begin, end, co-runners,
    signal averaging, record building) and writing the record;
(c) the CPU sampler at ``sample_hz``: its thread's CPU time over wall time,
    idle and while the worker loads the machine, as a percentage of one core.

Run: ``.venv/bin/python -m experiments.bench.bench_collectors`` (``--sampler-seconds 10``)
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from collectors.cpu_sampler import CpuSampler
from collectors.slot import RunningSlot
from collectors.timers import CpuTimer
from collectors.tracker import Tracker
from experiments.common import finish, start
from predictor.records.logio import RecordWriter


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    micro_batches: int = 20_000
    ab_models: tuple[str, ...] = ("resnet", "bert")
    ab_batch_sizes: tuple[int, ...] = (1, 8)
    ab_blocks: int = 20
    ab_block_size: int = 25
    sample_hz: float = 50.0
    sampler_seconds: float = 10.0
    seed: int = 0


def _worker(config: Config, results: Any, slot: Any) -> None:
    """A worker-like process: the hot path of :mod:`collectors.worker`, measured."""
    import torch  # heavy: torch only in the spawned worker

    from collectors.models import build, example_input  # heavy: imports torch

    torch.set_num_threads(1)
    timer = CpuTimer()
    job = 0

    def instrumented() -> None:
        nonlocal job
        slot.publish(job, time.monotonic())
        cpu0 = time.thread_time_ns()
        span = timer.begin()
        timer.end(span)
        cpu_ms = (time.thread_time_ns() - cpu0) / 1e6
        results.send(("end", 0, job, span.start_s, span.end_s(), span.elapsed_ms(), cpu_ms))
        job += 1

    t0 = time.perf_counter()
    for _ in range(config.micro_batches):
        instrumented()
    micro_us = (time.perf_counter() - t0) / config.micro_batches * 1e6

    ab: dict[str, Any] = {}
    results.send(("phase", "ab"))
    with torch.inference_mode():
        for name in config.ab_models:
            model, _ = build(name, 1)
            for bs in config.ab_batch_sizes:
                x = example_input(name, bs)
                for _ in range(5):
                    model(x)
                bare: list[float] = []
                inst: list[float] = []
                solo: list[float] = []
                for _ in range(config.ab_blocks):
                    t0 = time.perf_counter()
                    for _ in range(config.ab_block_size):
                        s = time.perf_counter()
                        model(x)
                        solo.append(time.perf_counter() - s)
                    bare.append((time.perf_counter() - t0) / config.ab_block_size)
                    t0 = time.perf_counter()
                    for _ in range(config.ab_block_size):
                        slot.publish(job, time.monotonic())
                        cpu0 = time.thread_time_ns()
                        span = timer.begin()
                        model(x)
                        timer.end(span)
                        cpu_ms = (time.thread_time_ns() - cpu0) / 1e6
                        results.send(("end", 0, job, span.start_s, span.end_s(), span.elapsed_ms(), cpu_ms))
                        job += 1
                    inst.append((time.perf_counter() - t0) / config.ab_block_size)
                ab[f"{name}/{bs}"] = {
                    "latency_ms": statistics.median(solo) * 1e3,
                    "bare_ms": statistics.median(bare) * 1e3,
                    "instrumented_ms": statistics.median(inst) * 1e3,
                }
    results.send(("bench", micro_us, ab))


def _sampler_cost(hz: float, seconds: float) -> dict[str, float]:
    sampler = CpuSampler(hz)
    wall0, proc0 = time.monotonic(), time.process_time()
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    wall = time.monotonic() - wall0
    return {
        "reads": sampler.reads,
        "reads_per_s": sampler.reads / wall,
        "thread_cpu_pct_of_core": 100 * sampler.cpu_time_s / wall,
        "process_cpu_pct_of_core": 100 * (time.process_time() - proc0) / wall,
        "us_per_read": 1e6 * sampler.cpu_time_s / max(sampler.reads, 1),
    }


def main() -> None:
    """Measure (c) on an idle machine, then (a) and (b) with a spawned worker; print and write the results."""
    config, out = start("bench_collectors", Config(), __doc__.splitlines()[0])

    print(f"(c) CPU sampler at {config.sample_hz:g} Hz, idle machine, {config.sampler_seconds:g} s ...")
    idle = _sampler_cost(config.sample_hz, config.sampler_seconds)

    ctx = mp.get_context("spawn")
    results, child_end = ctx.Pipe(duplex=False)  # a report pipe, as in collectors.workload
    sampler = CpuSampler(config.sample_hz).start()
    scratch = tempfile.TemporaryDirectory()
    writer = RecordWriter(Path(scratch.name) / "bench-records.jsonl.gz")
    tracker = Tracker(writer.write, signals=sampler.window, source="cpu", lag_s=0.05)
    attrs = {"gflops": 0.1, "mbytes": 6.0, "cpu_util": 1.0}
    slot = RunningSlot(ctx)
    proc = ctx.Process(target=_worker, args=(config, child_end, slot), daemon=True)
    wall0 = time.monotonic()
    proc.start()
    child_end.close()
    print("(a, b) worker hot path and parent tracker ...")
    live = (
        False  # during the micro-benchmark the parent only drains the pipe, so it never holds the worker up
    )
    costs: list[float] = []  # parent wall time per batch: slot read, begin, end, emission
    bench: tuple[Any, ...] | None = None
    while bench is None:
        if not results.poll(600):
            raise RuntimeError("the worker went silent")
        message = results.recv()
        if message[0] == "phase":
            live = True
            continue
        if message[0] == "bench":
            bench = message
            break
        if not live:
            continue
        t = time.perf_counter()
        running = slot.read()  # as the collection loop does: slot first, then the report
        if running is not None and running[0] == message[2]:
            tracker.begin(running[0], "cpu0", "resnet", 1, running[1], attrs=attrs, solo_latency_ms=1.5)
        else:
            tracker.begin(message[2], "cpu0", "resnet", 1, message[3], attrs=attrs, solo_latency_ms=1.5)
        tracker.end(message[2], message[4], start_s=message[3], latency_ms=message[5])
        tracker.poll()
        costs.append(time.perf_counter() - t)
    proc.join(30)
    time.sleep(0.1)
    tracker.flush()
    writer.close()
    scratch.cleanup()
    loaded_wall = time.monotonic() - wall0
    sampler.stop()
    loaded = {
        "thread_cpu_pct_of_core": 100 * sampler.cpu_time_s / loaded_wall,
        "us_per_read": 1e6 * sampler.cpu_time_s / max(sampler.reads, 1),
    }

    _, micro_us, ab = bench
    parent_us = statistics.median(costs) * 1e6
    parent_mean_us = statistics.mean(costs) * 1e6
    handled = len(costs)
    print()
    print(f"(a) worker hot path per batch (begin slot + timer + end report): {micro_us:.1f} us")
    for key, row in ab.items():
        added = (row["instrumented_ms"] - row["bare_ms"]) / row["bare_ms"]
        row["micro_fraction_pct"] = 100 * micro_us / 1e3 / row["latency_ms"]
        row["ab_added_pct"] = 100 * added
        print(
            f"    {key:<10} solo {row['latency_ms']:6.2f} ms: hot path {row['micro_fraction_pct']:.2f}% of it; "
            f"A/B {row['bare_ms']:.3f} -> {row['instrumented_ms']:.3f} ms ({100 * added:+.2f}%, noise included)"
        )
    print(
        f"(b) parent per batch (tracker + signals + record + gzip write): median {parent_us:.1f} us, "
        f"mean {parent_mean_us:.1f} us over {handled} batches"
    )
    print(
        f"(c) CPU sampler at {config.sample_hz:g} Hz: idle {idle['thread_cpu_pct_of_core']:.2f}% of a core "
        f"({idle['us_per_read']:.0f} us per read, {idle['reads_per_s']:.1f} reads/s); "
        f"under load {loaded['thread_cpu_pct_of_core']:.2f}% ({loaded['us_per_read']:.0f} us per read)"
    )
    finish(
        out,
        {
            "worker_hot_path_us_per_batch": micro_us,
            "ab": ab,
            "parent_us_per_batch_median": parent_us,
            "parent_us_per_batch_mean": parent_mean_us,
            "parent_batches": handled,
            "sampler_idle": idle,
            "sampler_loaded": loaded,
        },
    )


if __name__ == "__main__":
    main()
