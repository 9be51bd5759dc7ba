"""Candidates and rankings column-wise: ``RankPlacements`` without an object per candidate.

:class:`CandidateColumns` holds the candidate devices of one ranking as
columns (their co-runners flattened, candidate ``i`` owning
``offsets[i]:offsets[i + 1]``), built straight from the protobuf request or
from :class:`~predictor.service.types.Candidate` objects.
:func:`~predictor.service.estimates.column_checks.valid_columns` checks them all at once against the rules the
per-candidate path enforces (the column predicates of :mod:`predictor.records.rules`);
where it cannot vouch for every candidate, the service falls back to that path
(:func:`~predictor.service.answering.plan_query`), which names the first
offending field.
:class:`RankingColumns` is the answer, column-wise; :meth:`RankingColumns.to_ranking`
gives the :class:`~predictor.service.types.Ranking` of domain objects.

Examples
--------
>>> from predictor.service.types import Candidate, PlannedCoRunner
>>> columns = CandidateColumns.from_candidates(
...     [Candidate("gpu0", co_runners=(PlannedCoRunner("mlp", 2, remaining_ms=3.0),)), Candidate("gpu1")])
>>> len(columns), columns.offsets.tolist(), columns.remaining.tolist()
(2, [0, 1, 1], [3.0])
>>> columns.candidate(0) == Candidate("gpu0", co_runners=(PlannedCoRunner("mlp", 2, remaining_ms=3.0),))
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from predictor.calibration.conformal import Bound
from predictor.calibration.shapes import QueryShape
from predictor.records.colocations import CoLocations
from predictor.service.types import (
    Candidate,
    CoRunnerSource,
    DelayDecision,
    PlacementAnswer,
    PlannedCoRunner,
    Prediction,
    Ranking,
)

if TYPE_CHECKING:
    from predictor.service.estimates.terms import Terms


@dataclass(frozen=True, eq=False)
class CandidateColumns:
    """Candidate devices of one ranking, column-wise.

    Parameters
    ----------
    devices, device_kinds, sources, signals
        Per candidate.
    offsets
        ``n + 1`` non-decreasing integers from 0 delimiting each candidate's co-runners.
    models, batch_sizes, attrs
        Per co-runner.
    overlaps, remaining
        Per co-runner, meaningful where ``has_overlap`` / ``has_remaining``.
    has_overlap, has_remaining
        Per co-runner: whether it was given by overlap, by remaining time (or neither: overlap 1).
    typed
        Whether every name is a ``str``, every batch size an ``int`` and every number a
        ``float`` (true from protobuf); only then are the columns checked at once.
    """

    devices: Sequence[str]
    device_kinds: Sequence[str]
    sources: Sequence[CoRunnerSource]
    signals: Sequence[Mapping[str, float]]
    offsets: np.ndarray
    models: Sequence[str]
    batch_sizes: Sequence[int]
    attrs: Sequence[Mapping[str, float]]
    overlaps: np.ndarray
    remaining: np.ndarray
    has_overlap: np.ndarray
    has_remaining: np.ndarray
    typed: bool = False

    @classmethod
    def from_candidates(cls, candidates: Sequence[Candidate]) -> CandidateColumns:
        """From :class:`~predictor.service.types.Candidate` objects (tests and Python callers)."""
        runners = [r for c in candidates for r in c.co_runners]
        return cls(
            devices=[c.device for c in candidates],
            device_kinds=[c.device_kind for c in candidates],
            sources=[c.co_runner_source for c in candidates],
            signals=[c.signals for c in candidates],
            offsets=np.cumsum([0] + [len(c.co_runners) for c in candidates], dtype=np.int64),
            models=[r.model for r in runners],
            batch_sizes=[r.batch_size for r in runners],
            attrs=[r.attrs for r in runners],
            overlaps=np.array([0.0 if r.overlap is None else r.overlap for r in runners], dtype=float),
            remaining=np.array([0.0 if r.remaining_ms is None else r.remaining_ms for r in runners], dtype=float),
            has_overlap=np.array([r.overlap is not None for r in runners], dtype=bool),
            has_remaining=np.array([r.remaining_ms is not None for r in runners], dtype=bool),
        )

    def __len__(self) -> int:
        return len(self.devices)

    def candidate(self, i: int) -> Candidate:
        """Candidate ``i`` as a domain object (for the per-candidate path)."""
        runners = tuple(
            PlannedCoRunner(
                self.models[j],
                self.batch_sizes[j],
                self.attrs[j],
                overlap=float(self.overlaps[j]) if self.has_overlap[j] else None,
                remaining_ms=float(self.remaining[j]) if self.has_remaining[j] else None,
            )
            for j in range(int(self.offsets[i]), int(self.offsets[i + 1]))
        )
        return Candidate(self.devices[i], self.device_kinds[i], runners, self.sources[i], self.signals[i])

    def uses_live_view(self) -> list[int]:
        """Candidates whose co-runners come from the live view."""
        sources = self.sources
        live = CoRunnerSource.LIVE_VIEW in sources
        if not live and CoRunnerSource.AUTO not in sources:
            return []
        counts = np.diff(self.offsets).tolist()
        return [
            i
            for i, source in enumerate(sources)
            if source is CoRunnerSource.LIVE_VIEW or (source is CoRunnerSource.AUTO and not counts[i])
        ]


class EstimatedPaths(Sequence[tuple[str, ...]]):
    """Per candidate, the paths of the fields the service estimated because the query left them
    out (``co_runners[j].overlap``, ``signals.S``), as the per-candidate path names them; each
    tuple is built when asked for (a packed answer asks for none).

    Parameters
    ----------
    offsets
        The candidates' co-runner offsets.
    moving
        Per co-runner: given by remaining time (its overlap estimated from the predicted window).
    """

    def __init__(self, offsets: np.ndarray, moving: np.ndarray):
        self.offsets = offsets
        self.moving = moving
        self.filled = np.zeros_like(moving)
        self.extra: dict[int, tuple[str, ...]] = {}

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: Any) -> Any:
        if not isinstance(i, (int, np.integer)):
            return [self[j] for j in range(len(self))[i]]
        if i < 0:
            i += len(self)
        start, stop = int(self.offsets[i]), int(self.offsets[i + 1])
        overlaps = tuple(f"co_runners[{j - start}].overlap" for j in range(start, stop) if self.moving[j])
        filled = tuple(f"co_runners[{j - start}].overlap" for j in range(start, stop) if self.filled[j])
        return overlaps + filled + self.extra.get(i, ())

    def __setitem__(self, i: int, paths: tuple[str, ...]) -> None:
        """Candidate ``i``'s paths, replaced (the co-runners' own flags no longer count)."""
        start, stop = int(self.offsets[i]), int(self.offsets[i + 1])
        self.moving = self.moving.copy()
        self.filled = self.filled.copy()
        self.moving[start:stop] = False
        self.filled[start:stop] = False
        self.extra[i] = tuple(paths)

    def add(self, i: int, paths: tuple[str, ...]) -> None:
        """Append ``paths`` to candidate ``i``'s."""
        self.extra[i] = self.extra.get(i, ()) + tuple(paths)

    def any(self) -> bool:
        """Whether some candidate has a path."""
        return bool(self.moving.any() or self.filled.any() or any(self.extra.values()))


