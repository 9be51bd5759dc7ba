"""The service's errors retold for the command line: the flag to use, not the request field.

The service names the offending field of the gRPC request (``candidates[1].device``,
``query.co_runners[0].overlap``) and may advise in the contract's words ("give its co-runners with
co_runner_source EXPLICIT"). :func:`describe` turns both into what a ``predictor query`` user types:
the flag (``--devices``, the first ``--co-runner``) and the options that follow the advice.

Examples
--------
>>> flag_of("candidates[1].device", devices=["cpu0", "cpu1"])
"--devices (its 2nd device, 'cpu1')"
>>> flag_of("query.co_runners[0].overlap")
'--co-runner (the 1st, its OVERLAP)'
>>> flag_of("query.batch.batch_size")
'--batch-size'
>>> in_flag_words("give its co-runners with co_runner_source EXPLICIT")
'say what runs there: --idle (nothing) or --co-runner MODEL:BATCH[:OVERLAP] (repeatable)'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# Request fields (after any ``query.``/``candidates[i].``/``stages[i].`` prefix) and their flags.
_FIELD_FLAGS = {
    "device": "--device",
    "device_kind": "--device-kind",
    "batch.model": "--model",
    "batch.batch_size": "--batch-size",
    "batch.attrs": "--attr",
    "batch": "--model/--batch-size",
    "co_runner_source": "--idle or --co-runner",
    "solo_latency_ms": "--solo-ms",
    "confidence": "--confidence",
    "deadline": "--deadline-ms",
    "deadline_ms": "--deadline-ms",
    "deadline_time": "--deadline-ms",
    "learned_only": "--learned-only",
    "input_host": "--input-host",
    "input_device": "--input-device",
    "input_bytes": "--input-bytes",
    "price_per_s": "--prices",
    "edges": "--edge",
    "stages": "--stage",
    "candidates": "--devices",
}
# Contract words in messages, and what to type instead.
_PHRASES = (
    (
        re.compile(r"give its co-runners with co_runner_source EXPLICIT"),
        "say what runs there: --idle (nothing) or --co-runner MODEL:BATCH[:OVERLAP] (repeatable)",
    ),
    (re.compile(r"co_runner_source EXPLICIT"), "--idle or --co-runner"),
    (re.compile(r"\bsolo_latency_ms\b"), "--solo-ms"),
    (re.compile(r"\blearned_only\b"), "--learned-only"),
    (re.compile(r"\bdeadline_ms\b"), "--deadline-ms"),
    (re.compile(r"\bprice_per_s\b"), "--prices"),
)
_INDEXED = re.compile(r"^(?P<list>candidates|stages|co_runners|edges|price_per_s)\[(?P<i>\d+)\]\.?(?P<rest>.*)$")


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _plain_flag(path: str) -> str:
    """The flag of an unindexed field path: its longest prefix that has one ("" when none has)."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        flag = _FIELD_FLAGS.get(".".join(parts[:n]))
        if flag:
            return flag
    return ""


def flag_of(field: str, *, devices: Sequence[str] = ()) -> str:
    """The command-line flag standing for the request field ``field`` ("" when none does).

    ``devices`` (the ``--devices`` list of ``rank`` and ``plan``) names the device a
    ``candidates[i]`` path points at.
    """
    path = field.removeprefix("query.")
    indexed = _INDEXED.match(path)
    if indexed is None:
        return _plain_flag(path)
    which, i, rest = indexed["list"], int(indexed["i"]), indexed["rest"]
    nth = _ordinal(i + 1)
    if which == "candidates":
        named = f", {devices[i]!r}" if i < len(devices) else ""
        own = f"--devices (its {nth} device{named})"
        inner = flag_of(rest) if rest and rest != "device" else ""
        return f"{inner} for {own}" if inner else own
    if which == "stages":
        part = {"batch.model": "MODEL", "batch.batch_size": "BATCH", "solo_latency_ms": "SOLO_MS"}.get(rest)
        return f"--stage (the {nth}, its {part})" if part else f"--stage (the {nth})"
    if which == "co_runners":
        part = {"model": "MODEL", "batch_size": "BATCH", "overlap": "OVERLAP",
                "remaining_ms": "+REMAINING_MS"}.get(rest.split(".")[0])
        return f"--co-runner (the {nth}, its {part})" if part else f"--co-runner (the {nth})"
    if which == "edges":
        return f"--edge (the {nth})"
    return f"--prices (the {nth})"


def in_flag_words(message: str) -> str:
    """``message`` with the contract's words (``co_runner_source EXPLICIT``, ``solo_latency_ms``)
    replaced by the flags that do the same."""
    for pattern, words in _PHRASES:
        message = pattern.sub(words, message)
    return message


def describe(error: Any, *, devices: Sequence[str] = ()) -> str:
    """One line for a :class:`~predictor.service.errors.ServiceError`: its kind, the flag at fault
    and the reason in flag words, e.g. ``NotFound: --devices (its 2nd device, 'cpu1'): unknown
    device 'cpu1': ...; say what runs there: --idle (nothing) or --co-runner ...``."""
    field = getattr(error, "field", "") or ""
    message = in_flag_words(getattr(error, "message", None) or str(error))
    flag = flag_of(field, devices=devices)
    where = flag or field
    return f"{type(error).__name__}: {where}: {message}" if where else f"{type(error).__name__}: {message}"
