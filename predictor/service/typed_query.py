"""A query's record without the generic parser, where every field is already typed and valid.

:meth:`Answering.plan_query <predictor.service.answering.Answering.plan_query>` validates a
query by building the ``coloc/v1`` object of its record and parsing it
(:func:`~predictor.records.record.parse_record`), which names the first offending field. A query
decoded from a request has typed fields (strings, integers, floats), and nearly every one is
valid: :func:`typed_record` checks such a query with the parser's own predicates
(:mod:`predictor.records.rules`) and builds the record the parser would, at a fraction of the cost. It
vouches only for exact types (``float``, not an ``int`` or a NumPy scalar, which the parser
converts); anything else, valid or not, is left to the parser (``None``), so errors are
unchanged.
"""

from __future__ import annotations

from typing import Any

from predictor.records import rules
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.service.types import PlannedCoRunner, Query


def _numbers(values: Any) -> dict[str, float] | None:
    """A copy of an ``attrs`` or ``signals`` dict that :func:`rules.numeric_map` would return as
    it is (``None``: not vouched for)."""
    if type(values) is not dict or len(values) > rules.MAX_NUMERIC_KEYS:
        return None
    for key, value in values.items():
        if type(key) is not str or not rules.name_ok(key) or type(value) is not float or not rules.finite_ok(value):
            return None
    return dict(values)


def _name(value: Any, *, required: bool = True) -> bool:
    return type(value) is str and rules.name_ok(value, required=required)


def _runner(runner: PlannedCoRunner) -> CoRunner | None:
    overlap = 1.0 if runner.overlap is None else runner.overlap
    if not (_name(runner.model) and type(runner.batch_size) is int and rules.batch_size_ok(runner.batch_size)
            and type(overlap) is float and rules.overlap_ok(overlap)):
        return None
    attrs = _numbers(runner.attrs)
    return None if attrs is None else CoRunner(runner.model, runner.batch_size, attrs, overlap)


def typed_batch_ok(batch: BatchSpec, limit: float) -> bool:
    """Whether :func:`~predictor.records.record.parse_record` takes ``batch`` as it is (the same batch
    back), its attributes within the magnitude limit ``limit``; ``False`` where some field is not
    typed and valid as it is (the parser then says which, or that it converts it)."""
    return (_name(batch.model) and type(batch.batch_size) is int and rules.batch_size_ok(batch.batch_size)
            and _numbers(batch.attrs) is not None and rules.map_magnitudes_ok(batch.attrs, limit))


def typed_record(query: Query) -> Record | None:
    """The planned record :func:`~predictor.records.record.parse_record` builds from ``query``'s object
    (its explicit co-runners at their overlaps, 1 where none is given), or ``None`` where some
    field is not typed and valid as it is: the parser then checks it and names the field.

    The magnitude limit is not checked here (see :func:`~predictor.records.record.record_within_limits`).
    """
    batch, kind, solo = query.batch, query.device_kind or "", query.solo_latency_ms
    if not (_name(query.device) and _name(kind, required=False) and _name(batch.model)
            and type(batch.batch_size) is int and rules.batch_size_ok(batch.batch_size)
            and (solo is None or (type(solo) is float and rules.positive_ok(solo)))
            and rules.co_runner_count_ok(len(query.co_runners))):
        return None
    attrs, signals = _numbers(batch.attrs), _numbers(query.signals)
    if attrs is None or signals is None:
        return None
    runners = tuple(map(_runner, query.co_runners))
    if None in runners:
        return None
    return Record(device=query.device, batch=BatchSpec(batch.model, batch.batch_size, attrs), latency_ms=None,
                  device_kind=kind, solo_latency_ms=solo, co_runners=runners, signals=signals)  # type: ignore[arg-type]
