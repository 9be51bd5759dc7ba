"""The live view's side log: batch starts and ends, so that a restart restores what runs where.

The live view (:mod:`predictor.service.live.liveview`) is soft state: a batch it
misses only makes its device look idler than it is. Still, a scheduler's first
answer after a restart should be as good as its last, so every start and end
is appended to ``<state>/live/batches.log`` (one ``write`` syscall each, the
same ``<CRC-32> <JSON>`` lines as the observation log; no fsync: it survives a
kill of the process, not a machine crash). A start records when the batch
started on the *wall clock* (the view's own clock is monotonic and does not
survive a restart). At start-up :meth:`LiveLog.restore` enters the batches still
running into the view; the log is compacted to them then, whenever it has grown
by ``compact_after`` lines, and after a write fails (a full disk): a write
failure is counted and logged, never passed to the caller.

Examples
--------
>>> import tempfile
>>> from predictor.records.record import BatchSpec
>>> from predictor.service.live.liveview import LiveView
>>> folder, wall = tempfile.mkdtemp(), [1000.0]
>>> journal = LiveLog(folder, wall=lambda: wall[0])
>>> view = LiveView()
>>> journal.restore(view, horizon_s=60).restored
0
>>> journal.attach(view)
>>> view.start("gpu0", "L4", "b1", BatchSpec("bert", 4), predicted_ms=20_000.0)
1
>>> journal.close()
>>> wall[0] += 5.0  # restarted 5 s later
>>> again = LiveView(clock=lambda: 0.0)
>>> report = LiveLog(folder, wall=lambda: wall[0]).restore(again, horizon_s=60)
>>> report.restored, [(r.batch_id, round(ms)) for r, ms in again.running("gpu0")]
(1, [('b1', 15000)])
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from predictor.records.record import BatchSpec
from predictor.runtime.durable import close_quietly, fsync_dir
from predictor.service.errors import ServiceError

DIR_NAME = "live"
FILE_NAME = "batches.log"
log = logging.getLogger("predictor.service.durability.livelog")


@dataclass
class LiveRestoreReport:
    """What a restore found: batches restored, expired (past the horizon), ended, bad lines skipped."""

    restored: int = 0
    expired: int = 0
    ended: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the start-up message."""
        text = f"live view: {self.restored} running batches restored, {self.expired} expired"
        if self.skipped:
            text += f", {self.skipped} bad lines skipped (first: {self.errors[0]})"
        return text


def _line(obj: dict) -> bytes:
    body = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    return b"%08x %s\n" % (zlib.crc32(body), body)


def _parse(line: bytes) -> dict:
    crc, sep, body = line.partition(b" ")
    if not sep or len(crc) != 8 or not line.endswith(b"\n"):
        raise ValueError("torn or malformed line")
    body = body[:-1]
    try:
        if zlib.crc32(body) != int(crc, 16):
            raise ValueError("checksum mismatch")
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(str(exc) or "not JSON") from None
    if not isinstance(obj, dict) or obj.get("op") not in ("start", "end"):
        raise ValueError("not a start or end entry")
    return obj


