"""Exactly-once learning: which observations the service has already taken in.

A collector that resends an interrupted ``ReportObservations`` stream sends some
records twice. It can name each record, two ways (either or both):

* a **producer id and a sequence number** (as idempotent producers in log systems do), the same
  numbers on a resend. Per producer the service keeps the highest number taken and the *holes*
  below it (numbers skipped or refused, which may still come); a number at or below the highest,
  not a hole, is a duplicate. Numbers more than ``window`` below the highest are refused with a
  reason: never learned twice, never dropped silently;
* a **record id**: any string unique per producer; the last ``max_record_ids`` are kept.

Keys are namespaced by the caller's authenticated identity, so one client can neither suppress
nor replay another's records. A record is *taken* once it is in the observation log (learned, or
refused by the deterministic outlier gate); records refused before the log (invalid,
rate-limited) may be sent again. The table lives in the snapshot and is rebuilt from the log
entries after it, so it survives restarts.

Examples
--------
>>> table = Deduplicator(window=100)
>>> key = DedupKey(producer="collector-7", sequence=1)
>>> table.verdict("token:a", key), table.take("token:a", key), table.verdict("token:a", key)
('new', None, 'duplicate')
>>> table.verdict("token:b", key)  # another identity: another namespace
'new'
>>> table.take("token:a", DedupKey(producer="collector-7", sequence=4))  # 2 and 3 may still come
>>> [table.verdict("token:a", DedupKey("collector-7", s)) for s in (2, 3, 4)]
['new', 'new', 'duplicate']
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from predictor.records import rules
from predictor.service.errors import InvalidArgument, ServiceError

NEW, DUPLICATE, TOO_OLD = "new", "duplicate", "too_old"


class Duplicate(ServiceError):
    """The record was already taken in (learned, or refused by the outlier gate): dropped."""


@dataclass(frozen=True, slots=True)
class DedupKey:
    """How a record is named by its producer: producer id and sequence number, and/or a record id."""

    producer: str = ""
    sequence: int = 0
    record_id: str = ""

    def __bool__(self) -> bool:
        return bool(self.sequence or self.record_id)

    def validate(self) -> None:
        """Raise :class:`InvalidArgument` naming the field that is malformed."""
        if not rules.name_ok(self.producer, required=False):
            raise InvalidArgument("producer_id", f"longer than {rules.MAX_NAME_LENGTH} characters")
        if not rules.name_ok(self.record_id, required=False):
            raise InvalidArgument("record_id", f"longer than {rules.MAX_NAME_LENGTH} characters")
        if self.sequence < 0:
            raise InvalidArgument("sequence", f"must be >= 1 (0: none), got {self.sequence}")
        if self.sequence and not self.producer:
            raise InvalidArgument("producer_id", "a sequence number needs a producer id")


@dataclass(slots=True)
class ProducerWindow:
    """What one producer's sequence numbers have been taken: the highest, and the holes below it."""

    highest: int = 0
    floor: int = 0  # numbers <= floor are outside the window
    holes: set[int] = field(default_factory=set)

    def verdict(self, sequence: int) -> str:
        """``new``, ``duplicate`` or ``too_old`` (outside the window: cannot tell)."""
        if sequence > self.highest or sequence in self.holes:
            return NEW
        return TOO_OLD if sequence <= self.floor else DUPLICATE

    def take(self, sequence: int, window: int) -> None:
        """Mark ``sequence`` taken, keeping at most ``window`` numbers behind the highest."""
        if sequence > self.highest:
            self.holes.update(range(max(self.highest + 1, sequence - window), sequence))
            self.highest = sequence
            floor = max(self.floor, sequence - window - 1)
            if floor > self.floor:
                self.floor = floor
                if len(self.holes) > window // 2:
                    self.holes = {h for h in self.holes if h > floor}
        else:
            self.holes.discard(sequence)


class Deduplicator:
    """The retained window of taken records, per (identity, producer).

    Parameters
    ----------
    window
        Sequence numbers tracked behind each producer's highest.
    max_producers
        Producers kept; the least recently active is forgotten beyond it.
    max_record_ids
        Record ids kept; the oldest is forgotten beyond it.
    """

    def __init__(self, window: int = 100_000, max_producers: int = 10_000, max_record_ids: int = 100_000):
        for name, value in (("window", window), ("max_producers", max_producers), ("max_record_ids", max_record_ids)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self.window = window
        self.max_producers = max_producers
        self.max_record_ids = max_record_ids
        self._producers: OrderedDict[str, ProducerWindow] = OrderedDict()
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._reserved: set[tuple[str, int]] = set()  # names of records logged, not yet taken (not saved)
        self.n_duplicates = 0
        self.n_too_old = 0
        self.n_forgotten_producers = 0

    @staticmethod
    def _name(identity: str, name: str) -> str:
        return f"{identity}\0{name}"

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_reserved"]  # a snapshot holds what was taken; what was in flight is in the log, or lost
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reserved = set()

    def _reserved_names(self, identity: str, key: DedupKey) -> list[tuple[str, int]]:
        """What ``key`` takes, as :meth:`verdict` tells duplicates: its record id, its sequence number."""
        names = []
        if key.record_id:
            names.append((self._name(identity, f"{key.producer}\0{key.record_id}"), 0))
        if key.sequence:
            names.append((self._name(identity, key.producer), key.sequence))
        return names

    def reserve(self, identity: str, key: DedupKey) -> None:
        """Hold ``key`` in flight (its record logged, not yet written): meanwhile :meth:`verdict`
        calls it a duplicate; :meth:`take` or :meth:`release` ends it."""
        self._reserved.update(self._reserved_names(identity, key))

    def release(self, identity: str, key: DedupKey) -> None:
        """End :meth:`reserve` without taking the key (its record was not written)."""
        self._reserved.difference_update(self._reserved_names(identity, key))

    def verdict(self, identity: str, key: DedupKey) -> str:
        """``new``, ``duplicate`` or ``too_old`` for a record of ``identity`` named ``key`` (nothing
        changes); a key held in flight (:meth:`reserve`) is a duplicate."""
        if self._reserved and not self._reserved.isdisjoint(self._reserved_names(identity, key)):
            return DUPLICATE
        if key.record_id and self._name(identity, f"{key.producer}\0{key.record_id}") in self._ids:
            return DUPLICATE
        if key.sequence:
            window = self._producers.get(self._name(identity, key.producer))
            if window is not None:
                return window.verdict(key.sequence)
        return NEW

    def take(self, identity: str, key: DedupKey) -> None:
        """Mark the record taken (call once it is written to the log), ending :meth:`reserve`."""
        if self._reserved:
            self.release(identity, key)
        if key.record_id:
            name = self._name(identity, f"{key.producer}\0{key.record_id}")
            self._ids[name] = None
            self._ids.move_to_end(name)
            if len(self._ids) > self.max_record_ids:
                self._ids.popitem(last=False)
        if key.sequence:
            name = self._name(identity, key.producer)
            window = self._producers.get(name)
            if window is None:
                window = self._producers[name] = ProducerWindow()
                if len(self._producers) > self.max_producers:
                    self._producers.popitem(last=False)
                    self.n_forgotten_producers += 1
            else:
                self._producers.move_to_end(name)
            window.take(key.sequence, self.window)

    def producers(self) -> int:
        """Producers tracked."""
        return len(self._producers)

    def record_ids(self) -> int:
        """Record ids tracked."""
        return len(self._ids)
