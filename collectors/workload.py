"""Run a real co-located inference workload and stream one ``coloc/v1`` record per batch.

:func:`run_collection` is the programmatic entry (``predictor collect`` and
the service demo call it). It

1. starts ``workers`` worker processes (``spawn``), each loading every model
   of the schedule with one thread (:mod:`collectors.worker`);
2. profiles each (model, batch size) alone in one worker, with the others
   idle: ``solo_latency_ms`` and the intensity ``attrs`` of the records;
3. starts the samplers (``/proc`` on a CPU, NVML on GPUs);
4. for ``duration_s`` seconds draws Poisson requests per model following the
   schedule, closes batches by size or waiting time, dispatches them to the
   workers, and feeds the workers' begin/end reports to a
   :class:`~collectors.tracker.Tracker` whose records go to ``sink``;
5. drains the batches in flight, emits the last records and stops everything.

An optional ``admit`` callback sees each closed batch *before* it is
dispatched (with the batches in flight, its would-be co-runners) and may
refuse it: that is where a scheduler asks the service whether the batch can
meet its deadline. Refused batches are counted, never run.

Dispatch keeps at most two batches per worker queued; beyond a backlog of
``4 x workers`` closed batches the oldest are dropped (and counted), so an
overloaded run stays a bounded, honest measurement instead of an ever-growing
queue.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from collectors.batching import Batch, DynamicBatcher, PoissonArrivals
from collectors.cpu_sampler import CpuSampler
from collectors.nvml_sampler import NvmlSampler
from collectors.pool import WorkerPool
from collectors.sampler import Sampler
from collectors.schedule import Phase, constant_schedule, phase_at, schedule_models, validate_phases
from collectors.tracker import Sink, Tracker
from collectors.worker import WorkerConfig
from predictor.records.rules import BATCH_CPU_SIGNAL

START_TIMEOUT_S = 180.0
TOKEN_SEQ_LEN = 64


@dataclass
class CollectionConfig:
    """A collection run.

    Parameters
    ----------
    duration_s
        Seconds of load after start-up and profiling.
    phases
        The schedule (:mod:`collectors.schedule`); by default all six models at 40 requests/s.
    workers
        Concurrent worker processes.
    max_batch
        Largest batch; also the batch sizes profiled (1..max_batch).
    batch_timeout_ms
        A batch closes once its oldest request has waited this long.
    seed
        Seed of the arrivals.
    sample_hz
        Sampler frequency.
    device
        ``"cpu"``, ``"cuda"`` or ``"auto"`` (CUDA when available).
    profile_repeats
        Timed solo runs per (model, batch size); the median is kept.
    lag_s
        Tracker emission delay (see :class:`~collectors.tracker.Tracker`).
    """

    duration_s: float = 120.0
    phases: list[Phase] = field(
        default_factory=lambda: constant_schedule(("resnet", "vgg", "mobilenet", "bert", "gpt2", "mlp"), 40.0)
    )
    workers: int = 2
    max_batch: int = 8
    batch_timeout_ms: float = 20.0
    seed: int = 0
    sample_hz: float = 50.0
    device: str = "cpu"
    profile_repeats: int = 9
    lag_s: float = 0.1

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise ValueError(f"duration must be > 0, got {self.duration_s}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.max_batch < 1:
            raise ValueError(f"max batch must be >= 1, got {self.max_batch}")
        if self.batch_timeout_ms < 0:
            raise ValueError(f"batch timeout must be >= 0, got {self.batch_timeout_ms}")
        if self.sample_hz <= 0:
            raise ValueError(f"sample rate must be > 0, got {self.sample_hz}")
        if self.profile_repeats < 1:
            raise ValueError(f"profile repeats must be >= 1, got {self.profile_repeats}")
        validate_phases(list(self.phases))

    @property
    def models(self) -> tuple[str, ...]:
        """Every model the schedule uses."""
        return schedule_models(self.phases)


@dataclass
class CollectionStatus:
    """A progress snapshot: ``stage`` is starting, profiling, running, draining or done."""

    stage: str
    elapsed_s: float = 0.0
    duration_s: float = 0.0
    records: int = 0
    batches: int = 0
    requests: int = 0
    dropped_requests: int = 0
    in_flight: int = 0
    phase: Phase | None = None


@dataclass(frozen=True)
class SamplerStats:
    """One sampler's work in a run: reads made, ticks skipped because a read overran, its CPU time."""

    name: str
    reads: int
    skipped_ticks: int
    cpu_s: float


