"""Protobuf messages to domain objects and back; no logic here.

Queries and candidates are converted as given: the service validates them and
names offending fields with the same paths the messages use
(``query.batch.batch_size``). An observed ``Record`` message is converted to a
:class:`~predictor.records.record.Record` by the ``coloc/v1`` rules of
:mod:`predictor.records.rules`, as a log line is; one that breaks them becomes the
:class:`~predictor.records.rules.RecordError` saying why, for the service to report.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from predictor.calibration.conformal import BoundSource
from predictor.records import rules
from predictor.records.record import SCHEMA, BatchSpec, CoRunner, Record, RecordError, parse_record
from predictor.rpc.protos import pb2
from predictor.service.durability.dedup import DedupKey
from predictor.service.errors import InvalidArgument, ServiceError
from predictor.service.estimates.placements import CandidateColumns, RankingColumns
from predictor.service.live.queues import QueueWhatIf
from predictor.service.pipeline_types import PipelineCost, PipelinePlan, PipelineStage, StagePlan
from predictor.service.types import (
    MESSAGE_END,
    Candidate,
    CoRunnerSource,
    Deadline,
    DeadlineAnswer,
    DelayDecision,
    DeviceMemory,
    DriftAlarm,
    InputPlace,
    KindStatus,
    LogStatus,
    ObservationReport,
    PlacementAnswer,
    PlannedCoRunner,
    Prediction,
    Query,
    Ranking,
    Rejection,
    ShapeStats,
    Status,
)

_SOURCES = {0: CoRunnerSource.AUTO, 1: CoRunnerSource.EXPLICIT, 2: CoRunnerSource.LIVE_VIEW}
_SOURCES_PB = {v: k for k, v in _SOURCES.items()}
_BOUNDS_PB = {BoundSource.DEVICE_KIND: 1, BoundSource.POOLED: 2, BoundSource.FALLBACK: 3}
_BOUNDS = {v: k for k, v in _BOUNDS_PB.items()}
_WAIT_SOURCES_PB = {"none": 0, "queue": 1, "rates": 2}
_WAIT_SOURCES = {v: k for k, v in _WAIT_SOURCES_PB.items()}
_LINKS_PB = {"": 0, "device": 1, "host": 2, "rack": 3, "remote": 4}
_LINKS = {v: k for k, v in _LINKS_PB.items()}
_COSTS = {0: PipelineCost.BUSY_TIME, 1: PipelineCost.BUSY_TIME, 2: PipelineCost.PRICE}
_COSTS_PB = {PipelineCost.BUSY_TIME: 1, PipelineCost.PRICE: 2}


class NonFiniteAnswer(ServiceError):
    """An answer held NaN or an infinity: the last guard refuses to send it (``INTERNAL``).

    The service's rules keep every answer finite; this is raised only if one slipped through.
    """


def require_finite(what: str, *values: float) -> None:
    """Raise :class:`NonFiniteAnswer` unless every value is finite (NaN or +-inf never leaves in an OK answer)."""
    if not all(map(math.isfinite, values)):
        raise NonFiniteAnswer(f"the service computed a non-finite {what} ({values!r}); not answered")


def require_finite_arrays(what: str, *arrays: np.ndarray) -> None:
    """:func:`require_finite` of every element of the arrays."""
    if not np.isfinite(np.concatenate(arrays, axis=None)).all():  # one pass over all, flattened
        raise NonFiniteAnswer(f"the service computed a non-finite {what}; not answered")


def _optional(message: Any, name: str) -> float | None:
    return getattr(message, name) if message.HasField(name) else None


def _wait_field(message: Any, name: str) -> float:
    """A ``Prediction`` wait field: infinite when left unset for a saturated queue, else its value."""
    if not message.HasField(name) and message.queue_saturated:
        return math.inf
    return getattr(message, name)


# --------------------------------------------------------------------- requests -> domain


def map_from_pb(field: Any) -> dict[str, float]:
    """A protobuf map field as a dict, its keys sorted: the order a map's entries come in depends on
    the process (its string hashing), and the order of a record's names sets the order of the
    model's sums, so every map from the wire takes one order (``docs/design.md``, One truth)."""
    return dict(sorted(field.items()))


def batch_from_pb(message: Any) -> BatchSpec:
    """A ``Batch`` message as a :class:`BatchSpec`."""
    return BatchSpec(message.model, message.batch_size, map_from_pb(message.attrs))


def co_runner_from_pb(message: Any) -> PlannedCoRunner:
    """A ``CoRunner`` message as a :class:`PlannedCoRunner` (unset ``overlap``/``remaining_ms``: ``None``)."""
    return PlannedCoRunner(
        message.model,
        message.batch_size,
        map_from_pb(message.attrs),
        overlap=_optional(message, "overlap"),
        remaining_ms=_optional(message, "remaining_ms"),
    )


def co_runner_source_from_pb(value: int) -> CoRunnerSource:
    """A ``CoRunnerSource`` enum value as :class:`CoRunnerSource` (unknown values: ``AUTO``)."""
    return _SOURCES.get(value, CoRunnerSource.AUTO)


