"""The observation log: an append-only, segmented write-ahead log of what the model learns.

Every observation the service learns from is appended here *before* it is
learned, and a ``ReportObservations`` stream is acknowledged only after its
records are in the log (and synced, per the fsync policy). Appending encodes an
entry; entries are written by blocks, one ``write`` syscall for a message's
records (:meth:`ObservationLog.write_through`, before the block is learned),
never one per record. A snapshot records
the sequence number of the last entry it covers; on restart the service
restores the snapshot and replays the entries after it, through the same code
path, so the restored model is the one that was running.

Layout: ``<state>/wal/observations-<first sequence, 20 digits>.log``, one
entry per line::

    <CRC-32 of the JSON, 8 hex digits> <JSON>\\n
    {"seq": 17, "client": "token:collector-a", "batch_id": "", "record": {coloc/v1 ...}}

and, when the producer named the record (:mod:`predictor.service.durability.dedup`), ``"producer"``,
``"pseq"`` and ``"rid"``: the replay rebuilds the table of records already taken from them.

A snapshot seals the current segment (fsync) and starts a new one; once the
snapshot is durable, the segments it covers are deleted.

Fsync policies (what an acknowledgement guarantees):

``always`` (default)
    Each acknowledged stream is fsynced before its answer is sent (group
    commit: one fsync covers every stream waiting on it). Acknowledged records
    survive a kill of the process and a crash or power loss of the machine
    (given a disk that honours flushes).
``batch``
    A background thread fsyncs every ``fsync_interval_s``. Acknowledged records
    survive a kill of the process (they are in the page cache, written by a
    ``write`` syscall before the answer); a machine crash loses at most the last
    interval.
``never``
    The operating system writes the pages back when it likes (Linux: within
    about 30 s by default). Survives a kill of the process only.

Reading is tolerant: a line whose checksum or JSON does not match (a torn
final line after a kill in the middle of a write, or corruption) is skipped,
counted, and reported with its file, line number and byte offset.

Examples
--------
>>> import tempfile
>>> from predictor.records.record import parse_record
>>> folder = tempfile.mkdtemp()
>>> log = ObservationLog(folder, fsync="never")
>>> log.open(1)
>>> record = parse_record({"schema": "coloc/v1", "device": "cpu0",
...     "batch": {"model": "mlp", "batch_size": 2}, "latency_ms": 4.0})
>>> log.append(record, client="a"), log.append(record)
(1, 2)
>>> log.close()
>>> report = ReplayReport()
>>> [e.seq for e in ObservationLog(folder).replay(after=1, report=report)], report.covered
([2], 1)
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from predictor.records.record import Record, RecordError, parse_record, record_to_dict
from predictor.runtime.durable import close_quietly, fsync_dir
from predictor.service.durability.dedup import DedupKey

FSYNC_POLICIES = ("always", "batch", "never")
DIR_NAME = "wal"
_SEGMENT = re.compile(r"^observations-(\d{20})\.log$")
MAX_REPORTED_ERRORS = 100
MAX_LOST_RANGES = 64
"""Ranges of entries dropped by failed writes remembered (a failure is rare; its appenders ask at once)."""
log = logging.getLogger("predictor.service.durability.wal")


class LogError(RuntimeError):
    """The observation log cannot be read (strict replay) or written."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One logged observation."""

    seq: int
    record: Record
    client: str = ""
    batch_id: str = ""
    producer: str = ""
    sequence: int = 0
    record_id: str = ""

    @property
    def key(self) -> DedupKey:
        """How the producer named the record (empty: not named)."""
        return DedupKey(self.producer, self.sequence, self.record_id)


@dataclass
class ReplayReport:
    """What a replay read: entries replayed, entries the snapshot already covered, lines skipped."""

    replayed: int = 0
    covered: int = 0
    skipped: int = 0
    last_seq: int = 0
    errors: list[str] = field(default_factory=list)

    def add_error(self, message: str) -> None:
        """Count a skipped line, keeping its message while fewer than ``MAX_REPORTED_ERRORS`` are kept."""
        self.skipped += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(message)

    def summary(self) -> str:
        """One line for the log: entries replayed, and lines skipped with the first reason."""
        text = f"replayed {self.replayed} logged observations"
        if self.skipped:
            text += f", skipped {self.skipped} bad lines (first: {self.errors[0]})"
        return text


