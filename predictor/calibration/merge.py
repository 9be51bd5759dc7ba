"""Merging conformal calibrators that learned disjoint streams, through their residual windows.

A conformal bound is a quantile of a window of residuals, so two calibrators (two shards, two
replicas) merge by merging, cell by cell, the residuals they hold:

* a cell only one side holds is taken as it is, so calibrators of disjoint device kinds (the
  shards of a fleet) merge *exactly*: every kind answers as the shard that learned it;
* a cell both hold gets the residuals of both, interleaved in proportion to their counts (the
  recent ones of each side last) and cut to the window's size: a sketch of the union;
* the running centres and spreads of :class:`~predictor.calibration.shape.ShapeCalibrator`, and
  the adaptive conformal miss rates, combine as means weighted by their counts.

:func:`merge_shape_calibrators` and :func:`merge_conformal_calibrators` return a new
calibrator and leave both inputs as they were; the two must be configured alike (same window,
same scaling, ...), or a :class:`ValueError` names the setting that differs.

Examples
--------
>>> from predictor.calibration.conformal import ConformalCalibrator
>>> gpu, cpu = ConformalCalibrator(min_residuals=5), ConformalCalibrator(min_residuals=5)
>>> for i in range(40):
...     _ = gpu.add("A100", actual=10.0 + i % 7, predicted=10.0)
...     _ = cpu.add("EPYC", actual=5.0 + i % 3, predicted=5.0)
>>> merged = merge_conformal_calibrators(gpu, cpu)
>>> merged.kinds()
['A100', 'EPYC']
>>> merged.upper_bound(10.0, "A100", 0.9) == gpu.upper_bound(10.0, "A100", 0.9)
True
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Mapping
from typing import TypeVar

from predictor.calibration.conformal import ConformalCalibrator, ResidualWindow
from predictor.calibration.shape import ShapeCalibrator, Spread

K = TypeVar("K", bound=Hashable)

_SHAPE_SETTINGS = ("window", "min_residuals", "fallback_sigma", "gamma", "spread_rate",
                   "min_spread_n", "monotone", "scaled", "max_cells")
_CONFORMAL_SETTINGS = ("window", "min_residuals", "fallback_sigma", "adapt", "target")


def merge_windows(first: ResidualWindow, second: ResidualWindow) -> ResidualWindow:
    """The residuals of both windows in one of ``first``'s size.

    The two arrival orders are interleaved in proportion to their lengths (each side's most
    recent residuals last) and the oldest dropped beyond the size: when both fit, the merged
    window holds exactly the union.
    """
    # Residual i of a side of n sits at (i + 1) / n of the way: the sides' recent ends meet last.
    merged = [((i + 1) / len(values), side, value)
              for side, values in enumerate((first.values(), second.values()))
              for i, value in enumerate(values)]
    merged.sort(key=lambda item: (item[0], item[1]))
    out = ResidualWindow(first.size)
    for _, _, value in merged[-first.size:]:
        out.add(value)
    return out


def _merge_cells(first: Mapping[K, ResidualWindow], second: Mapping[K, ResidualWindow]) -> dict[K, ResidualWindow]:
    out = {key: copy.deepcopy(window) for key, window in first.items()}
    for key, window in second.items():
        out[key] = merge_windows(out[key], window) if key in out else copy.deepcopy(window)
    return out


def _merge_spread(first: Spread, second: Spread) -> Spread:
    out = Spread()
    n = first.n + second.n
    if n == 0:
        return out
    out.n = n
    out.m = (first.n * first.m + second.n * second.m) / n
    out.s = (first.n * first.s + second.n * second.s) / n
    return out


def _check_alike(first: object, second: object, settings: tuple[str, ...]) -> None:
    for name in settings:
        if getattr(first, name) != getattr(second, name):
            raise ValueError(f"cannot merge calibrators with different {name}: "
                             f"{getattr(first, name)!r} and {getattr(second, name)!r}")


def merge_shape_calibrators(first: ShapeCalibrator, second: ShapeCalibrator) -> ShapeCalibrator:
    """A :class:`ShapeCalibrator` holding what both learned (see the module documentation)."""
    _check_alike(first, second, _SHAPE_SETTINGS)
    out = copy.deepcopy(first)
    out._windows = _merge_cells(first._windows, second._windows)
    for key, spread in second._spreads.items():
        mine = first._spreads.get(key)
        out._spreads[key] = _merge_spread(mine, spread) if mine is not None else copy.deepcopy(spread)
    for cell, alphas in second._alphas.items():
        mine = first._alphas.get(cell)
        if mine is None:
            out._alphas[cell] = list(alphas)
            continue
        wa, wb = (len(c._windows.get(cell, ())) for c in (first, second))
        wa, wb = (wa, wb) if wa + wb else (1, 1)
        out._alphas[cell] = [(wa * x + wb * y) / (wa + wb) for x, y in zip(mine, alphas, strict=True)]
    out._kinds = first._kinds | second._kinds
    out.n_added = first.n_added + second.n_added
    return out


def merge_conformal_calibrators(first: ConformalCalibrator, second: ConformalCalibrator) -> ConformalCalibrator:
    """A :class:`~predictor.calibration.conformal.ConformalCalibrator` holding what both learned."""
    _check_alike(first, second, _CONFORMAL_SETTINGS)
    out = copy.deepcopy(first)
    out._windows = _merge_cells(first._windows, second._windows)
    for kind, shift in second._miss_shift.items():
        if kind not in first._miss_shift:
            out._miss_shift[kind] = shift
            continue
        wa, wb = first.n_residuals(kind), second.n_residuals(kind)
        out._miss_shift[kind] = (wa * first._miss_shift[kind] + wb * shift) / ((wa + wb) or 1)
    out.n_added = first.n_added + second.n_added
    return out