@dataclass
class CollectionResult:
    """What a run did: counts, the solo profile, sampler and tracker statistics."""

    records: int
    batches: int
    requests: int
    dropped_requests: int
    wall_s: float
    profile: dict[tuple[str, int], dict[str, float]]
    device_kind: str
    parent_cpu_s: float
    tracker_stats: dict[str, int]
    refused_batches: int = 0
    refused_requests: int = 0
    samplers: list[SamplerStats] = field(default_factory=list)


Progress = Callable[[CollectionStatus], None]


@dataclass(frozen=True)
class InFlight:
    """A batch running or queued on the workers, as an admission callback sees it:
    ``remaining_ms``, for one running, is its solo latency less the time it has run (at least
    0); ``None`` for one queued."""

    model: str
    batch_size: int
    attrs: dict[str, float]
    remaining_ms: float | None = None


@dataclass(frozen=True)
class PlannedBatch:
    """A closed batch about to be dispatched, as an admission callback sees it.

    ``in_flight`` holds the batches running or queued on the ``workers`` now, oldest first;
    :attr:`beside` those this batch will run beside once it starts.
    """

    model: str
    batch_size: int
    attrs: dict[str, float]
    solo_latency_ms: float | None
    device: str
    device_kind: str
    in_flight: tuple[InFlight, ...]
    workers: int

    @property
    def beside(self) -> tuple[InFlight, ...]:
        """The in-flight batches this one will run beside: the workers take batches first in,
        first out, so when it starts the other workers run the last ``workers - 1`` dispatched
        before it (all of the in-flight ones when fewer are in flight)."""
        others = max(self.workers - 1, 0)
        return self.in_flight[max(len(self.in_flight) - others, 0):] if others else ()


Admit = Callable[[PlannedBatch], bool]


def _attrs(model: str, figures: dict[str, float]) -> dict[str, float]:
    attrs = {k: v for k, v in figures.items() if k != "solo_ms"}
    if model in ("bert", "gpt2"):
        attrs["seq_len"] = float(TOKEN_SEQ_LEN)
    return attrs


def _samplers(config: CollectionConfig, devices: set[str], workers: WorkerPool) -> list[Sampler]:
    def own_pids() -> list[int]:  # the workload: this process (and the service in it) and its workers
        return [os.getpid(), *(p.pid for p in workers.procs if p.pid is not None)]

    samplers: list[Sampler] = [CpuSampler(config.sample_hz, own_pids=own_pids)]
    if any(d.startswith("gpu") for d in devices):
        samplers.append(NvmlSampler(config.sample_hz, own_pids=own_pids))
    return samplers


def _window(samplers: Sequence[Sampler]) -> Callable[[str, float, float], dict[str, float]]:
    def window(device: str, t0: float, t1: float) -> dict[str, float]:
        out: dict[str, float] = {}
        for sampler in samplers:
            out.update(sampler.window(device, t0, t1))
        return out

    return window