def segment_name(first_seq: int) -> str:
    """The file name of the log segment whose first entry has sequence number ``first_seq``."""
    return f"observations-{first_seq:020d}.log"


_ENCODER = msgspec.json.Encoder()
"""The log lines' JSON encoder: ``msgspec`` (compact JSON; small floats without an exponent, the same
values when read back)."""


def encode_entry(entry: LogEntry) -> bytes:
    """One log line, newline included."""
    obj: dict = {
        "seq": entry.seq,
        "client": entry.client,
        "batch_id": entry.batch_id,
        "record": record_to_dict(entry.record),
    }
    if entry.producer:
        obj["producer"] = entry.producer
    if entry.sequence:
        obj["pseq"] = entry.sequence
    if entry.record_id:
        obj["rid"] = entry.record_id
    body = _ENCODER.encode(obj)
    if b"null" in body:  # msgspec writes NaN and infinities as null; the standard library refuses them
        body = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    return b"%08x %s\n" % (zlib.crc32(body), body)



def decode_entry(line: bytes) -> LogEntry:
    """Parse one log line (without its newline); raises ``ValueError`` saying what is wrong."""
    crc, sep, body = line.partition(b" ")
    if not sep or len(crc) != 8:
        raise ValueError("no checksum")
    try:
        expected = int(crc, 16)
    except ValueError:
        raise ValueError("no checksum") from None
    if zlib.crc32(body) != expected:
        raise ValueError("checksum mismatch")
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("seq"), int) or obj["seq"] < 1:
        raise ValueError("no sequence number")
    try:
        record = parse_record(obj.get("record"))
    except RecordError as exc:
        raise ValueError(f"bad record ({exc})") from None
    pseq = obj.get("pseq", 0)
    if not isinstance(pseq, int) or pseq < 0:
        raise ValueError("bad producer sequence number")
    return LogEntry(
        obj["seq"],
        record,
        str(obj.get("client") or ""),
        str(obj.get("batch_id") or ""),
        str(obj.get("producer") or ""),
        pseq,
        str(obj.get("rid") or ""),
    )


