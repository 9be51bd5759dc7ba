"""A block of outcomes into a :class:`~predictor.calibration.shape.ShapeCalibrator` at once.

:func:`learn_block` gives the results of :meth:`ShapeCalibrator.score
<predictor.calibration.shape.ShapeCalibrator.score>` (an :class:`Outcome` with a confidence)
and :meth:`~predictor.calibration.shape.ShapeCalibrator.add` (one without) of each outcome in
turn, and leaves the calibrator as those calls would, bit for bit: the cells the blocks read
and write are numbered once and their windows, spreads and adaptive levels mirrored as arrays,
kept beside the calibrator from block to block; the sequential walk is run by the compiled kernel
(:func:`predictor.calibration.shape_kernel.learn_block`) on those arrays, and what changed is copied
back (new cells in the order the calls would have made them).
An outcome that the calls would refuse (a latency not finite and positive, a confidence out
of range), or a residual too large to be finite, sends the whole block the per-call way.

Examples
--------
>>> from predictor.calibration.shape import ShapeCalibrator
>>> from predictor.calibration.shapes import QueryShape
>>> shape = QueryShape("overlap", False)
>>> a, b = ShapeCalibrator(min_residuals=5), ShapeCalibrator(min_residuals=5)
>>> outcomes = [Outcome(shape, "cpu", 1, "m", 10.0 + i % 7, 10.0, False, 0.95) for i in range(40)]
>>> by_block = learn_block(a, outcomes)
>>> by_call = [b.score(shape, "cpu", 1, "m", 0.95, actual=o.actual, predicted=o.predicted) for o in outcomes]
>>> by_block == by_call and a.cells() == b.cells()
True
"""

from __future__ import annotations

import functools
import math
import weakref
from typing import Any, NamedTuple

import numpy as np

from predictor.calibration import shape_kernel
from predictor.calibration.conformal import Bound, BoundSource, ResidualWindow
from predictor.calibration.shape import (
    ALL,
    GRID,
    LINKED,
    MIN_SPREAD,
    POOL,
    WATCH_MOST,
    Cell,
    ShapeCalibrator,
    Spread,
    _cells,
    _chain_keys,
    _lookups,
    _nearest_level,
    normal_quantile,
    spread_lookups,
    watch,
    written_cells,
)
from predictor.calibration.shapes import QueryShape
from predictor.records.rules import check_confidence
from predictor.runtime.gil_yield import point as gil_point

FEWEST = 32
"""Outcomes a block needs to go through the kernel: copying the state of its cells in and out
costs about as much as the calls for ~25 outcomes (``learn_block`` of a few records' outcomes
goes the per-call way)."""
_SOURCES = (BoundSource.DEVICE_KIND, BoundSource.POOLED, BoundSource.FALLBACK)
SPREAD_WIDTH = 6
"""Spread keys per lookup (:func:`~predictor.calibration.shape.spread_lookups`: a linked cell's
six where a bound reads it, otherwise three, given twice); an outcome's three are those it is
normalised by and updates."""


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


def learn_block(calibrator: ShapeCalibrator, outcomes: list[Outcome], fewest: int = FEWEST) -> list[Result]:
    """:func:`learn_one` of each outcome in order, by the compiled kernel (see the module) when
    there are at least ``fewest`` of them."""
    residuals = _residuals(outcomes) if len(outcomes) >= fewest else None
    if residuals is None:
        return [learn_one(calibrator, o) for o in outcomes]
    block = _Block(calibrator)
    block.number(outcomes)
    if not block.run(outcomes, residuals):
        return [learn_one(calibrator, o) for o in outcomes]
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


_MODEL = object()
"""Stands for the model in a plan's spread keys (:func:`_spread_row`)."""


def _spread_row(key: str, kind: str, count: int) -> tuple:
    """The :func:`~predictor.calibration.shape.spread_lookups` of a bound's term, always
    :data:`SPREAD_WIDTH` of them (three given twice), for any model: :data:`_MODEL` where the
    model's own name goes."""
    keys = spread_lookups(key, kind, count, _MODEL)  # type: ignore[arg-type]
    return keys + keys if len(keys) < SPREAD_WIDTH else keys


