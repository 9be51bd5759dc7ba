""":func:`typed_record` builds exactly the record the parser builds, and vouches for nothing
the parser refuses (random queries, valid and not, typed and not)."""

from __future__ import annotations

import math

import numpy as np

from predictor.records import rules
from predictor.records.record import SCHEMA, BatchSpec, RecordError, parse_record, record_numbers
from predictor.service.answering import _record_object
from predictor.service.typed_query import typed_batch_ok, typed_record
from predictor.service.types import PlannedCoRunner, Query


def _pick(rng: np.random.Generator, options: list) -> object:
    return options[int(rng.integers(len(options)))]


def _name(rng: np.random.Generator) -> object:
    return _pick(rng, ["gpu0", "resnet", "k", "", "x" * 257, "x" * 256, None, 3])


def _value(rng: np.random.Generator) -> object:
    return _pick(rng, [1.5, 0.25, 0.0, 1.0, 2, True, math.nan, math.inf, -3.0, np.float64(0.5), "1", None])


def _map(rng: np.random.Generator) -> object:
    if rng.random() < 0.1:
        return _pick(rng, [None, [("a", 1.0)]])
    keys = ["a", "b", "", "y" * 300, 7] if rng.random() < 0.3 else ["a", "b", "c"]
    return {_pick(rng, keys): _value(rng) if rng.random() < 0.3 else float(rng.uniform(0, 5))
            for _ in range(int(rng.integers(0, 4)))}


def _query(rng: np.random.Generator) -> Query:
    wild = rng.random() < 0.5

    def maybe(good: object, bad: object) -> object:
        return bad if wild and rng.random() < 0.2 else good

    runners = tuple(
        PlannedCoRunner(maybe("bert", _name(rng)), maybe(int(rng.integers(1, 9)), _value(rng)),
                        maybe({"m": float(rng.uniform(0, 2))}, _map(rng)),
                        overlap=_pick(rng, [None, float(rng.uniform(0, 1)), maybe(0.5, _value(rng))]))
        for _ in range(int(rng.integers(0, 4)) if rng.random() < 0.95 else 70)
    )
    return Query(
        device=maybe("gpu0", _name(rng)),
        batch=BatchSpec(maybe("resnet", _name(rng)), maybe(int(rng.integers(1, 64)), _value(rng)),
                        maybe({"seq": float(rng.integers(1, 512))}, _map(rng))),
        device_kind=maybe(_pick(rng, ["", "A100"]), _name(rng)),
        co_runners=runners,
        signals=maybe({"util": float(rng.uniform(0, 1))}, _map(rng)),
        solo_latency_ms=_pick(rng, [None, float(rng.uniform(0.1, 9)), maybe(1.0, _value(rng))]),
    )


def _fields(record: object) -> list[tuple[type, object]]:
    def typed(value: object) -> object:
        if isinstance(value, dict):
            return [(type(k), k, type(v), v) for k, v in value.items()]
        if isinstance(value, tuple):
            return [_fields(v) for v in value]
        if hasattr(value, "__slots__"):
            return _fields(value)
        return (type(value), value)

    return [(name, typed(getattr(record, name))) for name in record.__slots__]  # type: ignore[attr-defined]


def test_typed_record_is_the_parsers_record_or_none() -> None:
    rng = np.random.default_rng(11)
    vouched = refused = 0
    for _ in range(2000):
        query = _query(rng)
        typed = typed_record(query)
        try:
            parsed = parse_record(_record_object(query), require_latency=False)
        except (RecordError, TypeError, ValueError):
            assert typed is None
            refused += 1
            continue
        if typed is not None:
            assert _fields(typed) == _fields(parsed)
            vouched += 1
    assert vouched > 500 and refused > 300


def _parser_takes(batch: BatchSpec, limit: float) -> bool:
    """What the parser says of a batch: taken as it is (the same batch back), within ``limit``."""
    try:
        parsed = parse_record({"schema": SCHEMA, "device": "-", "batch": {
            "model": batch.model, "batch_size": batch.batch_size, "attrs": batch.attrs}}, require_latency=False)
        rules.check_magnitudes(record_numbers(parsed), limit)
    except (RecordError, TypeError, ValueError, AttributeError):
        return False
    return _fields(parsed.batch) == _fields(batch)


def test_typed_batch_ok_only_where_the_parser_takes_the_batch_as_it_is() -> None:
    rng = np.random.default_rng(12)
    vouched = refused = 0
    for _ in range(2000):
        batch, limit = _query(rng).batch, _pick(rng, [1e9, 3.0])
        if typed_batch_ok(batch, limit):
            assert _parser_takes(batch, limit)
            vouched += 1
        else:
            refused += 1
    assert vouched > 500 and refused > 300
