"""Snapshots of a predictor's learned state: a versioned header, then a pickle.

A snapshot starts with a one-line JSON header (format, version, predictor
name, parameters) so an incompatible or foreign file is refused with a clear
message before anything is unpickled. Only load snapshots you wrote: the body
is a pickle.

Examples
--------
>>> from predictor.predictors import create
>>> blob = snapshot_predictor(create("rls"))
>>> restore_predictor(blob).name
'rls'
>>> restore_predictor(b"garbage")
Traceback (most recent call last):
...
predictor.snapshot.SnapshotError: snapshot: not a predictor snapshot (bad header)
"""

from __future__ import annotations

import json
import pickle

from predictor.predictors.base import LatencyPredictor

FORMAT = "interference-predictor-snapshot"
VERSION = 1


class SnapshotError(ValueError):
    """A snapshot that cannot be restored; nothing was loaded."""


def snapshot_predictor(predictor: LatencyPredictor) -> bytes:
    """Serialise ``predictor`` (hyperparameters and learned state)."""
    header = {"format": FORMAT, "version": VERSION, "name": predictor.name, "n_learned": predictor.n_learned}
    return json.dumps(header).encode() + b"\n" + pickle.dumps(predictor, protocol=pickle.HIGHEST_PROTOCOL)


def read_header(blob: bytes) -> dict:
    """The header of a snapshot, validated."""
    line, sep, _ = blob.partition(b"\n")
    try:
        header = json.loads(line) if sep else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SnapshotError("snapshot: not a predictor snapshot (bad header)")
    if header.get("version") != VERSION:
        raise SnapshotError(f"snapshot: version {header.get('version')!r} is not supported (expected {VERSION})")
    return header


def restore_predictor(blob: bytes) -> LatencyPredictor:
    """Rebuild a predictor from :func:`snapshot_predictor` output, or raise :class:`SnapshotError`."""
    header = read_header(blob)
    body = blob.partition(b"\n")[2]
    try:
        predictor = pickle.loads(body)
    except Exception as exc:  # a truncated or corrupt pickle can raise almost anything
        raise SnapshotError(f"snapshot: body unreadable ({type(exc).__name__}: {exc})") from None
    if not isinstance(predictor, LatencyPredictor) or predictor.name != header.get("name"):
        raise SnapshotError("snapshot: body does not match its header")
    return predictor
