"""Online solo-latency profile keyed by (model, batch size).

When a record carries ``solo_latency_ms`` it is used as is. Otherwise the
profile answers from what it has seen, in this order:

1. the latest profiled solo latency for the key (from records that carried one);
2. the mean latency of the key's records that ran alone (no overlapping co-runner);
3. the same model at the nearest profiled batch size, scaled linearly by batch size;
4. the lowest latency seen for the key (least interference seen so far);
5. the mean latency of everything seen, or 1 ms before anything was seen.

Memory is bounded by ``max_keys``.

Examples
--------
>>> from predictor.records.record import BatchSpec, Record
>>> profile = SoloProfile()
>>> profile.learn(Record("cpu0", BatchSpec("mlp", 2), 4.0))
>>> profile.estimate(Record("cpu0", BatchSpec("mlp", 4), None))
8.0
"""

from __future__ import annotations

from predictor.records.record import Record

Key = tuple[str, int]


class SoloProfile:
    """Solo latencies learnt online per (model, batch size), with the fallbacks above.

    Parameters
    ----------
    max_keys
        Most (model, batch size) keys remembered; records of further keys only
        update the overall mean.
    """

    def __init__(self, max_keys: int = 4096):
        self.max_keys = max_keys
        self._profiled: dict[Key, float] = {}
        self._alone: dict[Key, tuple[float, int]] = {}
        self._lowest: dict[Key, float] = {}
        self._total = 0.0
        self._count = 0

    def copy(self) -> SoloProfile:
        """An independent copy (the tables hold immutable values: shallow copies suffice)."""
        twin = SoloProfile.__new__(SoloProfile)
        twin.__dict__.update(self.__dict__)
        twin._profiled = dict(self._profiled)
        twin._alone = dict(self._alone)
        twin._lowest = dict(self._lowest)
        return twin

    def _has_room(self, key: Key) -> bool:
        return key in self._lowest or len(self._lowest) < self.max_keys

    def learn(self, record: Record) -> None:
        """Take in an observed record (``latency_ms`` set)."""
        latency = record.latency_ms
        if latency is None:
            return
        key = (record.batch.model, record.batch.batch_size)
        self._total += latency
        self._count += 1
        if not self._has_room(key):
            return
        self._lowest[key] = min(latency, self._lowest.get(key, latency))
        if record.solo_latency_ms is not None:
            self._profiled[key] = record.solo_latency_ms
        elif not any(r.overlap > 0 for r in record.co_runners):
            mean, n = self._alone.get(key, (0.0, 0))
            self._alone[key] = (mean + (latency - mean) / (n + 1), n + 1)

    def knows(self, record: Record) -> bool:
        """Whether the solo latency of ``record`` is given or profiled for its exact key (not a guess)."""
        return (
            record.solo_latency_ms is not None
            or self._known((record.batch.model, record.batch.batch_size)) is not None
        )

    def seen(self, record: Record) -> bool:
        """Whether a record of ``record``'s exact key (model, batch size) has been learned, alone or
        not: answers for it come from its own observations, even where its solo latency is a guess."""
        return (record.batch.model, record.batch.batch_size) in self._lowest

    def _known(self, key: Key) -> float | None:
        if key in self._profiled:
            return self._profiled[key]
        if key in self._alone:
            return self._alone[key][0]
        return None

    def estimate(self, record: Record) -> float:
        """Solo latency (ms) for ``record``'s model and batch size."""
        if record.solo_latency_ms is not None:
            return record.solo_latency_ms
        model, batch_size = record.batch.model, record.batch.batch_size
        key = (model, batch_size)
        known = self._known(key)
        if known is not None:
            return known
        sizes = [b for (m, b) in self._profiled.keys() | self._alone.keys() if m == model]
        if sizes:
            nearest = min(sizes, key=lambda b: (abs(b - batch_size), b))
            return self._known((model, nearest)) * batch_size / nearest  # type: ignore[operator]
        if key in self._lowest:
            return self._lowest[key]
        return self._total / self._count if self._count else 1.0
