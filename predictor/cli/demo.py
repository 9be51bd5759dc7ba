"""``predictor demo``: the service, the real CPU workload and a sample scheduler, end to end.

1. The service starts in-process on a free port, warm-started from the
   embedded default dataset (``predictor/data/cpu-default.jsonl.gz``) or from
   ``--warm-start LOG``, and a client waits for health ``SERVING``.
2. The real co-located workload (:func:`run_workload`, the only part that
   touches :mod:`collectors`) runs PyTorch models on worker processes and
   emits one ``coloc/v1`` record per executed batch.
3. A sample scheduler asks ``CheckDeadline`` for each closed batch *before it
   is dispatched*, with a deadline of ``--slo`` times its solo latency and the
   batches in flight as its co-runners, given as it knows them: without
   overlaps and without device signals (the query shape ``unknown/nosig``,
   which the service calibrates on its own residuals). Each question names
   the batch (``batch_id``), and the observation streamed later carries the
   same id, so the service calibrates on the very answer it gave. The batch
   is admitted when it is feasible at ``--confidence``; so that refusals do
   not freeze what the service learns, a share ``--explore`` of the refused
   batches is admitted anyway (exploration, reported). Refused batches never
   run (admission control). Each admitted batch's prediction, bound and
   deadline are then scored against the latency it really had.
4. The records stream to the service over ``ReportObservations``; a live table
   shows learning, coverage and decisions; a final summary follows, and
   everything stops cleanly.
"""

from __future__ import annotations

import argparse
import itertools
import math
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from predictor.records.logio import RecordWriter
from predictor.records.record import BatchSpec, Record
from predictor.service import CoRunnerSource, PlannedCoRunner, Query, Service, ServiceConfig

DEFAULT_DATASET = Path(__file__).resolve().parents[1] / "data" / "cpu-default.jsonl.gz"
SHORT_MODELS = ("mlp", "mobilenet")


@dataclass(frozen=True)
class DemoOptions:
    """What ``predictor demo`` runs."""

    duration_s: float = 60.0
    short: bool = False
    predictor: str = "rls"
    warm_start: str | None = None
    slo: float = 2.5  # deadline = slo x solo latency
    confidence: float = 0.95
    explore: float = 0.05  # share of refused batches admitted anyway
    seed: int = 0
    save: str | None = None  # a log of the records streamed
    live: bool | None = None  # None: when the console is a terminal


def register(subparsers: Any) -> None:
    """Add the ``demo`` sub-command."""
    parser = subparsers.add_parser(
        "demo",
        help="the service, the real CPU workload and a sample scheduler, end to end",
        description="Start the service in-process, run the real CPU workload streaming observations to it "
        "while a sample scheduler checks each batch's deadline, then print a summary.",
    )
    parser.add_argument("--duration", type=float, help="seconds of workload (default 60, 8 with --short)")
    parser.add_argument("--short", action="store_true", help="two small models, quick profiling (for tests)")
    parser.add_argument("--predictor", default="rls", help="predictor spec (default rls)")
    parser.add_argument(
        "--warm-start",
        metavar="LOG",
        help="log to warm-start from (default: the embedded CPU dataset, when present)",
    )
    parser.add_argument(
        "--slo", type=float, default=2.5, help="deadline as a multiple of solo latency (default 2.5)"
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="confidence a batch needs to be dispatched (default 0.95)",
    )
    parser.add_argument(
        "--explore",
        type=float,
        default=0.05,
        help="share of the batches the bound refuses that are admitted anyway, so that the service "
        "keeps learning where it refuses (default 0.05)",
    )
    parser.add_argument("--save", metavar="LOG", help="also write the records streamed to this log")
    parser.add_argument("--no-live", action="store_true", help="no live table (plain output)")
    parser.set_defaults(func=run)


# ----------------------------------------------------------------------------- the workload