def query_from_pb(message: Any) -> Query:
    """A ``BatchQuery`` as a :class:`Query`."""
    return Query(
        device=message.device,
        batch=batch_from_pb(message.batch),
        device_kind=message.device_kind,
        co_runners=tuple(co_runner_from_pb(c) for c in message.co_runners),
        co_runner_source=co_runner_source_from_pb(message.co_runner_source),
        signals=map_from_pb(message.signals),
        solo_latency_ms=_optional(message, "solo_latency_ms"),
        batch_id=message.batch_id,
        learned_only=message.learned_only,
        input=input_from_pb(message),
        what_if=what_if_from_pb(message),
    )


def what_if_from_pb(message: Any) -> QueueWhatIf | None:
    """The what-if fields of a ``BatchQuery`` (``None``: none set)."""
    values = [_optional(message, name) for name in ("arrival_rate_per_s", "service_mean_ms", "service_sd_ms")]
    return None if all(v is None for v in values) else QueueWhatIf(*values)


def input_from_pb(message: Any) -> InputPlace | None:
    """The ``input_host``, ``input_device`` and ``input_bytes`` of a message (``None``: none set)."""
    n_bytes = _optional(message, "input_bytes")
    if n_bytes is None and not message.input_host and not message.input_device:
        return None
    return InputPlace(message.input_host, message.input_device, n_bytes)


def set_input(message: Any, where: InputPlace | None) -> None:
    """Set the input fields of a message (the client side)."""
    if where is None:
        return
    message.input_host = where.host
    message.input_device = where.device
    if where.n_bytes is not None:
        message.input_bytes = where.n_bytes


def candidate_from_pb(message: Any) -> Candidate:
    """A ``PlacementCandidate`` message as a :class:`Candidate`."""
    return Candidate(
        device=message.device,
        device_kind=message.device_kind,
        co_runners=tuple(co_runner_from_pb(c) for c in message.co_runners),
        co_runner_source=co_runner_source_from_pb(message.co_runner_source),
        signals=map_from_pb(message.signals),
    )


def stage_from_pb(message: Any) -> PipelineStage:
    """A ``PipelineStage`` message as a :class:`PipelineStage`."""
    return PipelineStage(
        batch=batch_from_pb(message.batch),
        name=message.name,
        solo_latency_ms=_optional(message, "solo_latency_ms"),
        candidates=tuple(message.candidates),
    )


def edges_from_pb(messages: Iterable[Any]) -> list[tuple[int, int]]:
    """``PipelineEdge`` messages as ``(from_stage, to_stage)`` pairs."""
    return [(e.from_stage, e.to_stage) for e in messages]


def pipeline_cost_from_pb(value: int) -> PipelineCost:
    """A ``PipelineCost`` enum value (unknown values: an :class:`InvalidArgument` naming ``cost``)."""
    if value not in _COSTS:
        raise InvalidArgument("cost", f"unknown cost {value}")
    return _COSTS[value]


def deadline_from_pb(message: Any) -> Deadline:
    """The ``deadline`` oneof of a request (neither set: an empty deadline, rejected later)."""
    which = message.WhichOneof("deadline")
    if which == "deadline_ms":
        return Deadline(ms=message.deadline_ms)
    if which == "deadline_time":
        stamp = message.deadline_time
        try:
            return Deadline(at=rules.timestamp(stamp.seconds, stamp.nanos, "deadline_time", time.time()))
        except RecordError as exc:
            raise InvalidArgument(exc.field, exc.message) from None
    return Deadline()


def client_time_from_pb(message: Any) -> float | None:
    """A report's ``client_time`` as Unix seconds (``None`` when unset); ``InvalidArgument`` naming
    ``client_time.nanos`` or ``client_time.seconds`` when malformed (the skew bound is the service's)."""
    if not message.HasField("client_time"):
        return None
    stamp = message.client_time
    try:
        return rules.timestamp(stamp.seconds, stamp.nanos, "client_time", time.time())
    except RecordError as exc:
        raise InvalidArgument(exc.field, exc.message) from None


def confidence_from_pb(value: float) -> float | None:
    """0 (unset) means the service's default."""
    return None if value == 0 else value


