"""A block of outcomes into a :class:`~predictor.shape_calibration.ShapeCalibrator` at once.

:func:`learn_block` gives the results of :meth:`ShapeCalibrator.score
<predictor.shape_calibration.ShapeCalibrator.score>` (an :class:`Outcome` with a confidence)
and :meth:`~predictor.shape_calibration.ShapeCalibrator.add` (one without) of each outcome in
turn, and leaves the calibrator as those calls would, bit for bit: the cells the block reads
and writes are numbered once, their windows, spreads and adaptive levels copied into arrays,
the sequential walk run by the compiled kernel (:func:`predictor.shape_kernel.learn_block`),
and what changed copied back (new cells in the order the calls would have made them).
An outcome that the calls would refuse (a latency not finite and positive, a confidence out
of range), or a residual too large to be finite, sends the whole block the per-call way.

Examples
--------
>>> from predictor.shape_calibration import ShapeCalibrator
>>> from predictor.shapes import QueryShape
>>> shape = QueryShape("overlap", False)
>>> a, b = ShapeCalibrator(min_residuals=5), ShapeCalibrator(min_residuals=5)
>>> outcomes = [Outcome(shape, "cpu", 1, "m", 10.0 + i % 7, 10.0, False, 0.95) for i in range(40)]
>>> by_block = learn_block(a, outcomes)
>>> by_call = [b.score(shape, "cpu", 1, "m", 0.95, actual=o.actual, predicted=o.predicted) for o in outcomes]
>>> by_block == by_call and a.cells() == b.cells()
True
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from predictor import shape_kernel
from predictor.calibration import Bound, BoundSource, ResidualWindow, check_confidence
from predictor.shape_calibration import (
    ALL,
    GRID,
    LINKED,
    MIN_SPREAD,
    POOL,
    Cell,
    ShapeCalibrator,
    Spread,
    _cells,
    _chain_keys,
    _lookups,
    _nearest_level,
    normal_quantile,
)
from predictor.shapes import QueryShape

_SOURCES = (BoundSource.DEVICE_KIND, BoundSource.POOLED, BoundSource.FALLBACK)


class Outcome(NamedTuple):
    """An answer's outcome to calibrate on: ``score`` it at ``confidence`` then learn it, or
    (``confidence`` ``None``) only learn it (``linked``: an answer really given)."""

    shape: QueryShape
    kind: str
    count: int
    model: str
    actual: float
    predicted: float
    linked: bool = False
    confidence: float | None = None


Result = tuple[float, Bound, float] | float
"""What :meth:`ShapeCalibrator.score` (the correction, the bound of a 1 ms prediction, the
residual) or :meth:`ShapeCalibrator.add` (the residual) returns for an outcome."""


def learn_one(calibrator: ShapeCalibrator, outcome: Outcome) -> Result:
    """One outcome the per-call way (:meth:`ShapeCalibrator.score` or :meth:`ShapeCalibrator.add`)."""
    o = outcome
    if o.confidence is None:
        return calibrator.add(o.shape, o.kind, o.count, o.model, actual=o.actual, predicted=o.predicted,
                              linked=o.linked)
    if o.linked:
        raise ValueError("outcome.linked: a linked outcome is learned, not scored (confidence must be None)")
    return calibrator.score(o.shape, o.kind, o.count, o.model, o.confidence, actual=o.actual, predicted=o.predicted)


def learn_block(calibrator: ShapeCalibrator, outcomes: list[Outcome]) -> list[Result]:
    """:func:`learn_one` of each outcome in order, by the compiled kernel (see the module)."""
    residuals = _residuals(outcomes)
    if residuals is None or len(outcomes) < 2:
        return [learn_one(calibrator, o) for o in outcomes]
    block = _Block(calibrator)
    block.number(outcomes)
    block.run(outcomes, residuals)
    return block.results(outcomes, residuals)


def _residuals(outcomes: list[Outcome]) -> list[float] | None:
    """The residual of each outcome, or ``None`` when one of them the calls would refuse (or
    whose residual is not finite)."""
    out = []
    for o in outcomes:
        actual, predicted = o.actual, o.predicted
        if not (actual > 0 and predicted > 0 and math.isfinite(actual) and math.isfinite(predicted)):
            return None
        if o.confidence is not None:
            if o.linked:
                return None
            try:
                check_confidence(o.confidence)
            except ValueError:
                return None
        residual = math.log(actual / predicted)
        if not math.isfinite(residual):
            return None
        out.append(residual)
    return out


class _Block:
    """The numbering of a block's cells, their state as arrays, and the kernel's answers."""

    def __init__(self, calibrator: ShapeCalibrator):
        self.cal = calibrator
        self.windows: dict[Cell, int] = {}  # cells read or written, existing or written
        self.window_cells: list[Cell] = [(POOL, POOL, ALL)]  # 0: every cell absent all along (read, never written)
        self.written: set[int] = set()
        self.spreads: dict[tuple[str, str, str, int], int] = {}
        self.alphas: dict[Cell, int] = {}
        self.plans: dict[tuple, int] = {}
        self.plan_start = [0]
        self.term_look = [0]
        self.term_wide = [0]
        self.lk_win: list[int] = []
        self.lk_alpha: list[int] = []
        self.lk_spread: list[tuple[int, int, int]] = []
        self.lk_src: list[int] = []
        self.wd_win: list[int] = []
        self.wd_spread: list[tuple[int, int, int]] = []
        self.read_windows: list[tuple[Cell, int | None]] = []  # resolved after the writes are known

    # ------------------------------------------------------------------ numbering
    def _window(self, cell: Cell, write: bool = False) -> int:
        at = self.windows.get(cell)
        if at is None:
            at = self.windows[cell] = len(self.window_cells)
            self.window_cells.append(cell)
        if write:
            self.written.add(at)
        return at

    def _spread_ids(self, key: str, kind: str, count: int, model: str) -> tuple[int, int, int]:
        ids = []
        for spread_key in ((key, kind, model, count), (key, kind, "", count), (key, POOL, "", count)):
            at = self.spreads.get(spread_key)
            if at is None:
                at = self.spreads[spread_key] = len(self.spreads)
            ids.append(at)
        return ids[0], ids[1], ids[2]

    def _alpha(self, cell: Cell) -> int:
        at = self.alphas.get(cell)
        if at is None:
            at = self.alphas[cell] = len(self.alphas)
        return at

    def _plan(self, shape: QueryShape, kind: str, count: int, model: str) -> int:
        """The number of the plan of a bound (``ShapeCalibrator._terms_levels``'s walk)."""
        key = (shape, kind, count, model)
        at = self.plans.get(key)
        if at is not None:
            return at
        at = self.plans[key] = len(self.plans)
        for s, j in _cells(shape, count, self.cal.monotone):
            for cell_kind, source in ((kind, shape_kernel.DEVICE_KIND), (POOL, shape_kernel.POOLED)):
                for lookup, c in _lookups(s, j):
                    self.lk_win.append(self._window((lookup, cell_kind, c)))
                    self.lk_alpha.append(self._alpha((lookup, kind, j)))
                    self.lk_spread.append(self._spread_ids(lookup, kind, j, model))
                    self.lk_src.append(source)
            self.term_look.append(len(self.lk_win))
            for stand_in in _chain_keys(s):
                self.wd_win.append(self._window((stand_in, POOL, ALL)))
                self.wd_spread.append(self._spread_ids(stand_in, kind, j, model))
            self.term_wide.append(len(self.wd_win))
        self.plan_start.append(len(self.term_look) - 1)
        return at

    def number(self, outcomes: list[Outcome]) -> None:
        """Number every cell the outcomes read or write, and the plans of their bounds."""
        n = len(outcomes)
        self.it_plan = np.empty(n, dtype=np.int64)
        self.it_win = np.empty((n, 4), dtype=np.int64)
        self.it_spread = np.empty((n, 3), dtype=np.int64)
        self.it_alpha = np.empty(n, dtype=np.int64)
        self.it_score = np.zeros(n, dtype=np.bool_)
        self.it_out = np.zeros(n, dtype=np.int64)
        self.it_onem = np.zeros(n)
        self.it_ai = np.zeros(n, dtype=np.int64)
        self.it_denom = np.ones(n)
        self.it_fallback = np.zeros(n)
        sigma = self.cal.fallback_sigma
        for i, o in enumerate(outcomes):
            key = (LINKED if o.linked else "") + o.shape.key
            kind, count = o.kind, o.count
            self.it_plan[i] = self._plan(o.shape, kind, count, o.model)
            self.it_win[i] = [self._window(cell, True) for cell in
                              ((key, kind, count), (key, kind, ALL), (key, POOL, count), (key, POOL, ALL))]
            self.it_spread[i] = self._spread_ids(key, kind, count, o.model)
            self.it_alpha[i] = self._alpha((key, kind, count))
            confidence = o.confidence
            if confidence is None:
                continue
            self.it_score[i] = True
            if confidence in GRID:
                self.it_out[i] = GRID.index(confidence)
            else:
                ai = _nearest_level(confidence)
                self.it_out[i] = len(GRID)
                self.it_onem[i] = 1.0 - confidence
                self.it_ai[i] = ai
                self.it_denom[i] = 1.0 - GRID[ai]
                self.it_fallback[i] = normal_quantile(confidence) * sigma

    # ------------------------------------------------------------------ state in, kernel, state out
    def run(self, outcomes: list[Outcome], residuals: list[float]) -> None:
        """Copy the numbered state into arrays and run the kernel over the outcomes."""
        cal = self.cal
        rows = len(self.window_cells)
        win_exists = np.zeros(rows, dtype=np.bool_)
        win_len = np.zeros(rows, dtype=np.int64)
        win_sorted = np.empty((rows, cal.window))
        win_ring = np.empty((rows, cal.window))
        win_pool = np.array([cell[1] == POOL for cell in self.window_cells], dtype=np.bool_)
        self.kept: list[ResidualWindow | None] = [None] * rows
        for at in range(1, rows):
            window = cal._windows.get(self.window_cells[at])
            if window is None:
                continue
            self.kept[at] = window
            n = len(window)
            win_exists[at] = True
            win_len[at] = n
            if n:
                win_sorted[at, :n] = window._array if window._array is not None else window._sorted
                if at in self.written:
                    win_ring[at, :n] = list(window._order)
        spread_keys = list(self.spreads)
        n_spreads = len(spread_keys)
        sp_exists = np.zeros(n_spreads, dtype=np.bool_)
        sp_m, sp_s, sp_n = np.zeros(n_spreads), np.zeros(n_spreads), np.zeros(n_spreads, dtype=np.int64)
        sp_pool = np.array([key[1] == POOL for key in spread_keys], dtype=np.bool_)
        for at, key in enumerate(spread_keys):
            spread = cal._spreads.get(key)
            if spread is not None:
                sp_exists[at] = True
                sp_m[at], sp_s[at], sp_n[at] = spread.m, spread.s, spread.n
        alpha_cells = list(self.alphas)
        al_exists = np.zeros(len(alpha_cells), dtype=np.bool_)
        al = np.zeros((len(alpha_cells), len(GRID)))
        for at, cell in enumerate(alpha_cells):
            alphas = cal._alphas.get(cell)
            if alphas is not None:
                al_exists[at] = True
                al[at] = alphas
        grid_onem = np.array([1.0 - level for level in GRID])
        n = len(outcomes)
        self.out_centre, self.out_lf = np.zeros(n), np.zeros(n)
        self.out_src, self.out_n = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self.sizes = np.array([len(cal._windows), len(cal._spreads), len(cal._alphas)], dtype=np.int64)
        self.created = np.zeros((3, max(rows, n_spreads, len(alpha_cells), 1)), dtype=np.int64)
        self.n_created = np.zeros(3, dtype=np.int64)
        win_head = np.zeros(rows, dtype=np.int64)
        win_added = np.zeros(rows, dtype=np.int64)
        shape_kernel.learn_block(
            win_exists, win_len, win_sorted, win_ring, win_head, win_pool, win_added,
            sp_exists, sp_m, sp_s, sp_n, sp_pool, al_exists, al, grid_onem.copy(), self.sizes, self.created,
            self.n_created,
            np.array(self.plan_start, dtype=np.int64), np.array(self.term_look, dtype=np.int64),
            np.array(self.term_wide, dtype=np.int64), np.array(self.lk_win, dtype=np.int64),
            np.array(self.lk_alpha, dtype=np.int64), np.array(self.lk_spread, dtype=np.int64).reshape(-1, 3),
            np.array(self.lk_src, dtype=np.int64), np.array(self.wd_win, dtype=np.int64),
            np.array(self.wd_spread, dtype=np.int64).reshape(-1, 3),
            self.it_plan, np.array(residuals), self.it_score, self.it_win, self.it_spread, self.it_alpha, self.it_out,
            self.it_onem, self.it_ai, self.it_denom, self.it_fallback,
            grid_onem, np.array([normal_quantile(level) * cal.fallback_sigma for level in GRID]),
            np.array([min(cal.gamma, 0.1 * (1.0 - level)) for level in GRID]),
            np.array([(1.0 - level) / 20.0 for level in GRID]),
            np.array([min(5.0 * (1.0 - level), 0.5) for level in GRID]),
            bool(cal.gamma), cal.scaled, cal.min_residuals, cal.min_spread_n, cal.max_cells, cal.spread_rate,
            MIN_SPREAD, self.out_centre, self.out_lf, self.out_src, self.out_n,
        )
        self._store(win_len, win_sorted, win_ring, win_head, win_added, spread_keys, sp_m, sp_s, sp_n,
                    alpha_cells, al_exists, al)

    def _store(self, win_len, win_sorted, win_ring, win_head, win_added, spread_keys, sp_m, sp_s, sp_n,
               alpha_cells, al_exists, al) -> None:
        """Copy what the kernel changed back into the calibrator (new cells in order of creation)."""
        cal = self.cal
        created = {int(at) for at in self.created[0, :self.n_created[0]]}
        for at in sorted(self.written):
            added = int(win_added[at])
            if not added:
                continue
            window = self.kept[at]
            if window is None:
                window = ResidualWindow(cal.window)
            n, head = int(win_len[at]), int(win_head[at])
            ring = win_ring[at]
            order = ring[:n].tolist() if head == 0 else ring[head:n].tolist() + ring[:head].tolist()
            window._order.clear()
            window._order.extend(order)
            window._sorted = win_sorted[at, :n].tolist()
            window._array = None
            window._adds = window.adds + added
            self.kept[at] = window
        for at in self.created[0, :self.n_created[0]].tolist():
            cal._windows[self.window_cells[at]] = self.kept[at]  # type: ignore[assignment]
        assert len(created) == self.n_created[0]
        for at in sorted(set(self.it_spread.ravel().tolist())):
            spread = cal._spreads.get(spread_keys[at])
            if spread is not None:
                spread.m, spread.s, spread.n = float(sp_m[at]), float(sp_s[at]), int(sp_n[at])
        for at in self.created[1, :self.n_created[1]].tolist():
            spread = Spread()
            spread.m, spread.s, spread.n = float(sp_m[at]), float(sp_s[at]), int(sp_n[at])
            cal._spreads[spread_keys[at]] = spread
        fresh = set(self.created[2, :self.n_created[2]].tolist())
        for at in sorted(set(self.it_alpha.tolist()) - fresh):
            if al_exists[at]:
                cal._alphas[alpha_cells[at]][:] = al[at].tolist()
        for at in self.created[2, :self.n_created[2]].tolist():
            cal._alphas[alpha_cells[at]] = al[at].tolist()

    def results(self, outcomes: list[Outcome], residuals: list[float]) -> list[Result]:
        """The answers of the outcomes, and the calibrator's counters brought up to date."""
        cal = self.cal
        if cal._answered is not None:
            cal._answered = None  # a copy that learns is live (as add)
        kinds, most = cal._kinds, cal.max_cells
        out: list[Result] = []
        exp = math.exp
        centres, factors = self.out_centre.tolist(), self.out_lf.tolist()
        sources, counts = self.out_src.tolist(), self.out_n.tolist()
        for i, o in enumerate(outcomes):
            if len(kinds) < most:
                kinds.add(o.kind)
            if o.confidence is None:
                out.append(residuals[i])
            else:
                bound = Bound(exp(min(factors[i], 700.0)), _SOURCES[sources[i]], counts[i])
                out.append((exp(min(max(centres[i], -700.0), 700.0)), bound, residuals[i]))
        cal.n_added += len(outcomes)
        return out