def run_collection(
    config: CollectionConfig, sink: Sink, progress: Progress | None = None, admit: Admit | None = None
) -> CollectionResult:
    """Run the workload of ``config`` and send one record per executed batch to ``sink``.

    Parameters
    ----------
    config
        The run.
    sink
        Called with each :class:`~predictor.records.record.Record`, in end-time order (a
        :class:`~predictor.records.logio.RecordWriter`'s ``write``, a gRPC stream's ``send``).
    progress
        Called about five times a second with a :class:`CollectionStatus`.
    admit
        Called with a :class:`PlannedBatch` before each dispatch; ``False``
        refuses the batch (counted in the result, never run).

    Notes
    -----
    Workers are *spawned*, so a script calling this must guard its entry point
    with ``if __name__ == "__main__":``. ``torch`` is imported by the workers only.
    """
    notify = progress or (lambda status: None)
    wall0 = time.monotonic()
    notify(CollectionStatus("starting", duration_s=config.duration_s))
    workers = WorkerPool(config.workers, WorkerConfig(config.models, config.max_batch, config.device))
    samplers: list[Sampler] = []
    try:
        ready = workers.wait_for("ready", config.workers, START_TIMEOUT_S)
        devices = {m[1]: (m[2], m[3]) for m in ready}
        notify(CollectionStatus("profiling", duration_s=config.duration_s))
        workers.jobs.put(("profile", tuple(range(1, config.max_batch + 1)), config.profile_repeats))
        profile = workers.wait_for("profile", 1, START_TIMEOUT_S)[0][2]
        samplers = [s.start() for s in _samplers(config, {d for d, _ in devices.values()}, workers)]
        time.sleep(max(3.0 / config.sample_hz, 0.1))  # a first interval before the first batch
        source = "gpu" if any(d.startswith("gpu") for d, _ in devices.values()) else "cpu"
        tracker = Tracker(sink, signals=_window(samplers), source=source, lag_s=config.lag_s)
        loop = _Loop(config, workers, tracker, devices, profile, notify, admit)
        cpu0 = time.process_time()
        loop.run()
        parent_cpu_s = time.process_time() - cpu0
        stats = loop.status("done")
        notify(stats)
        kinds = sorted({k for _, k in devices.values()})
        return CollectionResult(
            records=tracker.emitted,
            batches=stats.batches,
            requests=stats.requests,
            dropped_requests=stats.dropped_requests,
            wall_s=time.monotonic() - wall0,
            profile=profile,
            device_kind=", ".join(kinds),
            parent_cpu_s=parent_cpu_s,
            refused_batches=loop.refused_batches,
            refused_requests=loop.refused_requests,
            samplers=[SamplerStats(s.name, s.reads, s.skipped_ticks, s.cpu_time_s) for s in samplers],
            tracker_stats={
                "emitted": tracker.emitted,
                "unknown_ends": tracker.unknown_ends,
                "stale_dropped": tracker.stale_dropped,
                "invalid": tracker.invalid,
                "signal_errors": tracker.signal_errors,
            },
        )
    finally:
        for sampler in samplers:
            sampler.stop()
        workers.stop()