def _record_as_given(message: Any) -> Record | None:
    """The ``Record`` message as a :class:`Record` when it is valid ``coloc/v1`` as it stands;
    ``None`` otherwise (then :func:`record_from_pb` validates it field by field and says why).

    Builds the record straight from the message, which costs a third of going through
    :func:`~predictor.records.record.parse_record`; the checks are the same rules
    (:mod:`predictor.records.rules` predicates on the typed fields).
    """
    if (message.schema and message.schema != SCHEMA) or not message.HasField("latency_ms"):
        return None
    latency = message.latency_ms
    solo = message.solo_latency_ms if message.HasField("solo_latency_ms") else None
    start = message.start_s if message.HasField("start_s") else None
    if not rules.positive_ok(latency) or (solo is not None and not rules.positive_ok(solo)):
        return None
    if start is not None and not rules.finite_ok(start):
        return None
    device, kind, source = message.device, message.device_kind, message.source
    if not (rules.name_ok(device) and rules.name_ok(kind, required=False) and rules.name_ok(source, required=False)):
        return None
    batch = message.batch
    attrs = map_from_pb(batch.attrs)
    if not (rules.name_ok(batch.model) and rules.batch_size_ok(batch.batch_size) and rules.numbers_ok(attrs)):
        return None
    signals = map_from_pb(message.signals)
    if not rules.numbers_ok(signals) or not rules.co_runner_count_ok(len(message.co_runners)):
        return None
    runners = []
    for runner in message.co_runners:
        runner_attrs = map_from_pb(runner.attrs)
        if runner.HasField("remaining_ms") or not (
            rules.name_ok(runner.model) and rules.batch_size_ok(runner.batch_size) and rules.numbers_ok(runner_attrs)
        ):
            return None
        overlap = runner.overlap if runner.HasField("overlap") else 1.0
        if not rules.overlap_ok(overlap):
            return None
        runners.append(CoRunner(runner.model, runner.batch_size, runner_attrs, overlap))
    return Record(
        device=device,
        batch=BatchSpec(batch.model, batch.batch_size, attrs),
        latency_ms=latency,
        device_kind=kind,
        start_s=start,
        solo_latency_ms=solo,
        co_runners=tuple(runners),
        signals=signals,
        source=source,
    )


def record_from_pb(message: Any) -> Record:
    """Validate an observed ``Record`` message as ``coloc/v1``; raises :class:`RecordError`."""
    record = _record_as_given(message)
    if record is not None:
        return record
    runners = []
    for i, runner in enumerate(message.co_runners):
        if runner.HasField("remaining_ms"):
            raise RecordError(f"co_runners[{i}].remaining_ms", "not allowed in an observation (give overlap)")
        runners.append(
            {
                "model": runner.model,
                "batch_size": runner.batch_size,
                "attrs": map_from_pb(runner.attrs),
                "overlap": _optional(runner, "overlap"),
            }
        )
    obj = {
        "schema": message.schema or SCHEMA,
        "device": message.device,
        "device_kind": message.device_kind or None,
        "batch": {
            "model": message.batch.model,
            "batch_size": message.batch.batch_size,
            "attrs": map_from_pb(message.batch.attrs),
        },
        "start_s": _optional(message, "start_s"),
        "latency_ms": _optional(message, "latency_ms"),
        "solo_latency_ms": _optional(message, "solo_latency_ms"),
        "co_runners": runners,
        "signals": map_from_pb(message.signals),
        "source": message.source or None,
    }
    return parse_record(obj)


def observed_from_pb(message: Any) -> Record | RecordError:
    """An observed ``Record`` message as a :class:`Record`, or the :class:`RecordError` saying why
    it is not ``coloc/v1`` (an item of the stream the service reports as rejected)."""
    try:
        return record_from_pb(message)
    except RecordError as exc:
        return exc


def observations_from_pb(messages: Iterable[Any]) -> Iterator[tuple[Record | RecordError, str]]:
    """The ``(record, batch_id)`` items of a ``ReportObservations`` stream, in order: each message's
    ``record`` (when set, or when the message has no ``records``), then its ``records``. Each record
    is converted as its item is drawn (:func:`observed_from_pb`): one that breaks ``coloc/v1``
    comes as its :class:`RecordError`, for the service to report at its index."""
    for message in messages:
        batch = message.records
        if not batch or message.HasField("record"):
            yield observed_from_pb(message.record), message.batch_id
        if batch:
            ids = message.batch_ids
            for i, record in enumerate(batch):
                yield observed_from_pb(record), ids[i] if i < len(ids) else ""


