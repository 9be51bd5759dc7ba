"""The fixed point of many rows at once, compiled (numba), where each row's latency is a quadratic
of its co-runners' overlaps.

A linear predictor's answer on a ranking's rows is, per row, a quadratic of the overlaps of its
co-runners given by remaining time (:class:`~predictor.features.extract.OverlapQuadratic`), mapped to a
latency by :class:`~predictor.predictors.base.QuadraticLatencies`. :func:`fixed_points` runs, row by row in one compiled
loop, the search of :func:`~predictor.service.estimates.monotone.fixed_point_one` (the secant estimate, the
galloping search, the bisection: the same grid points asked in the same order), as the
column-wise search (:func:`~predictor.service.estimates.monotone.fixed_point`) does over
arrays. The grid points' windows, those compared with the predictions and those answered, are read
from :func:`~predictor.service.estimates.monotone.grid_windows` (computed by NumPy), so a window is
the very number the other searches give for the same point, and at a tie (a prediction equal to a
window) every search decides alike (tested). A small ranking's rows with no co-runner given by
remaining time sit in the same quadratic, as constants: :func:`fixed_points` answers their latencies
in the same pass.

A single query with co-runners given by remaining time runs the same search
(:func:`window_of`): its ``rls`` answer is made a quadratic of its moving overlaps in the same
compiled call (:func:`_window_coefficients`, from the record's
:class:`~predictor.features.window.FineProgram` and the model's weight per feature).

Compiled on first use and cached on disk (``cache=True``), in strict IEEE order; a server
compiles it (or loads it from the cache) before it answers (:func:`warm`), so that its first
ranking does not pay for it.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from predictor.calibration import cell_kernel, probability_kernel
from predictor.features import quadratic_kernel
from predictor.features.extract import OverlapQuadratic
from predictor.features.window import FineProgram, WeightedWindowForms, WindowForm
from predictor.predictors.base import QuadraticLatencies, WeightedLatencies
from predictor.service.estimates import column_checks
from predictor.service.estimates.monotone import grid, grid_windows


@njit(cache=True, nogil=True, inline="always")
def _latency(coefficients: np.ndarray, remaining: np.ndarray, i: int, window: float, solo: float, low: float,
             high: float, log_target: bool) -> float:
    """Row ``i``'s latency with its co-runners at ``min(remaining / window, 1)`` (1: an idle window)."""
    k = remaining.shape[0]
    raw = coefficients[0, i]
    for a in range(k):
        oa = min(remaining[a, i] / window, 1.0) if window > 0 else 1.0
        term = coefficients[1 + a, i]
        for b in range(k):
            ob = min(remaining[b, i] / window, 1.0) if window > 0 else 1.0
            term += coefficients[1 + k + a * k + b, i] * ob
        raw += oa * term
    if math.isnan(raw):
        return solo * min(max(1.0, low), high)
    s = math.exp(min(raw, 10.0)) if log_target else raw
    if not math.isfinite(s):
        s = 1.0
    return solo * min(max(s, low), high)


@njit(cache=True, nogil=True, inline="always")
def _combined(coefficients: np.ndarray, remaining: np.ndarray, i: int, window: float, solos: np.ndarray,
              lows: np.ndarray, highs: np.ndarray, log_targets: np.ndarray, weights: np.ndarray) -> float:
    """Row ``i``'s latency of the parts ``coefficients[e]`` (:func:`_latency` each): the one part's with
    no weights, else ``exp(sum(weights[e] * log(latency_e)))`` (:class:`~predictor.predictors.base.WeightedLatencies`)."""
    if weights.size == 0:
        return _latency(coefficients[0], remaining, i, window, solos[0], lows[0], highs[0], log_targets[0])
    total = 0.0
    for e in range(weights.size):
        total = total + weights[e] * math.log(
            _latency(coefficients[e], remaining, i, window, solos[e], lows[e], highs[e], log_targets[e]))
    return math.exp(total)


