"""Domain requests and answers of the service, free of protobuf.

Field names follow the gRPC contract so that a field path in an error
(``query.co_runners[0].remaining_ms``) means the same thing on both sides.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from predictor.calibration.conformal import BoundSource
from predictor.records import rules
from predictor.records.record import BatchSpec, CoRunner
from predictor.service.errors import InvalidArgument
from predictor.service.live.queues import QueueWhatIf


class CoRunnerSource(enum.Enum):
    """Where a query's co-runners come from."""

    AUTO = "auto"  # the given ones if any, else the live view
    EXPLICIT = "explicit"  # exactly the given ones (none: the device is idle)
    LIVE_VIEW = "live_view"  # the live view; the device must be known


@dataclass(frozen=True, slots=True)
class PlannedCoRunner:
    """A co-runner of a planned batch: with an overlap, a remaining time, or neither (overlap 1)."""

    model: str
    batch_size: int
    attrs: Mapping[str, float] = field(default_factory=dict)
    overlap: float | None = None
    remaining_ms: float | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A device a batch could be placed on, with what runs there."""

    device: str
    device_kind: str = ""
    co_runners: tuple[PlannedCoRunner, ...] = ()
    co_runner_source: CoRunnerSource = CoRunnerSource.AUTO
    signals: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InputPlace:
    """Where a batch's input is and how large it is (``n_bytes`` ``None``: not said: no transfer)."""

    host: str = ""
    device: str = ""
    n_bytes: float | None = None

    def validate(self, prefix: str, limit: float) -> None:
        """Raise :class:`InvalidArgument` naming the first field (``{prefix}input_bytes``, as in the RPC)
        that breaks its rule: names bounded, the size a finite number >= 0 within ``limit``."""
        try:
            rules.name(self.host, f"{prefix}input_host", required=False)
            rules.name(self.device, f"{prefix}input_device", required=False)
            if self.n_bytes is not None:
                rules.input_bytes(self.n_bytes, f"{prefix}input_bytes")
        except rules.RecordError as exc:
            raise InvalidArgument(exc.field, exc.message) from None

    @property
    def given(self) -> bool:
        """Whether the input's size is given (a transfer is then counted)."""
        return self.n_bytes is not None


@dataclass(frozen=True, slots=True)
class Query:
    """A planned batch on one device."""

    device: str
    batch: BatchSpec
    device_kind: str = ""
    co_runners: tuple[PlannedCoRunner, ...] = ()
    co_runner_source: CoRunnerSource = CoRunnerSource.AUTO
    signals: Mapping[str, float] = field(default_factory=dict)
    solo_latency_ms: float | None = None
    batch_id: str = ""
    """Names the batch: its answer is remembered and calibrated on when its observation arrives."""
    learned_only: bool = False
    """Refuse (``FailedPrecondition``) rather than answer from a fallback for an unseen model or kind."""
    input: InputPlace | None = None
    """Where the batch's input is and how large it is: the answer adds its transfer to the device."""
    what_if: QueueWhatIf | None = None
    """The device's queue wait at these rates rather than the learned ones."""

    @classmethod
    def for_candidate(cls, batch: BatchSpec, candidate: Candidate, solo_latency_ms: float | None) -> Query:
        """The query of ``batch`` placed on one candidate device of a ranking."""
        return cls(
            device=candidate.device,
            batch=batch,
            device_kind=candidate.device_kind,
            co_runners=candidate.co_runners,
            co_runner_source=candidate.co_runner_source,
            signals=candidate.signals,
            solo_latency_ms=solo_latency_ms,
        )


@dataclass(frozen=True, slots=True)
class Deadline:
    """A deadline, relative (``ms`` from now) or absolute (``at``, Unix seconds); exactly one set."""

    ms: float | None = None
    at: float | None = None

    def relative_ms(
        self, field_path: str = "deadline", now: float | None = None, limit: float = rules.MAX_MAGNITUDE
    ) -> float:
        """Milliseconds left, validated (``now`` defaults to the wall clock): within ``limit``
        in magnitude, as every number of a query (:func:`predictor.records.rules.magnitude`)."""
        if (self.ms is None) == (self.at is None):
            raise InvalidArgument(field_path, "give exactly one of a relative deadline_ms or a deadline_time")
        if self.ms is not None:
            if not math.isfinite(self.ms) or self.ms <= 0:
                raise InvalidArgument(f"{field_path}_ms", f"must be finite and > 0, got {self.ms!r}")
            if not rules.magnitude_ok(self.ms, limit):
                raise InvalidArgument(f"{field_path}_ms", f"magnitude {self.ms:g} is beyond the limit of {limit:g}")
            return float(self.ms)
        assert self.at is not None
        if not math.isfinite(self.at):
            raise InvalidArgument(f"{field_path}_time", f"must be finite, got {self.at!r}")
        relative = (self.at - (time.time() if now is None else now)) * 1000.0
        if not rules.magnitude_ok(relative, limit):
            raise InvalidArgument(
                f"{field_path}_time", f"{relative:g} ms from now, beyond the limit of {limit:g} ms either way"
            )
        return relative


