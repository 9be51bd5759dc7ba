"""The ``coloc/v1`` record: one executed batch with its co-runners and device signals.

Every path in the system (live collection, JSONL logs, imported third-party
data, the service's observation stream, tests) speaks this one format; the
rule of every field is defined once, in :mod:`predictor.records.rules`.

Examples
--------
>>> r = parse_record({"schema": "coloc/v1", "device": "gpu0",
...                   "batch": {"model": "resnet", "batch_size": 4},
...                   "latency_ms": 12.5})
>>> r.batch.model, r.latency_ms, r.co_runners
('resnet', 12.5, ())
>>> parse_record({"schema": "coloc/v1", "device": "gpu0",
...               "batch": {"model": "resnet", "batch_size": 0},
...               "latency_ms": 1.0})
Traceback (most recent call last):
...
predictor.records.rules.RecordError: batch.batch_size: must be an integer >= 1, got 0
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from predictor.records import rules
from predictor.records.rules import (
    MAX_CO_RUNNERS,
    MAX_NAME_LENGTH,
    MAX_NUMERIC_KEYS,
    SCHEMA,
    RecordError,
)

__all__ = [
    "MAX_CO_RUNNERS",
    "MAX_NAME_LENGTH",
    "MAX_NUMERIC_KEYS",
    "SCHEMA",
    "BatchSpec",
    "CoRunner",
    "Record",
    "RecordError",
    "parse_record",
    "record_numbers",
    "record_to_dict",
]


@dataclass(frozen=True, slots=True)
class BatchSpec:
    """The batch whose latency is measured or predicted."""

    model: str
    batch_size: int
    attrs: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CoRunner:
    """A batch executing on the same device during part of the batch's window."""

    model: str
    batch_size: int
    attrs: Mapping[str, float] = field(default_factory=dict)
    overlap: float = 1.0


@dataclass(frozen=True, slots=True)
class Record:
    """One executed (or, with ``latency_ms=None``, one planned) batch."""

    device: str
    batch: BatchSpec
    latency_ms: float | None
    device_kind: str = ""
    start_s: float | None = None
    solo_latency_ms: float | None = None
    co_runners: tuple[CoRunner, ...] = ()
    signals: Mapping[str, float] = field(default_factory=dict)
    source: str = ""

    @property
    def slowdown(self) -> float | None:
        """Measured latency over solo latency, when both are known."""
        if self.latency_ms is None or not self.solo_latency_ms:
            return None
        return self.latency_ms / self.solo_latency_ms


# --------------------------------------------------------------------- parsing


def _co_runner(value: Any, path: str) -> CoRunner:
    obj = rules.require_mapping(value, path)
    overlap = 1.0
    if obj.get("overlap") is not None:
        overlap = rules.overlap(obj["overlap"], f"{path}.overlap")
    return CoRunner(
        model=rules.name(obj.get("model"), f"{path}.model"),
        batch_size=rules.batch_size(obj.get("batch_size"), f"{path}.batch_size"),
        attrs=rules.numeric_map(obj.get("attrs"), f"{path}.attrs"),
        overlap=overlap,
    )


def parse_record(obj: Any, *, require_latency: bool = True) -> Record:
    """Validate a decoded JSON object and build a :class:`Record`.

    Parameters
    ----------
    obj
        The decoded JSON object.
    require_latency
        ``False`` accepts a planned batch without ``latency_ms`` (a query).

    Raises
    ------
    RecordError
        Naming the first offending field.
    """
    obj = rules.require_mapping(obj, "record")
    if obj.get("schema") != SCHEMA:
        raise RecordError("schema", f"must be {SCHEMA!r}, got {obj.get('schema')!r}")
    batch = rules.require_mapping(obj.get("batch"), "batch")
    latency = obj.get("latency_ms")
    if latency is not None or require_latency:
        latency = rules.positive(latency, "latency_ms")
    solo = obj.get("solo_latency_ms")
    if solo is not None:
        solo = rules.positive(solo, "solo_latency_ms")
    start = obj.get("start_s")
    if start is not None:
        start = rules.number(start, "start_s")
    runners = obj.get("co_runners") or []
    if not isinstance(runners, list):
        raise RecordError("co_runners", "must be a list")
    rules.co_runner_count(len(runners))
    return Record(
        device=rules.name(obj.get("device"), "device"),
        device_kind=rules.name(obj.get("device_kind"), "device_kind", required=False),
        batch=BatchSpec(
            model=rules.name(batch.get("model"), "batch.model"),
            batch_size=rules.batch_size(batch.get("batch_size"), "batch.batch_size"),
            attrs=rules.numeric_map(batch.get("attrs"), "batch.attrs"),
        ),
        start_s=start,
        latency_ms=latency,
        solo_latency_ms=solo,
        co_runners=tuple(_co_runner(r, f"co_runners[{i}]") for i, r in enumerate(runners)),
        signals=rules.numeric_map(obj.get("signals"), "signals"),
        source=rules.name(obj.get("source"), "source", required=False),
    )


def record_numbers(record: Record) -> Iterator[tuple[str, float]]:
    """Every number of ``record`` that the magnitude limit applies to, with its field path, in order:
    latencies, then ``batch.attrs``, ``signals`` and each co-runner's ``attrs``
    (see :func:`predictor.records.rules.check_magnitudes`)."""
    if record.latency_ms is not None:
        yield "latency_ms", record.latency_ms
    if record.solo_latency_ms is not None:
        yield "solo_latency_ms", record.solo_latency_ms
    yield from _keyed("batch.attrs", record.batch.attrs)
    yield from _keyed("signals", record.signals)
    for i, runner in enumerate(record.co_runners):
        yield from _keyed(f"co_runners[{i}].attrs", runner.attrs)


def record_within_limits(record: Record, limit: float) -> bool:
    """Whether every number of :func:`record_numbers` passes :func:`~predictor.records.rules.check_magnitudes`.

    The cheap test of every query; where it fails, ``check_magnitudes(record_numbers(record), limit)``
    names the offending field.
    """
    latencies = (record.latency_ms, record.solo_latency_ms)
    if any(value is not None and not rules.latency_ok(value, limit) for value in latencies):
        return False
    maps = (record.batch.attrs, record.signals, *(runner.attrs for runner in record.co_runners))
    return all(rules.map_magnitudes_ok(values, limit) for values in maps)


def _keyed(path: str, values: Mapping[str, float]) -> Iterator[tuple[str, float]]:
    for key, value in values.items():
        yield f"{path}.{key}", value


def record_to_dict(record: Record) -> dict[str, Any]:
    """The JSON-ready ``coloc/v1`` object for ``record`` (optional fields omitted when empty)."""
    out: dict[str, Any] = {"schema": SCHEMA, "device": record.device}
    if record.device_kind:
        out["device_kind"] = record.device_kind
    batch: dict[str, Any] = {"model": record.batch.model, "batch_size": record.batch.batch_size}
    if record.batch.attrs:
        batch["attrs"] = dict(record.batch.attrs)
    out["batch"] = batch
    if record.start_s is not None:
        out["start_s"] = record.start_s
    if record.latency_ms is not None:
        out["latency_ms"] = record.latency_ms
    if record.solo_latency_ms is not None:
        out["solo_latency_ms"] = record.solo_latency_ms
    if record.co_runners:
        out["co_runners"] = [
            {"model": c.model, "batch_size": c.batch_size, "attrs": dict(c.attrs), "overlap": c.overlap}
            for c in record.co_runners
        ]
    if record.signals:
        out["signals"] = dict(record.signals)
    if record.source:
        out["source"] = record.source
    return out