def keyed_observation_messages_from_pb(messages: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """:func:`observations_from_pb` with how the producer named each record (``producer_id``,
    ``sequence`` numbering the message's records consecutively, ``record_id``/``record_ids``):
    ``(record, batch_id, key)``, the key ``None`` for a record not named; each message's records
    followed by :data:`~predictor.service.types.MESSAGE_END` (the service learns a message as
    one block)."""

    for message in messages:
        producer, sequence = message.producer_id, message.sequence
        batch = message.records
        ids = message.record_ids
        named = bool(producer or sequence or ids or message.record_id)
        position = 0
        if not batch or message.HasField("record"):
            key = DedupKey(producer, sequence, message.record_id) if named else None
            yield observed_from_pb(message.record), message.batch_id, key
            position = 1
        if batch:
            batch_ids = message.batch_ids
            for i, record in enumerate(batch):
                key = (
                    DedupKey(producer, sequence + position + i if sequence else 0, ids[i] if i < len(ids) else "")
                    if named
                    else None
                )
                yield observed_from_pb(record), batch_ids[i] if i < len(batch_ids) else "", key
        yield MESSAGE_END


# --------------------------------------------------------------------- domain -> messages


def _set_time(field: Any, unix_s: float) -> None:
    seconds = math.floor(unix_s)
    field.seconds = int(seconds)
    field.nanos = int(round((unix_s - seconds) * 1e9)) % 1_000_000_000


def co_runner_to_pb(runner: CoRunner | PlannedCoRunner) -> Any:
    """A co-runner as a ``CoRunner`` message (``overlap`` and ``remaining_ms`` set only when given)."""
    message = pb2().CoRunner(model=runner.model, batch_size=runner.batch_size, attrs=dict(runner.attrs))
    if runner.overlap is not None:
        message.overlap = runner.overlap
    remaining = getattr(runner, "remaining_ms", None)
    if remaining is not None:
        message.remaining_ms = remaining
    return message


def prediction_to_pb(prediction: Prediction) -> Any:
    """A :class:`Prediction` as a ``Prediction`` message (:class:`NonFiniteAnswer` if a number is not finite)."""
    require_finite(
        "prediction", prediction.latency_ms, prediction.solo_latency_ms, prediction.slowdown,
        prediction.upper_bound_ms, prediction.confidence,
        *(c.overlap for c in prediction.co_runners if c.overlap is not None),
    )
    return pb2().Prediction(
        latency_ms=prediction.latency_ms,
        solo_latency_ms=prediction.solo_latency_ms,
        slowdown=prediction.slowdown,
        upper_bound_ms=prediction.upper_bound_ms,
        confidence=prediction.confidence,
        bound_source=_BOUNDS_PB[prediction.bound_source],
        residuals=prediction.residuals,
        predictor=prediction.predictor,
        observations_learned=prediction.observations_learned,
        sequence=prediction.sequence,
        co_runners=[co_runner_to_pb(c) for c in prediction.co_runners],
        device_kind=prediction.device_kind,
        fallback=prediction.fallback,
        query_shape=prediction.query_shape,
        estimated=list(prediction.estimated),
        **queue_fields_to_pb(prediction),
    )


def answer_row_to_pb(answer: RankingColumns, message: Any) -> None:
    """Row 0 of a one-row answer (:meth:`Answering.predict_columns
    <predictor.service.answering.Answering.predict_columns>`) written into the ``Prediction`` message
    ``message``: the message :func:`prediction_to_pb` makes of ``answer.prediction(0)``, without the
    :class:`Prediction` and its co-runners in between (:class:`NonFiniteAnswer` if a number is not finite)."""
    if answer.terms is not None:  # queue, load or transfer fields: as a Prediction
        message.CopyFrom(prediction_to_pb(answer.prediction(0)))
        return
    rows = answer.rows
    latency, solo, upper = float(answer.latency_ms[0]), float(answer.solo_latency_ms[0]), float(answer.upper_bound_ms[0])
    slowdown = latency / solo
    overlaps = rows.overlaps.tolist()
    require_finite("prediction", latency, solo, slowdown, upper, answer.confidence, *overlaps)
    kind = rows.device_kinds[0]
    bound = answer.bounds[kind] if answer.row_bounds is None else answer.row_bounds[0]
    message.latency_ms = latency
    message.solo_latency_ms = solo
    message.slowdown = slowdown
    message.upper_bound_ms = upper
    message.confidence = answer.confidence
    message.bound_source = _BOUNDS_PB[bound.source]
    message.residuals = bound.n
    message.predictor = answer.predictor
    message.observations_learned = answer.observations_learned
    message.sequence = answer.sequence
    add = message.co_runners.add
    for model, size, attrs, overlap in zip(rows.models, rows.batch_sizes, rows.attrs, overlaps, strict=True):
        add(model=model, batch_size=size, attrs=dict(attrs), overlap=overlap)
    message.device_kind = kind
    message.fallback = bool(answer.fallback[0]) if answer.fallback is not None else False
    message.query_shape = answer.shapes[0] if answer.shapes is not None else ""
    if answer.estimated is not None:
        message.estimated.extend(answer.estimated[0])


_WAIT_FIELDS = ("queue_wait_ms", "queue_wait_bound_ms", "completion_ms", "completion_bound_ms")


def queue_fields_to_pb(prediction: Prediction) -> dict[str, Any]:
    """The queue, load and transfer fields of a ``Prediction`` message ({} when there is no term)."""
    if (prediction.queue_wait_source == "none" and not prediction.load_ms and not prediction.queue_saturated
            and not prediction.transfer_link):
        return {}
    fields: dict[str, Any] = {
        "queue_saturated": prediction.queue_saturated,
        "queue_wait_source": _WAIT_SOURCES_PB[prediction.queue_wait_source],
        "load_ms": prediction.load_ms,
    }
    for name in _WAIT_FIELDS:  # unset when saturated: no answer carries an infinity
        value = getattr(prediction, name)
        if math.isfinite(value):
            fields[name] = value
    if prediction.queue_utilisation is not None:
        fields["queue_utilisation"] = prediction.queue_utilisation
    if prediction.transfer_link:
        require_finite("transfer", prediction.transfer_ms, prediction.transfer_bound_ms)
        fields["transfer_ms"] = prediction.transfer_ms
        fields["transfer_bound_ms"] = prediction.transfer_bound_ms
        fields["transfer_link"] = _LINKS_PB[prediction.transfer_link]
    return fields


def delay_to_pb(delay: DelayDecision) -> Any:
    """A :class:`DelayDecision` as a ``DelayDecision`` message (non-finite times left unset)."""
    require_finite("delay decision", delay.delay_limit_ms, delay.remote_transfer_ms)
    message = pb2().DelayDecision(
        choice=delay.choice, local_device=delay.local_device, remote_device=delay.remote_device,
        delay_limit_ms=delay.delay_limit_ms, remote_transfer_ms=delay.remote_transfer_ms,
        waits_observed=delay.waits_observed, reason=delay.reason,
    )
    for name in ("local_wait_ms", "local_completion_ms", "remote_completion_ms"):
        value = getattr(delay, name)
        if math.isfinite(value):
            setattr(message, name, value)
    return message


def delay_from_pb(message: Any) -> DelayDecision | None:
    """A ``DelayDecision`` message as a :class:`DelayDecision` (``None``: unset; unset times: inf or NaN)."""
    if not message.choice:
        return None
    wait = message.local_wait_ms if message.HasField("local_wait_ms") else math.inf
    return DelayDecision(
        message.choice, message.local_device, message.remote_device, wait, message.delay_limit_ms,
        message.local_completion_ms if message.HasField("local_completion_ms") else math.nan,
        message.remote_completion_ms if message.HasField("remote_completion_ms") else math.nan,
        message.remote_transfer_ms, message.waits_observed, message.reason,
    )


def placement_fields_to_pb(placement: PlacementAnswer) -> dict[str, Any]:
    """The memory fields and deciding term of a ``Placement`` message."""
    fields: dict[str, Any] = {
        "infeasible_reason": placement.infeasible_reason,
        "deciding_term": placement.deciding_term,
        "memory_needed_mb": placement.memory_needed_mb,
    }
    if placement.memory_free_mb is not None:
        fields["memory_free_mb"] = placement.memory_free_mb
    return fields


def start_transfer_from_pb(message: Any) -> tuple[InputPlace | None, float | None]:
    """The input and measured transfer of a ``ReportBatchStartRequest``."""
    return input_from_pb(message), _optional(message, "transfer_ms")


def start_memory_from_pb(message: Any) -> DeviceMemory:
    """The memory fields of a ``ReportBatchStartRequest``."""
    return DeviceMemory(total_mb=_optional(message, "memory_total_mb"), used_mb=_optional(message, "memory_used_mb"),
                        load_ms=_optional(message, "load_ms"), resident_models=tuple(message.resident_models))


def end_memory_from_pb(message: Any) -> DeviceMemory:
    """The memory fields of a ``ReportBatchEndRequest``."""
    return DeviceMemory(used_mb=_optional(message, "memory_used_mb"), peak_mb=_optional(message, "peak_memory_mb"),
                        resident_models=tuple(message.resident_models))


def deadline_answer_to_pb(answer: DeadlineAnswer) -> Any:
    """A :class:`DeadlineAnswer` as a ``CheckDeadlineResponse`` (:class:`NonFiniteAnswer` if a number is not finite)."""
    require_finite("deadline answer", answer.slack_ms, answer.probability, answer.deadline_ms)
    return pb2().CheckDeadlineResponse(
        feasible=answer.feasible,
        slack_ms=answer.slack_ms,
        probability=answer.probability,
        deadline_ms=answer.deadline_ms,
        prediction=prediction_to_pb(answer.prediction),
    )


def ranking_to_pb(ranking: Ranking) -> Any:
    """A :class:`Ranking` as a ``RankPlacementsResponse``, placements in rank order."""
    require_finite("ranking", ranking.deadline_ms, *(v for p in ranking.placements for v in (p.slack_ms, p.probability)))
    messages = pb2()
    response = messages.RankPlacementsResponse(
        placements=[
            messages.Placement(
                device=p.device,
                rank=p.rank,
                feasible=p.feasible,
                slack_ms=p.slack_ms,
                probability=p.probability,
                prediction=prediction_to_pb(p.prediction),
                candidate_index=p.candidate_index,
                **placement_fields_to_pb(p),
            )
            for p in ranking.placements
        ],
        deadline_ms=ranking.deadline_ms,
    )
    if ranking.delay is not None:
        response.delay.CopyFrom(delay_to_pb(ranking.delay))
    return response


def pipeline_plan_to_pb(answer: PipelinePlan) -> Any:
    """A :class:`PipelinePlan` as a ``PlanPipelineResponse`` (:class:`NonFiniteAnswer` if a number is not finite)."""
    require_finite(
        "pipeline plan", answer.composed_bound_ms, answer.probability, answer.expected_ms, answer.cost,
        answer.deadline_ms, answer.confidence, answer.sum_of_stage_bounds_ms,
        *(v for s in answer.stages for v in (s.budget_ms, s.expected_ms, s.upper_bound_ms, s.cost,
                                              s.expected_start_ms)),
    )
    messages = pb2()
    return messages.PlanPipelineResponse(
        feasible=answer.feasible,
        composed_bound_ms=answer.composed_bound_ms,
        probability=answer.probability,
        expected_ms=answer.expected_ms,
        cost=answer.cost,
        stages=[
            messages.StagePlan(
                stage_index=s.stage_index,
                name=s.name,
                device=s.device,
                candidate_index=s.candidate_index,
                budget_ms=s.budget_ms,
                expected_ms=s.expected_ms,
                upper_bound_ms=s.upper_bound_ms,
                cost=s.cost,
                prediction=prediction_to_pb(s.prediction),
                expected_start_ms=s.expected_start_ms,
            )
            for s in answer.stages
        ],
        deadline_ms=answer.deadline_ms,
        confidence=answer.confidence,
        critical_path=list(answer.critical_path),
        sum_of_stage_bounds_ms=answer.sum_of_stage_bounds_ms,
        search=answer.search,
        optimal=answer.optimal,
        plans_evaluated=answer.plans_evaluated,
    )


def observation_report_to_pb(report: ObservationReport) -> Any:
    """An :class:`ObservationReport` as a ``ReportObservationsResponse``."""
    messages = pb2()
    return messages.ReportObservationsResponse(
        accepted=report.accepted,
        rejected=report.rejected,
        rejections=[
            messages.Rejection(index=r.index, field=r.field, reason=r.reason) for r in report.rejections
        ],
        observations_learned=report.observations_learned,
        outliers=report.outliers,
        rate_limited=report.rate_limited,
        log_sequence=report.log_sequence,
        duplicates=report.duplicates,
    )


def _finite(value: float | None) -> float | None:
    """A statistic for an ``optional double``: ``None`` (unset) for none or NaN, never NaN on the wire."""
    return None if value is None or math.isnan(value) else value


def status_to_pb(status: Status) -> Any:
    """A :class:`Status` as a ``GetStatusResponse``."""
    messages = pb2()
    response = messages.GetStatusResponse(
        ready=status.ready,
        predictor=status.predictor,
        observations_learned=status.observations_learned,
        observations_rejected=status.observations_rejected,
        rolling_mape=_finite(status.rolling_mape),
        coverage=_finite(status.coverage),
        coverage_confidence=status.coverage_confidence,
        device_kinds=[
            messages.DeviceKindStatus(
                device_kind=k.device_kind,
                observations=k.observations,
                rolling_mape=_finite(k.rolling_mape),
                coverage=_finite(k.coverage),
                residuals=k.residuals,
                drift_alarms=k.drift_alarms,
            )
            for k in status.device_kinds
        ],
        admission=[
            messages.AdmissionStats(
                source=a.source,
                query_shape=a.query_shape,
                device_kind=a.device_kind,
                model=a.model,
                co_runners=a.co_runners,
                observations=a.observations,
                coverage=_finite(a.coverage),
                mape=_finite(a.mape),
            )
            for a in status.admission
        ],
        admission_coverage=_finite(status.admission_coverage),
        admission_mape=_finite(status.admission_mape),
        answers_linked=status.answers_linked,
        answers_remembered=status.answers_remembered,
        devices=status.devices,
        batches_running=status.batches_running,
        uptime_s=status.uptime_s,
        observations_outliers=status.observations_outliers,
        observations_rate_limited=status.observations_rate_limited,
        observations_duplicates=status.observations_duplicates,
        live_restored=status.live_restored,
        live_expired=status.live_expired,
    )
    if status.log is not None:
        response.log.CopyFrom(
            messages.ObservationLogStatus(
                fsync=status.log.fsync,
                last_sequence=status.log.last_sequence,
                synced_sequence=status.log.synced_sequence,
                snapshot_sequence=status.log.snapshot_sequence,
                replayed=status.log.replayed,
                replay_skipped=status.log.replay_skipped,
            )
        )
    for alarm in status.drift_alarms:
        message = response.drift_alarms.add(
            device_kind=alarm.device_kind,
            at_observation=alarm.at_observation,
            rolling_mape=alarm.rolling_mape,
        )
        _set_time(message.time, alarm.time)
    if status.last_snapshot_time is not None:
        _set_time(response.last_snapshot_time, status.last_snapshot_time)
    return response


# --------------------------------------------------------------------- domain -> requests (client side)


def batch_to_pb(batch: BatchSpec) -> Any:
    """A :class:`BatchSpec` as a ``Batch`` message."""
    return pb2().Batch(model=batch.model, batch_size=batch.batch_size, attrs=dict(batch.attrs))


def query_to_pb(query: Query) -> Any:
    """A :class:`Query` as a ``BatchQuery`` message (the client side)."""
    message = pb2().BatchQuery(
        device=query.device,
        device_kind=query.device_kind,
        batch=batch_to_pb(query.batch),
        co_runners=[co_runner_to_pb(c) for c in query.co_runners],
        co_runner_source=_SOURCES_PB[query.co_runner_source],
        signals=dict(query.signals),
        batch_id=query.batch_id,
        learned_only=query.learned_only,
    )
    if query.solo_latency_ms is not None:
        message.solo_latency_ms = query.solo_latency_ms
    set_input(message, query.input)
    if query.what_if is not None:
        for name in ("arrival_rate_per_s", "service_mean_ms", "service_sd_ms"):
            value = getattr(query.what_if, name)
            if value is not None:
                setattr(message, name, value)
    return message


def candidate_to_pb(candidate: Candidate) -> Any:
    """A :class:`Candidate` as a ``PlacementCandidate`` message (the client side)."""
    return pb2().PlacementCandidate(
        device=candidate.device,
        device_kind=candidate.device_kind,
        co_runners=[co_runner_to_pb(c) for c in candidate.co_runners],
        co_runner_source=_SOURCES_PB[candidate.co_runner_source],
        signals=dict(candidate.signals),
    )


def stage_to_pb(stage: PipelineStage) -> Any:
    """A :class:`PipelineStage` as a ``PipelineStage`` message (the client side)."""
    message = pb2().PipelineStage(name=stage.name, batch=batch_to_pb(stage.batch), candidates=list(stage.candidates))
    if stage.solo_latency_ms is not None:
        message.solo_latency_ms = stage.solo_latency_ms
    return message


def pipeline_cost_to_pb(cost: PipelineCost) -> int:
    """A :class:`PipelineCost` as its enum value."""
    return _COSTS_PB[cost]


def set_deadline(message: Any, deadline_ms: float | None, deadline_time: float | None) -> None:
    """Set a request's relative (``deadline_ms``) or absolute (``deadline_time``, Unix s) deadline."""
    if deadline_ms is not None:
        message.deadline_ms = deadline_ms
    if deadline_time is not None:
        _set_time(message.deadline_time, deadline_time)


def record_to_pb(record: Record) -> Any:
    """A :class:`Record` as a ``Record`` message (the client side of ``ReportObservations``)."""
    messages = pb2()
    message = messages.Record(
        schema=SCHEMA,
        device=record.device,
        device_kind=record.device_kind,
        batch=batch_to_pb(record.batch),
        co_runners=[co_runner_to_pb(c) for c in record.co_runners],
        signals=dict(record.signals),
        source=record.source,
    )
    for name in ("start_s", "latency_ms", "solo_latency_ms"):
        value = getattr(record, name)
        if value is not None:
            setattr(message, name, value)
    return message


def _matrix(maps: list[Mapping[str, float]]) -> tuple[list[str], list[float]]:
    """The keys of ``maps`` in order of first use, and each map's values by them, row-major (NaN: absent)."""
    keys = list(dict.fromkeys(itertools.chain.from_iterable(maps)))
    return keys, [m.get(k, float("nan")) for m in maps for k in keys]


def packed_candidates_pb(columns: CandidateColumns) -> Any | None:
    """Candidate columns as a ``PackedCandidates`` message (the client side); ``None`` where the
    packed form cannot say them (a NaN number, which it reads as "not given": the classic form
    then carries them, and the service's error names the field)."""
    values = [columns.overlaps[columns.has_overlap], columns.remaining[columns.has_remaining]]
    attr_keys, attr_values = _matrix(list(columns.attrs))
    signal_keys, signal_values = _matrix(list(columns.signals))
    given = [v for m in (*columns.attrs, *columns.signals) for v in m.values()]
    if any(np.isnan(v).any() for v in values) or any(v != v for v in given):
        return None
    messages = pb2()
    packed = messages.PackedCandidates(
        device=columns.devices,
        device_kind=columns.device_kinds if any(columns.device_kinds) else (),
        co_runner_source=[_SOURCES_PB[s] for s in columns.sources],
        co_runner_count=np.diff(columns.offsets).tolist(),
        co_runner_model=columns.models,
        co_runner_batch_size=columns.batch_sizes,
        co_runner_overlap=np.where(columns.has_overlap, columns.overlaps, np.nan).tolist(),
        co_runner_remaining_ms=np.where(columns.has_remaining, columns.remaining, np.nan).tolist(),
    )
    packed.attr_keys[:], packed.attr_values[:] = attr_keys, attr_values
    packed.signal_keys[:], packed.signal_values[:] = signal_keys, signal_values
    return packed


# --------------------------------------------------------------------- responses -> domain (client side)


def _time(field: Any) -> float:
    return field.seconds + field.nanos / 1e9


def prediction_from_pb(message: Any) -> Prediction:
    """A ``Prediction`` message as a :class:`Prediction` (the client side)."""
    return Prediction(
        latency_ms=message.latency_ms,
        solo_latency_ms=message.solo_latency_ms,
        slowdown=message.slowdown,
        upper_bound_ms=message.upper_bound_ms,
        confidence=message.confidence,
        bound_source=_BOUNDS.get(message.bound_source, BoundSource.FALLBACK),
        residuals=message.residuals,
        predictor=message.predictor,
        observations_learned=message.observations_learned,
        co_runners=tuple(
            CoRunner(c.model, c.batch_size, map_from_pb(c.attrs), c.overlap if c.HasField("overlap") else 1.0)
            for c in message.co_runners
        ),
        device_kind=message.device_kind,
        fallback=message.fallback,
        query_shape=message.query_shape,
        estimated=tuple(message.estimated),
        queue_wait_ms=_wait_field(message, "queue_wait_ms"),
        queue_wait_bound_ms=_wait_field(message, "queue_wait_bound_ms"),
        queue_saturated=message.queue_saturated,
        queue_wait_source=_WAIT_SOURCES.get(message.queue_wait_source, "none"),
        queue_utilisation=_optional(message, "queue_utilisation"),
        load_ms=message.load_ms,
        transfer_ms=message.transfer_ms,
        transfer_bound_ms=message.transfer_bound_ms,
        transfer_link=_LINKS.get(message.transfer_link, ""),
        sequence=message.sequence,
    )


def deadline_answer_from_pb(message: Any) -> DeadlineAnswer:
    """A ``CheckDeadlineResponse`` as a :class:`DeadlineAnswer` (the client side)."""
    return DeadlineAnswer(
        feasible=message.feasible,
        slack_ms=message.slack_ms,
        probability=message.probability,
        deadline_ms=message.deadline_ms,
        prediction=prediction_from_pb(message.prediction),
    )


def ranking_from_pb(message: Any) -> Ranking:
    """A ``RankPlacementsResponse`` as a :class:`Ranking` (the client side)."""
    return Ranking(
        placements=tuple(
            PlacementAnswer(
                device=p.device,
                rank=p.rank,
                feasible=p.feasible,
                slack_ms=p.slack_ms,
                probability=p.probability,
                prediction=prediction_from_pb(p.prediction),
                candidate_index=p.candidate_index,
                infeasible_reason=p.infeasible_reason,
                deciding_term=p.deciding_term,
                memory_needed_mb=p.memory_needed_mb,
                memory_free_mb=_optional(p, "memory_free_mb"),
            )
            for p in message.placements
        ),
        deadline_ms=message.deadline_ms,
        delay=delay_from_pb(message.delay) if message.HasField("delay") else None,
    )


def pipeline_plan_from_pb(message: Any) -> PipelinePlan:
    """A ``PlanPipelineResponse`` as a :class:`PipelinePlan` (the client side)."""
    return PipelinePlan(
        feasible=message.feasible,
        composed_bound_ms=message.composed_bound_ms,
        probability=message.probability,
        expected_ms=message.expected_ms,
        cost=message.cost,
        stages=tuple(
            StagePlan(
                stage_index=s.stage_index,
                name=s.name,
                device=s.device,
                candidate_index=s.candidate_index,
                budget_ms=s.budget_ms,
                expected_ms=s.expected_ms,
                upper_bound_ms=s.upper_bound_ms,
                cost=s.cost,
                prediction=prediction_from_pb(s.prediction),
                expected_start_ms=s.expected_start_ms,
            )
            for s in message.stages
        ),
        deadline_ms=message.deadline_ms,
        confidence=message.confidence,
        critical_path=tuple(message.critical_path),
        sum_of_stage_bounds_ms=message.sum_of_stage_bounds_ms,
        search=message.search,
        optimal=message.optimal,
        plans_evaluated=message.plans_evaluated,
    )


def observation_report_from_pb(message: Any) -> ObservationReport:
    """A ``ReportObservationsResponse`` as an :class:`ObservationReport` (the client side)."""
    return ObservationReport(
        accepted=message.accepted,
        rejected=message.rejected,
        rejections=[Rejection(r.index, r.field, r.reason) for r in message.rejections],
        observations_learned=message.observations_learned,
        outliers=message.outliers,
        rate_limited=message.rate_limited,
        log_sequence=message.log_sequence,
        duplicates=message.duplicates,
    )


def status_from_pb(message: Any) -> Status:
    """A ``GetStatusResponse`` as a :class:`Status` (the client side)."""
    return Status(
        ready=message.ready,
        predictor=message.predictor,
        observations_learned=message.observations_learned,
        observations_rejected=message.observations_rejected,
        rolling_mape=_nan_unset(message, "rolling_mape"),
        coverage=_nan_unset(message, "coverage"),
        coverage_confidence=message.coverage_confidence,
        device_kinds=tuple(
            KindStatus(k.device_kind, k.observations, _nan_unset(k, "rolling_mape"), _nan_unset(k, "coverage"),
                       k.residuals, k.drift_alarms)
            for k in message.device_kinds
        ),
        drift_alarms=tuple(
            DriftAlarm(a.device_kind, a.at_observation, _time(a.time), a.rolling_mape)
            for a in message.drift_alarms
        ),
        devices=message.devices,
        batches_running=message.batches_running,
        uptime_s=message.uptime_s,
        last_snapshot_time=_time(message.last_snapshot_time)
        if message.HasField("last_snapshot_time")
        else None,
        observations_outliers=message.observations_outliers,
        observations_rate_limited=message.observations_rate_limited,
        observations_duplicates=message.observations_duplicates,
        live_restored=message.live_restored,
        live_expired=message.live_expired,
        log=LogStatus(
            message.log.fsync,
            message.log.last_sequence,
            message.log.synced_sequence,
            message.log.snapshot_sequence,
            message.log.replayed,
            message.log.replay_skipped,
        )
        if message.HasField("log")
        else None,
        admission=tuple(
            ShapeStats(a.source, a.query_shape, a.device_kind, a.model, a.co_runners, a.observations,
                       _optional(a, "coverage"), _optional(a, "mape"))
            for a in message.admission
        ),
        admission_coverage=_optional(message, "admission_coverage"),
        admission_mape=_optional(message, "admission_mape"),
        answers_linked=message.answers_linked,
        answers_remembered=message.answers_remembered,
    )


def _nan_unset(message: Any, name: str) -> float:
    """An ``optional double`` statistic as the domain's float: NaN where unset (none yet)."""
    return getattr(message, name) if message.HasField(name) else math.nan