def run_workload(
    duration_s: float,
    short: bool,
    sink: Callable[[Record], None],
    progress: Callable[[str, float], None],
    admit: Callable[[Any], bool] | None = None,
) -> str:
    """Run the real CPU workload for ``duration_s`` seconds, one record per batch to ``sink``.

    ``progress(stage, elapsed_s)`` is called a few times a second; ``admit`` sees each
    batch before dispatch (a :class:`collectors.workload.PlannedBatch`). Returns a one-line
    description of the run. Raises ``RuntimeError`` when the workload cannot run.
    """
    try:
        from collectors.schedule import constant_schedule  # heavy, optional: the workload needs torch
        from collectors.workload import CollectionConfig, run_collection  # heavy, optional: torch
    except ImportError as exc:  # torch or the collectors missing from this installation
        raise RuntimeError(f"the CPU workload is not available here ({exc})") from exc
    if short:
        config = CollectionConfig(
            duration_s=duration_s,
            phases=constant_schedule(SHORT_MODELS, 60.0),
            max_batch=4,
            profile_repeats=2,
            device="cpu",
        )
    else:
        config = CollectionConfig(duration_s=duration_s, device="cpu")
    result = run_collection(config, sink, lambda status: progress(status.stage, status.elapsed_s), admit)
    return (
        f"{result.batches} batches of {result.requests} requests on {config.workers} workers "
        f"({result.device_kind}), {result.refused_batches} batches refused by the scheduler, "
        f"{result.dropped_requests} requests dropped by full queues, {result.wall_s:.0f} s wall"
    )


# ----------------------------------------------------------------------------- the scheduler


@dataclass
class Decision:
    """One admission decision of the sample scheduler, and the latency the batch then had."""

    model: str
    batch_size: int
    predicted_ms: float
    bound_ms: float
    deadline_ms: float
    feasible: bool
    actual_ms: float = math.nan
    explored: bool = False  # refused by the bound, admitted to explore
    batch_id: str = ""
    probability: float = math.nan

    @property
    def admitted(self) -> bool:
        """Whether the batch was dispatched (feasible, or explored)."""
        return self.feasible or self.explored

    @property
    def met(self) -> bool:
        """Whether the batch ran within its deadline."""
        return self.actual_ms <= self.deadline_ms


@dataclass
class SchedulerStats:
    """What the sample scheduler decided and how the admitted batches turned out."""

    decisions: int = 0
    dispatched: int = 0
    deferred: int = 0
    explored: int = 0
    executed: int = 0
    executed_explored: int = 0
    explored_met: int = 0
    dispatched_met: int = 0
    covered: int = 0
    abs_pct_error: float = 0.0
    failures: int = 0
    recent: deque = field(default_factory=lambda: deque(maxlen=8))

    def decided(self, d: Decision) -> None:
        """Count a decision taken before dispatch."""
        self.decisions += 1
        if d.feasible:
            self.dispatched += 1
        elif d.explored:
            self.explored += 1
        else:
            self.deferred += 1
            self.recent.append(d)

    def settled(self, d: Decision) -> None:
        """An admitted batch ran: score its prediction, bound and deadline (explored batches apart)."""
        if d.explored:
            self.executed_explored += 1
            self.explored_met += d.met
            self.recent.append(d)
            return
        self.executed += 1
        self.covered += d.actual_ms <= d.bound_ms
        self.abs_pct_error += abs(d.actual_ms - d.predicted_ms) / d.actual_ms * 100.0
        self.dispatched_met += d.met
        self.recent.append(d)

    @property
    def mape(self) -> float:
        """Mean absolute percentage error of the admitted batches' predictions."""
        return self.abs_pct_error / self.executed if self.executed else math.nan

    @property
    def coverage(self) -> float:
        """Fraction of admitted batches within their upper bound."""
        return self.covered / self.executed if self.executed else math.nan

    @property
    def met_rate(self) -> float:
        """Fraction of admitted batches that met their deadline."""
        return self.dispatched_met / self.executed if self.executed else math.nan

    @property
    def admission_rate(self) -> float:
        """Fraction of the batches decided that the bound admitted (exploration left out)."""
        return self.dispatched / self.decisions if self.decisions else math.nan

    @property
    def exploration_share(self) -> float:
        """Fraction of the batches decided that were admitted to explore."""
        return self.explored / self.decisions if self.decisions else math.nan


