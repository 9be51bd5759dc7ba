"""Published versions between processes: a file replaced atomically, and a generation to check cheaply.

A learner process publishes an object (a :class:`~predictor.service.published.ModelVersion`, the
live view's books) for the answering processes of the same machine:

* :meth:`VersionFile.write` pickles it to a temporary file in the same folder and renames it over
  ``<name>.pickle`` (``os.replace``: atomic), then stores the new generation in ``<name>.gen``, a
  16-byte memory-mapped counter. A reader opens either the previous file or the new one, whole,
  never a torn one;
* :meth:`VersionReader.latest` reads the counter from its memory map (no system call) and loads
  the file again only when it moved. Checking costs well under a microsecond per call. The counter
  also holds the latest generation answers *must* see (one the learner wrote before acknowledging
  a write); a newer one that is not required is loaded by a background thread while answers go on
  from the version held.

What is pickled, and how consecutive versions share their unchanged parts (residual windows),
is :mod:`predictor.service.replicas.version_pickle`. A file holds, after its generation, the lengths of its
main pickle and of its parts (``<generation> <main length> <part count>``, then a key and a length
per part, then the main pickle, then the parts): a reader unpickles only the parts it does not hold
from the version it read before.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path
from typing import Any

from predictor.service.replicas.version_pickle import KEY_BYTES, PartReader, PartWriter

__all__ = ["VersionFile", "VersionReader", "layout", "parse"]

_COUNTER = struct.Struct("<qq")  # the latest generation; the latest an answer must see (see VersionFile.write)
_HEAD = struct.Struct("<qqq")  # generation, main pickle's length, parts
_PART = struct.Struct(f"<{KEY_BYTES}sq")  # a part's key and length


def layout(generation: int, main: bytes, parts: dict[bytes, bytes]) -> list[bytes]:
    """A version file's content, in pieces (see the module documentation)."""
    head = [_HEAD.pack(generation, len(main), len(parts))]
    head += [_PART.pack(key, len(data)) for key, data in parts.items()]
    return [*head, main, *parts.values()]


def parse(data: bytes) -> tuple[int, memoryview, dict[bytes, memoryview]]:
    """A version file's generation, main pickle and parts (views of ``data``: nothing copied)."""
    view = memoryview(data)
    generation, main_length, count = _HEAD.unpack_from(view, 0)
    offset = _HEAD.size + count * _PART.size
    main = view[offset:offset + main_length]
    offset += main_length
    parts = {}
    for key, length in _PART.iter_unpack(view[_HEAD.size:_HEAD.size + count * _PART.size]):
        parts[key] = view[offset:offset + length]
        offset += length
    if offset != len(view):
        raise ValueError(f"version file: {len(view)} bytes, its head describes {offset}")
    return generation, main, parts


class VersionFile:
    """The writing side: ``folder/<name>.pickle`` and its generation counter ``folder/<name>.gen``.

    Parameters
    ----------
    folder
        A folder of this machine (``/dev/shm`` or a temporary folder: nothing here needs to
        survive the processes).
    name
        The file's name, without suffix.
    """

    def __init__(self, folder: str | Path, name: str):
        self.path = Path(folder) / f"{name}.pickle"
        self.counter_path = Path(folder) / f"{name}.gen"
        self.generation = 0
        self.bytes_written = 0
        self.parts = PartWriter()
        self._lock = threading.Lock()
        if not self.counter_path.exists() or self.counter_path.stat().st_size != _COUNTER.size:
            tmp = self.counter_path.with_name(f".{self.counter_path.name}.tmp")
            tmp.write_bytes(_COUNTER.pack(0, 0))
            os.replace(tmp, self.counter_path)
        self._fd = os.open(self.counter_path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, _COUNTER.size)
        # a learner started again goes on from the generation its predecessor reached (readers keep their map)
        self.generation = _COUNTER.unpack_from(self._map, 0)[0]

    def write(self, obj: Any, required: bool = True) -> int:
        """Publish ``obj`` (pickled now, its unchanged parts reused) as the next generation; returns it.

        ``required``: every answer from now on must be computed from it or a later one (what the
        learner publishes before it acknowledges a write); otherwise (a version published while a
        stream is learning) a reader may go on answering from the version it holds while it loads
        this one in the background (:class:`VersionReader`).
        """
        with self._lock:
            main, parts = self.parts.encode(obj)
            return self._write(main, parts, required)

    def write_bytes(self, payload: bytes) -> int:
        """Publish an object already pickled (:func:`~predictor.service.replicas.version_pickle.dumps`, no shared parts) as the next generation;
        returns it.

        After :meth:`close` (the learner stopping) nothing is published: the generation stays.
        """
        with self._lock:
            return self._write(payload, {}, True)

    def require(self) -> None:
        """Mark the latest generation written as one every answer from now on must see."""
        with self._lock:
            if not self._map.closed:
                _COUNTER.pack_into(self._map, 0, self.generation, self.generation)

    def _write(self, main: bytes, parts: dict[bytes, bytes], required: bool) -> int:
        if self._map.closed:
            return self.generation
        generation = self.generation + 1
        tmp = self.path.with_name(f".{self.path.name}.{generation}.tmp")
        pieces = layout(generation, main, parts)
        with open(tmp, "wb") as out:
            out.writelines(pieces)
        os.replace(tmp, self.path)
        _, least = _COUNTER.unpack_from(self._map, 0)
        _COUNTER.pack_into(self._map, 0, generation, generation if required else least)  # one 16-byte copy
        self.generation = generation
        self.bytes_written = sum(len(piece) for piece in pieces)
        return generation

    def close(self) -> None:
        """Release the counter's memory map (after a write in flight ends; once)."""
        with self._lock:
            if self._map.closed:
                return
            self._map.close()
            os.close(self._fd)