class _Mirror:
    """The cells a calibrator's blocks name, numbered once, the walks of their bounds, and the
    calibrator's state of those cells as arrays: what the compiled kernel reads and writes in place,
    kept in step with the calibrator from block to block (what it learned call by call meanwhile is
    read back from its :func:`~predictor.calibration.shape.watch` list). Held beside the calibrator
    (:data:`_MIRRORS`), so that neither its snapshots nor its copies carry it.

    The walk of a bound depends on its (shape, kind, count) alone but for the model's own spreads:
    a *plan* per (shape, kind, count) holds every window, alpha cell and source of its terms, and
    spread keys where the model's own are ``-1 - j`` (the ``j``-th of the plan's *stems*, the
    model's spreads numbered per item in :attr:`own`)."""

    MOST = 500_000
    """Names kept at most (beyond, the mirror starts over)."""

    def __init__(self, calibrator: ShapeCalibrator) -> None:
        self.log = watch(calibrator)
        self.window = calibrator.window
        self.windows: dict[Cell, int] = {}
        self.window_cells: list[Cell] = []
        self.spreads: dict[tuple[str, str, str, int], int] = {}
        self.spread_keys: list[tuple[str, str, str, int]] = []
        self.alphas: dict[Cell, int] = {}
        self.alpha_cells: list[Cell] = []
        self.plans: dict[tuple, tuple[int, tuple[tuple[str, int], ...]]] = {}
        self.items: dict[tuple, tuple[int, int, tuple[int, ...], tuple[int, ...], int]] = {}
        self.cells: dict[tuple, tuple] = {}  # item()'s, but the model's spreads
        # the plans' walks, laid end to end (lists; as arrays in walks() until a plan is added)
        self._plan_start, self._term_look, self._term_wide = [0], [0], [0]
        self._lk_win: list[int] = []
        self._lk_alpha: list[int] = []
        self._lk_src: list[int] = []
        self._lk_spread: list[tuple[int, ...]] = []
        self._wd_win: list[int] = []
        self._wd_spread: list[tuple[int, ...]] = []
        self._walks: tuple | None = None
        self.most_terms = 1
        self.own = np.zeros(1024, dtype=np.int64)
        self.n_own = 0
        # the state, by number (windows' values by row)
        self.synced = [0, 0, 0]  # windows, spreads, alpha cells whose state is mirrored
        self.win_row = np.full(0, -1, dtype=np.int64)
        self.win_len = np.zeros(0, dtype=np.int64)
        self.win_pool = np.zeros(0, dtype=np.bool_)
        self.win_added = np.zeros(0, dtype=np.int64)
        self.win_sorted = np.empty((0, calibrator.window))
        self.win_ring = np.empty((0, calibrator.window))
        self.win_head = np.zeros(0, dtype=np.int64)
        self.n_rows = np.zeros(1, dtype=np.int64)
        self.sp_exists = np.zeros(0, dtype=np.bool_)
        self.sp_m, self.sp_s = np.zeros(0), np.zeros(0)
        self.sp_n = np.zeros(0, dtype=np.int64)
        self.sp_pool = np.zeros(0, dtype=np.bool_)
        self.al_exists = np.zeros(0, dtype=np.bool_)
        self.al = np.zeros((0, len(GRID)))

    def full(self) -> bool:
        """Whether so many names are kept that the mirror should start over."""
        return (len(self.windows) + len(self.spreads) + len(self.alphas) + len(self.items)
                + len(self.cells) + len(self.plans) + self.n_own > self.MOST)

    # ------------------------------------------------------------------ names
    def window_number(self, cell: Cell) -> int:
        return _number(self.windows, self.window_cells, cell)

    def alpha_number(self, cell: Cell) -> int:
        return _number(self.alphas, self.alpha_cells, cell)

    def spread_number(self, key: tuple[str, str, str, int]) -> int:
        return _number(self.spreads, self.spread_keys, key)

    def plan(self, shape: QueryShape, kind: str, count: int, monotone: bool) -> tuple[int, tuple[tuple[str, int], ...]]:
        """The number of the walk of the bounds of (shape, kind, count) for any model, and its stems:
        the (population key, count) of the model's own spreads it reads, in the order of their
        ``-1 - j`` keys."""
        key = (shape, kind, count, monotone)
        found = self.plans.get(key)
        if found is not None:
            return found
        stems: dict[tuple[str, int], int] = {}

        def spreads(lookup: str, j: int) -> tuple[int, ...]:
            row = []
            for name in _spread_row(lookup, kind, j):
                if name[2] is _MODEL:  # the model's own: numbered per item (item)
                    row.append(-1 - stems.setdefault((name[0], name[3]), len(stems)))
                else:
                    row.append(self.spread_number(name))
            return tuple(row)

        terms = 0
        for s, j in _cells(shape, count, monotone):
            for cell_kind, source in ((kind, shape_kernel.DEVICE_KIND), (POOL, shape_kernel.POOLED)):
                for lookup, c in _lookups(s, j):
                    self._lk_win.append(self.window_number((lookup, cell_kind, c)))
                    self._lk_alpha.append(self.alpha_number((lookup, kind, j)))
                    self._lk_spread.append(spreads(lookup, j))
                    self._lk_src.append(source)
            self._term_look.append(len(self._lk_win))
            for stand_in in _chain_keys(s):
                self._wd_win.append(self.window_number((stand_in, POOL, ALL)))
                self._wd_spread.append(spreads(stand_in, j))
            self._term_wide.append(len(self._wd_win))
            terms += 1
        self._plan_start.append(self._plan_start[-1] + terms)
        self.most_terms = max(self.most_terms, terms)
        self._walks = None
        found = self.plans[key] = (len(self._plan_start) - 2, tuple(stems))
        return found

    def walks(self) -> tuple[np.ndarray, ...]:
        """The plans' walks as the kernel reads them: plan_start, term_look, term_wide, lk_win,
        lk_alpha, lk_spread, lk_src, wd_win, wd_spread."""
        if self._walks is None:
            ints = functools.partial(np.array, dtype=np.int64)
            self._walks = (ints(self._plan_start), ints(self._term_look), ints(self._term_wide), ints(self._lk_win),
                           ints(self._lk_alpha), ints(self._lk_spread).reshape(-1, SPREAD_WIDTH), ints(self._lk_src),
                           ints(self._wd_win), ints(self._wd_spread).reshape(-1, SPREAD_WIDTH))
        return self._walks

    def item(self, o: Outcome, monotone: bool) -> tuple[int, int, tuple[int, ...], tuple[int, ...], int]:
        """An outcome's plan, where its model's own spreads start in :attr:`own`, the windows and
        spreads it writes (its cell's :func:`~predictor.calibration.shape.spread_lookups`, not
        reading, given twice) and its alpha cell."""
        key = (o.shape, o.kind, o.count, o.model, o.linked, monotone)
        found = self.items.get(key)
        if found is None:
            kind, count, model = o.kind, o.count, o.model
            cell_key = (LINKED if o.linked else "") + o.shape.key
            cell = self.cells.get((o.shape, kind, count, o.linked, monotone))
            if cell is None:  # what every model's outcomes of the cell share
                cell = self.cells[o.shape, kind, count, o.linked, monotone] = (
                    tuple(self.window_number(c) for c in written_cells(cell_key, kind, count)),
                    self.spread_number((cell_key, kind, "", count)),
                    self.spread_number((cell_key, POOL, "", count)),
                    self.alpha_number((cell_key, kind, count)),
                    *self.plan(o.shape, kind, count, monotone),
                )
            windows, by_kind, pooled, alpha, plan, stems = cell
            base, end = self.n_own, self.n_own + len(stems)
            if end > len(self.own):
                self.own = np.concatenate((self.own, np.zeros(max(len(self.own), len(stems)), dtype=np.int64)))
            numbers, keys = self.spreads, self.spread_keys
            own_numbers = []
            for stem, c in stems:
                name = (stem, kind, model, c)
                at = numbers.get(name)
                if at is None:
                    at = numbers[name] = len(keys)
                    keys.append(name)
                own_numbers.append(at)
            self.own[base:end] = own_numbers
            self.n_own = end
            own = self.spread_number((cell_key, kind, model, count))
            found = self.items[key] = (plan, base, windows, (own, by_kind, pooled, own, by_kind, pooled), alpha)
        return found

    # ------------------------------------------------------------------ state
    def sync(self, cal: ShapeCalibrator) -> bool:
        """Bring the mirrored state up to the calibrator's for every name numbered (what it learned
        call by call since the last block, and the names numbered since); ``False`` where one of its
        windows' sizes is not the calibrator's (made elsewhere)."""
        log = self.log
        if len(log) > WATCH_MOST:
            self.synced = [0, 0, 0]
        elif log:
            synced = self.synced
            for key, kind, count, model in log:
                for cell in written_cells(key, kind, count):
                    at = self.windows.get(cell)
                    if at is not None and at < synced[0] and not self._gather_window(cal, at):
                        return False
                for name in spread_lookups(key, kind, count, model, False):
                    at = self.spreads.get(name)
                    if at is not None and at < synced[1]:
                        self._gather_spread(cal, at)
                at = self.alphas.get((key, kind, count))
                if at is not None and at < synced[2]:
                    self._gather_alpha(cal, at)
        log.clear()
        self._grow(len(self.window_cells), len(self.spread_keys), len(self.alpha_cells))
        for at in range(self.synced[0], len(self.window_cells)):
            gil_point()
            if not self._gather_window(cal, at):
                return False
        for at in range(self.synced[1], len(self.spread_keys)):
            self._gather_spread(cal, at)
        for at in range(self.synced[2], len(self.alpha_cells)):
            self._gather_alpha(cal, at)
        self.synced = [len(self.window_cells), len(self.spread_keys), len(self.alpha_cells)]
        return True

    def _grow(self, windows: int, spreads: int, alphas: int) -> None:
        """Room for state of ``windows``, ``spreads`` and ``alphas`` names (new ones empty)."""
        if windows > len(self.win_row):
            more = max(windows - len(self.win_row), len(self.win_row))
            self.win_row = np.concatenate((self.win_row, np.full(more, -1, dtype=np.int64)))
            self.win_len = np.concatenate((self.win_len, np.zeros(more, dtype=np.int64)))
            self.win_added = np.concatenate((self.win_added, np.zeros(more, dtype=np.int64)))
            self.win_pool = np.concatenate((self.win_pool, np.zeros(more, dtype=np.bool_)))
        if spreads > len(self.sp_exists):
            more = max(spreads - len(self.sp_exists), len(self.sp_exists))
            self.sp_exists = np.concatenate((self.sp_exists, np.zeros(more, dtype=np.bool_)))
            self.sp_m = np.concatenate((self.sp_m, np.zeros(more)))
            self.sp_s = np.concatenate((self.sp_s, np.zeros(more)))
            self.sp_n = np.concatenate((self.sp_n, np.zeros(more, dtype=np.int64)))
            self.sp_pool = np.concatenate((self.sp_pool, np.zeros(more, dtype=np.bool_)))
        if alphas > len(self.al_exists):
            more = max(alphas - len(self.al_exists), len(self.al_exists))
            self.al_exists = np.concatenate((self.al_exists, np.zeros(more, dtype=np.bool_)))
            self.al = np.concatenate((self.al, np.zeros((more, len(GRID)))))

    def grow_rows(self, rows: int) -> None:
        """Room for ``rows`` windows' values."""
        if rows > len(self.win_head):
            more = max(rows - len(self.win_head), len(self.win_head))
            self.win_sorted = np.concatenate((self.win_sorted, np.empty((more, self.window))))
            self.win_ring = np.concatenate((self.win_ring, np.empty((more, self.window))))
            self.win_head = np.concatenate((self.win_head, np.zeros(more, dtype=np.int64)))

    def _gather_window(self, cal: ShapeCalibrator, at: int) -> bool:
        cell = self.window_cells[at]
        self.win_pool[at] = cell[1] == POOL
        window = cal._windows.get(cell)
        if window is None:
            self.win_row[at], self.win_len[at] = -1, 0
            return True
        if window.size != self.window:
            return False
        row = int(self.win_row[at])
        if row < 0:
            self.grow_rows(int(self.n_rows[0]) + 1)
            row = self.win_row[at] = int(self.n_rows[0])
            self.n_rows[0] += 1
        n = self.win_len[at] = len(window)
        self.win_head[row] = 0
        if n:
            self.win_sorted[row, :n] = window.sorted_array()
            self.win_ring[row, :n] = np.fromiter(window._order, dtype=float, count=n)
        return True

    def _gather_spread(self, cal: ShapeCalibrator, at: int) -> None:
        key = self.spread_keys[at]
        self.sp_pool[at] = key[1] == POOL
        spread = cal._spreads.get(key)
        if spread is None:
            self.sp_exists[at], self.sp_m[at], self.sp_s[at], self.sp_n[at] = False, 0.0, 0.0, 0
        else:
            self.sp_exists[at], self.sp_m[at], self.sp_s[at], self.sp_n[at] = True, spread.m, spread.s, spread.n

    def _gather_alpha(self, cal: ShapeCalibrator, at: int) -> None:
        alphas = cal._alphas.get(self.alpha_cells[at])
        self.al_exists[at] = alphas is not None
        if alphas is not None:
            self.al[at] = alphas


