"""A block of outcomes into a :class:`~predictor.calibration.shape.ShapeCalibrator` at once.

:func:`learn_block` gives the results of :meth:`ShapeCalibrator.score
<predictor.calibration.shape.ShapeCalibrator.score>` (an :class:`Outcome` with a confidence)
and :meth:`~predictor.calibration.shape.ShapeCalibrator.add` (one without) of each outcome in
turn, and leaves the calibrator as those calls would, bit for bit: the cells the block reads
and writes are numbered once, their windows, spreads and adaptive levels copied into arrays,
the sequential walk run by the compiled kernel (:func:`predictor.calibration.shape_kernel.learn_block`),
and what changed copied back (new cells in the order the calls would have made them).
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
    Cell,
    ShapeCalibrator,
    Spread,
    _cells,
    _chain_keys,
    _lookups,
    _nearest_level,
    normal_quantile,
    spread_lookups,
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


def _catch_up(window: ResidualWindow, added: int, n: int, head: int, ring: np.ndarray, ordered: np.ndarray) -> None:
    """Bring ``window`` to the state the kernel left its row in (``added`` residuals later: ``n`` of
    them in ``ring`` from ``head``, sorted in ``ordered``): it takes copies of the rows as its own
    (:meth:`ResidualWindow.take_arrays <predictor.calibration.conformal.ResidualWindow.take_arrays>`,
    which also keeps the ring for the next block)."""
    window.take_arrays(added, ring.copy(), head, ordered[:n].copy())


class _Plan(NamedTuple):
    """The walk of one bound (``ShapeCalibrator._terms_levels`` over ``_cells``), by cell name:
    per term, its lookups (``look`` offsets into window, alpha cell, spread keys and source)
    and the widest cells it falls back on (``wide`` offsets into window and spread keys)."""

    look: np.ndarray
    lk_win: np.ndarray
    lk_alpha: np.ndarray
    lk_spread: np.ndarray
    lk_src: np.ndarray
    wide: np.ndarray
    wd_win: np.ndarray
    wd_spread: np.ndarray


class _Skeleton(NamedTuple):
    """The walk of the bounds of one (shape, kind, count) without its model (:meth:`_Names.skeleton`):
    a :class:`_Plan`'s arrays but the spreads, whose numbers (rows of the lookups', then the wide
    cells') are ``fixed`` where they do not depend on the model; where they do (``owned``), the
    model's own spreads of ``stems[stem_of]`` (a population key and count), in order."""

    look: np.ndarray
    lk_win: np.ndarray
    lk_alpha: np.ndarray
    lk_src: np.ndarray
    wide: np.ndarray
    wd_win: np.ndarray
    fixed: np.ndarray
    owned: np.ndarray
    stem_of: np.ndarray
    stems: list[tuple[str, int]]


_MODEL = object()
"""Stands for the model in a skeleton's spread keys (:func:`_spread_row`)."""


def _spread_row(key: str, kind: str, count: int) -> tuple:
    """The :func:`~predictor.calibration.shape.spread_lookups` of a bound's term, always
    :data:`SPREAD_WIDTH` of them (three given twice), for any model: :data:`_MODEL` where the
    model's own name goes."""
    keys = spread_lookups(key, kind, count, _MODEL)  # type: ignore[arg-type]
    return keys + keys if len(keys) < SPREAD_WIDTH else keys


def _number(numbers: dict, names: list, name: Any) -> int:
    """The number of ``name`` in ``numbers``, the next one (appending it to ``names``) if it has none."""
    at = numbers.get(name)
    if at is None:
        at = numbers[name] = len(names)
        names.append(name)
    return at


