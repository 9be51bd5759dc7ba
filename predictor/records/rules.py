"""The ``coloc/v1`` rule set: one definition of every field's rule.

Every path that takes a record or a query in (a JSONL log line, the
observation stream, a query, the candidates of a ranking) checks its fields
with these rules, so that a limit cannot differ between a log line and an RPC:

* **checks** (:func:`name`, :func:`batch_size`, :func:`overlap`, ...) take a decoded value and
  its field path, and return the value or raise :class:`RecordError` naming the field;
* **predicates** (``*_ok``) say whether an already typed value (from protobuf) passes the same
  rule, without building an error; the checks use them, so the two cannot drift apart; the
  column predicates (:func:`names_ok`, ...) vouch for many values at once (ranking candidates);
* **time stamps** (:func:`timestamp`): a protobuf ``Timestamp`` has ``nanos`` in ``[0, 1e9)``
  and ``seconds`` within :data:`MAX_TIMESTAMP_SKEW_S` of now;
* **magnitudes** (:func:`check_magnitudes`, :func:`magnitude`): numbers the service learns from or answers
  about must not exceed a configured magnitude (``1e300`` is finite, its square is not),
  and latencies must be at least its inverse.

Examples
--------
>>> batch_size(4, "batch.batch_size"), name_ok("gpu0"), name_ok("", required=False)
(4, True, True)
>>> overlap(1.5, "co_runners[0].overlap")
Traceback (most recent call last):
...
predictor.records.rules.RecordError: co_runners[0].overlap: must lie in [0, 1], got 1.5
>>> check_magnitudes({"solo_latency_ms": 1e10}.items(), 1e9)
Traceback (most recent call last):
...
predictor.records.rules.RecordError: solo_latency_ms: magnitude 1e+10 is beyond the limit of 1e+09
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from predictor.records.keyed import KeyedMaps

SCHEMA = "coloc/v1"
MAX_NAME_LENGTH = 256
MAX_CO_RUNNERS = 64
MAX_NUMERIC_KEYS = 64
MAX_MAGNITUDE = 1e9
"""Default magnitude limit (``ServiceConfig.max_value``) on numbers learned from or asked about."""

MAX_TIMESTAMP_SKEW_S = 366 * 86400.0
"""How far from now (either way) a time stamp in a query may lie, in seconds."""

LATENCIES = frozenset({"latency_ms", "solo_latency_ms"})
"""Fields holding a latency: besides the magnitude limit, at least its inverse."""

BATCH_CPU_SIGNAL = "batch_cpu_ms"
"""Signal: CPU time the batch's own thread used (CPU backend), measured on the batch itself."""

OUTCOME_SIGNALS = frozenset({BATCH_CPU_SIGNAL})
"""Signals measured on the batch itself, known only once it ran: logged for analysis,
never a feature (a scheduler cannot know them before dispatch)."""


