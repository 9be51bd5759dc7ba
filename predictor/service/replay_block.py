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
* **no per-question objects**: a record's questions become the rows of one
  :class:`~predictor.service.answering.Plan` built from columns directly. The rows of a plan are
  one record's, never several records': a row's rounding depends on the rows beside it (the
  columns they present), and the answers must not depend on which records share a block.

The groups, their order and the predictor calls are those of :func:`replay_block_per_question`
(every question planned by ``plan_query``: the reference), so the answers are the same, bit for
bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from predictor.calibration.shapes import QueryShape
from predictor.records import rules
from predictor.records.colocations import CoLocations
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.runtime.gil_yield import point as gil_point
from predictor.service.admission import admission_queries, admission_shapes
from predictor.service.answering import Answering, Plan, Planned
from predictor.service.errors import ServiceError

if TYPE_CHECKING:
    from predictor.service.estimates.filling import Filling
    from predictor.service.published import ModelVersion

Question = tuple[int, QueryShape, str, str, Mapping[str, float], Sequence[CoRunner], list[float], "Planned | None"]
"""A planned question: the index of its record in the block, its shape, the device, device kind and
signals it is planned with, its co-runners (models, batch sizes, attributes), their overlaps as
planned, and what ``plan_query`` planned (``None``: planned here; built where needed)."""

Replayed = list[list[tuple[QueryShape, float]]]
"""Per record of a block, the shape and predicted latency of each of its answered questions."""

_NONE = np.zeros(0, dtype=np.intp)


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
    """The admission-time questions of a block's records, planned, in groups that share one batch
    and solo latency (keyed as :func:`replay_block_per_question` keys them, in the same order);
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


def group_plan(batch: BatchSpec, solo_latency_ms: float | None, group: Sequence[Question]) -> Any:
    """The :class:`~predictor.service.answering.Plan` of a group's questions: the rows
    :meth:`Plan.of <predictor.service.answering.Plan.of>` builds from their planned records."""
    offsets = np.zeros(len(group) + 1, dtype=np.int64)
    models: list[str] = []
    sizes: list[int] = []
    attrs: list[Mapping[str, float]] = []
    overlaps: list[float] = []
    for i, (_, _, _, _, _, runners, planned_overlaps, _) in enumerate(group):
        for r in runners:
            models.append(r.model)
            sizes.append(r.batch_size)
            attrs.append(r.attrs)
        overlaps += planned_overlaps
        offsets[i + 1] = len(overlaps)
    rows = CoLocations(batch, [q[2] for q in group], [q[3] for q in group], [q[4] for q in group], offsets,
                       models, sizes, attrs, np.array(overlaps, dtype=float), solo_latency_ms)
    return Plan(rows, np.full(len(overlaps), math.nan), _NONE, shapes=[q[1] for q in group])


def question_planned(record: Record, question: Question) -> Planned:
    """The :class:`~predictor.service.answering.Planned` ``plan_query`` gives for one question
    about ``record`` (the one it planned, for a record not vouched for)."""
    _, shape, device, kind, signals, runners, overlaps, given = question
    if given is not None:
        return given
    batch = record.batch
    planned = Record(device=device, batch=BatchSpec(batch.model, batch.batch_size, dict(batch.attrs)), latency_ms=None,
                     device_kind=kind, solo_latency_ms=record.solo_latency_ms, signals=signals,
                     co_runners=tuple(CoRunner(r.model, r.batch_size, dict(r.attrs), o)
                                      for r, o in zip(runners, overlaps, strict=True)))
    return Planned(planned, [None] * len(runners), shape)


def _latencies(answering: Answering, records: Sequence[Record], group: list[Question],
               model: ModelVersion) -> list[float | None]:
    """The latencies of a group's questions (``None``: refused): predicted together as one plan,
    else (a lone question, or a plan refused) each alone, as a single query."""
    if len(group) > 1:
        first = group[0]
        base = records[first[0]] if first[7] is None else first[7].record
        try:
            return answering.predict_plan(group_plan(base.batch, base.solo_latency_ms, group), model)[0].tolist()
        except ServiceError:
            pass  # each alone, so that only the refused ones are left out
    out: list[float | None] = []
    for question in group:
        try:
            out.append(float(answering.predict_plan(question_planned(records[question[0]], question), model)[0][0]))
        except ServiceError:
            out.append(None)
    return out


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
    each group predicted as one plan. Ingest passes the version of the last replay boundary
    (:meth:`ServiceState.replay_base <predictor.service.state.ServiceState.replay_base>`)."""
    model = model or answering.state.live_model()
    out: Replayed = [[] for _ in records]
    for group in plan_block(answering, records, filling).values():  # a record's questions share its batch: one group
        gil_point()
        for question, latency in zip(group, _latencies(answering, records, group, model), strict=True):
            if latency is not None:
                out[question[0]].append((question[1], latency))
    return out


def replay_block_per_question(answering: Answering, records: Sequence[Record]) -> Replayed:
    """The same replay with every question planned as a query (:meth:`Answering.plan_query
    <predictor.service.answering.Answering.plan_query>`) and predicted from its
    :class:`~predictor.service.answering.Planned`: the reference :func:`replay_block` equals."""
    model = answering.state.live_model()
    out: Replayed = [[] for _ in records]
    groups: dict[tuple, list[tuple[int, QueryShape, Planned]]] = {}
    for at, record in enumerate(records):
        for shape, planned in _planned_each(answering, record):
            batch = planned.record.batch
            key = _group_key(at, batch, planned.record.solo_latency_ms)
            groups.setdefault(key, []).append((at, shape, planned))
    for group in groups.values():
        latencies: list[float | None] | None = None
        if len(group) > 1:
            try:
                latencies = answering.predict_plan(Plan.of([p for _, _, p in group]), model)[0].tolist()
            except ServiceError:
                pass
        if latencies is None:
            latencies = []
            for _, _, planned in group:
                try:
                    latencies.append(float(answering.predict_plan(planned, model)[0][0]))
                except ServiceError:
                    latencies.append(None)
        for (at, shape, _), latency in zip(group, latencies, strict=True):
            if latency is not None:
                out[at].append((shape, latency))
    return out


def _group_key(at: int, batch: BatchSpec, solo_latency_ms: float | None) -> tuple:
    """The questions predicted together: one record's (at ``at`` in the block), of one batch (model,
    size, attributes) and one solo latency."""
    return (at, batch.model, batch.batch_size, tuple(batch.attrs.items()), solo_latency_ms)
