"""The admission-time replay of a block, planned per record (ingest's degraded replay).

For every record of a block the service asks itself the admission-time questions a scheduler
could have asked about its batch (:func:`~predictor.service.admission.admission_shapes`: its
co-runners without overlaps, with overlaps; never signals), against the replay base (the model
and filling at the last replay boundary of the sequence, :meth:`ServiceState.replay_base
<predictor.service.state.ServiceState.replay_base>`). A record's questions differ only in their co-runners' overlaps, so rather than planning
each as a query (:meth:`Answering.plan_query <predictor.service.answering.Answering.plan_query>`),
:func:`replay_block` plans them once per record:

* **validation once per record**: :func:`vouched` applies ``plan_query``'s predicates to the
  record's own fields; where it does not vouch, the record's questions go through ``plan_query``
  each, so the refusals are exactly ``plan_query``'s;
* **filling once per record**: the device kind, the signals filled in for it and the overlap
  assumed for its co-runners (the calls ``plan_query`` makes; they do not change during a replay);
* **each question answered alone**, as PredictLatency answers it: where the answer takes the
  per-record way (a predictor monotone itself and nothing to clip), by the predictor's
  ``predict_many`` of the planned record directly, without the answer path around it. No two
  questions share a computation, so an answer never depends on which records share a block.

The questions, their order and the predictor calls are those of :func:`replay_block_per_question`
(every question planned by ``plan_query`` and predicted alone: the reference), so the answers are
the same, bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from predictor.calibration.shapes import QueryShape
from predictor.predictors.base import LatencyPredictor
from predictor.records import rules
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.runtime.gil_yield import point as gil_point
from predictor.service.admission import admission_queries, admission_shapes
from predictor.service.answering import Answering, Planned
from predictor.service.errors import ServiceError
from predictor.service.estimates import monotone

if TYPE_CHECKING:
    from predictor.service.estimates.filling import Filling
    from predictor.service.published import ModelVersion

Question = tuple[int, QueryShape, str, str, Mapping[str, float], Sequence[CoRunner], list[float], "Planned | None"]
"""A planned question: the index of its record in the block, its shape, the device, device kind and
signals it is planned with, its co-runners (models, batch sizes, attributes), their overlaps as
planned, and what ``plan_query`` planned (``None``: planned here; built where needed)."""

Replayed = list[list[tuple[QueryShape, float]]]
"""Per record of a block, the shape and predicted latency of each of its answered questions."""


def _numbers_ok(values: Any, limit: float) -> bool:
    """Whether an ``attrs`` map is one :func:`~predictor.service.typed_query.typed_record` vouches
    for (a ``dict`` of valid names to finite floats) and within the magnitude ``limit``."""
    if type(values) is not dict or len(values) > rules.MAX_NUMERIC_KEYS:
        return False
    name_ok, finite_ok = rules.name_ok, rules.finite_ok
    for key, value in values.items():
        if type(key) is not str or not name_ok(key) or type(value) is not float or not finite_ok(value):
            return False
    return rules.map_magnitudes_ok(values, limit)


def _name_ok(value: Any, *, required: bool = True) -> bool:
    return type(value) is str and rules.name_ok(value, required=required)


def vouched(record: Record, limit: float) -> bool:
    """Whether every admission-time question about ``record`` passes :meth:`Answering.plan_query
    <predictor.service.answering.Answering.plan_query>`'s validation as it is typed: the
    predicates of :func:`~predictor.service.typed_query.typed_record` and
    :func:`~predictor.records.record.record_within_limits` (at ``limit``) of a question's record (the
    record's device, kind, batch, solo latency and co-runners, at their overlaps or at 1; no
    signals, no latency). ``False`` says only that the questions must be planned one by one."""
    batch, solo = record.batch, record.solo_latency_ms
    if not (_name_ok(record.device) and _name_ok(record.device_kind or "", required=False)
            and _name_ok(batch.model) and type(batch.batch_size) is int and rules.batch_size_ok(batch.batch_size)
            and (solo is None or (type(solo) is float and rules.positive_ok(solo) and rules.latency_ok(solo, limit)))
            and rules.co_runner_count_ok(len(record.co_runners)) and _numbers_ok(batch.attrs, limit)):
        return False
    name_ok, batch_size_ok, overlap_ok = rules.name_ok, rules.batch_size_ok, rules.overlap_ok
    for r in record.co_runners:
        model, size, overlap = r.model, r.batch_size, r.overlap
        if not (type(model) is str and name_ok(model) and type(size) is int and batch_size_ok(size)
                and type(overlap) is float and overlap_ok(overlap) and _numbers_ok(r.attrs, limit)):
            return False
    return True


def plan_block(answering: Answering, records: Sequence[Record],
               filling: Filling | None = None) -> dict[tuple, list[Question]]:
    """The admission-time questions of a block's records, planned, in groups of one record's
    questions that share one batch and solo latency (each record's in the order
    :func:`~predictor.service.admission.admission_queries` asks them);
    ``filling`` fills in signals and overlaps (default: the service's, as it stands)."""
    state = answering.state
    limit = state.config.max_value
    live = state.live
    given = filling
    filling = (filling or state.filling) if state.config.fill_missing else None
    groups: dict[tuple, list[Question]] = {}
    filled_signals: dict[tuple[str, str], Mapping[str, float]] = {}  # the filling does not change in a replay
    assumed_overlaps: dict[tuple[str, int], float] = {}
    for at, record in enumerate(records):
        gil_point()
        wanted = admission_shapes(record)
        if not wanted:
            continue
        if not vouched(record, limit):
            for shape, planned in _planned_each(answering, record, given):
                p = planned.record
                batch = p.batch
                key = _group_key(at, batch, p.solo_latency_ms)
                groups.setdefault(key, []).append(
                    (at, shape, p.device, p.device_kind, p.signals, p.co_runners, [c.overlap for c in p.co_runners],
                     planned))
            continue
        runners = record.co_runners
        kind = record.device_kind or live.kind_of(record.device)
        signals: Mapping[str, float] = {}
        assumed = 1.0  # a co-runner given without its overlap (typed_record's, unless filled)
        if filling is not None:  # what the filling gives is looked up once per device (kind) in a block
            where = (record.device, kind)
            known = filled_signals.get(where)
            if known is None:
                known = filled_signals[where] = filling.fill_signals(record.device, kind, signals)[0]
            signals = known
            if runners:
                count = (kind, len(runners))
                overlap = assumed_overlaps.get(count)
                if overlap is None:
                    overlap = assumed_overlaps[count] = filling.overlap(kind, len(runners))
                assumed = overlap
        batch = record.batch
        group = groups.setdefault(_group_key(at, batch, record.solo_latency_ms), [])
        for shape, with_overlaps in wanted:
            overlaps = [r.overlap for r in runners] if with_overlaps else [assumed] * len(runners)
            group.append((at, shape, record.device, kind, signals, runners, overlaps, None))
    return groups


def _planned_each(answering: Answering, record: Record,
                  filling: Filling | None = None) -> list[tuple[QueryShape, Planned]]:
    """The record's questions each planned by ``plan_query`` (those it refuses left out)."""
    out = []
    for shape, query in admission_queries(record):
        try:
            out.append((shape, answering.plan_query(query, "record.", filling=filling)))
        except ServiceError:
            continue
    return out


def question_planned(record: Record, question: Question) -> Planned:
    """The :class:`~predictor.service.answering.Planned` ``plan_query`` gives for one question
    about ``record`` (the one it planned, for a record not vouched for): equal to it, holding
    ``record``'s own batch and its co-runners kept at their overlaps where ``plan_query`` holds
    copies (a planned record is only read)."""
    _, shape, device, kind, signals, runners, overlaps, given = question
    if given is not None:
        return given
    planned = Record(device=device, batch=record.batch, latency_ms=None, device_kind=kind,
                     solo_latency_ms=record.solo_latency_ms, signals=signals,
                     co_runners=tuple(r if r.overlap is o else CoRunner(r.model, r.batch_size, r.attrs, o)
                                      for r, o in zip(runners, overlaps, strict=True)))
    return Planned(planned, [None] * len(runners), shape)


def _latency(answering: Answering, records: Sequence[Record], question: Question,
             model: ModelVersion) -> float | None:
    """The latency PredictLatency answers to one question (``None``: refused), from ``model``:
    :meth:`Answering.predict_plan <predictor.service.answering.Answering.predict_plan>` of its
    :class:`~predictor.service.answering.Planned`, or, where that takes the per-record way (a
    predictor monotone itself, no attribute to clip, no co-runner given by remaining time: always
    so here), the predictor's own ``predict_many`` of the planned record, which is what it computes
    (its ``predict_one`` where ``predict_many`` is the base class's, which calls it)."""
    planned = question_planned(records[question[0]], question)
    record, predictor = planned.record, model.predictor
    if monotone.direct(predictor, record.batch.attrs) and not monotone.needs_clipping(record):
        if type(predictor).predict_many is LatencyPredictor.predict_many:
            return float(predictor.predict_one(record))
        return float(predictor.predict_many([record])[0])
    try:
        return float(answering.predict_plan(planned, model)[0][0])
    except ServiceError:
        return None


def replay_record(answering: Answering, record: Record) -> list[tuple[QueryShape, float]]:
    """What the service would have answered, before learning ``record``, to the admission-time
    questions about its batch (:func:`~predictor.service.admission.admission_queries`): the
    shape and predicted latency of each, through the path every query takes
    (:meth:`Answering.plan_query`, then :meth:`Answering.predict_plan`). Questions the query rules
    refuse are left out: :func:`replay_block` of one record."""
    return replay_block(answering, [record])[0]


def replay_block(answering: Answering, records: Sequence[Record], model: ModelVersion | None = None,
                 filling: Filling | None = None) -> Replayed:
    """:func:`replay_record` of every record of a block, all against ``model`` and ``filling`` (default:
    the model and filling as they stand): each record's questions planned once (:func:`plan_block`),
    each question predicted alone (:func:`_latency`). Ingest passes the version of the last replay boundary
    (:meth:`ServiceState.replay_base <predictor.service.state.ServiceState.replay_base>`)."""
    model = model or answering.state.live_model()
    out: Replayed = [[] for _ in records]
    for group in plan_block(answering, records, filling).values():
        gil_point()
        for question in group:
            latency = _latency(answering, records, question, model)
            if latency is not None:
                out[question[0]].append((question[1], latency))
    return out


def replay_block_per_question(answering: Answering, records: Sequence[Record]) -> Replayed:
    """The same replay with every question planned as a query (:meth:`Answering.plan_query
    <predictor.service.answering.Answering.plan_query>`) and predicted alone from its
    :class:`~predictor.service.answering.Planned` (:meth:`Answering.predict_plan
    <predictor.service.answering.Answering.predict_plan>`, as PredictLatency predicts it): the
    reference :func:`replay_block` equals."""
    model = answering.state.live_model()
    out: Replayed = [[] for _ in records]
    for at, record in enumerate(records):
        for shape, planned in _planned_each(answering, record):
            try:
                out[at].append((shape, float(answering.predict_plan(planned, model)[0][0])))
            except ServiceError:
                continue
    return out


def _group_key(at: int, batch: BatchSpec, solo_latency_ms: float | None) -> tuple:
    """The questions predicted together: one record's (at ``at`` in the block), of one batch (model,
    size, attributes) and one solo latency."""
    return (at, batch.model, batch.batch_size, tuple(batch.attrs.items()), solo_latency_ms)
