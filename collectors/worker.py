"""The inference worker process: runs real models on request and reports begin/end times.

A worker builds every model of the run once, with one intra-op and one
inter-op thread on a CPU, runs each at every batch size it may be asked for
(:func:`~collectors.profiling.warm_up`), and then serves jobs from a shared
queue. Messages are small tuples:

jobs (parent to workers)
    ``("run", job_id, model, batch_size)``, ``("profile", batch_sizes, repeats)``, ``("stop",)``
reports (each worker to the parent, on its own pipe)
    ``("ready", worker, device, device_kind)``,
    ``("end", worker, job_id, start_s, end_s, latency_ms, cpu_ms)``,
    ``("profile", worker, {(model, batch_size): figures})``,
    ``("error", worker, traceback_text)``

Nothing the collection does runs inside a timed window but the timer's own two clock reads: a
batch's begin is published in the worker's shared-memory :class:`~collectors.slot.RunningSlot`
just before its timer starts (no system call), and its end report, carrying the exact start, is
written by the worker's own thread (``Connection.send``, no feeder thread competing with the
model) after the timer stops. Times are ``time.monotonic`` seconds, comparable across processes;
on CUDA, spans are resolved off the hot path (those whose end event has completed after each job,
the rest when the queue is idle).

``cpu_ms`` is the CPU time the worker's thread spent on the batch (``time.thread_time_ns`` read
just outside the timed window): on a CPU, the batch's own compute, and ``latency_ms - cpu_ms`` the
time it waited for a core; on CUDA it is not reported (``None``). Python's cyclic garbage
collector is held off from the first of these reads to the last (as ``timeit`` does), so that no
collection is counted as the batch's CPU time or its wait.
"""

from __future__ import annotations

import gc
import os
import queue
import time
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any

from collectors.devices import cpu_model_name, record_device, worker_torch_device
from collectors.slot import RunningSlot
from collectors.timers import make_timer


@dataclass(frozen=True)
class WorkerConfig:
    """What every worker loads: ``models`` for batch sizes 1..``max_batch`` on ``device``."""

    models: tuple[str, ...]
    max_batch: int
    device: str = "cpu"
    seed: int = 0
    threads: int = 1


def worker_main(worker: int, config: WorkerConfig, jobs: Any, results: Any, slot: RunningSlot) -> None:
    """Entry point of a worker process (``multiprocessing`` target).

    Parameters
    ----------
    worker
        This worker's index.
    config
        What to load.
    jobs
        The shared ``multiprocessing.Queue`` of jobs.
    results
        The writing end (a ``multiprocessing.connection.Connection``) of this worker's report pipe.
    slot
        Where this worker publishes the batch it is running.
    """
    try:
        _serve(worker, config, jobs, results, slot)
    except KeyboardInterrupt:
        pass
    except BaseException:
        results.send(("error", worker, traceback.format_exc()))


def _serve(worker: int, config: WorkerConfig, jobs: Any, results: Any, slot: RunningSlot) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", str(config.threads))
    import torch  # heavy: torch only in the worker process, after OMP_NUM_THREADS is set

    from collectors.models import build, example_input  # heavy: imports torch
    from collectors.profiling import profile_all, warm_up  # heavy: imports torch

    torch.set_num_threads(config.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    device = worker_torch_device(config.device, worker)
    kind = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else cpu_model_name()
    models: dict[str, torch.nn.Module] = {}
    inputs: dict[tuple[str, int], torch.Tensor] = {}
    for name in config.models:
        models[name], _ = build(name, 1, seed=config.seed, device=device)
        for bs in range(1, config.max_batch + 1):
            inputs[name, bs] = example_input(name, bs, seed=config.seed, device=device)
    timer = make_timer(device)
    warm_up(models, inputs)  # every shape it may be asked to run, not only the profiled ones
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    results.send(("ready", worker, record_device(device, worker), kind))

    unreported: deque[tuple[int, Any, float | None]] = deque()
    on_cpu = not device.startswith("cuda")

    def report(block: bool) -> None:
        while unreported and (block or unreported[0][1].ready()):
            job_id, span, cpu_ms = unreported.popleft()
            results.send(("end", worker, job_id, span.start_s, span.end_s(), span.elapsed_ms(), cpu_ms))

    with torch.inference_mode():
        while True:
            try:
                job = jobs.get(timeout=0.005) if unreported else jobs.get()
            except queue.Empty:
                report(block=True)
                continue
            kind_of_job = job[0]
            if kind_of_job == "run":
                _, job_id, name, bs = job
                model, x = models[name], inputs[name, bs]
                slot.publish(job_id, time.monotonic())
                gc.disable()  # no collection inside the timed windows (see the module's documentation)
                try:
                    cpu0 = time.thread_time_ns()
                    span = timer.begin()
                    model(x)
                    timer.end(span)
                    cpu_ms = (time.thread_time_ns() - cpu0) / 1e6 if on_cpu else None
                finally:
                    gc.enable()
                unreported.append((job_id, span, cpu_ms))
                report(block=False)
            elif kind_of_job == "profile":
                _, batch_sizes, repeats = job
                report(block=True)
                wanted = {key: x for key, x in inputs.items() if key[1] in batch_sizes}
                figures = profile_all(models, wanted, timer, repeats=repeats, seed=config.seed)
                results.send(("profile", worker, figures))
            elif kind_of_job == "stop":
                report(block=True)
                return