@dataclass(frozen=True, slots=True)
class Prediction:
    """Predicted latency of a planned batch, with its calibrated upper bound."""

    latency_ms: float
    solo_latency_ms: float
    slowdown: float
    upper_bound_ms: float
    confidence: float
    bound_source: BoundSource
    residuals: int
    predictor: str
    observations_learned: int
    co_runners: tuple[CoRunner, ...]
    device_kind: str
    fallback: bool = False
    """Whether the answer is a wide fallback (the model or the device kind was never seen)."""
    query_shape: str = ""
    """The shape of the query the bound was calibrated for (:mod:`predictor.calibration.shapes`)."""
    estimated: tuple[str, ...] = ()
    """Fields the service estimated because the query left them out (``signals.K``,
    ``co_runners[i].overlap``; see :mod:`predictor.service.estimates.filling`)."""
    queue_wait_ms: float = 0.0
    """Expected wait in the device's queue before the batch starts (inf: saturated)."""
    queue_wait_bound_ms: float = 0.0
    """The wait at the confidence (inf: saturated)."""
    queue_saturated: bool = False
    queue_wait_source: str = "none"
    """``none``, ``queue`` (the batches queued ahead) or ``rates`` (M/G/1 Pollaczek-Khinchine)."""
    queue_utilisation: float | None = None
    load_ms: float = 0.0
    """Time to load the model first (0: resident or unknown)."""
    transfer_ms: float = 0.0
    """Expected time to move the batch's input to the device (0: none given)."""
    transfer_bound_ms: float = 0.0
    """The transfer at the confidence."""
    transfer_link: str = ""
    """Link class of the transfer: ``device``, ``host``, ``rack``, ``remote`` ("": no input given)."""
    sequence: int = 0
    """The version the answer was computed from: the records the learner had taken in when it was
    published (:attr:`~predictor.service.published.ModelVersion.sequence`)."""

    @property
    def completion_ms(self) -> float:
        """Expected time from now to the batch's end: wait + load + transfer + latency."""
        return self.queue_wait_ms + self.load_ms + self.transfer_ms + self.latency_ms

    @property
    def completion_bound_ms(self) -> float:
        """Its bound at the confidence: wait bound + load + transfer bound + upper bound (what slack
        is counted from)."""
        return self.queue_wait_bound_ms + self.load_ms + self.transfer_bound_ms + self.upper_bound_ms


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """Memory read by a collector at a batch report (every field optional).

    ``total_mb`` and ``used_mb``: the device's capacity and use; ``load_ms`` (at a start): time
    spent loading the batch's model first; ``peak_mb`` (at an end): the batch's peak memory;
    ``resident_models``: the models loaded on the device now (empty: unchanged).
    """

    total_mb: float | None = None
    used_mb: float | None = None
    load_ms: float | None = None
    peak_mb: float | None = None
    resident_models: tuple[str, ...] = ()

    FIELDS = {"total_mb": "memory_total_mb", "used_mb": "memory_used_mb", "load_ms": "load_ms",
              "peak_mb": "peak_memory_mb"}

    def validate(self, limit: float) -> None:
        """Raise :class:`InvalidArgument` naming the first field (as in the RPC) that is not a finite
        number >= 0 within ``limit``."""
        for attr, path in self.FIELDS.items():
            value = getattr(self, attr)
            if value is not None:
                try:
                    rules.non_negative_within(value, path, limit)
                except rules.RecordError as exc:
                    raise InvalidArgument(exc.field, exc.message) from None
        if len(self.resident_models) > rules.MAX_NUMERIC_KEYS * 16:
            raise InvalidArgument("resident_models", f"more than {rules.MAX_NUMERIC_KEYS * 16} models")
        for i, model in enumerate(self.resident_models):
            if not (model and rules.name_ok(model)):
                raise InvalidArgument(f"resident_models[{i}]",
                                      f"must be a non-empty string of at most {rules.MAX_NAME_LENGTH} characters")


@dataclass(frozen=True, slots=True)
class DeadlineAnswer:
    """Whether a planned batch meets its deadline at a confidence."""

    feasible: bool
    slack_ms: float
    probability: float
    deadline_ms: float
    prediction: Prediction