class RowShapes(Sequence[QueryShape]):
    """Per row, the query shape its bound is calibrated for, as an index into the few distinct
    shapes of a ranking (what the calibration cells and the answer's shape keys are found from
    without a look-up per row).

    Parameters
    ----------
    distinct
        The distinct shapes.
    index
        Per row, its shape's position in ``distinct``.
    """

    def __init__(self, distinct: Sequence[QueryShape], index: np.ndarray):
        self.distinct = list(distinct)
        self.index = index

    def __len__(self) -> int:
        return self.index.size

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, (int, np.integer)):
            return self.distinct[self.index[i]]
        return [self.distinct[j] for j in self.index[i].tolist()]

    def keys(self) -> list[str]:
        """``shape.key`` of every row."""
        keys = np.empty(len(self.distinct), dtype=object)
        keys[:] = [shape.key for shape in self.distinct]
        return keys[self.index].tolist()


def distinct_maps(maps: Sequence[Mapping[str, float]]) -> Sequence[Mapping[str, float]]:
    """``maps``, or its first alone where every row's is equal to it (the candidates of a packed
    request without signals share one empty map): what checking every row comes to."""
    if isinstance(maps, list) and len(maps) > 1 and maps.count(maps[0]) == len(maps):
        return maps[:1]
    return maps


def rank_order(slack: np.ndarray, rows: CoLocations) -> np.ndarray:
    """The candidates best first: most slack, then (ties) fewer co-runners, then less total
    overlap, then request order.

    Two devices that are otherwise equal rank the less crowded first even where their answers
    tie (a prediction clamped at its largest slowdown, a predictor blind to co-runners).

    Examples
    --------
    >>> from predictor.records.record import BatchSpec
    >>> rows = CoLocations.build(BatchSpec("a", 1), ["busy", "idle", "half"],
    ...                          [[("b", 1, {}, 1.0)], [], [("b", 1, {}, 0.5)]])
    >>> rank_order(np.array([5.0, 5.0, 5.0]), rows).tolist()
    [1, 2, 0]
    """
    counts = np.diff(rows.offsets)
    total = np.bincount(rows.rows_of_runners(), rows.overlaps, minlength=len(rows)) if rows.overlaps.size else counts
    return np.lexsort((total, counts, -slack))  # a stable sort: request order last


