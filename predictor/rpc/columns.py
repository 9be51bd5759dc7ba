"""``RankPlacements`` messages to column-wise domain objects and back, without an object per candidate.

The per-object conversions of :mod:`predictor.rpc.convert` build a
:class:`~predictor.service.types.Candidate` (with its co-runners) per
candidate and a :class:`~predictor.service.types.PlacementAnswer` per
answer; with hundreds of candidates per call that costs more than the
predictions. These read the request straight into a
:class:`~predictor.service.estimates.placements.CandidateColumns` and write a
:class:`~predictor.service.estimates.placements.RankingColumns` straight into the
response. No validation here either: the service checks the columns.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from predictor.records.keyed import KeyedMaps
from predictor.records.record import RecordError
from predictor.rpc import candidate_wire, convert, placement_wire, wire
from predictor.rpc.convert import (
    _BOUNDS_PB,
    _SOURCES,
    _matrix,
    packed_candidates_pb,
    require_finite,
    require_finite_arrays,
)
from predictor.rpc.decoding import raw_bytes
from predictor.rpc.protos import pb2
from predictor.service.estimates.placements import CandidateColumns, EstimatedPaths, RankingColumns
from predictor.service.types import CoRunnerSource

_CANDIDATE = operator.attrgetter("device", "device_kind", "co_runner_source")
_RUNNER = operator.attrgetter("model", "batch_size", "overlap", "remaining_ms")
_ATTRS = operator.attrgetter("attrs")
_SIGNALS = operator.attrgetter("signals")
_RUNNERS = operator.attrgetter("co_runners")
_HAS_OVERLAP = operator.methodcaller("HasField", "overlap")
_HAS_REMAINING = operator.methodcaller("HasField", "remaining_ms")
_EMPTY: Mapping[str, float] = MappingProxyType({})
_PACKED_FIELDS = {field.name: field.number for field in pb2().PackedRanking.DESCRIPTOR.fields}
"""The field numbers of ``PackedRanking``'s columns, as the contract gives them."""


def candidate_columns_from_pb(candidates: Any) -> CandidateColumns:
    """The repeated ``PlacementCandidate`` of a request, column-wise.

    Fields are read by ``map`` over ``operator`` getters, which costs about half a loop's bytecode.
    """
    n = len(candidates)
    devices, kinds, codes = zip(*map(_CANDIDATE, candidates), strict=True) if n else ((), (), ())
    source_of, auto = _SOURCES.get, CoRunnerSource.AUTO
    per_candidate = list(map(_RUNNERS, candidates))
    messages = list(itertools.chain.from_iterable(per_candidate))
    r = len(messages)
    models, sizes, overlaps, remaining = zip(*map(_RUNNER, messages), strict=True) if r else ((), (), (), ())
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, per_candidate), dtype=np.int64, count=n), out=offsets[1:])
    columns = CandidateColumns(
        devices=list(devices),
        device_kinds=list(kinds),
        sources=[source_of(code, auto) for code in codes],
        signals=[convert.map_from_pb(s) if s else _EMPTY for s in map(_SIGNALS, candidates)],  # keys sorted
        offsets=offsets,
        models=list(models),
        batch_sizes=list(sizes),
        attrs=list(map(convert.map_from_pb, map(_ATTRS, messages))),
        overlaps=np.array(overlaps, dtype=float),
        remaining=np.array(remaining, dtype=float),
        has_overlap=np.fromiter(map(_HAS_OVERLAP, messages), dtype=bool, count=r),
        has_remaining=np.fromiter(map(_HAS_REMAINING, messages), dtype=bool, count=r),
        typed=True,
    )
    return columns


def request_columns_from_pb(request: Any) -> CandidateColumns:
    """The classic ``candidates`` of a ``RankPlacementsRequest``, column-wise: read from the
    request's wire bytes (those it was parsed from, else serialised again) in one compiled pass (:mod:`predictor.rpc.candidate_wire`), else (a
    field that reader declines) message by message (:func:`candidate_columns_from_pb`)."""
    raw = raw_bytes(request)
    fields = candidate_wire.read(request.SerializeToString() if raw is None else raw)
    if fields is None:
        return candidate_columns_from_pb(request.candidates)
    codes = fields.pop("source_codes")
    return CandidateColumns(**fields, sources=_sources(codes, len(codes)), typed=True)