@dataclass(frozen=True, slots=True)
class PlacementAnswer:
    """The answer for one candidate device of a ranking."""

    device: str
    rank: int
    feasible: bool
    slack_ms: float
    probability: float
    prediction: Prediction
    candidate_index: int
    infeasible_reason: str = ""
    """Why the device cannot take the batch whatever its slack (e.g. memory); "" when it can."""
    deciding_term: str = ""
    """``memory``, ``queue``, ``load``, ``transfer``, ``interference`` or ``solo`` ("" when no term was known)."""
    memory_needed_mb: float = 0.0
    memory_free_mb: float | None = None


@dataclass(frozen=True, slots=True)
class DelayDecision:
    """Delay scheduling: wait for the device holding the input, or take a remote one now
    (:mod:`predictor.service.estimates.delay`).

    ``choice``: ``local_now``, ``wait_local`` (wait up to ``delay_limit_ms`` for
    ``local_device``, then take ``remote_device``) or ``remote_now``; completions are expected
    times from now to the batch's end (NaN: no such device).
    """

    choice: str
    local_device: str
    remote_device: str
    local_wait_ms: float
    delay_limit_ms: float
    local_completion_ms: float
    remote_completion_ms: float
    remote_transfer_ms: float
    waits_observed: int
    reason: str


@dataclass(frozen=True, slots=True)
class Ranking:
    """Answers for every candidate, best (most slack) first."""

    placements: tuple[PlacementAnswer, ...]
    deadline_ms: float
    delay: DelayDecision | None = None
    """With an input given and a local device: wait for it, or go remote now."""


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why one message of an observation stream was rejected."""

    index: int
    field: str
    reason: str


MESSAGE_END = ("\0end of message", "")
"""An item of an observation stream that ends a message: the records since the previous one are
learned as one block now (:meth:`Ingest.report_observations
<predictor.service.ingest.Ingest.report_observations>`), not held for more to come."""


@dataclass
class ObservationReport:
    """What a stream of observations did."""

    accepted: int = 0
    rejected: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    observations_learned: int = 0
    outliers: int = 0  # of the rejected: refused by the outlier gate
    rate_limited: int = 0  # of the rejected: beyond the client's rate
    log_sequence: int = 0  # observation log position covering this stream (0: no log)
    duplicates: int = 0  # resent records already taken in: dropped (neither accepted nor rejected)


@dataclass(frozen=True, slots=True)
class KindStatus:
    """Learning and calibration state of one device kind."""

    device_kind: str
    observations: int
    rolling_mape: float
    coverage: float
    residuals: int
    drift_alarms: int


@dataclass(frozen=True, slots=True)
class DriftAlarm:
    """The error level of a device kind changed."""

    device_kind: str
    at_observation: int
    time: float  # Unix seconds
    rolling_mape: float


@dataclass(frozen=True, slots=True)
class ShapeStats:
    """Admission-time error and coverage of the answers of one slice.

    ``observations`` counts the answers scored; ``coverage`` and ``mape`` are ``None`` before any.
    """

    source: str
    query_shape: str
    device_kind: str
    model: str
    co_runners: int  # count bucket; -1: all counts
    observations: int
    coverage: float | None
    mape: float | None


@dataclass(frozen=True, slots=True)
class LogStatus:
    """The observation log (write-ahead) of a service with a state folder."""

    fsync: str
    last_sequence: int  # last entry appended
    synced_sequence: int  # last entry known fsynced
    snapshot_sequence: int  # last entry covered by the latest snapshot
    replayed: int  # entries replayed at start
    replay_skipped: int  # bad lines skipped at start (torn or corrupt)


@dataclass(frozen=True, slots=True)
class Status:
    """What ``GetStatus`` reports."""

    ready: bool
    predictor: str
    observations_learned: int
    observations_rejected: int
    rolling_mape: float
    coverage: float
    coverage_confidence: float
    device_kinds: tuple[KindStatus, ...]
    drift_alarms: tuple[DriftAlarm, ...]
    devices: int
    batches_running: int
    uptime_s: float
    last_snapshot_time: float | None  # Unix seconds
    observations_outliers: int = 0
    observations_rate_limited: int = 0
    log: LogStatus | None = None
    admission: tuple[ShapeStats, ...] = ()
    """Admission-time error and coverage per source, query shape, device kind, model and count."""
    admission_coverage: float | None = None
    """Coverage at ``coverage_confidence`` of the replayed admission-time answers (``None``: none yet)."""
    admission_mape: float | None = None
    """Rolling MAPE (%) of the replayed admission-time answers (``None``: none yet)."""
    answers_linked: int = 0
    """Observations matched, by batch id, to the answer given about them."""
    answers_remembered: int = 0
    """Answers kept, by batch id, until their observation arrives."""
    observations_duplicates: int = 0  # resent records dropped, in total
    live_restored: int = 0  # running batches restored into the live view at start-up
    live_expired: int = 0  # batches of the live view's side log dropped at start-up (past the horizon)
