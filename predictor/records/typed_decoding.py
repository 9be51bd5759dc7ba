"""Typed decoding of ``coloc/v1`` lines with ``msgspec``: the rules of :mod:`predictor.records.rules` as types.

One ``msgspec`` decoder parses a line straight into structs whose field types and constraints
are the rules of :func:`~predictor.records.record.parse_record` (names, batch sizes, latencies,
overlaps, finite numbers, the limits on keys and co-runners), with no dict built per object, and
builds the :class:`~predictor.records.record.Record` (:func:`decode_record`) or leaves the struct
as it is (:func:`decode_row`: a :class:`ColocRow`, read like a record, for the replay).

A line the typed decoder refuses is **not** reported from here: it goes on to the reference path,
which either accepts it (the types are stricter than the rules in corner cases, e.g. a batch size
written ``4.0``) or raises the reference's :class:`~predictor.records.rules.RecordError`, so the
errors (field, message, line) are the reference's by construction. The types are never looser
than the rules (``tests/records/test_typed_decoding.py``: on random lines, valid and invalid,
both paths give the same record or the same error).

Examples
--------
>>> decode_record('{"schema": "coloc/v1", "device": "gpu0", "batch": {"model": "a", "batch_size": 2},'
...               ' "latency_ms": 3}')
Record(device='gpu0', batch=BatchSpec(model='a', batch_size=2, attrs={}), latency_ms=3.0, ...)
>>> decode_record('{"schema": "coloc/v1", "device": "gpu0", "batch": {"model": "a", "batch_size": 2.0},'
...               ' "latency_ms": 3}') is None  # the reference decides (and accepts)
True
"""

from __future__ import annotations

import sys
from typing import Annotated, Literal

import msgspec

from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.records.rules import MAX_CO_RUNNERS, MAX_NAME_LENGTH, MAX_NUMERIC_KEYS, SCHEMA

_LARGEST = sys.float_info.max

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_LENGTH)]
OptionalName = Annotated[str, msgspec.Meta(max_length=MAX_NAME_LENGTH)]
Finite = Annotated[float, msgspec.Meta(ge=-_LARGEST, le=_LARGEST)]
Positive = Annotated[float, msgspec.Meta(gt=0.0, le=_LARGEST)]
Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
BatchSize = Annotated[int, msgspec.Meta(ge=1)]
Numbers = Annotated[dict[Name, Finite], msgspec.Meta(max_length=MAX_NUMERIC_KEYS)]


class _Batch(msgspec.Struct):
    model: Name
    batch_size: BatchSize
    attrs: Numbers | None = None


class _CoRunner(msgspec.Struct):
    model: Name
    batch_size: BatchSize
    attrs: Numbers | None = None
    overlap: Fraction | None = None


class _Record(msgspec.Struct):
    schema: Literal["coloc/v1"]  # noqa: F821 - a literal type, not a name
    device: Name
    batch: _Batch
    latency_ms: Positive
    device_kind: OptionalName | None = None
    start_s: Finite | None = None
    solo_latency_ms: Positive | None = None
    co_runners: Annotated[list[_CoRunner], msgspec.Meta(max_length=MAX_CO_RUNNERS)] | None = None
    signals: Numbers | None = None
    source: OptionalName | None = None


class _RowBatch(msgspec.Struct, gc=False):
    model: Name
    batch_size: BatchSize
    attrs: Numbers = {}


class _RowCoRunner(msgspec.Struct, gc=False):
    model: Name
    batch_size: BatchSize
    attrs: Numbers = {}
    overlap: Fraction = 1.0


class ColocRow(msgspec.Struct, gc=False):
    """One ``coloc/v1`` line as decoded, read like a :class:`~predictor.records.record.Record`.

    The same attributes, with the record's values where they are set (an absent map is an
    empty one, an absent overlap 1, an absent name ``""``; the co-runners a list), so what
    reads a record's fields (features, the solo profile) reads a row alike, without a record
    built per line. A line with an explicit ``null`` where the record has a default is not a
    row (:func:`decode_row` gives ``None``): the record path decides. Rows hold no reference
    cycles, so the garbage collector does not track them (``gc=False``: cheaper to allocate by
    the hundred thousand).
    """

    schema: Literal["coloc/v1"]  # noqa: F821 - a literal type, not a name
    device: Name
    batch: _RowBatch
    latency_ms: Positive
    device_kind: OptionalName = ""
    start_s: Finite | None = None
    solo_latency_ms: Positive | None = None
    co_runners: Annotated[list[_RowCoRunner], msgspec.Meta(max_length=MAX_CO_RUNNERS)] = []
    signals: Numbers = {}
    source: OptionalName = ""


assert SCHEMA == "coloc/v1"  # the literal above
_DECODER = msgspec.json.Decoder(_Record)
_ROW_DECODER = msgspec.json.Decoder(ColocRow)
_REFUSED = (msgspec.DecodeError, msgspec.ValidationError)


def decode_record(line: str | bytes) -> Record | None:
    """The :class:`~predictor.records.record.Record` of one JSON line, or ``None`` where the typed
    decoder refuses it (then the reference path decides: it accepts or names the error)."""
    try:
        return record_of(_DECODER.decode(line))
    except _REFUSED:
        return None


def decode_row(line: str | bytes) -> ColocRow | None:
    """The :class:`ColocRow` of one JSON line, or ``None`` where it is not one (refused by the
    types, or an explicit ``null`` for a defaulted field): then :func:`decode_record` decides."""
    try:
        return _ROW_DECODER.decode(line)
    except _REFUSED:
        return None


def record_of(raw: _Record | ColocRow) -> Record:
    """The :class:`~predictor.records.record.Record` of a decoded line (a ``None`` field: the record's default)."""
    batch = raw.batch
    return Record(
        device=raw.device,
        batch=BatchSpec(batch.model, batch.batch_size, batch.attrs or {}),
        latency_ms=raw.latency_ms,
        device_kind=raw.device_kind or "",
        start_s=raw.start_s,
        solo_latency_ms=raw.solo_latency_ms,
        co_runners=tuple(
            CoRunner(r.model, r.batch_size, r.attrs or {}, 1.0 if r.overlap is None else r.overlap)
            for r in raw.co_runners or ()
        ),
        signals=raw.signals or {},
        source=raw.source or "",
    )