class _Names:
    """Numbers for the cells (windows, spreads, alpha cells) a calibrator's blocks name, and
    the walks of the bounds they ask, kept from block to block (names only: no state). Held
    beside the calibrator (:data:`_NAMES`), so that neither its snapshots nor its copies carry it."""

    MOST = 500_000
    """Names kept at most (beyond, they start over)."""

    def __init__(self) -> None:
        self.windows: dict[Cell, int] = {}
        self.window_cells: list[Cell] = []
        self.spreads: dict[tuple[str, str, str, int], int] = {}
        self.spread_keys: list[tuple[str, str, str, int]] = []
        self.alphas: dict[Cell, int] = {}
        self.alpha_cells: list[Cell] = []
        self.plans: dict[tuple, int] = {}
        self.walks: list[_Plan] = []
        self.skeletons: dict[tuple, _Skeleton] = {}
        self.items: dict[tuple, tuple[int, tuple[int, ...], tuple[int, ...], int]] = {}
        self.cells: dict[tuple, tuple[tuple[int, ...], int, int, int]] = {}  # item()'s, but the model's spread

    def full(self) -> bool:
        """Whether so many names are kept that they should start over."""
        return (len(self.windows) + len(self.spreads) + len(self.alphas) + len(self.items)
                + len(self.cells) + len(self.plans) > self.MOST)

    def window(self, cell: Cell) -> int:
        return _number(self.windows, self.window_cells, cell)

    def alpha(self, cell: Cell) -> int:
        return _number(self.alphas, self.alpha_cells, cell)

    def plan(self, shape: QueryShape, kind: str, count: int, model: str, monotone: bool) -> int:
        """The number of the walk of a bound: its model's spread keys put into the walk of its
        (shape, kind, count) that every model shares (:meth:`skeleton`)."""
        key = (shape, kind, count, model, monotone)
        at = self.plans.get(key)
        if at is not None:
            return at
        sk = self.skeleton(shape, kind, count, monotone)
        numbers, keys = self.spreads, self.spread_keys
        own = []
        for stem, j in sk.stems:
            name = (stem, kind, model, j)
            at = numbers.get(name)
            if at is None:
                at = numbers[name] = len(keys)
                keys.append(name)
            own.append(at)
        spreads = sk.fixed.copy()
        spreads[sk.owned] = np.array(own, dtype=np.int64)[sk.stem_of]
        looks = len(sk.lk_win)
        self.walks.append(_Plan(sk.look, sk.lk_win, sk.lk_alpha, spreads[:looks], sk.lk_src, sk.wide, sk.wd_win,
                                spreads[looks:]))
        at = self.plans[key] = len(self.walks) - 1
        return at

    def skeleton(self, shape: QueryShape, kind: str, count: int, monotone: bool) -> _Skeleton:
        """The part of the walks of (shape, kind, count) that does not depend on the model: every
        window, alpha cell and source, and the spread keys but the model's own."""
        key = (shape, kind, count, monotone)
        found = self.skeletons.get(key)
        if found is not None:
            return found
        look, lk_win, lk_alpha, lk_src, lk_keys = [0], [], [], [], []
        wide, wd_win, wd_keys = [0], [], []
        for s, j in _cells(shape, count, monotone):
            for cell_kind, source in ((kind, shape_kernel.DEVICE_KIND), (POOL, shape_kernel.POOLED)):
                for lookup, c in _lookups(s, j):
                    lk_win.append(self.window((lookup, cell_kind, c)))
                    lk_alpha.append(self.alpha((lookup, kind, j)))
                    lk_keys.append(_spread_row(lookup, kind, j))
                    lk_src.append(source)
            look.append(len(lk_win))
            for stand_in in _chain_keys(s):
                wd_win.append(self.window((stand_in, POOL, ALL)))
                wd_keys.append(_spread_row(stand_in, kind, j))
            wide.append(len(wd_win))
        stems: dict[tuple[str, int], int] = {}
        fixed, stem_at = [], []
        for k in (*lk_keys, *wd_keys):
            for name in k:
                if name[2] is _MODEL:  # the model's own: numbered per model (plan)
                    fixed.append(-1)
                    stem_at.append(stems.setdefault((name[0], name[3]), len(stems)))
                else:
                    fixed.append(_number(self.spreads, self.spread_keys, name))
                    stem_at.append(-1)
        ints = functools.partial(np.array, dtype=np.int64)
        owned = ints(stem_at).reshape(-1, SPREAD_WIDTH) >= 0
        found = self.skeletons[key] = _Skeleton(
            ints(look), ints(lk_win), ints(lk_alpha), ints(lk_src), ints(wide), ints(wd_win),
            ints(fixed).reshape(-1, SPREAD_WIDTH), owned, ints([at for at in stem_at if at >= 0]), list(stems))
        return found

    def item(self, o: Outcome, monotone: bool) -> tuple[int, tuple[int, ...], tuple[int, ...], int]:
        """An outcome's walk, the windows and spreads it writes (its cell's
        :func:`~predictor.calibration.shape.spread_lookups`, not reading, given twice) and its alpha cell."""
        key = (o.shape, o.kind, o.count, o.model, o.linked, monotone)
        found = self.items.get(key)
        if found is None:
            kind, count = o.kind, o.count
            cell_key = (LINKED if o.linked else "") + o.shape.key
            cell = self.cells.get((o.shape, kind, count, o.linked))
            if cell is None:  # what every model's outcomes of the cell share
                cell = self.cells[o.shape, kind, count, o.linked] = (
                    tuple(self.window(c) for c in ((cell_key, kind, count), (cell_key, kind, ALL),
                                                   (cell_key, POOL, count), (cell_key, POOL, ALL))),
                    _number(self.spreads, self.spread_keys, (cell_key, kind, "", count)),
                    _number(self.spreads, self.spread_keys, (cell_key, POOL, "", count)),
                    self.alpha((cell_key, kind, count)),
                )
            windows, by_kind, pooled, alpha = cell
            own = _number(self.spreads, self.spread_keys, (cell_key, kind, o.model, count))
            found = self.items[key] = (self.plan(o.shape, kind, count, o.model, monotone), windows,
                                       (own, by_kind, pooled, own, by_kind, pooled), alpha)
        return found