class SampleScheduler:
    """Admission control: asks ``CheckDeadline`` for each batch before it is dispatched.

    Parameters
    ----------
    client
        An :class:`~predictor.rpc.client.InterferenceClient`.
    slo
        Deadline of a batch as a multiple of its solo latency.
    confidence
        Confidence at which a batch must be feasible to be dispatched.
    explore
        Share of the batches the bound refuses that are dispatched anyway (exploration).
    seed
        Seed of the exploration draws.
    """

    def __init__(self, client: Any, slo: float, confidence: float, explore: float = 0.05, seed: int = 0):
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore must lie in [0, 1], got {explore!r}")
        self.client = client
        self.slo = slo
        self.confidence = confidence
        self.explore = explore
        self.rng = random.Random(seed)
        self.stats = SchedulerStats()
        self._ids = itertools.count()
        self._pending: dict[tuple[str, int], deque[Decision]] = {}
        self._lock = threading.Lock()

    def admit(self, planned: Any) -> bool:
        """Decide for a :class:`collectors.workload.PlannedBatch`; ``False`` refuses it."""
        batch_id = f"demo-{next(self._ids)}"
        query = Query(  # the co-runners as the scheduler knows them: no overlaps, no signals
            device=planned.device,
            batch=BatchSpec(planned.model, planned.batch_size, planned.attrs),
            device_kind=planned.device_kind,
            co_runners=tuple(PlannedCoRunner(m, b, a) for m, b, a in planned.in_flight),
            co_runner_source=CoRunnerSource.EXPLICIT,
            solo_latency_ms=planned.solo_latency_ms,
            batch_id=batch_id,
        )
        solo = planned.solo_latency_ms or 1.0
        try:
            answer = self.client.check_deadline(query, self.slo * solo, confidence=self.confidence)
        except Exception:  # a scheduler keeps going (fail open); failures are counted and shown
            self.stats.failures += 1
            return True
        decision = Decision(
            planned.model,
            planned.batch_size,
            answer.prediction.latency_ms,
            answer.prediction.upper_bound_ms,
            answer.deadline_ms,
            answer.feasible,
            explored=not answer.feasible and self.rng.random() < self.explore,
            batch_id=batch_id,
            probability=answer.probability,
        )
        with self._lock:
            self.stats.decided(decision)
            if decision.admitted:
                self._pending.setdefault((planned.model, planned.batch_size), deque()).append(decision)
        return decision.admitted

    def settle(self, record: Record) -> str:
        """Match an executed batch to its admission decision (oldest of its model and size);
        returns the batch id the decision named ("" when none matched)."""
        with self._lock:
            pending = self._pending.get((record.batch.model, record.batch.batch_size))
            if not pending:
                return ""  # admitted while the scheduler failed open
            decision = pending.popleft()
            decision.actual_ms = record.latency_ms  # type: ignore[assignment]
            self.stats.settled(decision)
            return decision.batch_id


# ----------------------------------------------------------------------------- the run