class LiveLog:
    """Append-only side log of batch starts and ends (see the module docstring).

    Parameters
    ----------
    folder
        Where ``batches.log`` lives (created when missing).
    compact_after
        Lines appended before the log is rewritten with only the running batches.
    wall
        Wall clock, Unix seconds.
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        compact_after: int = 10_000,
        wall: Callable[[], float] = time.time,
    ):
        self.folder = Path(folder)
        self.path = self.folder / FILE_NAME
        self.compact_after = compact_after
        self.wall = wall
        self.horizon_s = 60.0
        self._running: dict[tuple[str, str], dict] = {}  # (device, batch_id) -> start entry
        self._fd: int | None = None
        self._appended = 0
        self._broken = False
        self._lock = threading.Lock()
        self.n_write_failures = 0

    # ------------------------------------------------------------------ start-up
    def restore(self, view: Any, horizon_s: float) -> LiveRestoreReport:
        """Enter the batches the log says still run into ``view`` (a LiveView, not yet attached).

        Folds the log (a start, unless an end follows it), drops the batches that started more
        than ``horizon_s`` ago (they have long ended; a wall clock stepped backwards makes a batch
        look younger, and the view's own staleness limit still drops it), enters the rest with the
        elapsed time they have run (the devices of the dropped ones stay known, idle), and
        rewrites the log with just them.
        """
        self.horizon_s = horizon_s
        report = LiveRestoreReport()
        running: dict[tuple[str, str], dict] = {}
        try:
            stream = open(self.path, "rb")  # noqa: SIM115
        except FileNotFoundError:
            stream = None
        if stream is not None:
            with stream:
                offset = 0
                for number, line in enumerate(stream, start=1):
                    try:
                        obj = _parse(line)
                        key = (str(obj["device"]), str(obj["batch_id"]))
                    except (ValueError, KeyError) as exc:
                        report.skipped += 1
                        if len(report.errors) < 20:
                            report.errors.append(f"{FILE_NAME}: line {number} (byte offset {offset}): {exc}")
                        offset += len(line)
                        continue
                    offset += len(line)
                    if obj["op"] == "start":
                        running[key] = obj
                    elif running.pop(key, None) is not None:
                        report.ended += 1
        now = self.wall()
        for key, obj in running.items():
            age_s = now - float(obj.get("started", now))
            if age_s > horizon_s:
                report.expired += 1
                try:
                    view.touch(key[0], str(obj.get("kind", "")))  # the device stays known, idle
                except ServiceError:
                    pass
                continue
            try:
                batch = obj["batch"]
                view.start(
                    key[0],
                    str(obj.get("kind", "")),
                    key[1],
                    BatchSpec(str(batch["model"]), int(batch["batch_size"]), dict(batch.get("attrs") or {})),
                    float(obj["predicted_ms"]),
                    max(0.0, age_s) * 1000.0,
                )
            except (KeyError, TypeError, ValueError, ServiceError) as exc:
                report.skipped += 1
                if len(report.errors) < 20:
                    report.errors.append(f"{FILE_NAME}: batch {key[1]!r} on {key[0]!r}: {exc}")
                continue
            self._running[key] = obj
            report.restored += 1
        with self._lock:
            self._compact()
        if report.skipped:
            log.warning("%s", report.summary())
        return report

    def attach(self, view: Any) -> None:
        """Log ``view``'s starts and ends from now on."""
        view.journal = self

    # ------------------------------------------------------------------ the view's calls
    def started(
        self, device: str, kind: str, batch_id: str, batch: BatchSpec, predicted_ms: float, elapsed_ms: float
    ) -> None:
        """A batch entered the view (called under the view's lock)."""
        obj = {
            "op": "start",
            "device": device,
            "kind": kind,
            "batch_id": batch_id,
            "batch": {"model": batch.model, "batch_size": batch.batch_size, "attrs": dict(batch.attrs)},
            "predicted_ms": predicted_ms,
            "started": self.wall() - elapsed_ms / 1000.0,
        }
        with self._lock:
            self._running[(device, batch_id)] = obj
            self._write(obj)

    def ended(self, device: str, batch_id: str) -> None:
        """A batch left the view by an end report (called under the view's lock)."""
        with self._lock:
            if self._running.pop((device, batch_id), None) is None:
                return
            self._write({"op": "end", "device": device, "batch_id": batch_id})

    # ------------------------------------------------------------------ writing
    def _write(self, obj: dict) -> None:
        if self._broken or self._fd is None or self._appended >= self.compact_after:
            self._compact()
            return  # the rewrite holds obj's effect
        try:
            _write_all(self._fd, _line(obj))
            self._appended += 1
        except (OSError, ValueError) as exc:
            self._failed(exc)

    def _compact(self) -> None:
        """Rewrite the log atomically with the running batches within the horizon (under the lock)."""
        now = self.wall()
        self._running = {
            k: v for k, v in self._running.items() if now - float(v.get("started", now)) <= self.horizon_s
        }
        self.close_fd()
        tmp = self.path.with_name(f".{FILE_NAME}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            data = b"".join(_line(v) for v in self._running.values())
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            fsync_dir(self.folder)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except (OSError, ValueError) as exc:
            tmp.unlink(missing_ok=True)
            self._failed(exc)
            return
        self._appended = 0
        self._broken = False

    def _failed(self, exc: Exception) -> None:
        self._broken = True
        self.n_write_failures += 1
        log.error("live view log %s: %s (the view goes on in memory; retried at the next report)", self.path, exc)

    def close_fd(self) -> None:
        """Close the log file (it is reopened by the next write)."""
        fd, self._fd = self._fd, None
        close_quietly(fd)

    def close(self) -> None:
        """Stop logging (a graceful stop)."""
        with self._lock:
            self.close_fd()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