def ranking_columns_to_pb(ranking: RankingColumns) -> Any:
    """The ``RankPlacementsResponse`` of a column-wise ranking: written as bytes in one pass
    (:func:`_placements_wire`, returned as they are: a :class:`~predictor.rpc.wire.Serialized`) unless
    it has queue, load or memory terms or per-candidate estimates of another form, then message by message."""
    require_finite("deadline", ranking.deadline_ms)
    require_finite_arrays(
        "ranking", ranking.latency_ms, ranking.solo_latency_ms, ranking.upper_bound_ms, ranking.slack_ms,
        ranking.probability, ranking.rows.overlaps,
    )
    messages = pb2()
    response = messages.RankPlacementsResponse(deadline_ms=ranking.deadline_ms)
    if ranking.terms is None and (ranking.estimated is None or isinstance(ranking.estimated, EstimatedPaths)):
        if ranking.delay is not None:
            response.delay.CopyFrom(convert.delay_to_pb(ranking.delay))
        # placements (field 1) first, then the others: the order protobuf writes them in
        return wire.Serialized(_placements_wire(ranking) + response.SerializeToString(), messages.RankPlacementsResponse)
    rows = ranking.rows
    devices, kinds, models, sizes, attrs = rows.devices, rows.device_kinds, rows.models, rows.batch_sizes, rows.attrs
    offsets = rows.offsets.tolist()
    overlaps = rows.overlaps.tolist()
    latency, solo = ranking.latency_ms.tolist(), ranking.solo_latency_ms.tolist()
    upper, slack, probability = ranking.upper_bound_ms.tolist(), ranking.slack_ms.tolist(), ranking.probability.tolist()
    solos = set(solo)
    templates: dict[tuple, bytes] = {}  # the fields rows of one calibration cell share, merged in at once

    def template(i: int) -> bytes:
        b = ranking.row_bounds[i] if ranking.row_bounds is not None else ranking.bounds[kinds[i]]
        shape = ranking.shapes[i] if ranking.shapes is not None else ""
        fallback = bool(ranking.fallback[i]) if ranking.fallback is not None else False
        key = (kinds[i], b.source, b.n, shape, fallback)
        found = templates.get(key)
        if found is None:
            found = templates[key] = messages.Placement(
                prediction=messages.Prediction(
                    solo_latency_ms=solo[0] if len(solos) == 1 else 0.0,
                    confidence=ranking.confidence,
                    bound_source=_BOUNDS_PB[b.source],
                    residuals=b.n,
                    predictor=ranking.predictor,
                    observations_learned=ranking.observations_learned,
                    sequence=ranking.sequence,
                    device_kind=kinds[i],
                    fallback=fallback,
                    query_shape=shape,
                )
            ).SerializeToString()
        return found

    estimated = ranking.estimated
    add = response.placements.add
    for rank, i in enumerate(ranking.order.tolist(), start=1):
        placement = add()
        placement.MergeFromString(template(i))
        placement.device = devices[i]
        placement.rank = rank
        placement.feasible = ranking.feasible(i)
        placement.slack_ms = slack[i]
        placement.probability = probability[i]
        placement.candidate_index = i
        prediction = placement.prediction
        prediction.latency_ms = latency[i]
        if len(solos) > 1:
            prediction.solo_latency_ms = solo[i]
        prediction.slowdown = latency[i] / solo[i]
        prediction.upper_bound_ms = upper[i]
        if estimated is not None and estimated[i]:
            prediction.estimated.extend(estimated[i])
        if ranking.terms is not None:
            _set_terms(placement, ranking, i)
        runners = prediction.co_runners
        for j in range(offsets[i], offsets[i + 1]):
            runners.add(model=models[j], batch_size=sizes[j], attrs=attrs[j], overlap=overlaps[j])
    if ranking.delay is not None:
        response.delay.CopyFrom(convert.delay_to_pb(ranking.delay))
    return response


def _placements_wire(ranking: RankingColumns) -> bytes:
    """The placements of a ranking without terms, as wire bytes (:mod:`predictor.rpc.placement_wire`):
    one serialised ``Prediction`` per calibration cell for the fields its rows share."""
    messages = pb2()
    rows = ranking.rows
    n = len(rows.devices)
    kinds = rows.device_kinds
    bounds = ranking.row_bounds if ranking.row_bounds is not None else list(map(ranking.bounds.__getitem__, kinds))
    shapes = ranking.shapes if ranking.shapes is not None else [""] * n  # strings (shape keys)
    fallback = ranking.fallback.tolist() if ranking.fallback is not None else [False] * n
    row_template, first = _cells(ranking, kinds, bounds, shapes, fallback)
    solo = ranking.solo_latency_ms
    solo_per_row = bool(solo.size) and not (solo == solo[0]).all()
    solo_shared = 0.0 if solo_per_row else float(solo[0])
    templates = [
        _template(solo_shared, ranking.confidence, bounds[i].source, bounds[i].n, ranking.predictor,
                  ranking.observations_learned, ranking.sequence, kinds[i], bool(fallback[i]), shapes[i])
        for i in first
    ]
    estimated = ranking.estimated
    r = len(rows.models)
    extra = [b""] * n
    if estimated is None:
        paths_off, moving = np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=bool)
        filled = moving
    else:
        paths_off, moving, filled = estimated.offsets, estimated.moving, estimated.filled
        for i, paths in estimated.extra.items():
            extra[i] = messages.Prediction(estimated=paths).SerializeToString()
    keys, attrs = _attr_matrix(rows.attrs, r)
    return placement_wire.placements(
        ranking.order, row_template, templates, rows.devices, ranking.slack_ms, ranking.probability,
        ranking.latency_ms, solo, solo_per_row, ranking.upper_bound_ms, rows.offsets, rows.models, rows.batch_sizes,
        keys, attrs, rows.overlaps, paths_off, moving, filled, extra,
    )