def _renumber(numbers: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(numbers, return_inverse=True)`` of numbers in ``0 .. size - 1``, without sorting."""
    seen = np.zeros(size, dtype=np.bool_)
    seen[numbers] = True
    return np.flatnonzero(seen), (np.cumsum(seen) - 1)[numbers]


_NAMES: weakref.WeakKeyDictionary[ShapeCalibrator, _Names] = weakref.WeakKeyDictionary()


def _names(calibrator: ShapeCalibrator) -> _Names:
    names = _NAMES.get(calibrator)
    if names is None or names.full():
        names = _NAMES[calibrator] = _Names()
    return names


class _Block:
    """A block's cells numbered from 0 (those its outcomes read or write), their state as
    arrays, and the kernel's answers."""

    def __init__(self, calibrator: ShapeCalibrator):
        self.cal = calibrator

    def number(self, outcomes: list[Outcome]) -> None:
        """Number every cell the outcomes read or write, and the walks of their bounds."""
        names, monotone = _names(self.cal), self.cal.monotone
        n = len(outcomes)
        plans: dict[int, int] = {}
        it_plan, it_win, it_spread, it_alpha = [], [], [], []
        self.it_score = np.zeros(n, dtype=np.bool_)
        self.it_out = np.zeros(n, dtype=np.int64)
        self.it_onem = np.zeros(n)
        self.it_ai = np.zeros(n, dtype=np.int64)
        self.it_denom = np.ones(n)
        self.it_fallback = np.zeros(n)
        sigma = self.cal.fallback_sigma
        for i, o in enumerate(outcomes):
            gil_point()
            plan, wins, spreads, alpha = names.item(o, monotone)
            it_plan.append(plans.setdefault(plan, len(plans)))
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
        walks = [names.walks[plan] for plan in plans]
        terms = np.array([len(walk.look) - 1 for walk in walks], dtype=np.int64)
        self.plan_start = np.concatenate(([0], np.cumsum(terms)))
        lk_sizes = np.array([len(walk.lk_win) for walk in walks], dtype=np.int64)
        wd_sizes = np.array([len(walk.wd_win) for walk in walks], dtype=np.int64)
        lk_base = np.concatenate(([0], np.cumsum(lk_sizes)))
        wd_base = np.concatenate(([0], np.cumsum(wd_sizes)))
        self.term_look = np.concatenate([walk.look[:-1] + base for walk, base in zip(walks, lk_base, strict=False)]
                                        + [lk_base[-1:]])
        self.term_wide = np.concatenate([walk.wide[:-1] + base for walk, base in zip(walks, wd_base, strict=False)]
                                        + [wd_base[-1:]])
        self.lk_src = np.concatenate([walk.lk_src for walk in walks])
        self.it_plan = np.array(it_plan, dtype=np.int64)
        item_win = np.array(it_win, dtype=np.int64)
        item_spread = np.array(it_spread, dtype=np.int64)
        item_alpha = np.array(it_alpha, dtype=np.int64)
        # global names -> this block's numbers (0 .. distinct - 1)
        lk_win = np.concatenate([walk.lk_win for walk in walks])
        wd_win = np.concatenate([walk.wd_win for walk in walks])
        cells, inverse = _renumber(np.concatenate((lk_win, wd_win, item_win.ravel())), len(names.window_cells))
        self.lk_win, self.wd_win = inverse[:len(lk_win)], inverse[len(lk_win):len(lk_win) + len(wd_win)]
        self.it_win = inverse[len(lk_win) + len(wd_win):].reshape(-1, 4)
        self.window_cells = [names.window_cells[at] for at in cells.tolist()]
        lk_spread = np.concatenate([walk.lk_spread for walk in walks])
        wd_spread = np.concatenate([walk.wd_spread for walk in walks])
        keys, inverse = _renumber(np.concatenate((lk_spread, wd_spread, item_spread)).ravel(), len(names.spread_keys))
        inverse = inverse.reshape(-1, SPREAD_WIDTH)
        self.lk_spread, self.wd_spread = inverse[:len(lk_spread)], inverse[len(lk_spread):len(lk_spread) + len(wd_spread)]
        self.it_spread = inverse[len(lk_spread) + len(wd_spread):]
        self.spread_keys = [names.spread_keys[at] for at in keys.tolist()]
        lk_alpha = np.concatenate([walk.lk_alpha for walk in walks])
        alphas, inverse = _renumber(np.concatenate((lk_alpha, item_alpha)), len(names.alpha_cells))
        self.lk_alpha, self.it_alpha = inverse[:len(lk_alpha)], inverse[len(lk_alpha):]
        self.alpha_cells = [names.alpha_cells[at] for at in alphas.tolist()]
        self.written = set(self.it_win.ravel().tolist())

    # ------------------------------------------------------------------ state in, kernel, state out
    def run(self, outcomes: list[Outcome], residuals: list[float]) -> bool:
        """Copy the numbered state into arrays and run the kernel over the outcomes; ``False``
        (nothing changed) where a window's size is not the calibrator's (made elsewhere)."""
        cal = self.cal
        rows = len(self.window_cells)
        win_exists = np.zeros(rows, dtype=np.bool_)
        win_len = np.zeros(rows, dtype=np.int64)
        win_sorted = np.empty((rows, cal.window))
        win_ring = np.empty((rows, cal.window))
        win_pool = np.array([cell[1] == POOL for cell in self.window_cells], dtype=np.bool_)
        win_head = np.zeros(rows, dtype=np.int64)
        self.kept: list[ResidualWindow | None] = [None] * rows
        for at in range(rows):
            gil_point()
            window = cal._windows.get(self.window_cells[at])
            if window is None:
                continue
            if window.size != cal.window:
                return False
            self.kept[at] = window
            n = len(window)
            win_exists[at] = True
            win_len[at] = n
            if n:
                win_sorted[at, :n] = window.sorted_array()  # cached as an array from block to block
                if at in self.written:
                    kept = window._block_ring
                    if kept is not None and kept[0] == window.adds:  # as the last block left it
                        win_ring[at], win_head[at] = kept[1], kept[2]
                    else:
                        win_ring[at, :n] = np.fromiter(window._order, dtype=float, count=n)
        spread_keys = self.spread_keys
        n_spreads = len(spread_keys)
        gil_point()
        found = list(map(cal._spreads.get, spread_keys))
        gil_point()
        sp_exists = np.array([spread is not None for spread in found], dtype=np.bool_)
        sp_m = np.array([0.0 if spread is None else spread.m for spread in found], dtype=float)
        sp_s = np.array([0.0 if spread is None else spread.s for spread in found], dtype=float)
        sp_n = np.array([0 if spread is None else spread.n for spread in found], dtype=np.int64)
        sp_pool = np.array([key[1] == POOL for key in spread_keys], dtype=np.bool_)
        alpha_cells = self.alpha_cells
        al_exists = np.zeros(len(alpha_cells), dtype=np.bool_)
        al = np.zeros((len(alpha_cells), len(GRID)))
        for at, cell in enumerate(alpha_cells):
            gil_point()
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
        win_added = np.zeros(rows, dtype=np.int64)
        shape_kernel.learn_block(
            win_exists, win_len, win_sorted, win_ring, win_head, win_pool, win_added,
            sp_exists, sp_m, sp_s, sp_n, sp_pool, al_exists, al, grid_onem.copy(), self.sizes, self.created,
            self.n_created,
            self.plan_start, self.term_look, self.term_wide, self.lk_win, self.lk_alpha, self.lk_spread,
            self.lk_src, self.wd_win, self.wd_spread,
            self.it_plan, np.array(residuals), self.it_score, self.it_win, self.it_spread, self.it_alpha, self.it_out,
            self.it_onem, self.it_ai, self.it_denom, self.it_fallback,
            grid_onem, np.array([normal_quantile(level) * cal.fallback_sigma for level in GRID]),
            np.array([min(cal.gamma, 0.1 * (1.0 - level)) for level in GRID]),
            np.array([(1.0 - level) / 20.0 for level in GRID]),
            np.array([min(5.0 * (1.0 - level), 0.5) for level in GRID]),
            bool(cal.gamma), cal.scaled, cal.min_residuals, cal.min_spread_n, cal.max_cells, cal.spread_rate,
            MIN_SPREAD, self.out_centre, self.out_lf, self.out_src, self.out_n, cal.noise,
        )
        self._store(win_len, win_sorted, win_ring, win_head, win_added, spread_keys, sp_m, sp_s, sp_n,
                    alpha_cells, al_exists, al)
        return True

    def _store(self, win_len, win_sorted, win_ring, win_head, win_added, spread_keys, sp_m, sp_s, sp_n,
               alpha_cells, al_exists, al) -> None:
        """Copy what the kernel changed back into the calibrator (new cells in order of creation)."""
        cal = self.cal
        for at in sorted(self.written):
            gil_point()
            added = int(win_added[at])
            if not added:
                continue
            window = self.kept[at]
            if window is None:
                window = self.kept[at] = ResidualWindow(cal.window)
            _catch_up(window, added, int(win_len[at]), int(win_head[at]), win_ring[at], win_sorted[at])
        for at in self.created[0, :self.n_created[0]].tolist():
            cal._windows[self.window_cells[at]] = self.kept[at]  # type: ignore[assignment]
        for at, window in enumerate(self.kept):
            gil_point()
            if window is not None and window._array is None:
                window._array = win_sorted[at, :int(win_len[at])].copy()  # (ResidualWindow.sorted_array)
        spreads, made = cal._spreads, Spread.of
        ms, ss, ns = sp_m.tolist(), sp_s.tolist(), sp_n.tolist()
        for at in sorted(set(self.it_spread.ravel().tolist())):
            key = spread_keys[at]
            if key in spreads:  # replaced, not changed: a frozen copy may hold it
                spreads[key] = made(ms[at], ss[at], ns[at])
        for at in self.created[1, :self.n_created[1]].tolist():
            spreads[spread_keys[at]] = made(ms[at], ss[at], ns[at])
        fresh = set(self.created[2, :self.n_created[2]].tolist())
        for at in sorted(set(self.it_alpha.tolist()) - fresh):
            if al_exists[at]:
                cal._alphas[alpha_cells[at]] = al[at].tolist()  # replaced, not changed: a frozen copy may hold it
        for at in self.created[2, :self.n_created[2]].tolist():
            cal._alphas[alpha_cells[at]] = al[at].tolist()

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
