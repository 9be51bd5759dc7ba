"""The fine features of one record as a function of its co-runners' overlaps.

A query whose co-runners are given by remaining time is predicted at several windows (the
fixed point of :func:`~predictor.service.estimates.monotone.fixed_point_one`): the record is the same
each time but for those co-runners' overlaps. :func:`fine_program` walks the record once, as
:func:`~predictor.features.extract.fine_features` does, and keeps what the overlaps do not change
(the names in their order, the batch's features, the signals, each co-runner's multipliers);
:meth:`FineProgram.values` then computes the values for given overlaps with the same
arithmetic in the same order: the same numbers, to the last bit (tested against
:func:`~predictor.features.extract.fine_features`).

A program holds for the overlaps whose zeros are where it was made (a co-runner of overlap 0
adds to ``co:count`` only, so its names are absent): :meth:`FineProgram.values` answers
``None`` for others, and the caller takes the dict path.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from predictor.features.extract import (
    _RUNNER_SUMS,
    CO,
    COUNT,
    CROSS,
    SIGNAL,
    RowLayout,
    _batch_features,
    _model_sums,
)
from predictor.records.record import CoRunner, Record
from predictor.records.rules import OUTCOME_SIGNALS

_Term = tuple[int, int, float | None]  # (slot, co-runner, multiplier; None: the overlap itself)


@dataclass(frozen=True, eq=False)
class FineProgram:
    """How one record's fine features follow its co-runners' overlaps (see the module).

    Attributes
    ----------
    names
        The fine feature names, in :func:`~predictor.features.extract.fine_features`' order.
    initial
        Each name's value before the overlap-weighted sums (0 for the sums).
    terms
        ``(slot, co-runner, multiplier)`` in the order the sums are made.
    crosses
        ``(slot, own value, slot of co:K)`` of each ``x:K`` term.
    zero
        Per co-runner, whether its overlap is 0 (its terms skipped).
    """

    names: tuple[str, ...]
    initial: tuple[float, ...]
    terms: tuple[_Term, ...]
    crosses: tuple[tuple[int, float, int], ...]
    zero: tuple[bool, ...]

    def values(self, overlaps: Sequence[float]) -> list[float] | None:
        """The fine features' values with the co-runners at ``overlaps`` (``None``: an overlap is 0
        where the program's is not, or the other way round)."""
        zero = self.zero
        for i, overlap in enumerate(overlaps):
            if (overlap == 0.0) is not zero[i]:
                return None
        values = list(self.initial)
        for slot, runner, multiplier in self.terms:
            weight = overlaps[runner]
            values[slot] = values[slot] + (weight if multiplier is None else weight * multiplier)
        for slot, own, co in self.crosses:
            values[slot] = own * values[co]
        return values

    @functools.cached_property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The program as arrays, for the compiled quadratic
        (:func:`~predictor.service.estimates.fixed_point_kernel.window_of`): the initial values; a row per
        term, ``(slot, co-runner, step)`` (the step its multiplier, 1 for the overlap itself); a
        row per cross, ``(slot, own value, source slot)``. Made once per program (an ensemble's experts
        read the same; never changed in place)."""
        terms = [(slot, runner, 1.0 if multiplier is None else multiplier) for slot, runner, multiplier in self.terms]
        return (np.array(self.initial, dtype=float), np.array(terms, dtype=float).reshape(-1, 3),
                np.array(self.crosses, dtype=float).reshape(-1, 3))


@dataclass(frozen=True, eq=False)
class WindowForm:
    """A single query's answer as a function of the overlaps of its co-runners given by remaining
    time, for the compiled fixed point (:func:`~predictor.service.estimates.fixed_point_kernel.window_of`):
    a linear model's ``intercept + weights @ x`` over the features ``x`` of the record's
    :class:`FineProgram` (its interaction features where ``layout`` is given), mapped to a
    latency as :class:`~predictor.predictors.base.QuadraticLatencies` maps it.

    ``moving``: the co-runners given by remaining time, ``remaining``: their remaining ms;
    ``overlaps``: every co-runner's overlap (the moving ones' unused).
    """

    program: FineProgram
    layout: RowLayout | None
    intercept: float
    weights: np.ndarray
    overlaps: tuple[float, ...]
    moving: tuple[int, ...]
    remaining: tuple[float, ...]
    solo: float
    low: float
    high: float
    log_target: bool


@dataclass(frozen=True, eq=False)
class WeightedWindowForms:
    """A single query's answer as a weighted geometric mean of several :class:`WindowForm` of the same
    moving co-runners (an ensemble's experts'), combined as
    :class:`~predictor.predictors.base.WeightedLatencies` combines rows; ``solo``, ``low`` and
    ``high``: those of the grid searched (the ensemble's)."""

    weights: tuple[float, ...]
    parts: tuple[WindowForm, ...]
    solo: float
    low: float
    high: float


def fine_program(record: Record, overlaps: Sequence[float] | None = None) -> FineProgram | None:
    """The :class:`FineProgram` of ``record`` for overlaps zero where ``overlaps`` are (default:
    the record's own); ``None`` where a name would be both summed and assigned (the dict path
    merges them; not worth following here)."""
    batch = record.batch
    if overlaps is None:
        overlaps = [runner.overlap for runner in record.co_runners]
    slots: dict[str, int] = {}
    initial: list[float] = []

    def slot(name: str, value: float = 0.0) -> int:
        at = slots.get(name)
        if at is None:
            at = slots[name] = len(initial)
            initial.append(value)
        return at

    for name, value in _batch_features(batch).items():
        slot(name, value)
    batch_slots = len(initial)
    terms: list[_Term] = []
    crosses: list[tuple[int, float, int]] = []
    zero = tuple(overlap == 0.0 for overlap in overlaps)
    runners = record.co_runners
    if runners:
        count = slot(COUNT)
        model_sums = _model_sums(batch.model)
        for j, runner in enumerate(runners):
            initial[count] = initial[count] + 1.0
            if zero[j]:
                continue
            for name, value_of in _RUNNER_SUMS:
                terms.append((slot(name), j, None if value_of is None else value_of(runner.batch_size)))
            for prefix in model_sums:
                terms.append((slot(prefix + runner.model), j, None))
            for key, value in runner.attrs.items():
                terms.append((slot(CO + key), j, value))
        if any(at < batch_slots for at, _, _ in terms) or count < batch_slots:
            return None  # a sum onto a batch feature's name
        for key, own_value in batch.attrs.items():
            co = slots.get(CO + key)
            if co is not None:
                if CROSS + key in slots:
                    return None
                crosses.append((slot(CROSS + key), own_value, co))
    for key, value in record.signals.items():
        if key not in OUTCOME_SIGNALS:
            if SIGNAL + key in slots:
                return None
            slot(SIGNAL + key, value)
    return FineProgram(tuple(slots), tuple(initial), tuple(terms), tuple(crosses), zero)


def moving_program(record: Record, remaining_ms: Sequence[float | None]) -> tuple[list, list, FineProgram] | None:
    """What a predictor's window path follows ``record`` by: the moving co-runners ``(index,
    remaining ms)``, the overlaps (the moving ones at their remaining ms: zero exactly where every
    window's overlap is, as remaining ms > 0 is never 0) and the record's :class:`FineProgram` over
    them; ``None`` when no co-runner moves or the program does not hold (:func:`fine_program`)."""
    moving = [(i, ms) for i, ms in enumerate(remaining_ms) if ms is not None]
    if not moving:
        return None
    overlaps = [runner.overlap for runner in record.co_runners]
    for i, ms in moving:
        overlaps[i] = ms
    program = fine_program(record, overlaps)
    return None if program is None else (moving, overlaps, program)


def overlap_at(remaining_ms: float, window: float) -> float:
    """The overlap of a co-runner with ``remaining_ms`` left in a window of ``window`` ms:
    ``min(remaining / window, 1)``, or 1 for an idle window (<= 0)."""
    return 1.0 if window <= 0 else min(remaining_ms / window, 1.0)


def at_window(record: Record, remaining_ms: Sequence[float | None], window: float) -> Record:
    """``record`` with each co-runner ``i`` whose ``remaining_ms[i]`` is given at its overlap for
    ``window`` (:func:`overlap_at`), the others as they are."""
    runners = tuple(
        runner if ms is None else CoRunner(runner.model, runner.batch_size, runner.attrs, overlap_at(ms, window))
        for runner, ms in zip(record.co_runners, remaining_ms, strict=True)
    )
    return with_runners(record, runners)


_RECORD_FIELDS = tuple(f.name for f in fields(Record) if f.name != "co_runners")
_set = object.__setattr__


def with_runners(record: Record, runners: tuple[CoRunner, ...]) -> Record:
    """``dataclasses.replace(record, co_runners=runners)`` at half the cost (a window's record
    is made several times per query): every field copied as it is, none validated again."""
    twin = object.__new__(Record)
    for name in _RECORD_FIELDS:
        _set(twin, name, getattr(record, name))
    _set(twin, "co_runners", runners)
    return twin