class _Pipeline:
    """Workload records -> scheduler -> observation stream, on two threads."""

    def __init__(self, client: Any, scheduler: SampleScheduler, save: str | None = None):
        self.client = client
        self.writer = RecordWriter(save, atomic=True) if save else None
        self.scheduler = scheduler
        self.records: queue.Queue[Record | None] = queue.Queue(maxsize=100_000)
        self.stream: queue.Queue[tuple[Record, str] | None] = queue.Queue(maxsize=100_000)
        self.streamed = 0
        self.report: Any = None
        self.error: BaseException | None = None
        self._threads = [
            threading.Thread(target=self._schedule, name="demo-scheduler", daemon=True),
            threading.Thread(target=self._send, name="demo-stream", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def sink(self, record: Record) -> None:
        if self.writer is not None:
            self.writer.write(record)
        self.records.put(record)

    def _schedule(self) -> None:
        while (record := self.records.get()) is not None:
            batch_id = self.scheduler.settle(record)
            self.stream.put((record, batch_id))
        self.stream.put(None)

    def _items(self) -> Any:
        while (item := self.stream.get()) is not None:
            self.streamed += 1
            yield item

    def _send(self) -> None:
        try:
            self.report = self.client.report_observations(self._items())
        except BaseException as exc:  # shown in the summary
            self.error = exc

    def finish(self, timeout: float = 60.0) -> None:
        self.records.put(None)
        for thread in self._threads:
            thread.join(timeout)
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _fmt(value: float, digits: int = 2, suffix: str = "") -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}{suffix}"


def _live_table(stage: str, elapsed: float, options: DemoOptions, pipeline: _Pipeline, status: Any) -> Any:
    s = pipeline.scheduler.stats
    table = Table(
        title=f"interference demo: {stage} {elapsed:.0f}/{options.duration_s:.0f} s", show_header=False
    )
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("records streamed", str(pipeline.streamed))
    if status is not None:
        table.add_row("observations learned", str(status.observations_learned))
        table.add_row("rolling MAPE (service)", _fmt(status.rolling_mape, 1, " %"))
        table.add_row(f"coverage @ {status.coverage_confidence:g} (service)", _fmt(status.coverage, 4))
        table.add_row("drift alarms", str(len(status.drift_alarms)))
    table.add_row("decisions: dispatched / explored / refused", f"{s.dispatched} / {s.explored} / {s.deferred}")
    table.add_row("deadlines met (dispatched, ran)", _fmt(100 * s.met_rate, 1, " %"))
    recent = Table(title="latest decisions", show_lines=False)
    for column in ("batch", "predicted", "bound", "deadline", "actual", "decision"):
        recent.add_column(column, justify="right")
    for d in list(s.recent):
        if d.admitted:
            verdict = ("[green]dispatched" if d.feasible else "[cyan]explored") + (" ✓" if d.met else " ✗")
        else:
            verdict = "[yellow]refused"
        recent.add_row(
            f"{d.model}×{d.batch_size}",
            f"{d.predicted_ms:.1f}",
            f"{d.bound_ms:.1f}",
            f"{d.deadline_ms:.1f}",
            _fmt(d.actual_ms, 1),
            verdict,
        )
    return Group(table, recent)


def summary_table(options: DemoOptions, stats: SchedulerStats, status: Any, report: Any) -> Any:
    """The final table of the demo: the scheduler's decisions and the service's learning."""
    table = Table(title="demo summary", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("batches decided before dispatch", str(stats.decisions))
    table.add_row("admitted batches that ran", str(stats.executed))
    table.add_row("admission-time MAPE (admitted batches)", _fmt(stats.mape, 1, " %"))
    table.add_row(f"admission-time coverage of the {options.confidence:g} bound (admitted batches)",
                  _fmt(stats.coverage, 4))
    table.add_row("admission rate (admitted by the bound / decided)", _fmt(100 * stats.admission_rate, 1, " %"))
    table.add_row(f"exploration share (refused but admitted, --explore {options.explore:g})",
                  f"{stats.explored} ({_fmt(100 * stats.exploration_share, 1)} %)")
    if stats.executed_explored:
        table.add_row("explored batches that met their deadline",
                      f"{stats.explored_met} / {stats.executed_explored}")
    if status is not None:
        table.add_row("service: observations learned", str(status.observations_learned))
        table.add_row("service: rolling MAPE (observation time)", _fmt(status.rolling_mape, 1, " %"))
        table.add_row(f"service: coverage @ {status.coverage_confidence:g} (observation time)",
                      _fmt(status.coverage, 4))
        table.add_row("service: admission-time MAPE (replayed)", _fmt(status.admission_mape, 1, " %"))
        table.add_row(f"service: admission-time coverage @ {status.coverage_confidence:g} (replayed)",
                      _fmt(status.admission_coverage, 4))
        linked = [a for a in status.admission if a.source == "linked" and a.co_runners == -1
                  and not a.model and not a.device_kind]
        for a in linked:
            table.add_row(f"service: linked answers {a.query_shape}: coverage @ {status.coverage_confidence:g}",
                          f"{_fmt(a.coverage, 4)} of {a.observations}")
        table.add_row("service: drift alarms", str(len(status.drift_alarms)))
    if report is not None:
        table.add_row("observations accepted / rejected", f"{report.accepted} / {report.rejected}")
    table.add_row(f"deadline = {options.slo:g} × solo latency", "")
    table.add_row("decisions: dispatched / explored / refused",
                  f"{stats.dispatched} / {stats.explored} / {stats.deferred}")
    table.add_row(
        "deadlines met among dispatched",
        f"{stats.dispatched_met} / {stats.executed} ({_fmt(100 * stats.met_rate, 1)} %)",
    )
    if stats.failures:
        table.add_row("[red]scheduler RPC failures", str(stats.failures))
    return table


def run_demo(options: DemoOptions, console: Any = None) -> int:
    """Run the demo; returns the exit status."""
    from predictor.rpc.client import InterferenceClient  # heavy: grpc, not at CLI registration
    from predictor.rpc.server import create_server, stop_server  # heavy: grpc

    console = console or Console()
    warm = options.warm_start or (str(DEFAULT_DATASET) if DEFAULT_DATASET.exists() else None)
    service = Service(ServiceConfig(predictor=options.predictor, default_confidence=options.confidence))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    client = InterferenceClient(f"127.0.0.1:{port}")
    try:
        console.print(f"service on 127.0.0.1:{port}, health {client.health()}")
        console.print(service.open(warm_start=warm))
        client.wait_ready(30)
        console.print(
            f"health {client.health()}; starting the {'short ' if options.short else ''}CPU workload "
            f"for {options.duration_s:g} s (start-up and profiling come first)"
        )
        scheduler = SampleScheduler(client, options.slo, options.confidence, options.explore, options.seed)
        pipeline = _Pipeline(client, scheduler, options.save)
        stage = ["starting", 0.0]
        status_cache: list[Any] = [None, 0.0]

        def progress(name: str, elapsed: float) -> None:
            stage[0], stage[1] = name, elapsed

        def render() -> Any:
            now = time.monotonic()
            if now - status_cache[1] > 0.5:
                try:
                    status_cache[0] = client.status()
                except Exception:
                    pass
                status_cache[1] = now
            return _live_table(str(stage[0]), float(stage[1]), options, pipeline, status_cache[0])

        live = console.is_terminal if options.live is None else options.live
        try:
            if live:
                with Live(get_renderable=render, console=console, refresh_per_second=2):
                    described = run_workload(
                        options.duration_s, options.short, pipeline.sink, progress, scheduler.admit
                    )
            else:
                described = run_workload(
                    options.duration_s, options.short, pipeline.sink, progress, scheduler.admit
                )
        except RuntimeError as exc:
            console.print(f"[red]demo: the workload failed: {exc}")
            return 1
        finally:
            pipeline.finish()
        console.print(f"workload done: {described}")
        if options.save:
            console.print(f"records saved to {options.save}")
        if pipeline.error is not None:
            console.print(f"[red]demo: the observation stream failed: {pipeline.error}")
        status = client.status()
        console.print(summary_table(options, pipeline.scheduler.stats, status, pipeline.report))
        return 0 if pipeline.error is None else 1
    finally:
        client.close()
        stop_server(server, service, grace=2.0)
        console.print("service stopped")


def run(args: argparse.Namespace) -> int:
    """Entry of ``predictor demo``."""
    duration = args.duration if args.duration is not None else (8.0 if args.short else 60.0)
    options = DemoOptions(
        duration_s=duration,
        short=args.short,
        predictor=args.predictor,
        warm_start=args.warm_start,
        slo=args.slo,
        confidence=args.confidence,
        explore=args.explore,
        live=False if args.no_live else None,
        save=args.save,
    )
    return run_demo(options)