def _cells(ranking: RankingColumns, kinds: Sequence[str], bounds: Sequence[Any], shapes: Sequence[str],
           fallback: Sequence[bool]) -> tuple[np.ndarray, list[int]]:
    """Each row's cell (the fields of its ``Prediction`` that rows share: device kind, bound, query
    shape, fallback), numbered from 0 in order of first row, and the first row of each: the ranking's
    calibration cells where it tells them (:attr:`RankingColumns.row_cells`), else the distinct fields."""
    if ranking.row_cells is not None:  # numbered in order of first row: a cell's first row brings a new number
        cells = np.asarray(ranking.row_cells, dtype=np.int64)
        new = np.empty(cells.size, dtype=bool)
        new[:1] = True
        np.greater(cells[1:], np.maximum.accumulate(cells)[:-1], out=new[1:])
        return cells, np.flatnonzero(new).tolist()
    keys = list(zip(kinds, map(id, bounds), shapes, fallback, strict=True))  # a row's cell
    firsts = dict(zip(keys, range(len(keys)), strict=True))  # a row of each cell
    cell = {key: j for j, key in enumerate(firsts)}
    return np.fromiter(map(cell.__getitem__, keys), dtype=np.int64, count=len(keys)), list(firsts.values())


@functools.lru_cache(maxsize=1024)
def _template(solo_latency_ms: float, confidence: float, source: Any, residuals: int, predictor: str,
              observations_learned: int, sequence: int, device_kind: str, fallback: bool, query_shape: str) -> bytes:
    """A serialised ``Prediction`` of the fields a calibration cell's rows share (the same for every
    ranking of a model version: kept)."""
    return pb2().Prediction(
        solo_latency_ms=solo_latency_ms, confidence=confidence, bound_source=_BOUNDS_PB[source],
        residuals=residuals, predictor=predictor, observations_learned=observations_learned, sequence=sequence,
        device_kind=device_kind, fallback=fallback, query_shape=query_shape,
    ).SerializeToString()


def _attr_matrix(attrs: Sequence[Mapping[str, float]], rows: int) -> tuple[tuple[str, ...], np.ndarray]:
    """The co-runners' attributes as keys and a ``rows x keys`` matrix (NaN: absent)."""
    if isinstance(attrs, KeyedMaps):
        return attrs.keys, attrs.matrix
    keys, values = _matrix(list(attrs))
    return tuple(keys), np.array(values, dtype=float).reshape(rows, len(keys))


def _set_terms(placement: Any, ranking: RankingColumns, i: int) -> None:
    """Candidate ``i``'s queue, load and memory fields (a ranking with terms)."""
    prediction = placement.prediction
    for key, value in convert.queue_fields_to_pb(ranking.prediction(i)).items():
        setattr(prediction, key, value)
    for key, value in ranking.placement_fields(i).items():
        if value is not None:
            setattr(placement, key, value)
# ----------------------------------------------------------------------------- the packed form


def _lengths_ok(packed: Any, field: str, allowed: tuple[int, ...]) -> int:
    size = len(getattr(packed, field))
    if size not in allowed:
        wanted = " or ".join(str(a) for a in dict.fromkeys(allowed))
        raise RecordError(f"packed_candidates.{field}", f"must have {wanted} values, got {size}")
    return size


def _rows_of(keys: list[str], values: Any, rows: int, field: str) -> Sequence[Mapping[str, float]]:
    """One mapping per row of a row-major ``rows x len(keys)`` matrix; NaN: the row lacks the key
    (kept as the matrix, :class:`~predictor.records.keyed.KeyedMaps`)."""
    if len(set(keys)) != len(keys):
        raise RecordError(f"packed_candidates.{field.replace('values', 'keys')}", "repeats a key")
    if not keys:
        return [_EMPTY] * rows
    return KeyedMaps(tuple(keys), np.asarray(values, dtype=float).reshape(rows, len(keys)))