class ObservationLog:
    """Append-only, segmented write-ahead log of observations.

    Parameters
    ----------
    folder
        Where the segments live (created when missing).
    fsync
        ``always``, ``batch`` or ``never`` (see the module docstring).
    fsync_interval_s
        Period of the background fsync of the ``batch`` policy.
    """

    def __init__(self, folder: str | os.PathLike, *, fsync: str = "always", fsync_interval_s: float = 1.0):
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {FSYNC_POLICIES}, got {fsync!r}")
        if not fsync_interval_s > 0:
            raise ValueError(f"fsync_interval_s must be > 0, got {fsync_interval_s!r}")
        self.folder = Path(folder)
        self.fsync = fsync
        self.fsync_interval_s = fsync_interval_s
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._path: Path | None = None
        self._broken = False
        self._open = False
        self.last_seq = 0
        self.synced_seq = 0
        self._pending: list[bytes] = []  # encoded entries after the last written, in order: one write
        self._lost: list[tuple[int, int]] = []  # (first, last) sequence numbers a failed write dropped
        self._lost_reason = ""
        self._size = 0  # bytes written to the current segment: its whole lines
        self._stop = threading.Event()
        self._syncer: threading.Thread | None = None

    # ------------------------------------------------------------------ reading
    def segments(self) -> list[tuple[int, Path]]:
        """``(first sequence number, path)`` of every segment, in order."""
        if not self.folder.is_dir():
            return []
        found = []
        for path in self.folder.iterdir():
            match = _SEGMENT.match(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def replay(
        self, after: int = 0, *, tolerant: bool = True, report: ReplayReport | None = None
    ) -> Iterator[LogEntry]:
        """Yield the logged entries with a sequence number above ``after``, in order.

        Bad lines are skipped and reported (``tolerant``), or raise :class:`LogError` naming
        the file, line and byte offset.
        """
        report = report if report is not None else ReplayReport()
        report.last_seq = max(report.last_seq, after)
        for _, path in self.segments():
            for entry in self._read_segment(path, tolerant, report):
                if entry.seq <= report.last_seq and entry.seq > after:
                    self._bad(report, tolerant, f"{path.name}: sequence {entry.seq} out of order, skipped")
                    continue
                report.last_seq = max(report.last_seq, entry.seq)
                if entry.seq <= after:
                    report.covered += 1
                    continue
                report.replayed += 1
                yield entry

    def _read_segment(self, path: Path, tolerant: bool, report: ReplayReport) -> Iterator[LogEntry]:
        """The entries of one segment, read line by line (memory bounded by the longest line)."""
        try:
            stream = open(path, "rb")  # noqa: SIM115  (closed below, also when the caller stops early)
        except OSError as exc:
            self._bad(report, tolerant, f"{path.name}: unreadable ({exc.strerror or exc})")
            return
        with stream:
            offset = 0
            for number, line in enumerate(stream, start=1):
                where = f"{path.name}: line {number} (byte offset {offset})"
                offset += len(line)
                if not line.endswith(b"\n"):
                    self._bad(
                        report,
                        tolerant,
                        f"{where}: torn final line ({len(line)} bytes without a newline, a write cut short), "
                        "skipped",
                    )
                    return
                if not line.strip():
                    continue
                try:
                    entry = decode_entry(line[:-1])
                except ValueError as exc:
                    self._bad(report, tolerant, f"{where}: {exc}, skipped")
                    continue
                yield entry

    @staticmethod
    def _bad(report: ReplayReport, tolerant: bool, message: str) -> None:
        if not tolerant:
            raise LogError(message)
        log.warning("observation log: %s", message)
        report.add_error(message)

    # ------------------------------------------------------------------ writing
    def open(self, next_seq: int) -> None:
        """Start appending at ``next_seq``, in a new segment (call after :meth:`replay`)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self.last_seq = self.synced_seq = next_seq - 1
            self._start_segment(next_seq)
            self._open = True
        if self.fsync == "batch" and self._syncer is None:
            self._stop.clear()
            self._syncer = threading.Thread(target=self._sync_loop, name="wal-fsync", daemon=True)
            self._syncer.start()

    def _start_segment(self, first_seq: int) -> None:
        path = self.folder / segment_name(first_seq)
        # A segment of that name holds no readable entry (else the sequence would be past it):
        # at most a torn line, already reported by the replay; start it afresh.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        if self.fsync != "never":
            fsync_dir(self.folder)
        self._fd, self._path, self._broken, self._size = fd, path, False, 0

    @property
    def is_open(self) -> bool:
        """Whether entries can be appended (opened, not closed)."""
        return self._open

    def append(self, record: Record, client: str = "", batch_id: str = "", key: DedupKey | None = None) -> int:
        """Add one entry, encoded, to those the next :meth:`write` writes; returns its sequence number.

        Entries are written by blocks (group commit: one ``write`` syscall for a message's records,
        not one per record): call :meth:`write_through` before acting on an entry as logged.
        """
        with self._lock:
            if not self._open:
                raise LogError("the observation log is closed")
            seq = self.last_seq + 1
            named = key or DedupKey()
            self._pending.append(encode_entry(
                LogEntry(seq, record, client, batch_id, named.producer, named.sequence, named.record_id)
            ))
            self.last_seq = seq
            return seq

    def _write_pending(self) -> None:
        """Write every entry appended and not written yet, in one ``write`` syscall (in the page cache
        on return), under the lock. When it cannot, those entries are dropped, never written later
        (:meth:`write_through` tells their appenders), the failure is logged, and the log goes on in a
        new segment (the failed write may have left a torn line)."""
        if not self._pending:
            return
        first = self.last_seq - len(self._pending) + 1
        lines, self._pending = b"".join(self._pending), []
        try:
            if self._broken or self._fd is None:
                self._abandon()
                self._start_segment(first)
            _write_all(self._fd, lines)
            self._size += len(lines)
        except OSError as exc:
            self._broken = True
            self._cut_torn_tail()
            self._lost = [*self._lost[-(MAX_LOST_RANGES - 1):], (first, self.last_seq)]
            self._lost_reason = f"cannot write to {self._path}: {exc.strerror or exc}"
            log.error("observation log: %s (entries %d to %d dropped)", self._lost_reason, first, self.last_seq)

    def write_through(self, seqs: Iterable[int]) -> None:
        """Make sure the entries ``seqs`` (sequence numbers :meth:`append` returned) are written;
        raises :class:`LogError` when a write dropped any of them."""
        with self._lock:
            self._write_pending()
            if self._lost and any(first <= seq <= last for seq in seqs for first, last in self._lost):
                raise LogError(self._lost_reason)

    def sync(self, seq: int | None = None) -> None:
        """Make the entries up to ``seq`` (default: all) durable, as the ``always`` policy requires.

        A no-op for the other policies (entries are written before they are learned:
        :meth:`write_through`), and when another call already synced past ``seq``.
        """
        if self.fsync != "always":
            return
        self._sync_now(seq)

    def _sync_now(self, seq: int | None = None) -> None:
        with self._lock:
            self._write_pending()  # then every entry up to last_seq is written, or dropped (told to its appenders)
            target = self.last_seq if seq is None else min(seq, self.last_seq)
            if self._fd is None or self.synced_seq >= target:
                return
            target = self.last_seq
            fd = os.dup(self._fd)  # fsync outside the lock: appends go on meanwhile
        try:
            os.fsync(fd)
        except OSError as exc:
            raise LogError(f"cannot fsync {self._path}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
        with self._lock:
            self.synced_seq = max(self.synced_seq, target)

    def _sync_loop(self) -> None:
        while not self._stop.wait(self.fsync_interval_s):
            try:
                self._sync_now()
            except LogError as exc:
                log.error("observation log: %s", exc)

    def rotate(self) -> int:
        """Seal the current segment (fsynced) and start a new one; returns the last sequence sealed."""
        with self._lock:
            if not self._open:
                raise LogError("the observation log is closed")
            sealed = self.last_seq
            self._write_pending()  # what it drops is told to its appenders (write_through); this seals what is written
            try:
                if self._fd is not None:
                    self._seal()
                self._start_segment(sealed + 1)
            except OSError as exc:
                self._broken = True
                raise LogError(
                    f"cannot start a new segment in {self.folder}: {exc.strerror or exc}"
                ) from None
            return sealed

    def _cut_torn_tail(self) -> None:
        """After a failed write, cut what it wrote of its lines (the segment ends at its last whole
        line); where that fails too, the replay skips the torn line and reports it."""
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass

    def _abandon(self) -> None:
        """Drop a segment whose last write failed (its torn tail is reported at the next replay)."""
        fd, self._fd = self._fd, None
        close_quietly(fd)

    def _seal(self) -> None:
        """Fsync (unless ``never``) and close the current segment."""
        assert self._fd is not None
        fd, self._fd = self._fd, None
        try:
            if self.fsync != "never":
                os.fsync(fd)
                self.synced_seq = self.last_seq
        finally:
            os.close(fd)

    def discard_through(self, seq: int) -> int:
        """Delete the sealed segments whose entries all have sequence numbers <= ``seq``; returns how many."""
        segments = self.segments()
        removed = 0
        for (_, path), (next_first, _) in zip(segments, segments[1:], strict=False):
            if next_first <= seq + 1 and path != self._path:
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def close(self) -> None:
        """Stop the background fsync, seal the current segment."""
        self._stop.set()
        if self._syncer is not None:
            self._syncer.join(timeout=5)
            self._syncer = None
        with self._lock:
            self._open = False
            self._write_pending()
            if self._fd is not None:
                try:
                    self._seal()
                except OSError as exc:
                    log.error("observation log: cannot seal %s: %s", self._path, exc)
            self._path = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
