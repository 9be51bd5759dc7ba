"""How a published version is pickled for other processes: fresh locks, and parts shared across versions.

A :class:`~predictor.service.published.ModelVersion` is mostly residual windows (the calibrators'
:class:`~predictor.calibration.conformal.ResidualWindow`: two lists of up to a few thousand floats each),
and most of them are unchanged from one version to the next: the learner copies a window only when
it changed (:class:`~predictor.calibration.conformal.WindowCopies`), so consecutive versions hold the *same*
copy of every other one. The windows are also most of what unpickling a version costs (the shape
calibrator's are re-sorted on load).

So a version is written as a *main* pickle in which each window is a reference to a *part*, a
window pickled on its own, with its sorted order (read back without sorting, and only when an
answer first reads that window: :class:`PackedWindow`) and keyed by a 16-byte key that names that copy for good (8 random
bytes per writer, then a count: a learner started again never reuses a key):

* :class:`PartWriter` (the learner's side) keeps the key and pickled bytes of every window copy of
  the last version it wrote, so an unchanged window is neither pickled nor given a key again;
* :class:`PartReader` (a worker's side) keeps the window objects of the last version it read, and
  unpickles only the parts whose key it does not hold: a worker that skipped generations reads
  what changed since the version it holds, whatever the learner wrote in between.

Objects are pickled with their locks replaced by fresh ones (and read-only mapping views as copies)
(:class:`_LockFreePickler`), so that a book guarded by a ``threading.Lock`` can be copied while its
lock is held; a live view's journal (its side log, an open file) stays with the learner.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import threading
import types
from collections import deque
from collections.abc import Mapping
from typing import Any

from predictor.calibration.conformal import ResidualWindow
from predictor.service.durability.livelog import LiveLog

KEY_BYTES = 16
_COUNT = struct.Struct("<Q")
_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


def _no_journal() -> None:
    return None


def _mapping_proxy(mapping: dict) -> types.MappingProxyType:
    return types.MappingProxyType(mapping)


class PackedWindow(ResidualWindow):
    """A residual window read from a version file: its residuals unpickled on first use.

    An answer reads only the few windows of its query's cells, so a worker unpickles only those
    (once per window copy: unchanged windows are kept across versions by :class:`PartReader`).
    Unpickling is idempotent, so two threads reading a window at once are safe; once unpickled,
    it is a plain :class:`~predictor.calibration.conformal.ResidualWindow` (its class is switched), and
    pickles as one.
    """

    def __init__(self, size: int, residuals: bytes, adds: int):
        self.size = size
        self._packed = residuals
        self._array = None
        self._adds = adds

    def __getattr__(self, name: str) -> Any:
        if name not in ("_order", "_sorted") or "_packed" not in self.__dict__:
            raise AttributeError(name)
        order, ordered = pickle.loads(self._packed)
        self._sorted = ordered
        self._order = deque(order)
        self.__class__ = ResidualWindow  # unpacked: a plain window from now on
        return self.__dict__[name]

    def __reduce_ex__(self, protocol: Any) -> Any:
        self._order  # noqa: B018 - unpacks it, so that it pickles as a plain window
        return self.__reduce_ex__(protocol)


def _window_reduction(window: ResidualWindow) -> tuple:
    residuals = pickle.dumps((list(window._order), window._sorted), pickle.HIGHEST_PROTOCOL)
    return PackedWindow, (window.size, residuals, window.adds)


def _part(key: bytes) -> Any:
    """Stands for a shared part in a main pickle; resolved by :class:`PartReader`, never called."""
    raise pickle.UnpicklingError(f"part {key.hex()}: a version's main pickle is read by PartReader.loads only")


class _LockFreePickler(pickle.Pickler):
    """A pickler that writes a fresh lock for every lock, no side log for a live view's journal, and
    residual windows compactly (or, given ``parts``, as references to shared parts)."""

    def __init__(self, file: io.BytesIO, parts: PartWriter | None = None):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.parts = parts

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, ResidualWindow):
            return (_part, (self.parts.key_of(obj),)) if self.parts is not None else _window_reduction(obj)
        if isinstance(obj, types.MappingProxyType):  # read-only views (a topology's tables)
            return _mapping_proxy, (dict(obj),)
        if isinstance(obj, _LOCK_TYPES):
            return (threading.Lock if isinstance(obj, _LOCK_TYPES[0]) else threading.RLock), ()
        if isinstance(obj, LiveLog):
            return _no_journal, ()
        return NotImplemented


def dumps(obj: Any, parts: PartWriter | None = None) -> bytes:
    """``obj`` pickled with fresh locks (see the module documentation); its windows as references
    to ``parts`` when given (read back with :meth:`PartReader.loads`), else inline."""
    buffer = io.BytesIO()
    _LockFreePickler(buffer, parts).dump(obj)
    return buffer.getvalue()


class PartWriter:
    """The writing side of shared parts: a key and pickled bytes per window copy of the last version.

    A window copy is identified by the object and its change count (a copy never changes; the count
    guards against a live window passed by mistake).
    """

    def __init__(self) -> None:
        self._token = os.urandom(KEY_BYTES - _COUNT.size)
        self._count = 0
        self._held: dict[int, tuple[ResidualWindow, int, bytes, bytes]] = {}
        self._used: dict[int, tuple[ResidualWindow, int, bytes, bytes]] = {}
        self.pickled = 0  # parts pickled (not reused)

    def key_of(self, window: ResidualWindow) -> bytes:
        """The key of ``window`` as it is now (the previous version's when it is the same copy)."""
        held = self._used.get(id(window)) or self._held.get(id(window))
        if held is None or held[0] is not window or held[1] != window.adds:
            self._count += 1
            held = (window, window.adds, self._token + _COUNT.pack(self._count), dumps(window))
            self.pickled += 1
        self._used[id(window)] = held
        return held[2]

    def encode(self, obj: Any) -> tuple[bytes, dict[bytes, bytes]]:
        """``obj``'s main pickle and the parts it refers to (key to pickled bytes); the parts not
        referred to are forgotten."""
        self._used = {}  # filled by key_of while obj is pickled (and only then)
        main = dumps(obj, self)
        self._held, self._used = self._used, {}
        return main, {key: data for _, _, key, data in self._held.values()}


class _PartUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, resolve: Any):
        super().__init__(file)
        self._resolve = resolve

    def find_class(self, module: str, name: str) -> Any:
        if module == __name__ and name == "_part":
            return self._resolve
        return super().find_class(module, name)


class PartReader:
    """The reading side of shared parts: the window objects of the last version read, by key."""

    def __init__(self) -> None:
        self._held: dict[bytes, Any] = {}
        self.unpickled = 0  # parts unpickled (not reused)

    def loads(self, main: bytes | memoryview, parts: Mapping[bytes, bytes | memoryview]) -> Any:
        """The object pickled as ``main`` (:meth:`PartWriter.encode`), its parts taken from those held
        when their key is, else unpickled from ``parts``; then holds the parts of this one only."""
        used: dict[bytes, Any] = {}

        def resolve(key: bytes) -> Any:
            obj = used.get(key)
            if obj is None:
                obj = self._held.get(key)
                if obj is None:
                    obj = pickle.loads(parts[key])
                    self.unpickled += 1
                used[key] = obj
            return obj

        obj = _PartUnpickler(io.BytesIO(main), resolve).load()
        self._held = used
        return obj