class VersionReader:
    """The reading side of a :class:`VersionFile`: the latest object, reloaded when its generation moves.

    An answer that finds a newer generation published loads it at once only when it must (a
    generation written ``required``, or nothing held yet); otherwise it answers from the version
    held and wakes a loading thread, which loads the latest generation then (skipping those it did
    not get to) and swaps the reference: answers always use a complete version, and pay no load.

    Parameters
    ----------
    folder, name
        As given to the :class:`VersionFile`.
    """

    def __init__(self, folder: str | Path, name: str):
        self.path = Path(folder) / f"{name}.pickle"
        self.counter_path = Path(folder) / f"{name}.gen"
        self.generation = 0  # of the object held
        self.loads = 0
        self.loads_in_background = 0
        self.parts = PartReader()
        self._obj: Any = None
        self._map: mmap.mmap | None = None
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._closed = False
        self._loader: threading.Thread | None = None

    def available(self) -> bool:
        """Whether a first version has been published."""
        return self.published_generation() > 0

    def published_generation(self) -> int:
        """The latest generation published (0: none yet, or no counter file yet)."""
        return self._counter()[0]

    def _counter(self) -> tuple[int, int]:
        if self._map is None:
            try:
                fd = os.open(self.counter_path, os.O_RDONLY)
            except FileNotFoundError:
                return 0, 0
            try:
                self._map = mmap.mmap(fd, _COUNTER.size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
        return _COUNTER.unpack_from(self._map, 0)

    def latest(self) -> Any:
        """The latest published object that answers must see (``LookupError`` before the first one)."""
        published, required = self._counter()
        held = self._obj
        if published == self.generation or (held is not None and self.generation >= required):
            if held is None:
                raise LookupError(f"{self.path}: nothing published yet")
            if published != self.generation:
                self._wake_loader()
            return held
        with self._lock:
            if self._obj is None or self.generation < required:
                self._load()
            return self._obj

    def close(self) -> None:
        """Stop the loading thread (if started)."""
        self._closed = True
        self._wanted.set()
        if self._loader is not None:
            self._loader.join(timeout=10)

    def _load(self) -> None:
        with open(self.path, "rb") as source:
            generation, main, parts = parse(source.read())
        self._obj = self.parts.loads(main, parts)
        self.generation = generation
        self.loads += 1

    def _wake_loader(self) -> None:
        if self._loader is None:
            with self._lock:
                if self._loader is None and not self._closed:
                    self._loader = threading.Thread(target=self._load_ahead, name=f"load-{self.path.stem}",
                                                    daemon=True)
                    self._loader.start()
        self._wanted.set()

    def _load_ahead(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._closed:
                return
            with self._lock:
                if self.published_generation() != self.generation:
                    self._load()
                    self.loads_in_background += 1
