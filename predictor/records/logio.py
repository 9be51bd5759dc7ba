"""Streaming JSONL reader and writer for ``coloc/v1`` logs (plain or gzip).

A strict read stops at the first bad line with a :class:`RecordError` naming
the line and the field; a tolerant read skips bad lines and counts them in a
:class:`ReadReport`.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypeVar

from predictor.records.inflate_ahead import open_inflating
from predictor.records.record import Record, RecordError, parse_record, record_to_dict
from predictor.records.typed_decoding import ColocRow, decode_record, decode_row

MAX_REPORTED_ERRORS = 100
T = TypeVar("T")


@dataclass
class ReadReport:
    """What a read saw: records accepted, lines skipped and why (first 100 kept)."""

    accepted: int = 0
    skipped: int = 0
    errors: list[RecordError] = field(default_factory=list)

    def add_error(self, error: RecordError) -> None:
        """Count a skipped line, keeping its error among the first 100."""
        self.skipped += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(error)

    def summary(self) -> str:
        """One line: records read, lines skipped and the first error."""
        text = f"{self.accepted} records read, {self.skipped} bad lines skipped"
        if self.errors:
            text += "; first: " + str(self.errors[0])
        return text


def open_text(path: str | os.PathLike, mode: str = "rt") -> IO[str]:
    """Open ``path`` as text, through gzip when the name ends in ``.gz``."""
    if str(path).endswith(".gz"):
        return gzip.open(path, mode, encoding="utf-8")  # type: ignore[return-value]
    return open(path, mode, encoding="utf-8")


def parse_line(text: str, line: int) -> Record:
    """Parse one JSONL line; errors carry ``line``.

    Decoded by the typed decoder (:func:`~predictor.records.typed_decoding.decode_record`); a line it
    refuses goes through ``json.loads`` and :func:`~predictor.records.record.parse_record`, which accept
    it or raise the error naming the field.
    """
    record = decode_record(text)
    if record is not None:
        return record
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError("json", f"not valid JSON ({exc.msg} at column {exc.colno})", line) from None
    try:
        return parse_record(obj)
    except RecordError as exc:
        raise exc.at_line(line) from None


def parse_row(text: str, line: int) -> ColocRow | Record:
    """:func:`parse_line`, answering the decoded :class:`~predictor.records.typed_decoding.ColocRow` (read
    like a record) where the line is one, without building the record."""
    row = decode_row(text)
    return row if row is not None else parse_line(text, line)


def iter_records(
    source: str | os.PathLike | IO[str],
    *,
    tolerant: bool = False,
    report: ReadReport | None = None,
    inflate_ahead: bool = True,
) -> Iterator[Record]:
    """Yield the records of a ``coloc/v1`` log in file order.

    Parameters
    ----------
    source
        A path (``.gz`` read through gzip) or an open text stream.
    tolerant
        Skip bad lines (counted in ``report``) instead of raising.
    report
        Filled in as the read progresses.
    inflate_ahead
        A ``.gz`` path is inflated ahead on a thread of its own (:mod:`predictor.records.inflate_ahead`; the
        same text); ``False``: on this one.
    """
    return _iter_parsed(source, tolerant, report, parse_line, inflate_ahead)


def iter_rows(
    source: str | os.PathLike | IO[str],
    *,
    tolerant: bool = False,
    report: ReadReport | None = None,
    inflate_ahead: bool = True,
) -> Iterator[ColocRow | Record]:
    """:func:`iter_records`, each line as :func:`parse_row` gives it: the same lines accepted,
    the same errors (the replay's reader: it reads fields, never needs a record)."""
    return _iter_parsed(source, tolerant, report, parse_row, inflate_ahead)


def _iter_parsed(
    source: str | os.PathLike | IO[str],
    tolerant: bool,
    report: ReadReport | None,
    parse: Callable[[str, int], T],
    inflate_ahead: bool = True,
) -> Iterator[T]:
    """The lines of ``source`` through ``parse(text, line number)``, as :func:`iter_records` reads them."""
    report = report if report is not None else ReadReport()
    stream = source
    if isinstance(source, (str, os.PathLike)):
        stream = open_inflating(source) if inflate_ahead and str(source).endswith(".gz") else open_text(source)
    try:
        for number, text in enumerate(_lines(stream, report, tolerant), start=1):
            if text is None or not text.strip():
                continue
            try:
                record = parse(text, number)
            except RecordError as exc:
                if not tolerant:
                    raise
                report.add_error(exc)
                continue
            report.accepted += 1
            yield record
    finally:
        if stream is not source:
            stream.close()


def _lines(stream: IO[str], report: ReadReport, tolerant: bool) -> Iterator[str | None]:
    """Lines of ``stream``; a truncated gzip member or undecodable bytes become an error."""
    number = 0
    while True:
        try:
            text = stream.readline()
        except (EOFError, gzip.BadGzipFile, zlib.error, UnicodeDecodeError, OSError) as exc:
            error = RecordError("file", f"unreadable after this point ({exc})", number + 1)
            if not tolerant:
                raise error from None
            report.add_error(error)
            return
        if not text:
            return
        number += 1
        yield text


def read_records(path: str | os.PathLike, *, tolerant: bool = False,
                 inflate_ahead: bool = True) -> tuple[list[Record], ReadReport]:
    """Read a whole log into memory; returns the records and the read report (``inflate_ahead``: as
    :func:`iter_records`)."""
    report = ReadReport()
    return list(iter_records(path, tolerant=tolerant, report=report, inflate_ahead=inflate_ahead)), report


def dumps_record(record: Record) -> str:
    """One compact JSON line (without the newline)."""
    return json.dumps(record_to_dict(record), separators=(",", ":"), allow_nan=False)


class RecordWriter:
    """Append ``coloc/v1`` lines to a file (gzip when the name ends in ``.gz``).

    Writes go to a temporary name and are renamed into place on :meth:`close`
    when ``atomic`` is set, so a reader never sees a half-written log.
    """

    def __init__(self, path: str | os.PathLike, *, atomic: bool = False):
        self.path = Path(path)
        self._target = self.path.with_name(self.path.name + ".tmp") if atomic else self.path
        if str(self.path).endswith(".gz"):
            raw = gzip.open(self._target, "wb")
            self._stream: IO[str] = io.TextIOWrapper(raw, encoding="utf-8")
        else:
            self._stream = open(self._target, "w", encoding="utf-8")
        self._atomic = atomic
        self.count = 0

    def write(self, record: Record) -> None:
        """Append one record as a JSON line."""
        self._stream.write(dumps_record(record) + "\n")
        self.count += 1

    def write_all(self, records: Iterable[Record]) -> int:
        """Append every record; returns the total written by this writer so far."""
        for record in records:
            self.write(record)
        return self.count

    def close(self) -> None:
        """Close the file (idempotent); an atomic writer then renames it into place."""
        if self._stream.closed:
            return
        self._stream.close()
        if self._atomic:
            os.replace(self._target, self.path)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def write_records(path: str | os.PathLike, records: Iterable[Record]) -> int:
    """Write ``records`` to ``path`` atomically; returns how many were written."""
    with RecordWriter(path, atomic=True) as writer:
        return writer.write_all(records)