@dataclass(eq=False, slots=True)
class RankingColumns:
    """A ranking, column-wise: per-candidate arrays in candidate order, and the ranking ``order``.

    ``rows`` holds the planned co-locations as predicted (co-runners with their effective
    overlaps); ``bounds`` the calibration of each distinct device kind (``Bound.upper_ms`` is
    the factor on the latency); ``order[r]`` the candidate ranked ``r + 1``.
    """

    rows: CoLocations
    order: np.ndarray
    latency_ms: np.ndarray
    solo_latency_ms: np.ndarray
    upper_bound_ms: np.ndarray
    slack_ms: np.ndarray
    probability: np.ndarray
    bounds: Mapping[str, Bound]
    confidence: float
    predictor: str
    observations_learned: int
    deadline_ms: float
    estimated: Sequence[tuple[str, ...]] | None = None
    """Per candidate, the fields estimated because the query left them out (``None``: none)."""
    row_bounds: Sequence[Bound] | None = None
    """Per row: how its bound was calibrated (``None``: ``bounds`` of its device kind)."""
    shapes: Sequence[str] | None = None
    """Per row: the query shape its bound was calibrated for."""
    fallback: np.ndarray | None = None
    """Per row: whether the answer is a wide fallback (unseen model or device kind)."""
    row_cells: np.ndarray | None = None
    """Per row: the number of its calibration cell, the cells numbered 0, 1, ... in order of first row
    (rows of one cell share their device kind, ``row_bounds``, ``shapes`` and ``fallback``); ``None``:
    not told."""
    raw_latency_ms: np.ndarray | None = None
    """Per row: the predictor's latency before the calibrated correction (``None``: ``latency_ms``)."""
    terms: Terms | None = None
    """Queue wait, load time, memory and transfer of every row (``None``: none known, the latency alone)."""
    delay: DelayDecision | None = None
    """Delay scheduling: wait for a device holding the input, or go remote now (``None``: not asked)."""
    sequence: int = 0
    """The version the answers were computed from (:attr:`~predictor.service.published.ModelVersion.sequence`)."""

    def prediction(self, i: int) -> Prediction:
        """Candidate ``i``'s answer as a :class:`~predictor.service.types.Prediction`."""
        kind = self.rows.device_kinds[i]
        bound = self.bounds[kind] if self.row_bounds is None else self.row_bounds[i]
        latency, solo = float(self.latency_ms[i]), float(self.solo_latency_ms[i])
        return Prediction(
            latency_ms=latency,
            solo_latency_ms=solo,
            slowdown=latency / solo,
            upper_bound_ms=float(self.upper_bound_ms[i]),
            confidence=self.confidence,
            bound_source=bound.source,
            residuals=bound.n,
            predictor=self.predictor,
            observations_learned=self.observations_learned,
            co_runners=self.rows.co_runners(i),
            device_kind=kind,
            fallback=bool(self.fallback[i]) if self.fallback is not None else False,
            query_shape=self.shapes[i] if self.shapes is not None else "",
            estimated=self.estimated[i] if self.estimated is not None else (),
            sequence=self.sequence,
            **self.term_fields(i),
        )

    def term_fields(self, i: int) -> dict:
        """Row ``i``'s queue, load and transfer fields of a :class:`~predictor.service.types.Prediction`
        ({} without terms)."""
        if self.terms is None:
            return {}
        wait = self.terms.waits[i]
        transfer = self.terms.transfer(i)
        return {
            "transfer_ms": transfer.mean_ms,
            "transfer_bound_ms": transfer.bound_ms,
            "transfer_link": transfer.link,
            "queue_wait_ms": wait.mean_ms,
            "queue_wait_bound_ms": wait.bound_ms,
            "queue_saturated": wait.saturated,
            "queue_wait_source": wait.source.value,
            "queue_utilisation": wait.utilisation,
            "load_ms": float(self.terms.load_ms[i]),
        }

    def placement_fields(self, i: int) -> dict:
        """Row ``i``'s memory fields and deciding term of a :class:`~predictor.service.types.PlacementAnswer`."""
        terms = self.terms
        if terms is None:
            return {}
        free = float(terms.free_mb[i])
        return {
            "infeasible_reason": terms.reasons[i],
            "deciding_term": terms.deciding_term(i, float(self.upper_bound_ms[i]), float(self.solo_latency_ms[i])),
            "memory_needed_mb": float(terms.needed_mb[i]),
            "memory_free_mb": None if math.isnan(free) else free,
        }

    def feasible(self, i: int) -> bool:
        """Whether row ``i`` meets the deadline at the confidence (and fits in memory)."""
        return bool(self.slack_ms[i] >= 0) and (self.terms is None or bool(self.terms.fits[i]))

    def to_ranking(self) -> Ranking:
        """The ranking as domain objects, best placement first."""
        placements = tuple(
            PlacementAnswer(
                device=self.rows.devices[i],
                rank=rank,
                feasible=self.feasible(i),
                slack_ms=float(self.slack_ms[i]),
                probability=float(self.probability[i]),
                prediction=self.prediction(i),
                candidate_index=i,
                **self.placement_fields(i),
            )
            for rank, i in enumerate(self.order.tolist(), start=1)
        )
        return Ranking(placements, self.deadline_ms, self.delay)