@njit(cache=True, nogil=True)
def _search(coefficients: np.ndarray, remaining: np.ndarray, solos: np.ndarray, lows: np.ndarray,
            highs: np.ndarray, log_targets: np.ndarray, weights: np.ndarray, grid_low: float, scale: float,
            points: int, solo_grid: float, grid_min: float, grid_max: float, windows: np.ndarray,
            still: np.ndarray, out: np.ndarray) -> None:
    """Per row, the window of its grid point (``fixed_point_one``'s search), the window at index ``j``
    being ``windows[j]`` (:func:`~predictor.service.estimates.monotone.grid_windows`); each row's latency
    that of :func:`_combined` of the parts ``coefficients[e]``. A row flagged ``still`` (no overlap of
    it moves: its quadratic a constant) gets its latency instead, at a window of 1."""
    for i in range(coefficients.shape[2]):
        if still[i]:
            out[i] = _combined(coefficients, remaining, i, 1.0, solos, lows, highs, log_targets, weights)
            continue
        w0 = solo_grid
        f0 = _combined(coefficients, remaining, i, w0, solos, lows, highs, log_targets, weights)
        f1 = _combined(coefficients, remaining, i, f0, solos, lows, highs, log_targets, weights)
        slope = (f1 - f0) / (f0 - w0) if abs(f0 - w0) > 1e-12 * solo_grid else 0.0
        if slope == slope:  # NaN stays NaN
            slope = min(slope, 0.0)
        guess = f0 + slope * (f0 - w0) / (1.0 - slope) if slope < 0 else f1
        if not (math.isfinite(guess) and guess > 0):
            guess = f1
        guess = min(max(guess, grid_min), grid_max)
        start = int(min(max(math.floor((math.log(guess) - grid_low) / scale), 0.0), points - 1.0))

        window = windows[start]
        first = window >= _combined(coefficients, remaining, i, window, solos, lows, highs, log_targets, weights)
        below, above = (-1, start) if first else (start, points)
        down, up = first, not first
        step = 1
        while down or up:
            probe = max(above - step, 0) if down else min(below + step, points)
            result = probe >= points
            if not result:
                window = windows[probe]
                result = window >= _combined(coefficients, remaining, i, window, solos, lows, highs, log_targets,
                                             weights)
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
            window = windows[mid]
            if window >= _combined(coefficients, remaining, i, window, solos, lows, highs, log_targets, weights):
                above = mid
            else:
                below = mid
        out[i] = windows[above]


def fixed_points(latencies: QuadraticLatencies | WeightedLatencies, remaining: np.ndarray, solo: float, high: float,
                 low: float, still: np.ndarray | None = None) -> np.ndarray:
    """The window of every row of ``latencies`` (:func:`~predictor.service.estimates.monotone.fixed_point`'s
    answer): ``remaining[k, row]`` the remaining time of the row's ``k``-th co-runner (0 for one
    whose overlap does not move: its coefficients are 0); ``solo``, ``high`` and ``low`` those of
    the grid searched (:func:`~predictor.service.estimates.monotone.grid`). A row flagged in ``still``
    (none of its overlaps moves) is not searched: its latency is answered instead."""
    grid_low, scale, points = grid(solo, high, low)
    windows = grid_windows(solo, high, low)
    if isinstance(latencies, WeightedLatencies):
        parts, weights = latencies.parts, np.array(latencies.weights, dtype=float)
    else:
        parts, weights = (latencies,), _NO_WEIGHTS
    coefficients = np.stack([part.quadratic.coefficients for part in parts])
    out = np.empty(coefficients.shape[2])
    _search(coefficients, np.ascontiguousarray(remaining, dtype=float),
            *(np.array([getattr(part, name) for part in parts]) for name in ("solo", "low", "high", "log_target")),
            weights, grid_low, scale, points, solo, solo * low, solo * high, windows,
            np.zeros(out.size, dtype=bool) if still is None else still, out)
    return out


_NO_WEIGHTS = np.zeros(0)


@njit(cache=True, nogil=True)
def _window_coefficients(initial, terms, crosses, moving_of, overlaps, left, right, keys, weights, intercept, k,
                         out):  # pragma: no cover
    """``out`` = the coefficients (constant, ``k`` linear, ``k * k`` quadratic; the layout of
    :class:`~predictor.features.extract.OverlapQuadratic`) of ``intercept + weights @ x`` as a quadratic of
    the ``k`` moving overlaps: ``x`` the features of a :class:`~predictor.features.window.FineProgram`
    (:meth:`~predictor.features.window.FineProgram.arrays`), and with a layout (``left``,
    ``right``, ``keys`` not empty) their pairwise products and crossed copies after them.
    ``moving_of[runner]``: the moving index of a co-runner (-1: at ``overlaps[runner]``)."""
    n = initial.size
    affine = np.zeros((n, 1 + k))  # each fine feature: its value with the moving overlaps at 0, its slopes
    for i in range(n):
        affine[i, 0] = initial[i]
    for t in range(terms.shape[0]):  # the sums, in the program's order
        slot, runner, step = int(terms[t, 0]), int(terms[t, 1]), terms[t, 2]
        j = moving_of[runner]
        if j < 0:
            affine[slot, 0] += overlaps[runner] * step
        else:
            affine[slot, 1 + j] += step
    for c in range(crosses.shape[0]):
        slot, own, source = int(crosses[c, 0]), crosses[c, 1], int(crosses[c, 2])
        for m in range(1 + k):
            affine[slot, m] = own * affine[source, m]
    square = np.zeros((1 + k, 1 + k))  # the answer is z' square z, z = [1, o]
    for i in range(n):
        for m in range(1 + k):
            square[0, m] += weights[i] * affine[i, m]
    pairs = left.size
    for q in range(pairs):
        w = weights[n + q]
        for a in range(1 + k):
            wa = w * affine[left[q], a]
            for b in range(1 + k):
                square[a, b] += wa * affine[right[q], b]
    for q in range(keys.size):
        w = weights[n + pairs + q]
        for m in range(1 + k):
            square[0, m] += w * affine[keys[q], m]
    out[0] = square[0, 0] + intercept
    for a in range(k):
        out[1 + a] = square[0, 1 + a] + square[1 + a, 0]
        for b in range(k):
            out[1 + k + a * k + b] = square[1 + a, 1 + b]