def _number(numbers: dict, names: list, name: Any) -> int:
    """The number of ``name`` in ``numbers``, the next one (appending it to ``names``) if it has none."""
    at = numbers.get(name)
    if at is None:
        at = numbers[name] = len(names)
        names.append(name)
    return at


_MIRRORS: weakref.WeakKeyDictionary[ShapeCalibrator, _Mirror] = weakref.WeakKeyDictionary()


def _mirror(calibrator: ShapeCalibrator) -> _Mirror:
    mirror = _MIRRORS.get(calibrator)
    if mirror is None or mirror.full() or mirror.window != calibrator.window:
        mirror = _MIRRORS[calibrator] = _Mirror(calibrator)
    return mirror


class _Block:
    """A block's outcomes as the kernel reads them (their plans, cells and levels, by the mirror's
    numbers), the kernel's run over the mirror, and what changed written back into the calibrator."""

    def __init__(self, calibrator: ShapeCalibrator):
        self.cal = calibrator
        self.mirror = _mirror(calibrator)

    def number(self, outcomes: list[Outcome]) -> None:
        """Number every cell the outcomes read or write, and the walks of their bounds."""
        mirror, monotone = self.mirror, self.cal.monotone
        n = len(outcomes)
        it_plan, it_own, it_win, it_spread, it_alpha = [], [], [], [], []
        self.it_score = np.zeros(n, dtype=np.bool_)
        self.it_out = np.zeros(n, dtype=np.int64)
        self.it_onem = np.zeros(n)
        self.it_ai = np.zeros(n, dtype=np.int64)
        self.it_denom = np.ones(n)
        self.it_fallback = np.zeros(n)
        sigma = self.cal.fallback_sigma
        for i, o in enumerate(outcomes):
            gil_point()
            plan, base, wins, spreads, alpha = mirror.item(o, monotone)
            it_plan.append(plan)
            it_own.append(base)
            it_win.append(wins)
            it_spread.append(spreads)
            it_alpha.append(alpha)
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
        ints = functools.partial(np.array, dtype=np.int64)
        self.it_plan, self.it_own, self.it_alpha = ints(it_plan), ints(it_own), ints(it_alpha)
        self.it_win = ints(it_win).reshape(-1, 4)
        self.it_spread = ints(it_spread).reshape(-1, SPREAD_WIDTH)

    # ------------------------------------------------------------------ kernel, state out
    def run(self, outcomes: list[Outcome], residuals: list[float]) -> bool:
        """Bring the mirror up to the calibrator and run the kernel over the outcomes; ``False``
        (nothing changed) where a window's size is not the calibrator's (made elsewhere)."""
        cal, mirror = self.cal, self.mirror
        n = len(outcomes)
        if not mirror.sync(cal):
            _MIRRORS.pop(cal, None)
            return False
        self.written = np.unique(self.it_win)
        mirror.grow_rows(int(mirror.n_rows[0]) + int(np.count_nonzero(mirror.win_row[self.written] < 0)))
        self.out_centre, self.out_lf = np.zeros(n), np.zeros(n)
        self.out_src, self.out_n = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self.sizes = np.array([len(cal._windows), len(cal._spreads), len(cal._alphas)], dtype=np.int64)
        self.created = np.zeros((3, 4 * n), dtype=np.int64)
        self.n_created = np.zeros(3, dtype=np.int64)
        most = mirror.most_terms
        grid_onem = np.array([1.0 - level for level in GRID])
        m = mirror
        shape_kernel.learn_block(
            m.win_row, m.win_len, m.win_sorted, m.win_ring, m.win_head, m.win_pool, m.win_added, m.n_rows,
            m.sp_exists, m.sp_m, m.sp_s, m.sp_n, m.sp_pool, m.al_exists, m.al, grid_onem.copy(), self.sizes,
            self.created, self.n_created, *m.walks(), m.own, np.empty(most), np.empty(most),
            np.empty(most, dtype=np.int64),
            self.it_plan, self.it_own, np.array(residuals), self.it_score, self.it_win, self.it_spread, self.it_alpha,
            self.it_out, self.it_onem, self.it_ai, self.it_denom, self.it_fallback,
            grid_onem, np.array([normal_quantile(level) * cal.fallback_sigma for level in GRID]),
            np.array([min(cal.gamma, 0.1 * (1.0 - level)) for level in GRID]),
            np.array([(1.0 - level) / 20.0 for level in GRID]),
            np.array([min(5.0 * (1.0 - level), 0.5) for level in GRID]),
            bool(cal.gamma), cal.scaled, cal.min_residuals, cal.min_spread_n, cal.max_cells, cal.spread_rate,
            MIN_SPREAD, self.out_centre, self.out_lf, self.out_src, self.out_n, cal.noise,
        )
        self._store()
        return True

    def _store(self) -> None:
        """Copy what the kernel changed back into the calibrator (new cells in order of creation)."""
        cal, m = self.cal, self.mirror
        made: dict[int, ResidualWindow] = {}
        for at in self.written.tolist():
            gil_point()
            added = int(m.win_added[at])
            if not added:
                continue
            m.win_added[at] = 0
            window = cal._windows.get(m.window_cells[at])
            if window is None:
                window = made[at] = ResidualWindow(cal.window)
            row, n = int(m.win_row[at]), int(m.win_len[at])
            window.take_arrays(added, m.win_ring[row].copy(), int(m.win_head[row]), m.win_sorted[row, :n].copy())
        for at in self.created[0, :self.n_created[0]].tolist():
            cal._windows[m.window_cells[at]] = made[at]
        spreads, spread_of, keys = cal._spreads, Spread.of, m.spread_keys
        created = self.created[1, :self.n_created[1]]
        written = np.unique(self.it_spread[:, :shape_kernel.WRITTEN_SPREADS])
        kept = written[m.sp_exists[written] & ~np.isin(written, created)]  # in the calibrator before the block
        for at in (kept, created):  # replaced, not changed (a frozen copy may hold it), then the new in order
            spreads.update(zip(map(keys.__getitem__, at.tolist()),
                               map(spread_of, m.sp_m[at].tolist(), m.sp_s[at].tolist(), m.sp_n[at].tolist()), strict=True))
        fresh = set(self.created[2, :self.n_created[2]].tolist())
        for at in sorted(set(self.it_alpha.tolist()) - fresh):
            if m.al_exists[at]:
                cal._alphas[m.alpha_cells[at]] = m.al[at].tolist()  # replaced, not changed: a frozen copy may hold it
        for at in self.created[2, :self.n_created[2]].tolist():
            cal._alphas[m.alpha_cells[at]] = m.al[at].tolist()

    def results(self, outcomes: list[Outcome], residuals: list[float]) -> list[Result]:
        """The answers of the outcomes, and the calibrator's counters brought up to date."""
        cal = self.cal
        if cal._answered is not None:
            cal.forget_answers()  # a copy that learns is live (as add)
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
