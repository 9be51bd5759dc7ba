"""The ``coloc/v1`` record: one executed batch with its co-runners and device signals.

Every path in the system (live collection, JSONL logs, imported third-party
data, the service's observation stream, tests) speaks this one format.

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
predictor.records.RecordError: batch.batch_size: must be an integer >= 1, got 0
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "coloc/v1"
MAX_NAME_LENGTH = 256
MAX_CO_RUNNERS = 64
MAX_NUMERIC_KEYS = 64


class RecordError(ValueError):
    """A record that does not follow ``coloc/v1``.

    Parameters
    ----------
    field
        Dotted path of the offending field, e.g. ``co_runners[1].overlap``.
    message
        What is wrong with it.
    line
        1-based line number in the file it came from, when known.
    """

    def __init__(self, field: str, message: str, line: int | None = None):
        self.field = field
        self.message = message
        self.line = line
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"{where}{field}: {message}")

    def at_line(self, line: int) -> RecordError:
        """Return the same error located at ``line``."""
        return RecordError(self.field, self.message, line)


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


def _require_mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        raise RecordError(path, "is required")
    if not isinstance(value, Mapping):
        raise RecordError(path, f"must be an object, got {type(value).__name__}")
    return value


def _name(value: Any, path: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if value is None:
        raise RecordError(path, "is required")
    if not isinstance(value, str) or (required and not value):
        raise RecordError(path, f"must be a non-empty string, got {value!r}")
    if len(value) > MAX_NAME_LENGTH:
        raise RecordError(path, f"longer than {MAX_NAME_LENGTH} characters")
    return value


def _finite(value: Any, path: str) -> float:
    if value is None:
        raise RecordError(path, "is required")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(path, f"must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise RecordError(path, f"must be finite, got {value!r}")
    return number


def _positive(value: Any, path: str) -> float:
    number = _finite(value, path)
    if number <= 0:
        raise RecordError(path, f"must be > 0, got {value!r}")
    return number


def _batch_size(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        if isinstance(value, float) and value.is_integer() and value >= 1:
            return int(value)
        raise RecordError(path, f"must be an integer >= 1, got {value!r}")
    return value


def _numeric_map(value: Any, path: str) -> dict[str, float]:
    if value is None:
        return {}
    mapping = _require_mapping(value, path)
    if len(mapping) > MAX_NUMERIC_KEYS:
        raise RecordError(path, f"more than {MAX_NUMERIC_KEYS} keys")
    out: dict[str, float] = {}
    for key, item in mapping.items():
        key_path = f"{path}.{key}"
        _name(key, key_path)
        out[key] = _finite(item, key_path)
    return out


def _co_runner(value: Any, path: str) -> CoRunner:
    obj = _require_mapping(value, path)
    overlap = 1.0
    if obj.get("overlap") is not None:
        overlap = _finite(obj["overlap"], f"{path}.overlap")
        if not 0.0 <= overlap <= 1.0:
            raise RecordError(f"{path}.overlap", f"must lie in [0, 1], got {overlap!r}")
    return CoRunner(
        model=_name(obj.get("model"), f"{path}.model"),
        batch_size=_batch_size(obj.get("batch_size"), f"{path}.batch_size"),
        attrs=_numeric_map(obj.get("attrs"), f"{path}.attrs"),
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
    obj = _require_mapping(obj, "record")
    if obj.get("schema") != SCHEMA:
        raise RecordError("schema", f"must be {SCHEMA!r}, got {obj.get('schema')!r}")
    batch = _require_mapping(obj.get("batch"), "batch")
    latency = obj.get("latency_ms")
    if latency is not None or require_latency:
        latency = _positive(latency, "latency_ms")
    solo = obj.get("solo_latency_ms")
    if solo is not None:
        solo = _positive(solo, "solo_latency_ms")
    start = obj.get("start_s")
    if start is not None:
        start = _finite(start, "start_s")
    runners = obj.get("co_runners") or []
    if not isinstance(runners, list):
        raise RecordError("co_runners", "must be a list")
    if len(runners) > MAX_CO_RUNNERS:
        raise RecordError("co_runners", f"more than {MAX_CO_RUNNERS} co-runners")
    return Record(
        device=_name(obj.get("device"), "device"),
        device_kind=_name(obj.get("device_kind"), "device_kind", required=False),
        batch=BatchSpec(
            model=_name(batch.get("model"), "batch.model"),
            batch_size=_batch_size(batch.get("batch_size"), "batch.batch_size"),
            attrs=_numeric_map(batch.get("attrs"), "batch.attrs"),
        ),
        start_s=start,
        latency_ms=latency,
        solo_latency_ms=solo,
        co_runners=tuple(_co_runner(r, f"co_runners[{i}]") for i, r in enumerate(runners)),
        signals=_numeric_map(obj.get("signals"), "signals"),
        source=_name(obj.get("source"), "source", required=False),
    )


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
