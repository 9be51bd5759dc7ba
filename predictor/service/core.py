"""The prediction service: a plain object that the gRPC layer (or anything else) calls.

:class:`Service` composes three parts along the data flow:

* :class:`~predictor.service.state.ServiceState` — what the service knows (the online
  predictor, the conformal calibrator, the error monitor, the outlier gates, the live
  view, the counters) and its snapshots and observation log;
* :class:`~predictor.service.ingest.Ingest` — one observed record into the models, the
  calibrator, the gates and the log, prequentially (predict, bound, then learn);
* :class:`~predictor.service.answering.Answering` — one query into one prediction, the
  same path for PredictLatency, CheckDeadline and RankPlacements.

The batches reported running (ReportBatchStart/End) join the two: a start is
predicted, then entered in the live view.

Examples
--------
>>> from predictor.records.record import BatchSpec, parse_record
>>> service = Service(ServiceConfig(predictor="solo"))
>>> service.open()
'cold start: nothing learned yet'
>>> service.observe(parse_record({"schema": "coloc/v1", "device": "cpu0",
...     "batch": {"model": "mlp", "batch_size": 2}, "latency_ms": 4.0}))  # predicted before learning
1.0
>>> prediction = service.predict(Query("cpu0", BatchSpec("mlp", 2)))
>>> prediction.latency_ms, prediction.observations_learned
(4.0, 1)
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from predictor.predictors import LatencyPredictor
from predictor.records import rules
from predictor.records.logio import ReadReport
from predictor.records.record import BatchSpec, Record
from predictor.service.answering import Answering, invalid_argument
from predictor.service.config import ServiceConfig
from predictor.service.durability import wal
from predictor.service.errors import FailedPrecondition, InvalidArgument
from predictor.service.estimates.placements import CandidateColumns, RankingColumns
from predictor.service.guards.ratelimit import RateLimiter
from predictor.service.ingest import Ingest, Observed
from predictor.service.live.liveview import LiveView
from predictor.service.pipeline_types import PipelineCost, PipelinePlan, PipelineStage
from predictor.service.pipelines import PipelinePlanner
from predictor.service.replay_block import replay_block
from predictor.service.state import ServiceState
from predictor.service.types import (
    Candidate,
    CoRunnerSource,
    Deadline,
    DeadlineAnswer,
    DeviceMemory,
    InputPlace,
    ObservationReport,
    Prediction,
    Query,
    Ranking,
    Status,
)


class Service:
    """Online interference prediction with calibrated deadline answers.

    Parameters
    ----------
    config
        The service's configuration.
    predictor
        An already built predictor (default: built from ``config.predictor``).
    clock
        Monotonic clock of the live view, in seconds.
    wall
        Wall clock, Unix seconds: what a report's ``client_time`` is compared with.
    state
        The state to answer from, built already (an answering worker's
        :class:`~predictor.service.replicas.workers.WorkerState`; default: a new one of ``config``).
    """

    def __init__(
        self,
        config: ServiceConfig | None = None,
        *,
        predictor: LatencyPredictor | None = None,
        clock: Callable[[], float] = time.monotonic,
        state: ServiceState | None = None,
        wall: Callable[[], float] = time.time,
    ):
        self.config = config = config or ServiceConfig()
        self.wall = wall
        self.state = state if state is not None else ServiceState(config, predictor, clock)
        self.ingest = Ingest(self.state)
        self.answers = Answering(self.state)
        self.pipelines = PipelinePlanner(self.answers)
        if config.admission_replay:
            # Degraded replay: the admission-time answers about each observed batch go the way real queries go.
            self.ingest.replay = functools.partial(replay_block, self.answers)

    # ------------------------------------------------------------------ what the service knows
    @property
    def live(self) -> LiveView:
        """What runs on which device."""
        return self.state.live

    @property
    def ready(self) -> bool:
        """Whether the service answers (opened, not closing)."""
        return self.state.ready

    @property
    def predictor_name(self) -> str:
        """The registry spec of the predictor."""
        return self.config.predictor

    @property
    def observations_learned(self) -> int:
        """How many observations the predictor learned."""
        return self.state.predictor.n_learned

    @property
    def started(self) -> float:
        """When the service was created (Unix seconds)."""
        return self.state.started

    @property
    def state_dir(self) -> Path | None:
        """The state folder (snapshot and observation log), when one is set."""
        return self.state.state_dir

    @property
    def obs_log(self) -> wal.ObservationLog | None:
        """The observation log (write-ahead) of a service with a state folder."""
        return self.state.obs_log

    @property
    def snapshot_sequence(self) -> int:
        """The last observation log entry covered by the latest snapshot."""
        return self.state.snapshot_sequence

    @property
    def rate_limiter(self) -> RateLimiter | None:
        """The per-client rate limiter of observations (``None``: unlimited)."""
        return self.ingest.rate_limiter

    def add_ready_listener(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(ready)`` now and whenever readiness changes."""
        self.state.add_ready_listener(listener)

    def mark_ready(self) -> None:
        """Start answering."""
        self.state.set_ready(True)

    def status(self) -> Status:
        """Observations learned, rolling error, coverage and drift alarms, per device kind."""
        return self.state.status()

    # ------------------------------------------------------------------ start, stop, snapshots
    def open(self, state_dir: str | Path | None = None, warm_start: str | Path | None = None,
             *, ready: bool = True) -> str:
        """Restore the snapshot in ``state_dir``, else warm-start from a log; then become ready
        (``ready=False``: not yet; the caller calls :meth:`mark_ready` when its own start-up is done).

        Returns what was done, in words. Raises :class:`~predictor.snapshot.SnapshotError`
        for a snapshot that exists but cannot be used (nothing is loaded then).
        """
        return self.state.open(self.ingest, state_dir, warm_start, ready=ready)

    def close(self) -> None:
        """Stop answering, stop periodic snapshots and write a final one (when a state folder is set)."""
        self.state.close()

    def save_snapshot(self, path: str | Path | None = None) -> Path:
        """Write the learned state atomically (default: ``state_dir/service.snapshot``)."""
        return self.state.save_snapshot(path)

    def state_payload(self) -> bytes:
        """The learned state as snapshot payload bytes (equal bytes: equal state)."""
        return self.state.state_payload()

    def restore_snapshot(self, path: str | Path) -> dict:
        """Replace the learned state by the snapshot at ``path``, whole or not at all."""
        return self.state.restore_snapshot(path)

    # ------------------------------------------------------------------ learning
    def warm_start(self, path: str | Path, *, tolerant: bool = True) -> ReadReport:
        """Learn from a ``coloc/v1`` log, prequentially, as if it had been streamed."""
        return self.ingest.warm_start(path, tolerant=tolerant)

    def observe(self, record: Record, batch_id: str = "", *, client: str = "") -> float:
        """Learn from one observed record; returns the latency predicted for it before learning
        (see :meth:`Ingest.observe <predictor.service.ingest.Ingest.observe>`)."""
        return self.ingest.observe(record, batch_id, client=client)

    def report_observations(
        self, items: Iterable[tuple[Observed, str]], *, client: str = "", peer: str = ""
    ) -> ObservationReport:
        """Learn from a stream of ``(record, batch_id)``, reporting each rejected one
        (see :meth:`Ingest.report_observations <predictor.service.ingest.Ingest.report_observations>`)."""
        return self.ingest.report_observations(items, client=client, peer=peer)

    # ------------------------------------------------------------------ batches reported running
    def batch_start(
        self,
        device: str,
        device_kind: str,
        batch_id: str,
        batch: BatchSpec,
        elapsed_ms: float | None = None,
        *,
        memory: DeviceMemory | None = None,
        where: InputPlace | None = None,
        transfer_ms: float | None = None,
        client_time_s: float | None = None,
    ) -> tuple[float, int]:
        """A batch started on ``device``; returns its predicted latency and how many run there now.

        ``elapsed_ms``: how long it had already run when reported (its start, for the live view and
        the queue's wait and service times, is that long before the report); ``client_time_s``: when
        the client made the report, its wall clock (:meth:`event_age_ms`; the start is then
        ``elapsed_ms`` before that). ``memory``: the device's memory and the model's load time as the
        collector read them; ``where`` and ``transfer_ms``: where the batch's input was, how large, and
        the time it took to move it to the device (learned by its link class's correction).
        """
        self.state.require_ready()
        if elapsed_ms is not None:
            invalid_argument(lambda v, p: rules.non_negative_within(v, p, self.config.max_value), elapsed_ms,
                             "elapsed_ms")
        age_ms = self.event_age_ms(client_time_s)
        memory = memory or DeviceMemory()
        memory.validate(self.config.max_value)
        if where is not None:
            where.validate("", self.config.max_value)
        if transfer_ms is not None:
            invalid_argument(lambda v, p: rules.non_negative_within(v, p, self.config.max_value), transfer_ms,
                             "transfer_ms")
            if where is None or not where.given:
                raise InvalidArgument("input_bytes", "is required with transfer_ms (the size of the input moved)")
        if not batch_id:
            raise InvalidArgument("batch_id", "must be a non-empty string")
        if not rules.name_ok(batch_id):
            raise InvalidArgument("batch_id", f"longer than {rules.MAX_NAME_LENGTH} characters")
        # An unknown device is idle; a known one is predicted from its live view.
        source = CoRunnerSource.AUTO if self.live.knows(device) else CoRunnerSource.EXPLICIT
        query = Query(device, batch, device_kind=device_kind, co_runner_source=source)
        try:
            predicted = self.answers.predict(query, prefix="").latency_ms
        except FailedPrecondition:
            # Nothing learned to predict it from: it is taken to run until it goes stale (a co-runner
            # overlapping fully, the cautious assumption), and 0 is answered: no prediction.
            predicted = 0.0
        window = predicted or self.config.stale_after_s * 1000.0
        since_start_ms = (elapsed_ms or 0.0) + age_ms
        running = self.live.start(device, device_kind, batch_id, batch, window, since_start_ms)
        self.state.queues.started(device, batch_id, since_start_ms)
        book = self.state.memory
        if memory.resident_models:
            book.set_resident(device, memory.resident_models)
        book.mark_resident(device, batch.model)
        if memory.total_mb is not None or memory.used_mb is not None:
            book.device_memory(device, memory.total_mb, memory.used_mb)
        if memory.load_ms is not None:
            book.load_time(batch.model, device_kind or self.live.kind_of(device), memory.load_ms)
        if transfer_ms is not None and where is not None:
            self.state.transfers.observe(device, where, transfer_ms)
        return predicted, running

    def batch_end(self, device: str, batch_id: str, *, memory: DeviceMemory | None = None,
                  client_time_s: float | None = None) -> tuple[bool, int]:
        """A batch ended on ``device`` (or left its queue); returns whether it was running (or
        queued) and how many still run.

        ``memory``: the batch's peak memory and the device's memory in use after it; ``client_time_s``:
        when it ended, the client's wall clock (:meth:`event_age_ms`; default: when the report arrives).
        """
        self.state.require_ready()
        if not device:
            raise InvalidArgument("device", "must be a non-empty string")
        if not batch_id:
            raise InvalidArgument("batch_id", "must be a non-empty string")
        memory = memory or DeviceMemory()
        memory.validate(self.config.max_value)
        age_ms = self.event_age_ms(client_time_s)
        spec = next((r.batch for r, _ in self.live.running(device) if r.batch_id == batch_id), None)
        was_queued, _ = self.state.queues.ended(device, batch_id, age_ms)
        found, running = self.live.end(device, batch_id, required=not was_queued)
        if memory.used_mb is not None:
            self.state.memory.device_memory(device, used_mb=memory.used_mb)
        if memory.resident_models:
            self.state.memory.set_resident(device, memory.resident_models)
        if memory.peak_mb is not None and spec is not None:
            self.state.memory.footprint(spec.model, spec.batch_size, memory.peak_mb)
        return found or was_queued, running

    def batch_queued(self, device: str, device_kind: str, batch_id: str, batch: BatchSpec, *,
                     client_time_s: float | None = None) -> tuple[int, float, float]:
        """A batch joined ``device``'s queue; returns how many are queued there, its expected wait
        (the predicted latencies queued ahead) and its predicted latency on the device as it runs now.

        ``client_time_s``: when it joined, the client's wall clock (:meth:`event_age_ms`; default: when
        the report arrives)."""
        self.state.require_ready()
        age_ms = self.event_age_ms(client_time_s)
        if not device:
            raise InvalidArgument("device", "must be a non-empty string")
        if not rules.name_ok(device):
            raise InvalidArgument("device", f"longer than {rules.MAX_NAME_LENGTH} characters")
        if not batch_id:
            raise InvalidArgument("batch_id", "must be a non-empty string")
        if not rules.name_ok(batch_id):
            raise InvalidArgument("batch_id", f"longer than {rules.MAX_NAME_LENGTH} characters")
        source = CoRunnerSource.AUTO if self.live.knows(device) else CoRunnerSource.EXPLICIT
        query = Query(device, batch, device_kind=device_kind, co_runner_source=source)
        prediction = self.answers.predict(query, prefix="")
        self.live.touch(device, device_kind)
        queued, wait = self.state.queues.queued(device, batch_id, batch, prediction.latency_ms, age_ms)
        return queued, wait, prediction.latency_ms

    def event_age_ms(self, client_time_s: float | None) -> float:
        """How long ago, ms, an event the client stamped ``client_time_s`` happened (0: unstamped).

        Clock semantics: ``client_time_s`` is the client's wall clock (Unix seconds, UTC, e.g.
        NTP-disciplined) when the event happened; its age is the service's wall clock now less it,
        and the event is placed that long before now on the service's monotonic clock. A time up to
        ``max_clock_skew_ms`` ahead of the service's clock is taken as now; one further ahead or
        further behind is refused with :class:`InvalidArgument` naming ``client_time``.
        """
        if client_time_s is None:
            return 0.0
        age_ms = (self.wall() - client_time_s) * 1000.0
        bound = self.config.max_clock_skew_ms
        if not abs(age_ms) <= bound:  # NaN too
            way = "ahead of" if age_ms < 0 else "behind"
            raise InvalidArgument("client_time", f"is {abs(age_ms):.0f} ms {way} the service's clock (UTC), beyond "
                                  f"the {bound:g} ms allowed (max_clock_skew_ms): synchronise the client's "
                                  "clock, or leave client_time unset")
        return max(age_ms, 0.0)

    # ------------------------------------------------------------------ answering
    def predict(self, query: Query, confidence: float | None = None, *, prefix: str = "query.") -> Prediction:
        """Predicted latency and calibrated upper bound of a planned batch."""
        return self.answers.predict(query, confidence, prefix=prefix)

    def check_deadline(self, query: Query, deadline: Deadline, confidence: float | None = None) -> DeadlineAnswer:
        """Whether a planned batch finishes within ``deadline`` at ``confidence``."""
        return self.answers.check_deadline(query, deadline, confidence)

    def rank_placements(
        self,
        batch: BatchSpec,
        candidates: list[Candidate] | CandidateColumns,
        deadline: Deadline,
        confidence: float | None = None,
        solo_latency_ms: float | None = None,
        *,
        batch_id: str = "",
        learned_only: bool = False,
        where: InputPlace | None = None,
    ) -> Ranking:
        """Answers for one batch on many candidate devices, most slack first (see
        :meth:`Answering.rank_columns <predictor.service.answering.Answering.rank_columns>`)."""
        return self.answers.rank_placements(batch, candidates, deadline, confidence, solo_latency_ms,
                                            batch_id=batch_id, learned_only=learned_only, where=where)

    def rank_columns(
        self,
        batch: BatchSpec,
        candidates: CandidateColumns,
        deadline: Deadline,
        confidence: float | None = None,
        solo_latency_ms: float | None = None,
        *,
        batch_id: str = "",
        learned_only: bool = False,
        where: InputPlace | None = None,
    ) -> RankingColumns:
        """:meth:`rank_placements`, answered column-wise (what the RPC layer turns into its response)."""
        return self.answers.rank_columns(batch, candidates, deadline, confidence, solo_latency_ms,
                                         batch_id=batch_id, learned_only=learned_only, where=where)

    def plan_pipeline(
        self,
        stages: Sequence[PipelineStage],
        edges: Sequence[tuple[int, int]],
        candidates: Sequence[Candidate],
        deadline: Deadline,
        confidence: float | None = None,
        cost: PipelineCost = PipelineCost.BUSY_TIME,
        price_per_s: Sequence[float] = (),
    ) -> PipelinePlan:
        """A device and a latency budget per stage of a pipeline, at least cost, such that the composed
        end-to-end bound meets ``deadline`` (see :mod:`predictor.service.pipelines`)."""
        return self.pipelines.plan(stages, edges, candidates, deadline, confidence, cost, price_per_s)