@njit(cache=True, nogil=True)
def _window_search(initial, terms, crosses, moving_of, overlaps, left, right, keys, weights, intercept, remaining,
                   solo, low, high, log_target, grid_low, scale, points, solo_grid, grid_min, grid_max, windows
                   ):  # pragma: no cover
    """The window of a single query's fixed point: its quadratic, then :func:`_search` on it."""
    k = remaining.size
    coefficients = np.empty((1 + k + k * k, 1))
    _window_coefficients(initial, terms, crosses, moving_of, overlaps, left, right, keys, weights, intercept, k,
                         coefficients[:, 0])
    out = np.empty(1)
    _search(coefficients.reshape(1, 1 + k + k * k, 1), remaining.reshape(k, 1), np.array([solo]), np.array([low]),
            np.array([high]), np.array([log_target]), np.zeros(0), grid_low, scale, points, solo_grid, grid_min,
            grid_max, windows, np.zeros(1, dtype=np.bool_), out)
    return out[0]


_NO_INDEX = np.zeros(0, dtype=np.intp)


def _form_arguments(form: WindowForm) -> tuple:
    """The compiled functions' arguments of the program, overlaps, layout and weights of ``form``."""
    moving_of = [-1] * len(form.overlaps)
    for j, runner in enumerate(form.moving):
        moving_of[runner] = j
    layout = form.layout
    left, right, keys = (_NO_INDEX,) * 3 if layout is None else (layout.left, layout.right, layout.keys)
    return (*form.program.arrays, np.array(moving_of, dtype=np.intp), np.array(form.overlaps, dtype=float),
            left, right, keys, form.weights, form.intercept)


def window_coefficients(form: WindowForm) -> np.ndarray:
    """The single query's answer as the coefficients of a quadratic of its moving co-runners'
    overlaps (one column of :class:`~predictor.features.extract.OverlapQuadratic`'s): the same numbers as its
    features' dot product with the weights, up to rounding (tested)."""
    k = len(form.moving)
    out = np.empty(1 + k + k * k)
    _window_coefficients(*_form_arguments(form), k, out)
    return out


def window_of(form: WindowForm | WeightedWindowForms) -> float:
    """The single query's window at its fixed point: :func:`~predictor.service.estimates.monotone.fixed_point_one`'s
    grid point over ``solo * [low, high]`` (the form's), searched (compiled, in one call) on the
    quadratic of :func:`window_coefficients`; of a weighted form, on its parts' quadratics combined
    (:class:`~predictor.predictors.base.WeightedLatencies`)."""
    solo, low, high = form.solo, form.low, form.high
    grid_low, scale, points = grid(solo, high, low)
    windows = grid_windows(solo, high, low)
    if isinstance(form, WeightedWindowForms):
        parts = form.parts
        coefficients = np.stack([window_coefficients(part) for part in parts])[:, :, None]
        out = np.empty(1)
        _search(coefficients, np.array(parts[0].remaining, dtype=float).reshape(-1, 1),
                *(np.array([getattr(part, name) for part in parts]) for name in ("solo", "low", "high", "log_target")),
                np.array(form.weights, dtype=float), grid_low, scale, points, solo, solo * low, solo * high, windows,
                np.zeros(1, dtype=bool), out)
        return float(out[0])
    return float(_window_search(*_form_arguments(form), np.array(form.remaining, dtype=float), solo, low, high,
                                form.log_target, grid_low, scale, points, solo, solo * low, solo * high, windows))


def warm() -> None:
    """Compile the kernels now (or load them from the disk cache), on a two-row problem and a
    single query's quadratic, alone and weighted (an ensemble's); and the one a ranking's probabilities are read with
    (:func:`predictor.calibration.probability_kernel.warm`), the one a ranking's quadratics are built with
    (:func:`predictor.features.quadratic_kernel.warm`), the one its rows are grouped by calibration cell
    with (:func:`predictor.calibration.cell_kernel.warm`), and the one its candidates' numbers are checked with
    (:func:`predictor.service.estimates.column_checks.warm`)."""

    cell_kernel.warm()
    column_checks.warm()
    probability_kernel.warm()
    quadratic_kernel.warm()
    rows = QuadraticLatencies(OverlapQuadratic.of(np.zeros((1, 2), dtype=np.intp), np.zeros(2), np.ones((1, 2)),
                                                  np.zeros((1, 1, 2))), 1.0, 0.5, 2.0, True)
    fixed_points(rows, np.ones((1, 2)), 1.0, 2.0, 0.5, np.array([False, True]))
    program = FineProgram(("own", "co"), (1.0, 0.0), ((1, 0, None),), (), (False,))
    form = WindowForm(program, None, 0.0, np.ones(2), (0.5,), (0,), (3.0,), 1.0, 0.5, 2.0, True)
    window_of(form)
    window_of(WeightedWindowForms((0.5, 0.5), (form, form), 1.0, 0.5, 2.0))  # an ensemble's
