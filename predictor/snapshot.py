"""Snapshots of learned state, a predictor's or a whole service's: one versioned format.

Layout::

    INTERFERENCE-PREDICTOR-SNAPSHOT\\n      magic line
    {"format": ..., "version": 2, ...}\\n   JSON header (one line)
    <payload>                               pickle of the state, ``payload_bytes`` long

The header records the payload's length and SHA-256, the predictor (its
name or spec), the number of observations learned, and any fields the writer
adds (the service adds ``log_sequence``: the last observation log entry the
state covers, see :mod:`predictor.service.durability.wal`).

* Bytes: :func:`dumps` and :func:`loads`.
* Files: :func:`write_snapshot` and :func:`write_payload` write to a temporary
  file in the same folder, flush and fsync it, rename it over the previous
  snapshot and fsync the folder, so a crash leaves either the old or the new
  snapshot; :func:`read_snapshot` and :func:`read_header` read them back.
* Predictors: :func:`snapshot_predictor` and :func:`restore_predictor`.

A read checks the magic, the header, the version, the length and the digest
before unpickling anything; any failure raises :class:`SnapshotError` saying
what and where, and nothing is loaded. Snapshots are pickles: restore only
snapshots you wrote (a state folder is trusted like the code itself).

Examples
--------
>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> header = write_snapshot(folder / "s.snapshot", {"w": [1.0, 2.0]}, predictor="rls", observations=2)
>>> state, header = read_snapshot(folder / "s.snapshot")
>>> state, header["predictor"], header["observations"]
({'w': [1.0, 2.0]}, 'rls', 2)
>>> (folder / "bad.snapshot").write_bytes(b"hello")
5
>>> read_snapshot(folder / "bad.snapshot")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
predictor.runtime.durable.SnapshotError: ...bad.snapshot: not a predictor snapshot (bad magic at byte 0)

A predictor round-trips through the same format:

>>> from predictor.predictors import create
>>> blob = snapshot_predictor(create("rls"))
>>> blob.startswith(MAGIC), restore_predictor(blob).name
(True, 'rls')
>>> restore_predictor(b"garbage")
Traceback (most recent call last):
...
predictor.runtime.durable.SnapshotError: snapshot: not a predictor snapshot (bad magic at byte 0)
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import platform
import time
from pathlib import Path
from typing import Any

from predictor.predictors.base import LatencyPredictor
from predictor.runtime.durable import SnapshotError, fsync_dir

MAGIC = b"INTERFERENCE-PREDICTOR-SNAPSHOT\n"
FORMAT = "interference-predictor/service-state"
VERSION = 2
"""The format version this code writes and reads. Version 1 payloads were pickled by code that
filled in attributes missing from older pickles on load; this code sets every attribute when an
object is made and loads no such pickle, so a version 1 snapshot is refused
(:func:`parse_header` says how to rebuild the state from the records it was learned from)."""
MAX_HEADER_BYTES = 64 * 1024
REQUIRED = ("payload_bytes", "payload_sha256", "predictor", "observations")
"""Header fields every snapshot has (besides ``format`` and ``version``)."""
REBUILD = (
    "it was written by an older version of the code, whose learned state this one cannot load. "
    "Rebuild the state from the records it was learned from: move the state folder aside whole "
    "(its observation log holds only the records after this snapshot, so replaying it alone "
    "would lose the rest) and run `predictor serve --state DIR --warm-start LOG`, with DIR a new "
    "or empty folder and LOG the coloc/v1 log of those records; the service learns LOG and writes "
    f"a version {VERSION} snapshot in DIR"
)
"""What a refusal of an older snapshot tells the user to do."""


def dump_state(state: Any) -> bytes:
    """The payload bytes for ``state`` (take them under the owner's lock, write them outside)."""
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def _frame(
    payload: bytes, predictor: str, observations: int, extra: dict[str, Any] | None
) -> tuple[bytes, dict]:
    """The snapshot bytes around ``payload``, and their header."""
    header = {
        "format": FORMAT,
        "version": VERSION,
        "created": time.time(),
        "predictor": predictor,
        "observations": int(observations),
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
        "python": platform.python_version(),
    }
    header.update(extra or {})
    return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload, header


def dumps(state: Any, *, predictor: str, observations: int, extra: dict[str, Any] | None = None) -> bytes:
    """A snapshot of ``state`` as bytes.

    Parameters
    ----------
    state
        Anything picklable.
    predictor
        The predictor's name or spec, recorded in the header.
    observations
        How many observations the state has learned.
    extra
        More JSON fields for the header.
    """
    return _frame(dump_state(state), predictor, observations, extra)[0]


def parse_header(head: bytes, source: str = "snapshot") -> tuple[dict, int]:
    """The validated header at the start of ``head`` and the byte offset of the payload.

    ``head`` holds at least the first ``len(MAGIC) + MAX_HEADER_BYTES`` bytes of a snapshot
    (or all of it); ``source`` names it in errors.
    """
    if head[: len(MAGIC)] != MAGIC:
        raise SnapshotError(f"{source}: not a predictor snapshot (bad magic at byte 0)")
    offset = len(MAGIC)
    end = head.find(b"\n", offset, offset + MAX_HEADER_BYTES)
    if end < 0:
        raise SnapshotError(f"{source}: header truncated or too long at byte {offset}")
    try:
        header = json.loads(head[offset:end])
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{source}: header at byte {offset} is not JSON ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SnapshotError(f"{source}: header at byte {offset} is not a {FORMAT} header")
    version = header.get("version")
    if version != VERSION:
        said = f"{source}: snapshot format version {version!r} is not supported (this code reads version {VERSION})"
        if isinstance(version, int) and not isinstance(version, bool) and version < VERSION:
            said += f"; {REBUILD}"
        raise SnapshotError(said)
    for key in REQUIRED:
        if key not in header:
            raise SnapshotError(f"{source}: header at byte {offset} lacks {key!r}")
    return header, end + 1


def loads(blob: bytes, source: str = "snapshot") -> tuple[Any, dict]:
    """Verify and load a snapshot from :func:`dumps`; returns ``(state, header)``.

    Raises :class:`SnapshotError`, naming ``source`` and what is wrong where, for anything
    but a whole, intact snapshot of this format version.
    """
    header, offset = parse_header(blob, source)
    payload = blob[offset:]
    expected = header["payload_bytes"]
    if len(payload) != expected:
        raise SnapshotError(
            f"{source}: body unreadable: {len(payload)} bytes from byte {offset}, header says {expected} (truncated?)"
        )
    if hashlib.sha256(payload).hexdigest() != header["payload_sha256"]:
        raise SnapshotError(
            f"{source}: body unreadable: checksum mismatch (corrupted between bytes {offset} and {offset + expected})"
        )
    try:
        state = pickle.loads(payload)
    except Exception as exc:  # a class renamed or removed since the snapshot was written
        raise SnapshotError(f"{source}: body unreadable by this version of the code ({exc})") from None
    return state, header


def write_snapshot(path: str | os.PathLike, state: Any, *, predictor: str, observations: int) -> dict:
    """Atomically write a snapshot of ``state`` to ``path``; returns the header written."""
    return write_payload(path, dump_state(state), predictor=predictor, observations=observations)


def write_payload(
    path: str | os.PathLike,
    payload: bytes,
    *,
    predictor: str,
    observations: int,
    extra: dict[str, Any] | None = None,
) -> dict:
    """Atomically write a payload from :func:`dump_state` to ``path``; returns the header written.

    ``extra`` adds JSON fields to the header (e.g. ``log_sequence``, the last observation log
    entry the state covers).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data, header = _frame(payload, predictor, observations, extra)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return header


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Delete the temporary files a writer of ``path`` killed mid-write left (``.<name>.<pid>.tmp``).

    Call before any writer runs; returns what was deleted. The snapshot at ``path`` itself is
    untouched: a write cut short never replaced it.
    """
    path = Path(path)
    if not path.parent.is_dir():
        return []
    stale = [p for p in path.parent.glob(f".{path.name}.*.tmp") if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def _read(path: Path, size: int = -1) -> bytes:
    try:
        with open(path, "rb") as stream:
            return stream.read(size)
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_header(path: str | os.PathLike) -> tuple[dict, int]:
    """The header of the snapshot at ``path`` and the byte offset of its payload (the payload is not read)."""
    path = Path(path)
    return parse_header(_read(path, len(MAGIC) + MAX_HEADER_BYTES), str(path))


def read_snapshot(path: str | os.PathLike) -> tuple[Any, dict]:
    """Read and verify the snapshot at ``path``; returns ``(state, header)``."""
    path = Path(path)
    return loads(_read(path), str(path))


def snapshot_predictor(predictor: LatencyPredictor) -> bytes:
    """A snapshot of ``predictor`` (hyperparameters and learned state) as bytes."""
    return dumps(predictor, predictor=predictor.name, observations=predictor.n_learned)


def restore_predictor(blob: bytes) -> LatencyPredictor:
    """Rebuild a predictor from :func:`snapshot_predictor` output, or raise :class:`SnapshotError`."""
    predictor, header = loads(blob)
    if not isinstance(predictor, LatencyPredictor) or predictor.name != header["predictor"]:
        raise SnapshotError("snapshot: body does not match its header")
    return predictor
