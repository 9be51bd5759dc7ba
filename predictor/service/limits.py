"""Magnitude limits on what the model learns from.

``coloc/v1`` only asks attributes and signals to be finite, but a value of
``1e300`` is finite and its square is not: an online linear model fed one such
record can end with non-finite weights for good. The service refuses to learn
from records whose numbers exceed a configured magnitude (queries are not
checked: they change nothing).

Examples
--------
>>> from predictor.records import parse_record
>>> record = parse_record({"schema": "coloc/v1", "device": "gpu0", "latency_ms": 1.0,
...     "batch": {"model": "m", "batch_size": 1, "attrs": {"l2_util": 1e300}}})
>>> check_magnitudes(record, 1e9)
Traceback (most recent call last):
...
predictor.service.errors.InvalidArgument: record.batch.attrs.l2_util: magnitude 1e+300 is beyond the limit of 1e+09
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from predictor.records import Record
from predictor.service.errors import InvalidArgument


def _numbers(record: Record) -> Iterator[tuple[str, float]]:
    yield "latency_ms", record.latency_ms or 0.0
    if record.solo_latency_ms is not None:
        yield "solo_latency_ms", record.solo_latency_ms
    yield from _mapping("batch.attrs", record.batch.attrs)
    yield from _mapping("signals", record.signals)
    for i, runner in enumerate(record.co_runners):
        yield from _mapping(f"co_runners[{i}].attrs", runner.attrs)


def _mapping(path: str, values: Mapping[str, float]) -> Iterator[tuple[str, float]]:
    for key, value in values.items():
        yield f"{path}.{key}", value


def check_magnitudes(record: Record, limit: float, prefix: str = "record.") -> None:
    """Raise :class:`InvalidArgument` naming the first number of ``record`` beyond ``limit`` in magnitude.

    Latencies must also be at least ``1 / limit`` (a latency of ``5e-324`` ms is no measurement).
    """
    for path, value in _numbers(record):
        if abs(value) > limit:
            raise InvalidArgument(f"{prefix}{path}", f"magnitude {value:g} is beyond the limit of {limit:g}")
    for path, value in (("latency_ms", record.latency_ms), ("solo_latency_ms", record.solo_latency_ms)):
        if value is not None and value < 1.0 / limit:
            raise InvalidArgument(
                f"{prefix}{path}", f"{value:g} is below the smallest latency, {1.0 / limit:g} ms"
            )
