"""Many co-locations of one batch, column-wise: the rows of a placement ranking.

A ranking asks about one batch on hundreds of candidate devices. Building a
:class:`~predictor.records.record.Record` per candidate costs more than predicting
it; :class:`CoLocations` keeps the candidates as columns instead (one row per
device, the co-runners of all rows flattened, row ``i`` owning
``offsets[i]:offsets[i + 1]``), so that features and predictions are computed
for all rows at once (:func:`predictor.features.extract.feature_matrix`,
:meth:`~predictor.predictors.base.LatencyPredictor.predict_colocations`).
Row ``i`` stands for the planned record :meth:`CoLocations.record` builds.

Examples
--------
>>> from predictor.records.record import BatchSpec
>>> rows = CoLocations.build(
...     BatchSpec("bert", 4, {"l2_util": 0.5}),
...     devices=["gpu0", "gpu1"],
...     co_runners=[[("mlp", 2, {"l2_util": 0.1}, 0.5)], []],
... )
>>> len(rows), rows.offsets.tolist(), rows.record(0).co_runners[0].overlap
(2, [0, 1, 1], 0.5)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from predictor.records.record import BatchSpec, CoRunner, Record

_EMPTY: Mapping[str, float] = {}


@dataclasses.dataclass(frozen=True, eq=False)
class CoLocations:
    """One batch on ``n`` devices, each with its co-runners, column-wise.

    Parameters
    ----------
    batch
        The batch every row places.
    devices, device_kinds, signals
        Per row.
    offsets
        ``n + 1`` non-decreasing integers from 0: row ``i``'s co-runners are
        ``offsets[i]:offsets[i + 1]`` of the per-co-runner columns.
    models, batch_sizes, attrs, overlaps
        Per co-runner; ``overlaps`` in [0, 1].
    solo_latency_ms
        The batch's profiled solo latency, if given (shared by every row).
    """

    batch: BatchSpec
    devices: Sequence[str]
    device_kinds: Sequence[str]
    signals: Sequence[Mapping[str, float]]
    offsets: np.ndarray
    models: Sequence[str]
    batch_sizes: Sequence[int]
    attrs: Sequence[Mapping[str, float]]
    overlaps: np.ndarray
    solo_latency_ms: float | None = None
    cache: dict = dataclasses.field(default_factory=dict, repr=False)
    """What derived computations keep about the rows other than the overlaps (shared by
    :meth:`with_overlaps`)."""

    @classmethod
    def build(
        cls,
        batch: BatchSpec,
        devices: Sequence[str],
        co_runners: Sequence[Sequence[tuple[str, int, Mapping[str, float], float]]],
        *,
        device_kinds: Sequence[str] | None = None,
        signals: Sequence[Mapping[str, float]] | None = None,
        solo_latency_ms: float | None = None,
    ) -> CoLocations:
        """From per-row lists of ``(model, batch_size, attrs, overlap)`` (tests, small callers)."""
        flat = [runner for runners in co_runners for runner in runners]
        return cls(
            batch=batch,
            devices=list(devices),
            device_kinds=list(device_kinds) if device_kinds is not None else [""] * len(devices),
            signals=list(signals) if signals is not None else [_EMPTY] * len(devices),
            offsets=np.concatenate([[0], np.cumsum([len(r) for r in co_runners], dtype=np.int64)]).astype(np.int64),
            models=[r[0] for r in flat],
            batch_sizes=[r[1] for r in flat],
            attrs=[r[2] for r in flat],
            overlaps=np.array([r[3] for r in flat], dtype=float),
            solo_latency_ms=solo_latency_ms,
        )

    @classmethod
    def from_records(cls, records: Sequence[Record]) -> CoLocations:
        """Planned records that share one batch and solo latency, as rows."""
        if not records:
            raise ValueError("give at least one record")
        first = records[0]
        return cls.build(
            first.batch,
            [r.device for r in records],
            [[(c.model, c.batch_size, c.attrs, c.overlap) for c in r.co_runners] for r in records],
            device_kinds=[r.device_kind for r in records],
            signals=[r.signals for r in records],
            solo_latency_ms=first.solo_latency_ms,
        )

    def __len__(self) -> int:
        return len(self.devices)

    def rows_of_runners(self) -> np.ndarray:
        """The row of each co-runner (computed once, kept in :attr:`cache`; read-only)."""
        found = self.cache.get("rows_of_runners")
        if found is None:
            found = self.cache["rows_of_runners"] = np.repeat(np.arange(len(self.devices)), np.diff(self.offsets))
            found.flags.writeable = False
        return found

    def take(self, rows: np.ndarray) -> tuple[CoLocations, np.ndarray]:
        """Rows ``rows`` of these, in that order, as rows of their own (a fresh :attr:`cache`), and the
        positions among these rows' co-runners of theirs (what maps a per-co-runner column onto them).

        Examples
        --------
        >>> rows = CoLocations.build(BatchSpec("a", 1), ["x", "y", "z"],
        ...                          [[("b", 1, {}, 0.5)], [], [("c", 2, {}, 0.25), ("b", 1, {}, 1.0)]])
        >>> part, positions = rows.take(np.array([2, 0]))
        >>> part.devices, part.offsets.tolist(), positions.tolist(), part.overlaps.tolist()
        (['z', 'x'], [0, 2, 3], [1, 2, 0], [0.25, 1.0, 0.5])
        """
        rows = np.asarray(rows, dtype=np.intp)
        counts = np.diff(self.offsets)[rows]
        offsets = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        positions = np.repeat(self.offsets[:-1][rows] - offsets[:-1], counts) + np.arange(offsets[-1])
        at, picked = rows.tolist(), positions.tolist()
        part = CoLocations(
            batch=self.batch,
            devices=[self.devices[i] for i in at],
            device_kinds=[self.device_kinds[i] for i in at],
            signals=[self.signals[i] for i in at],
            offsets=offsets,
            models=[self.models[j] for j in picked],
            batch_sizes=[self.batch_sizes[j] for j in picked],
            attrs=[self.attrs[j] for j in picked],
            overlaps=self.overlaps[positions],
            solo_latency_ms=self.solo_latency_ms,
        )
        return part, positions

    def with_overlaps(self, overlaps: np.ndarray) -> CoLocations:
        """The same rows with other co-runner overlaps (and the same :attr:`cache`)."""
        return dataclasses.replace(self, overlaps=overlaps, cache=self.cache)

    def co_runners(self, i: int) -> tuple[CoRunner, ...]:
        """Row ``i``'s co-runners."""
        start, stop = int(self.offsets[i]), int(self.offsets[i + 1])
        return tuple(
            CoRunner(self.models[j], self.batch_sizes[j], self.attrs[j], float(self.overlaps[j]))
            for j in range(start, stop)
        )

    def record(self, i: int) -> Record:
        """Row ``i`` as a planned record."""
        return Record(
            device=self.devices[i],
            batch=self.batch,
            latency_ms=None,
            device_kind=self.device_kinds[i],
            solo_latency_ms=self.solo_latency_ms,
            co_runners=self.co_runners(i),
            signals=self.signals[i],
        )

    def alone(self, i: int = 0) -> Record:
        """Row ``i``'s batch alone on its device (no co-runners, no signals): what a solo latency
        is looked up by (:meth:`LatencyPredictor.solo_latency
        <predictor.predictors.base.LatencyPredictor.solo_latency>`), the same for every row. Row 0's is
        made once (kept in :attr:`cache`)."""
        if i == 0:
            found = self.cache.get("alone")
            if found is None:
                found = self.cache["alone"] = self._alone(0)
            return found
        return self._alone(i)

    def _alone(self, i: int) -> Record:
        return Record(device=self.devices[i], batch=self.batch, latency_ms=None, device_kind=self.device_kinds[i],
                      solo_latency_ms=self.solo_latency_ms)

    def records(self) -> list[Record]:
        """Every row as a planned record, in row order."""
        return [self.record(i) for i in range(len(self))]
