"""Snapshots of the service's learned state: written atomically, restored whole or not at all.

File layout::

    INTERFERENCE-PREDICTOR-SNAPSHOT\\n      magic line
    {"format": ..., "version": 1, ...}\\n   JSON header (one line)
    <payload>                               pickle of the state, ``payload_bytes`` long

The header records the payload's length and SHA-256, the predictor spec,
the number of observations learned and, for a service with an observation
log, ``log_sequence``: the last log entry the state covers (the restart
replays the entries after it, see :mod:`predictor.service.wal`). A write goes to a temporary file in the
same folder, is flushed and fsynced, then renamed over the previous snapshot
and the folder fsynced, so a crash leaves either the old or the new snapshot.
A read checks the magic, the header, the version, the length and the digest
before unpickling anything; any failure raises :class:`SnapshotError` saying
what and where, and nothing is loaded.

Snapshots are pickles: restore only snapshots this service wrote (the state
folder is trusted like the service's own code).

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
predictor.service.snapshot.SnapshotError: ...bad.snapshot: not a predictor snapshot (bad magic at byte 0)
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

from predictor.service.durable import fsync_dir

MAGIC = b"INTERFERENCE-PREDICTOR-SNAPSHOT\n"
FORMAT = "interference-predictor/service-state"
VERSION = 1
FILE_NAME = "service.snapshot"
MAX_HEADER_BYTES = 64 * 1024


class SnapshotError(RuntimeError):
    """A snapshot that cannot be read or does not fit this service; nothing was loaded."""


def dump_state(state: Any) -> bytes:
    """The payload bytes for ``state`` (take them under the owner's lock, write them outside)."""
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def write_snapshot(path: str | os.PathLike, state: Any, *, predictor: str, observations: int) -> dict:
    """Atomically write ``state`` to ``path``; returns the header written."""
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
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(MAGIC)
            out.write(json.dumps(header, sort_keys=True).encode() + b"\n")
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return header


def read_header(path: str | os.PathLike) -> tuple[dict, int]:
    """The header of the snapshot at ``path`` and the byte offset of its payload."""
    path = Path(path)
    try:
        with open(path, "rb") as stream:
            magic = stream.read(len(MAGIC))
            if magic != MAGIC:
                raise SnapshotError(f"{path}: not a predictor snapshot (bad magic at byte 0)")
            line = stream.readline(MAX_HEADER_BYTES)
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read ({exc.strerror or exc})") from None
    offset = len(MAGIC)
    if not line.endswith(b"\n"):
        raise SnapshotError(f"{path}: header truncated or too long at byte {offset}")
    try:
        header = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{path}: header at byte {offset} is not JSON ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SnapshotError(f"{path}: header at byte {offset} is not a {FORMAT} header")
    if header.get("version") != VERSION:
        raise SnapshotError(
            f"{path}: snapshot format version {header.get('version')!r} is not supported "
            f"(this service reads version {VERSION})"
        )
    for key in ("payload_bytes", "payload_sha256", "predictor", "observations"):
        if key not in header:
            raise SnapshotError(f"{path}: header at byte {offset} lacks {key!r}")
    return header, offset + len(line)


def read_snapshot(path: str | os.PathLike) -> tuple[Any, dict]:
    """Read and verify the snapshot at ``path``; returns ``(state, header)``."""
    path = Path(path)
    header, offset = read_header(path)
    with open(path, "rb") as stream:
        stream.seek(offset)
        payload = stream.read()
    expected = header["payload_bytes"]
    if len(payload) != expected:
        raise SnapshotError(
            f"{path}: payload is {len(payload)} bytes from byte {offset}, header says {expected} (truncated?)"
        )
    if hashlib.sha256(payload).hexdigest() != header["payload_sha256"]:
        raise SnapshotError(
            f"{path}: payload checksum mismatch (corrupted between bytes {offset} and {offset + expected})"
        )
    try:
        state = pickle.loads(payload)
    except Exception as exc:  # a class renamed or removed since the snapshot was written
        raise SnapshotError(f"{path}: payload cannot be loaded by this version of the code ({exc})") from None
    return state, header