class RecordError(ValueError):
    """A record (or query) field that does not follow ``coloc/v1``.

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


# --------------------------------------------------------------------- predicates (typed values)


def name_ok(value: str, *, required: bool = True) -> bool:
    """Whether a string passes the name rule: non-empty when ``required``, at most :data:`MAX_NAME_LENGTH`."""
    return len(value) <= MAX_NAME_LENGTH and not (required and not value)


def finite_ok(value: float) -> bool:
    """Whether a number is finite."""
    return math.isfinite(value)


def positive_ok(value: float) -> bool:
    """Whether a number is finite and > 0 (a latency)."""
    return value > 0 and math.isfinite(value)


def non_negative_ok(value: float) -> bool:
    """Whether a number is finite and >= 0 (a remaining or elapsed time)."""
    return value >= 0 and math.isfinite(value)


def batch_size_ok(value: int) -> bool:
    """Whether an integer is a batch size (>= 1)."""
    return value >= 1


def overlap_ok(value: float) -> bool:
    """Whether a number is an overlap fraction, in [0, 1]."""
    return 0.0 <= value <= 1.0


def co_runner_count_ok(count: int) -> bool:
    """Whether a record may have ``count`` co-runners."""
    return count <= MAX_CO_RUNNERS


def numbers_ok(values: Mapping[str, float]) -> bool:
    """Whether a typed ``attrs`` or ``signals`` map passes :func:`numeric_map` as it is."""
    if not values:
        return True
    return (
        len(values) <= MAX_NUMERIC_KEYS
        and all(name_ok(key) for key in values)
        and all(map(finite_ok, values.values()))
    )


# --------------------------------------------------------------------- checks (decoded values)


def require_mapping(value: Any, path: str) -> Mapping[str, Any]:
    """``value`` when it is a mapping; raises :class:`RecordError` otherwise (or when missing)."""
    if value is None:
        raise RecordError(path, "is required")
    if not isinstance(value, Mapping):
        raise RecordError(path, f"must be an object, got {type(value).__name__}")
    return value


def name(value: Any, path: str, *, required: bool = True) -> str:
    """A name (device, model, kind, source, key): a string, non-empty when ``required``, bounded."""
    if value is None and not required:
        return ""
    if value is None:
        raise RecordError(path, "is required")
    if not isinstance(value, str) or (required and not value):
        raise RecordError(path, f"must be a non-empty string, got {value!r}")
    if not name_ok(value, required=required):
        raise RecordError(path, f"longer than {MAX_NAME_LENGTH} characters")
    return value


def number(value: Any, path: str) -> float:
    """A finite number (not a bool)."""
    if value is None:
        raise RecordError(path, "is required")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(path, f"must be a number, got {value!r}")
    result = float(value)
    if not finite_ok(result):
        raise RecordError(path, f"must be finite, got {value!r}")
    return result


def _number_where(value: Any, path: str, ok: Callable[[float], bool], must: str, *, as_given: bool) -> float:
    """:func:`number`, then ``ok`` of it, else "must {must}, got ..." (the value as given, or as a float)."""
    result = number(value, path)
    if not ok(result):
        raise RecordError(path, f"must {must}, got {value if as_given else result!r}")
    return result


def positive(value: Any, path: str) -> float:
    """A finite number > 0 (a latency)."""
    return _number_where(value, path, positive_ok, "be > 0", as_given=True)


def non_negative(value: float, path: str) -> float:
    """A finite number >= 0 (a co-runner's remaining time, a batch's elapsed time)."""
    if not non_negative_ok(value):
        raise RecordError(path, f"must be finite and >= 0, got {value!r}")
    return value


def batch_size(value: Any, path: str) -> int:
    """An integer >= 1 (an integral float is accepted)."""
    if isinstance(value, bool) or not isinstance(value, int) or not batch_size_ok(value):
        if isinstance(value, float) and value.is_integer() and batch_size_ok(int(value)):
            return int(value)
        raise RecordError(path, f"must be an integer >= 1, got {value!r}")
    return value


def overlap(value: Any, path: str) -> float:
    """An overlap fraction: finite, in [0, 1]."""
    return _number_where(value, path, overlap_ok, "lie in [0, 1]", as_given=False)


def numeric_map(value: Any, path: str) -> dict[str, float]:
    """An ``attrs`` or ``signals`` map: at most :data:`MAX_NUMERIC_KEYS` names, finite numbers."""
    if value is None:
        return {}
    mapping = require_mapping(value, path)
    if len(mapping) > MAX_NUMERIC_KEYS:
        raise RecordError(path, f"more than {MAX_NUMERIC_KEYS} keys")
    out: dict[str, float] = {}
    for key, item in mapping.items():
        key_path = f"{path}.{key}"
        name(key, key_path)
        out[key] = number(item, key_path)
    return out


def co_runner_count(count: int, path: str = "co_runners") -> None:
    """Raise when a record has more than :data:`MAX_CO_RUNNERS` co-runners."""
    if not co_runner_count_ok(count):
        raise RecordError(path, f"more than {MAX_CO_RUNNERS} co-runners")


# --------------------------------------------------------------------- column predicates (candidates)

_VALUES = operator.methodcaller("values")


def names_ok(names: Iterable[str], *, required: bool) -> bool:
    """:func:`name_ok` of every name at once (each distinct name checked once: a ranking's columns
    name few models and kinds many times over)."""
    distinct = names if isinstance(names, (set, frozenset)) else set(names)
    if not distinct:
        return True
    return max(map(len, distinct)) <= MAX_NAME_LENGTH and not (required and "" in distinct)


def keyed_keys_ok(maps: KeyedMaps) -> bool:
    """:func:`maps_ok` of keyed maps but their values: at most :data:`MAX_NUMERIC_KEYS` in a map, every
    key a valid name (checked even where no row has a value)."""
    return maps.most_keys() <= MAX_NUMERIC_KEYS and _keys_ok(maps.keys)


def _keys_ok(keys: Iterable[str]) -> bool:
    return all(isinstance(k, str) for k in keys) and names_ok(keys, required=True)


def maps_ok(maps: Sequence[Mapping[str, float]], limit: float = math.inf) -> bool:
    """:func:`numbers_ok` of every map at once, and every value within ``limit`` in magnitude."""
    keys: Iterable[str]
    if isinstance(maps, KeyedMaps):
        if not keyed_keys_ok(maps):
            return False
        keys, values = (), maps.present()
    else:
        most = max(map(len, maps)) if maps else 0
        if not most or most > MAX_NUMERIC_KEYS:
            return most <= MAX_NUMERIC_KEYS
        keys = set(itertools.chain.from_iterable(map(tuple, set(map(tuple, maps)))))
        values = np.fromiter(itertools.chain.from_iterable(map(_VALUES, maps)), dtype=float)
    return _keys_ok(keys) and bool(np.isfinite(values).all()) and magnitudes_ok(values, limit)


def overlaps_ok(values: np.ndarray) -> bool:
    """:func:`overlap_ok` of every value at once (NaN fails)."""
    return bool(((values >= 0) & (values <= 1)).all())


def non_negatives_ok(values: np.ndarray) -> bool:
    """:func:`non_negative_ok` of every value at once."""
    return bool((np.isfinite(values) & (values >= 0)).all())


# --------------------------------------------------------------------- magnitudes


def magnitudes_ok(values: np.ndarray, limit: float) -> bool:
    """Whether every value is within ``limit`` in magnitude (NaN fails)."""
    return bool((np.abs(values) <= limit).all()) if values.size else True


def magnitude_ok(value: float, limit: float) -> bool:
    """Whether a number is within ``limit`` in magnitude."""
    return abs(value) <= limit


def map_magnitudes_ok(values: Mapping[str, float], limit: float) -> bool:
    """:func:`magnitude_ok` of every value of an ``attrs`` or ``signals`` map."""
    return not values or max(map(abs, values.values())) <= limit


def latency_ok(value: float, limit: float) -> bool:
    """Whether a latency lies within ``[1 / limit, limit]``."""
    return 1.0 / limit <= value <= limit


def magnitude(value: float, path: str, limit: float) -> float:
    """A finite number within ``limit`` in magnitude (a deadline, a remaining time)."""
    if not finite_ok(value):
        raise RecordError(path, f"must be finite, got {value!r}")
    if not magnitude_ok(value, limit):
        raise RecordError(path, f"magnitude {value:g} is beyond the limit of {limit:g}")
    return value


def check_confidence(confidence: float) -> float:
    """Validate a confidence level in (0, 1) (a query's, a calibrator's target); raises :class:`ValueError`."""
    if not (isinstance(confidence, (int, float)) and math.isfinite(confidence) and 0.0 < confidence < 1.0):
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    return float(confidence)


def timestamp(seconds: int, nanos: int, path: str, now: float) -> float:
    """A protobuf ``Timestamp`` as Unix seconds: ``nanos`` in ``[0, 1e9)``, ``seconds`` within
    :data:`MAX_TIMESTAMP_SKEW_S` of ``now``; raises :class:`RecordError` naming the part.

    >>> timestamp(100, 10**9, "deadline_time", now=100.0)
    Traceback (most recent call last):
    ...
    predictor.records.rules.RecordError: deadline_time.nanos: must lie in [0, 1e9), got 1000000000
    """
    if not 0 <= nanos < 1_000_000_000:
        raise RecordError(f"{path}.nanos", f"must lie in [0, 1e9), got {nanos}")
    if not abs(seconds - now) <= MAX_TIMESTAMP_SKEW_S:
        raise RecordError(
            f"{path}.seconds", f"{seconds} is more than {MAX_TIMESTAMP_SKEW_S:g} s from now ({now:.0f})"
        )
    return seconds + nanos / 1e9


def check_magnitudes(numbers: Iterable[tuple[str, float]], limit: float) -> None:
    """Raise :class:`RecordError` naming the first of ``(path, value)`` beyond ``limit`` in magnitude.

    Then, latencies (paths in :data:`LATENCIES`) must also be at least ``1 / limit``
    (a latency of ``5e-324`` ms is no measurement).
    """
    numbers = list(numbers)
    for path, value in numbers:
        if not magnitude_ok(value, limit):
            raise RecordError(path, f"magnitude {value:g} is beyond the limit of {limit:g}")
    for path, value in numbers:
        if path in LATENCIES and not latency_ok(value, limit):
            raise RecordError(path, f"{value:g} is below the smallest latency, {1.0 / limit:g} ms")


def non_negative_within(value: float, path: str, limit: float = MAX_MAGNITUDE) -> float:
    """A finite number >= 0 within ``limit`` in magnitude (memory in MB, a load time)."""
    non_negative(value, path)
    if not magnitude_ok(value, limit):
        raise RecordError(path, f"magnitude {value:g} is beyond the limit of {limit:g}")
    return value


MAX_INPUT_BYTES = 1e15
"""Largest size of a batch's input, bytes (a petabyte): sizes are not bounded by ``max_value``."""


def input_bytes_ok(value: float) -> bool:
    """Whether a number is the size of an input: finite, >= 0, at most :data:`MAX_INPUT_BYTES`."""
    return 0.0 <= value <= MAX_INPUT_BYTES


def input_bytes(value: float, path: str) -> float:
    """The size of a batch's input in bytes (:func:`input_bytes_ok`); raises :class:`RecordError`."""
    if not input_bytes_ok(value):
        raise RecordError(path, f"must be finite, >= 0 and at most {MAX_INPUT_BYTES:g} bytes, got {value!r}")
    return value