def packed_columns_from_pb(packed: Any) -> CandidateColumns:
    """The ``PackedCandidates`` of a request as :class:`CandidateColumns` (lengths checked here,
    values by the service, as for the classic form)."""
    n = len(packed.device)
    _lengths_ok(packed, "device_kind", (0, n))
    _lengths_ok(packed, "co_runner_source", (0, n))
    _lengths_ok(packed, "co_runner_count", (0, n))
    counts = np.array(packed.co_runner_count, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    if counts.size:
        np.cumsum(counts, out=offsets[1:])
    r = int(offsets[-1])
    _lengths_ok(packed, "co_runner_model", (r,))
    _lengths_ok(packed, "co_runner_batch_size", (r,))
    _lengths_ok(packed, "co_runner_overlap", (0, r))
    _lengths_ok(packed, "co_runner_remaining_ms", (0, r))
    attr_keys, signal_keys = list(packed.attr_keys), list(packed.signal_keys)
    _lengths_ok(packed, "attr_values", (r * len(attr_keys),))
    _lengths_ok(packed, "signal_values", (n * len(signal_keys),))
    overlaps = np.array(packed.co_runner_overlap, dtype=float) if len(packed.co_runner_overlap) else np.full(r, np.nan)
    remaining = (np.array(packed.co_runner_remaining_ms, dtype=float) if len(packed.co_runner_remaining_ms)
                 else np.full(r, np.nan))
    has_overlap, has_remaining = ~np.isnan(overlaps), ~np.isnan(remaining)
    return CandidateColumns(  # (a repeated field's whole slice is its list, made faster than list() makes it)
        devices=packed.device[:],
        device_kinds=packed.device_kind[:] if len(packed.device_kind) else [""] * n,
        sources=_sources(packed.co_runner_source, n),
        signals=_rows_of(signal_keys, packed.signal_values, n, "signal_values"),
        offsets=offsets,
        models=packed.co_runner_model[:],
        batch_sizes=packed.co_runner_batch_size[:],
        attrs=_rows_of(attr_keys, packed.attr_values, r, "attr_values"),
        overlaps=np.where(has_overlap, overlaps, 0.0),
        remaining=np.where(has_remaining, remaining, 0.0),
        has_overlap=has_overlap,
        has_remaining=has_remaining,
        typed=True,
    )


def _sources(codes: Any, n: int) -> list[CoRunnerSource]:
    """The co-runner source of each of ``n`` candidates from their codes (none: AUTO for all; one
    code for all looked up once)."""
    source_of, auto = _SOURCES.get, CoRunnerSource.AUTO
    if not len(codes):
        return [auto] * n
    values = np.array(codes, dtype=np.int64)
    if (values == values[0]).all():
        return [source_of(int(values[0]), auto)] * n
    return [source_of(code, auto) for code in values.tolist()]


def pack_rank_request(request: Any, *, omit_detail: bool = False) -> Any:
    """The same ``RankPlacementsRequest`` with its candidates in the packed form (clients, tests)."""
    columns = candidate_columns_from_pb(request.candidates)
    packed = packed_candidates_pb(columns)
    if packed is None:
        raise ValueError("the packed form cannot carry a NaN (it means 'not given' there)")
    out = pb2().RankPlacementsRequest()
    out.CopyFrom(request)
    out.ClearField("candidates")
    out.packed_candidates.CopyFrom(packed)
    out.omit_detail = omit_detail
    return out


def ranking_packed_to_pb(ranking: RankingColumns) -> Any:
    """The ``RankPlacementsResponse`` of a ranking in the packed form (no ``Placement`` per
    candidate). Its columns are written as wire-format bytes (:mod:`predictor.rpc.wire`) and
    parsed by protobuf: the message a value-by-value fill makes, without a Python number per value."""
    messages = pb2()
    order = ranking.order
    solo = ranking.solo_latency_ms
    require_finite_arrays("ranking", ranking.latency_ms, ranking.upper_bound_ms, ranking.slack_ms,
                          ranking.probability, solo)
    response = messages.RankPlacementsResponse(deadline_ms=ranking.deadline_ms)
    packed = response.packed
    packed.MergeFromString(b"".join([
        wire.packed_varints(_PACKED_FIELDS["candidate_index"], order),
        *(wire.packed_doubles(_PACKED_FIELDS[name], getattr(ranking, name)[order])
          for name in ("latency_ms", "upper_bound_ms", "slack_ms", "probability")),
        wire.packed_doubles(_PACKED_FIELDS["solo_latency_ms"],
                            solo[:1] if solo.size and (solo == solo[0]).all() else solo[order]),
    ]))
    packed.confidence = ranking.confidence
    packed.predictor = ranking.predictor
    packed.observations_learned = ranking.observations_learned
    packed.sequence = ranking.sequence
    if ranking.delay is not None:
        response.delay.CopyFrom(convert.delay_to_pb(ranking.delay))
    return response
