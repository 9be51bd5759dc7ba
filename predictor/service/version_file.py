"""Published versions between processes: a file replaced atomically, and a generation to check cheaply.

A learner process publishes an object (a :class:`~predictor.service.published.ModelVersion`, the
live view's books) for the answering processes of the same machine:

* :meth:`VersionFile.write` pickles it to a temporary file in the same folder and renames it over
  ``<name>.pickle`` (``os.replace``: atomic), then stores the new generation in ``<name>.gen``, an
  8-byte memory-mapped counter. A reader opens either the previous file or the new one, whole,
  never a torn one;
* :meth:`VersionReader.latest` reads the counter from its memory map (no system call) and loads
  the file again only when it moved. Checking costs well under a microsecond per call.

Objects are pickled with their locks replaced by fresh ones (and read-only mapping views as copies) (:class:`_LockFreePickler`), so that a
book guarded by a ``threading.Lock`` can be copied while its lock is held; a live view's journal
(its side log, an open file) stays with the learner.
"""

from __future__ import annotations

import io
import mmap
import os
import pickle
import struct
import threading
import types
from pathlib import Path
from typing import Any

_COUNTER = struct.Struct("<q")
_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


def _no_journal() -> None:
    return None


def _mapping_proxy(mapping: dict) -> types.MappingProxyType:
    return types.MappingProxyType(mapping)


class _LockFreePickler(pickle.Pickler):
    """A pickler that writes a fresh lock for every lock, and no side log for a live view's journal."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.MappingProxyType):  # read-only views (a topology's tables)
            return _mapping_proxy, (dict(obj),)
        if isinstance(obj, _LOCK_TYPES):
            return (threading.Lock if isinstance(obj, _LOCK_TYPES[0]) else threading.RLock), ()
        from predictor.service.livelog import LiveLog

        if isinstance(obj, LiveLog):
            return _no_journal, ()
        return NotImplemented


def dumps(obj: Any) -> bytes:
    """``obj`` pickled with fresh locks (see the module documentation)."""
    buffer = io.BytesIO()
    _LockFreePickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


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
        self._lock = threading.Lock()
        if not self.counter_path.exists() or self.counter_path.stat().st_size != _COUNTER.size:
            tmp = self.counter_path.with_name(f".{self.counter_path.name}.tmp")
            tmp.write_bytes(_COUNTER.pack(0))
            os.replace(tmp, self.counter_path)
        self._fd = os.open(self.counter_path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, _COUNTER.size)
        # a learner started again goes on from the generation its predecessor reached (readers keep their map)
        self.generation = _COUNTER.unpack_from(self._map, 0)[0]

    def write(self, obj: Any) -> int:
        """Publish ``obj`` (pickled now) as the next generation; returns that generation."""
        return self.write_bytes(dumps(obj))

    def write_bytes(self, payload: bytes) -> int:
        """Publish an object already pickled (:func:`dumps`) as the next generation; returns it.

        After :meth:`close` (the learner stopping) nothing is published: the generation stays.
        """
        with self._lock:
            if self._map.closed:
                return self.generation
            generation = self.generation + 1
            tmp = self.path.with_name(f".{self.path.name}.{generation}.tmp")
            with open(tmp, "wb") as out:
                out.write(_COUNTER.pack(generation))
                out.write(payload)
            os.replace(tmp, self.path)
            _COUNTER.pack_into(self._map, 0, generation)
            self.generation = generation
            self.bytes_written = len(payload)
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
        self._obj: Any = None
        self._map: mmap.mmap | None = None
        self._lock = threading.Lock()

    def available(self) -> bool:
        """Whether a first version has been published."""
        return self.published_generation() > 0

    def published_generation(self) -> int:
        """The latest generation published (0: none yet, or no counter file yet)."""
        if self._map is None:
            try:
                fd = os.open(self.counter_path, os.O_RDONLY)
            except FileNotFoundError:
                return 0
            try:
                self._map = mmap.mmap(fd, _COUNTER.size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
        return _COUNTER.unpack_from(self._map, 0)[0]

    def latest(self) -> Any:
        """The latest published object (``LookupError`` before the first one)."""
        if self.published_generation() == self.generation:
            if self._obj is None:
                raise LookupError(f"{self.path}: nothing published yet")
            return self._obj
        with self._lock:
            if self.published_generation() != self.generation:
                with open(self.path, "rb") as source:
                    data = source.read()
                self._obj = pickle.loads(memoryview(data)[_COUNTER.size:])
                self.generation = _COUNTER.unpack_from(data, 0)[0]
                self.loads += 1
            return self._obj
