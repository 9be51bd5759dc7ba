"""A gzip file inflated on a thread of its own, ahead of the one that reads its lines.

Reading a ``.jsonl.gz`` log through :func:`gzip.open` inflates it on the reading thread, in small
steps of Python between its lines. zlib releases the GIL while it inflates, so another thread can do it
while the reader decodes the lines it already has. :class:`InflatingReader` is a raw binary
stream whose bytes a thread inflates ahead, a megabyte of the file at a time, holding at most
:data:`AHEAD` pieces of :data:`PIECE` bytes ready; :func:`open_inflating` wraps it as the text
stream :func:`gzip.open` gives (UTF-8, universal newlines).

The file is read as :class:`gzip.GzipFile` reads it: members one after another, zero bytes
between them skipped; a file cut short raises :class:`EOFError`, a damaged one (a bad header, a
bad check sum) :class:`gzip.BadGzipFile`, from the read that reaches that point.

Examples
--------
>>> import gzip, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "log.jsonl.gz")
>>> with gzip.open(path, "wt") as out:
...     _ = out.write("one\\ntwo\\n")
>>> with open_inflating(path) as stream:
...     stream.read().splitlines()
['one', 'two']
"""

from __future__ import annotations

import gzip
import io
import os
import queue
import threading
import zlib
from collections.abc import Iterator

CHUNK = 1 << 20
"""Bytes of the file read at a time."""
PIECE = 1 << 22
"""Most inflated bytes handed over at a time."""
AHEAD = 4
"""Most inflated pieces held ready (what the thread may run ahead of the reader)."""

_END = object()


class InflatingReader(io.RawIOBase):
    """The inflated bytes of the gzip file at ``path`` (a raw binary stream), inflated by a thread.

    :meth:`close` stops the thread wherever it is (a reader may stop before the end).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__()
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._pieces: queue.Queue[object] = queue.Queue(maxsize=AHEAD)
        self._stop = threading.Event()
        self._current = memoryview(b"")
        self._last: object = None  # _END or the exception that ended the stream
        self._thread = threading.Thread(target=self._inflate, name="inflate", daemon=True)
        self._thread.start()

    def readable(self) -> bool:
        """Always: the stream is read, never written."""
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Fill ``buffer`` from the inflated bytes; 0 at the end."""
        while not self._current:
            if self._last is None:
                item = self._pieces.get()
                if isinstance(item, bytes):
                    self._current = memoryview(item)
                    continue
                self._last = item
            if self._last is _END:
                return 0
            raise self._last  # type: ignore[misc]
        n = min(len(buffer), len(self._current))
        buffer[:n] = self._current[:n]
        self._current = self._current[n:]
        return n

    def close(self) -> None:
        """Stop the thread and close the file."""
        if not self.closed:
            self._stop.set()
            while self._thread.is_alive():
                try:  # make room for a piece the thread is waiting to hand over
                    self._pieces.get(timeout=0.05)
                except queue.Empty:
                    pass
            self._thread.join()
            self._file.close()
        super().close()

    def _inflate(self) -> None:
        try:
            for piece in self._inflated():
                if not self._hand_over(piece):
                    return
            self._hand_over(_END)
        except (EOFError, gzip.BadGzipFile, OSError) as exc:
            self._hand_over(exc)
        except zlib.error as exc:  # a damaged member: what gzip raises for it
            self._hand_over(gzip.BadGzipFile(str(exc)))

    def _hand_over(self, item: object) -> bool:
        """Queue ``item`` for the reader; ``False`` when stopped first."""
        while not self._stop.is_set():
            try:
                self._pieces.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _inflated(self) -> Iterator[bytes]:
        decompressor = None
        data = b""
        first = True
        while not self._stop.is_set():
            if not data:
                data = self._file.read(CHUNK)
                if not data:
                    if decompressor is not None:
                        raise EOFError("Compressed file ended before the end-of-stream marker was reached")
                    return
            if decompressor is None:  # a member starts, after any zero bytes of padding after another
                if not first:
                    data = data.lstrip(b"\x00")
                    if not data:
                        continue
                decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
                first = False
            piece = decompressor.decompress(data, PIECE)
            data = decompressor.unconsumed_tail
            if decompressor.eof:
                data = decompressor.unused_data
                decompressor = None
            if piece:
                yield piece


def open_inflating(path: str | os.PathLike) -> io.TextIOWrapper:
    """The gzip file at ``path`` as UTF-8 text (what ``gzip.open(path, "rt", encoding="utf-8")``
    gives), inflated ahead by a thread (:class:`InflatingReader`)."""
    return io.TextIOWrapper(io.BufferedReader(InflatingReader(path), buffer_size=1 << 16), encoding="utf-8")
