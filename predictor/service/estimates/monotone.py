"""Answers monotone in crowding, for every predictor the service can run.

Contention never makes a batch faster: adding a co-runner, raising a co-runner's overlap
or its batch size must never lower the predicted latency (nor, the bound being a factor of
it per device kind, the bound). The answering path gets that guarantee here, whatever the
learner:

* a predictor that guarantees it itself (:meth:`~predictor.predictors.base.LatencyPredictor.monotone_in_crowding`:
  non-negative weights on contention features) answers **directly**; its features grow with
  crowding for non-negative attributes, so a co-runner's negative attribute is read as 0
  (contention cannot speed a batch up) and a batch with a negative attribute of its own is
  answered by the construction below;
* any other predictor (a tree ensemble, a learner added later) answers through a **monotone
  construction** over its own answers (:func:`additive`): its answer for the batch alone, times
  one plus a non-negative term per co-runner, so monotone by construction.

Co-runners given by remaining time get their overlap ``min(1, remaining / window)`` from the
batch's own predicted window, a fixed point (:func:`fixed_point`): the answer is the smallest
point of a fixed log-spaced grid at which the window covers its prediction, which is monotone
whenever the prediction is (a larger prediction moves every such point up).

Examples
--------
>>> from predictor.predictors import create
>>> from predictor.records.record import BatchSpec
>>> rows = CoLocations.build(BatchSpec("a", 1), ["d", "d"], [[], [("b", 4, {}, 0.5)]], solo_latency_ms=10.0)
>>> latencies(create("solo"), rows).tolist()
[10.0, 10.0]
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import operator
from collections.abc import Callable

import numpy as np

from predictor.predictors import LatencyPredictor
from predictor.predictors.base import MAX_SLOWDOWN, MIN_SLOWDOWN, QuadraticLatencies, WeightedLatencies
from predictor.records.colocations import CoLocations
from predictor.records.keyed import KeyedMaps
from predictor.records.record import Record

_VALUES = operator.methodcaller("values")
GRID_STEPS = 12
""":func:`fixed_point` answers on a grid of ``2**12`` log-spaced points over the predictor's slowdown
range: a resolution of ``log(high / low) / 4096``, 0.06% for a range of 1 to 12, 0.19% at most."""


def direct(predictor: LatencyPredictor, batch_attrs: dict[str, float] | None = None) -> bool:
    """Whether ``predictor`` answers directly (it is monotone itself, and the batch's own
    attributes are non-negative)."""
    if not predictor.monotone_in_crowding():
        return False
    return not batch_attrs or min(batch_attrs.values()) >= 0


def needs_clipping(rows: CoLocations | Record) -> bool:
    """Whether some co-runner has a negative attribute (kept in ``rows.cache`` for columns)."""
    if isinstance(rows, Record):
        return any(c.attrs and min(c.attrs.values()) < 0 for c in rows.co_runners)
    cached = rows.cache.get("negative_attrs")
    if cached is None and isinstance(rows.attrs, KeyedMaps):
        values = rows.attrs.present()
        cached = rows.cache["negative_attrs"] = bool(values.size and values.min() < 0)
    if cached is None:
        values = np.fromiter(itertools.chain.from_iterable(map(_VALUES, rows.attrs)), dtype=float)
        cached = rows.cache["negative_attrs"] = bool(values.size and values.min() < 0)
    return cached


def clipped(rows: CoLocations) -> CoLocations:
    """The rows with every negative co-runner attribute read as 0.

    Built once per ``rows.cache`` (kept there): rows that share it differ only in their overlaps
    (:meth:`~predictor.records.colocations.CoLocations.with_overlaps`), so they share one clipped form,
    and what is cached for it (its feature form) is computed once, not on every call; each
    gets it with its own overlaps.
    """
    base = rows.cache.get("clipped")
    if base is None:
        attrs = [{k: max(v, 0.0) for k, v in m.items()} if m and min(m.values()) < 0 else m for m in rows.attrs]
        base = rows.cache["clipped"] = dataclasses.replace(rows, attrs=attrs, cache={})
    return base if base.overlaps is rows.overlaps else base.with_overlaps(rows.overlaps)


def latencies(predictor: LatencyPredictor, rows: CoLocations) -> np.ndarray:
    """Monotone predicted latencies (ms) of the rows (see the module's docstring)."""
    if direct(predictor, dict(rows.batch.attrs)):
        if needs_clipping(rows):
            rows = clipped(rows)
        return _predict(predictor, rows)
    return additive(predictor, rows)


def overlap_latencies(
    predictor: LatencyPredictor, rows: CoLocations, subset: np.ndarray
) -> Callable[[np.ndarray], np.ndarray]:
    """``latencies(predictor, rows.with_overlaps(overlaps))[subset]`` as a function of ``overlaps``
    (one per co-runner of ``rows``), with what does not depend on them computed once where the
    predictor answers directly and has a :meth:`~predictor.predictors.base.LatencyPredictor.colocation_form`
    (a fixed point asks it a dozen times); otherwise the rows of ``subset`` alone are predicted (rows
    are independent: each row's answer is the same whatever rows are beside it, up to the rounding of
    a matrix whose sums run over the columns the rows present)."""
    if len(rows) > 1 and direct(predictor, dict(rows.batch.attrs)):
        form = predictor.colocation_form(clipped(rows) if needs_clipping(rows) else rows, subset)
        if form is not None:
            return form
    if len(subset) == len(rows):
        return lambda overlaps: latencies(predictor, rows.with_overlaps(overlaps))[subset]
    part, positions = rows.take(subset)
    return lambda overlaps: latencies(predictor, part.with_overlaps(overlaps[positions]))


def overlap_quadratic(predictor: LatencyPredictor, rows: CoLocations, subset: np.ndarray,
                      moving: np.ndarray) -> QuadraticLatencies | WeightedLatencies | None:
    """:func:`overlap_latencies` as a quadratic of the overlaps of the co-runners flagged ``moving``
    (:meth:`~predictor.predictors.base.LatencyPredictor.colocation_quadratic`): ``None`` where the
    predictor does not answer directly or has none."""
    if len(rows) > 1 and direct(predictor, dict(rows.batch.attrs)):
        return predictor.colocation_quadratic(clipped(rows) if needs_clipping(rows) else rows, subset, moving)
    return None


def _predict(predictor: LatencyPredictor, rows: CoLocations) -> np.ndarray:
    if len(rows) == 1:
        return np.asarray(predictor.predict_many([rows.record(0)]), dtype=float)
    return np.asarray(predictor.predict_colocations(rows), dtype=float)


def _high(predictor: LatencyPredictor) -> float:
    return float(getattr(predictor, "_slowdown_range", (MIN_SLOWDOWN, MAX_SLOWDOWN))[1])


def additive(predictor: LatencyPredictor, rows: CoLocations) -> np.ndarray:
    """``base * (1 + sum_i overlap_i * h_i)``, at most the predictor's largest slowdown.

    ``base`` is the predictor's answer for the batch alone on the device and ``h_i >= 0`` the
    extra slowdown it predicts for co-runner ``i`` alone at full overlap, made non-decreasing in
    the co-runner's batch size (the running maximum over batch sizes 1, 2, 4, ..., interpolated in
    ``log2``). Adding a co-runner adds a non-negative term, raising an overlap or a batch size
    raises one: monotone in crowding by construction.

    The terms ``h_i`` depend on everything but the overlaps and are kept in ``rows.cache``
    (shared by :meth:`~predictor.records.colocations.CoLocations.with_overlaps`), so a fixed point
    over the overlaps predicts them once.
    """
    cached = rows.cache.get("monotone_terms")
    if cached is None:
        cached = rows.cache["monotone_terms"] = _terms(predictor, rows)
    base, terms, solo = cached
    n = len(rows)
    extra = np.bincount(rows.rows_of_runners(), rows.overlaps * terms, minlength=n) if terms.size else np.zeros(n)
    return np.minimum(base * (1.0 + extra), solo * _high(predictor))


def _terms(predictor: LatencyPredictor, rows: CoLocations) -> tuple[np.ndarray, np.ndarray, float]:
    """Per row, the answer alone; per co-runner, its non-negative extra slowdown ``h``."""
    n = len(rows)
    empty = CoLocations(
        rows.batch, rows.devices, rows.device_kinds, rows.signals, np.zeros(n + 1, dtype=np.int64),
        [], [], [], np.zeros(0), rows.solo_latency_ms,
    )
    base = _predict_any(predictor, empty)
    solo = predictor.solo_latency(rows.alone())
    row_of = rows.rows_of_runners()
    # One single co-runner row per (co-runner, power of two up to above its batch size).
    probes: list[tuple[int, int, int]] = []  # (co-runner, row, batch size)
    spans = []
    for j, size in enumerate(rows.batch_sizes):
        top = max(int(size), 1).bit_length()  # 2**(top-1) <= size < 2**top
        spans.append((len(probes), top + 1, size))
        probes += [(j, int(row_of[j]), 1 << k) for k in range(top + 1)]
    if not probes:
        return base, np.zeros(0), solo
    singles = CoLocations(
        rows.batch,
        [rows.devices[r] for _, r, _ in probes],
        [rows.device_kinds[r] for _, r, _ in probes],
        [rows.signals[r] for _, r, _ in probes],
        np.arange(len(probes) + 1, dtype=np.int64),
        [rows.models[j] for j, _, _ in probes],
        [b for _, _, b in probes],
        [rows.attrs[j] for j, _, _ in probes],
        np.ones(len(probes)),
        rows.solo_latency_ms,
    )
    rise = np.maximum(_predict_any(predictor, singles) / base[[r for _, r, _ in probes]] - 1.0, 0.0)
    rise = np.where(np.isfinite(rise), rise, 0.0)
    terms = np.zeros(len(rows.batch_sizes))
    for j, (start, count, size) in enumerate(spans):
        envelope = np.maximum.accumulate(rise[start:start + count])  # non-decreasing in the batch size
        k = count - 2  # 2**k <= size < 2**(k+1)
        fraction = math.log2(size) - k if size > 1 else 0.0
        terms[j] = envelope[k] + (envelope[k + 1] - envelope[k]) * min(max(fraction, 0.0), 1.0)
    return base, terms, solo


def _predict_any(predictor: LatencyPredictor, rows: CoLocations) -> np.ndarray:
    values = _predict(predictor, rows)
    return np.where(np.isfinite(values) & (values > 0), values, predictor.solo_latency(rows.alone()))


def fixed_point(
    predict: Callable[[np.ndarray], np.ndarray], moving: np.ndarray, solo: float, high: float, low: float
) -> np.ndarray:
    """The window of each row whose co-runners' overlaps follow it: for rows in ``moving``, the
    smallest point ``w`` of a fixed log-spaced grid over ``solo * [low, high]`` with
    ``w >= predict(w)``; the others get ``predict`` (constant in the window).

    ``predict(window)`` gives every row's latency for per-row windows; it must not rise with
    the window (overlaps ``min(1, remaining / window)`` fall as it grows). The grid does not
    depend on the rows, so a larger ``predict`` never gives a smaller answer; only the search
    does: from a secant estimate of the fixed point (two predictions, from the solo latency),
    a galloping search brackets the grid point, then bisection finds it (a few predictions when
    the estimate is close, as it usually is).
    """
    grid_low, scale, points = grid(solo, high, low)

    def at(index: np.ndarray) -> np.ndarray:
        return np.exp(grid_low + scale * index)

    def covered(index: np.ndarray) -> np.ndarray:
        window = at(index)
        return window >= predict(window)

    # A secant estimate of w = F(w) from (solo, F(solo)) and (F(solo), F(F(solo))).
    w0 = np.full(moving.size, solo)
    f0 = predict(w0)
    f1 = predict(f0)
    slope = np.divide(f1 - f0, f0 - w0, out=np.zeros_like(f0), where=np.abs(f0 - w0) > 1e-12 * solo)
    slope = np.minimum(slope, 0.0)  # F does not rise with the window
    guess = np.where(slope < 0, f0 + slope * (f0 - w0) / (1.0 - slope), f1)
    guess = np.clip(np.where(np.isfinite(guess) & (guess > 0), guess, f1), solo * low, solo * high)
    start = np.clip(np.floor((np.log(guess) - grid_low) / scale), 0, points - 1).astype(np.int64)

    first = covered(start)
    below = np.where(first, -1, start)  # w(below) < predict (or -1: below the grid)
    above = np.where(first, start, points)  # w(above) >= predict (the grid's top always is)
    down, up = moving & first, moving & ~first  # still galloping down (to find below) or up (to find above)
    step = 1
    while down.any() or up.any():
        probe = np.where(down, np.maximum(above - step, 0), np.where(up, np.minimum(below + step, points), above))
        result = covered(np.minimum(probe, points - 1)) | (probe >= points)
        above = np.where(down & result, probe, np.where(up & result, probe, above))
        below = np.where((down & ~result) | (up & ~result), probe, below)
        done_down = down & (~result | (probe == 0))
        below = np.where(down & result & (probe == 0), -1, below)
        down = down & ~done_down
        up = up & ~result
        step *= 2
    while True:
        open_ = moving & (above - below > 1)
        if not open_.any():
            break
        mid = np.where(open_, (below + above) // 2, above)
        result = covered(mid)
        above = np.where(open_ & result, mid, above)
        below = np.where(open_ & ~result, mid, below)
    result = at(above)
    if not moving.all():
        result = np.where(moving, result, predict(result))
    return result


def grid(solo: float, high: float, low: float) -> tuple[float, float, int]:
    """The fixed point's grid over ``solo * [low, high]``: its log start, log step and size."""
    grid_low, grid_high = math.log(solo * low), math.log(solo * high)
    points = 1 << GRID_STEPS
    return grid_low, (grid_high - grid_low) / points, points


@functools.lru_cache(maxsize=256)
def grid_windows(solo: float, high: float, low: float) -> np.ndarray:
    """Every point's window of :func:`grid` (indices ``0`` to ``points``, read-only): the very numbers
    :func:`fixed_point` and :func:`fixed_point_one` compare with their predictions (NumPy's ``exp``,
    which may round apart from ``math.exp`` by an ulp). A compiled search reads its windows here, so
    that at a tie (a prediction equal to a window, as a constant latency clamped at ``solo * low`` can
    be) it decides as they do. Kept for the last 256 grids asked (32 KiB each)."""
    grid_low, scale, points = grid(solo, high, low)
    windows = np.exp(grid_low + scale * np.arange(points + 1))
    windows.flags.writeable = False
    return windows


def fixed_point_one(predict: Callable[[float], float], solo: float, high: float, low: float) -> float:
    """:func:`fixed_point` of a single moving row, on Python floats: the same grid point, found
    by the same search (the same predictions asked, the same ``exp`` and ``log``), without the
    cost of array operations on one element, which dominates a single query's answer.

    ``predict(window)``: the row's latency for its co-runners' overlaps at ``window``.
    """
    grid_low, scale, points = grid(solo, high, low)

    def at(index: int) -> float:
        return float(np.exp(grid_low + scale * index))

    def covered(index: int) -> bool:
        window = at(index)
        return window >= predict(window)

    w0 = solo
    f0 = predict(w0)
    f1 = predict(f0)
    slope = (f1 - f0) / (f0 - w0) if abs(f0 - w0) > 1e-12 * solo else 0.0
    slope = min(slope, 0.0) if slope == slope else slope  # NaN stays NaN, as np.minimum keeps it
    guess = f0 + slope * (f0 - w0) / (1.0 - slope) if slope < 0 else f1
    if not (math.isfinite(guess) and guess > 0):
        guess = f1
    guess = min(max(guess, solo * low), solo * high)
    start = int(min(max(math.floor((float(np.log(guess)) - grid_low) / scale), 0), points - 1))

    first = covered(start)
    below, above = (-1, start) if first else (start, points)
    down, up = first, not first
    step = 1
    while down or up:
        probe = max(above - step, 0) if down else min(below + step, points)
        result = probe >= points or covered(probe)
        if result:
            above = probe
            if down and probe == 0:
                below, down = -1, False
        else:
            below = probe
            down = False
        up = up and not result
        step *= 2
    while above - below > 1:
        mid = (below + above) // 2
        if covered(mid):
            above = mid
        else:
            below = mid
    return at(above)