class _Loop:
    """The parent's event loop: arrivals, batching, dispatch, reports, emission."""

    def __init__(
        self,
        config: CollectionConfig,
        workers: WorkerPool,
        tracker: Tracker,
        devices: dict[int, tuple[str, str]],
        profile: dict[tuple[str, int], dict[str, float]],
        notify: Progress,
        admit: Admit | None = None,
    ) -> None:
        self.config = config
        self.admit = admit
        self.refused_batches = 0
        self.refused_requests = 0
        self.workers = workers
        self.tracker = tracker
        self.devices = devices
        self.solo = {key: figures["solo_ms"] for key, figures in profile.items()}
        self.attrs = {key: _attrs(key[0], figures) for key, figures in profile.items()}
        self.notify = notify
        self.arrivals = PoissonArrivals(config.phases, seed=config.seed)
        self.batcher = DynamicBatcher(config.max_batch, config.batch_timeout_ms / 1e3)
        self.backlog: deque[Batch] = deque()
        self.jobs: dict[int, tuple[str, int]] = {}
        self.begun: set[int] = set()
        self.next_job = 0
        self.requests = 0
        self.dropped_batched = 0
        self.t0 = 0.0

    @property
    def in_flight(self) -> int:
        return len(self.jobs)

    def status(self, stage: str) -> CollectionStatus:
        elapsed = min(time.monotonic() - self.t0, self.config.duration_s)
        return CollectionStatus(
            stage=stage,
            elapsed_s=elapsed,
            duration_s=self.config.duration_s,
            records=self.tracker.emitted,
            batches=self.next_job,
            requests=self.requests,
            dropped_requests=self.batcher.dropped + self.dropped_batched,
            in_flight=self.in_flight,
            phase=phase_at(self.config.phases, elapsed),
        )

    def run(self) -> None:
        self.t0 = time.monotonic()
        end = self.t0 + self.config.duration_s
        next_note = self.t0
        while True:
            now = time.monotonic()
            if now >= end:
                break
            self._arrive(now)
            self._dispatch()
            wake = min(
                self.t0 + self.arrivals.next_time(),
                self.t0 + self.batcher.next_deadline(),
                now + 0.02,
                end,
            )
            self._drain(wake - time.monotonic())
            self._poll()
            if now >= next_note:
                self.workers.check_alive()
                self.notify(self.status("running"))
                next_note = now + 0.2
        self.batcher.clear()
        self.dropped_batched += sum(b.batch_size for b in self.backlog)
        self.backlog.clear()
        deadline = time.monotonic() + 30.0
        while self.jobs and time.monotonic() < deadline:
            self._drain(0.05)
            self.notify(self.status("draining"))
        settle = time.monotonic() + self.tracker.lag_s  # let the samplers cover the last windows
        while time.monotonic() < settle:
            self._drain(settle - time.monotonic())
        self.tracker.flush()

    def _arrive(self, now: float) -> None:
        for t, model in self.arrivals.until(now - self.t0):
            self.batcher.add(model, t)
            self.requests += 1
        for batch in self.batcher.ready(now - self.t0):
            self.backlog.append(batch)
        limit = 4 * self.config.workers
        while len(self.backlog) > limit:
            self.dropped_batched += self.backlog.popleft().batch_size

    def _dispatch(self) -> None:
        while self.backlog and self.in_flight < 2 * self.config.workers:
            batch = self.backlog.popleft()
            if self.admit is not None and not self.admit(self._planned(batch)):
                self.refused_batches += 1
                self.refused_requests += batch.batch_size
                continue
            job_id = self.next_job
            self.next_job += 1
            self.jobs[job_id] = (batch.model, batch.batch_size)
            self.workers.jobs.put(("run", job_id, batch.model, batch.batch_size))

    def _planned(self, batch: Batch) -> PlannedBatch:
        key = (batch.model, batch.batch_size)
        device, device_kind = self.devices[0]
        return PlannedBatch(
            model=batch.model,
            batch_size=batch.batch_size,
            attrs=self.attrs.get(key, {}),
            solo_latency_ms=self.solo.get(key),
            device=device,
            device_kind=device_kind,
            in_flight=self._in_flight(),
            workers=self.config.workers,
        )

    def _in_flight(self) -> tuple[InFlight, ...]:
        """The jobs in flight, oldest first, each running one with its expected time left."""
        now = time.monotonic()
        started = dict(filter(None, (slot.read() for slot in self.workers.slots)))
        out = []
        for job_id, (model, size) in self.jobs.items():
            start_s, solo = started.get(job_id), self.solo.get((model, size))
            remaining = None if start_s is None or solo is None else max(solo - 1e3 * (now - start_s), 0.0)
            out.append(InFlight(model, size, self.attrs.get((model, size), {}), remaining))
        return tuple(out)

    def _poll(self) -> None:
        """Register the batches running now, then let the tracker emit what is due.

        Slots are read before the pipes are drained: a worker reports a batch's
        end before it publishes its next one, so no batch escapes both.
        """
        for worker, slot in enumerate(self.workers.slots):
            running = slot.read()
            if running is not None:
                self._begin(worker, *running)
        self._drain(0.0)
        self.tracker.poll()

    def _drain(self, timeout: float) -> None:
        message = self.workers.get(timeout)
        while message is not None:
            self._handle(message)
            message = self.workers.get(0.0)

    def _begin(self, worker: int, job_id: int, start_s: float) -> None:
        if job_id in self.begun or job_id not in self.jobs:
            return
        self.begun.add(job_id)
        model, bs = self.jobs[job_id]
        device, device_kind = self.devices[worker]
        self.tracker.begin(
            job_id,
            device,
            model,
            bs,
            start_s,
            attrs=self.attrs.get((model, bs)),
            solo_latency_ms=self.solo.get((model, bs)),
            device_kind=device_kind,
        )

    def _handle(self, message: tuple[Any, ...]) -> None:
        if message[0] == "end":
            _, worker, job_id, start_s, end_s, latency_ms, cpu_ms = message
            self._begin(worker, job_id, start_s)  # a batch too short for any slot read
            self.begun.discard(job_id)
            self.jobs.pop(job_id, None)
            own = {BATCH_CPU_SIGNAL: cpu_ms} if cpu_ms is not None else None
            self.tracker.end(job_id, end_s, start_s=start_s, latency_ms=latency_ms, own_signals=own)
            self._dispatch()
