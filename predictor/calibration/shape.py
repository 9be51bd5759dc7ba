"""Conditional conformal bounds: calibrated per query shape, device kind and co-runner count.

:class:`ShapeCalibrator` keeps, per *cell* ``(query shape, device kind, co-runner count)``
(:mod:`predictor.calibration.shapes`), the last ``window`` *normalised* residuals of answers of that
shape, recorded prequentially (each answer scored before its outcome was learned):

    ``r = log(actual / predicted)``,  ``z = (r - m) / s``

where ``m`` and ``s`` are a running (exponentially weighted) centre and mean absolute deviation
of the residuals of the same shape, kind, co-runner count *and model*. The upper bound at
confidence ``c`` is ``predicted * exp(m + s * z_(k))``, ``z_(k)`` the split-conformal quantile of
the cell: conditional twice over, Mondrian (each cell has its own quantile, so the coverage holds
per co-runner count, not only on average) and locally scaled (a model whose answers are reliable
gets a narrow bound, one whose answers scatter a wide one). The calibrator also corrects the point
answer, adapts its levels online and keeps both monotone in crowding (see
:class:`ShapeCalibrator`).

Examples
--------
>>> import random
>>> from predictor.calibration.shapes import QueryShape
>>> rng, cal, shape = random.Random(0), ShapeCalibrator(min_residuals=20), QueryShape("overlap", False)
>>> for _ in range(500):
...     _ = cal.add(shape, "cpu", 1, "mlp", actual=10.0 * math.exp(rng.gauss(0, 0.1)), predicted=10.0)
>>> bound = cal.bound(shape, "cpu", 1, "mlp", 10.0, 0.95)
>>> bound.source.value, 11.0 < bound.upper_ms < 13.0
('device_kind', True)
"""

from __future__ import annotations

import functools
import math
import operator
import weakref
from dataclasses import dataclass
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from predictor.calibration import probability_kernel
from predictor.calibration.conformal import (
    Bound,
    BoundSource,
    ResidualWindow,
    WindowCopies,
)
from predictor.calibration.shapes import QueryShape
from predictor.records.rules import check_confidence

POOL = "*"
ALL = -1
LINKED = "linked:"
"""Prefix of the cells of residuals of answers really given (matched by batch id)."""
GRID = (0.9, 0.95, 0.99)
"""Confidence levels whose miss rates adaptive conformal inference tracks per cell."""
MIN_SPREAD = 0.01
CENTRE_Z = 2.0
"""Standard errors by which a running centre is shrunk towards 0 before it corrects a point answer
(:func:`centre_noise`)."""
MAX_ANSWERED = 4096
"""Most factors a frozen copy keeps (its cache is emptied when full)."""
MAX_PACKED = 256
"""Most cells' windows a frozen copy keeps packed for rankings (:class:`_Packed`; emptied when full)."""
WATCH_MOST = 4096
"""Outcomes a watch list (:func:`watch`) keeps; past it, it holds ``WATCH_MOST + 1`` of them and its reader
takes every cell as changed."""
_NORMAL = NormalDist()

Cell = tuple[str, str, int]  # (shape key, device kind or POOL, count bucket or ALL)


class Spread:
    """A running centre and mean absolute deviation of residuals (exponentially weighted,
    an ordinary mean over the first ``1 / rate`` of them). Once in a calibrator it is not
    changed but replaced (frozen copies share it)."""

    __slots__ = ("m", "n", "s")

    def __init__(self) -> None:
        self.m = 0.0
        self.s = 0.0
        self.n = 0

    def update(self, residual: float, rate: float) -> None:
        """Take in one residual."""
        a = max(rate, 1.0 / (self.n + 1))
        deviation = abs(residual - self.m) if self.n else 0.0
        self.m += a * (residual - self.m)
        if self.n:
            b = max(rate, 1.0 / self.n)
            self.s += b * (deviation - self.s)
        self.n += 1

    def __getstate__(self) -> tuple:
        return (self.m, self.s, self.n)

    @classmethod
    def of(cls, m: float, s: float, n: int) -> Spread:
        """The spread with centre ``m``, deviation ``s`` after ``n`` residuals."""
        spread = cls.__new__(cls)
        spread.m, spread.s, spread.n = m, s, n
        return spread

    def clone(self) -> Spread:
        """An independent copy."""
        twin = Spread.__new__(Spread)
        twin.m, twin.s, twin.n = self.m, self.s, self.n
        return twin

    def __setstate__(self, state: tuple) -> None:
        self.m, self.s, self.n = state


class _SpreadColumns(NamedTuple):
    """A calibrator's running spreads as a snapshot holds them: the keys in order, and each one's
    centre, deviation and count, in three arrays (:meth:`spreads` gives the dict back)."""

    keys: list[tuple[str, str, str, int]]
    m: np.ndarray
    s: np.ndarray
    n: np.ndarray

    def spreads(self) -> dict[tuple[str, str, str, int], Spread]:
        """The dict of :class:`Spread` these columns were made from, in the same order."""
        return dict(zip(self.keys, map(Spread.of, self.m.tolist(), self.s.tolist(), self.n.tolist()), strict=True))


def _spread_columns(spreads: dict[tuple[str, str, str, int], Spread]) -> _SpreadColumns:
    """The columns of ``spreads`` (:class:`_SpreadColumns`); every number as it is (floats as
    doubles, counts as 64-bit integers), so the dict made back is equal, bit for bit."""
    values, n = spreads.values(), len(spreads)
    return _SpreadColumns(list(spreads), *(np.fromiter(map(operator.attrgetter(name), values), dtype=kind, count=n)
                                           for name, kind in (("m", float), ("s", float), ("n", np.int64))))


@dataclass(frozen=True, slots=True)
class _Term:
    """One count's share of a bound: ``log factor = m + s * z`` of the window, or the fallback."""

    log_factor: float
    source: BoundSource
    n: int
    window: ResidualWindow | None
    m: float
    s: float
    phi: float  # allowed miss rate over requested miss rate (adaptive conformal)


class ShapeCalibrator:
    """Online conditional conformal calibration (the bound: see the module documentation).

    Residuals of answers really given (matched to their outcome by batch id) have cells of their
    own, used before the replayed ones of the same shape where they hold enough. A cell with fewer
    than ``min_residuals`` residuals borrows, in order: the same shape and kind over all counts,
    the shapes that stand in for it (:meth:`QueryShape.chain
    <predictor.calibration.shapes.QueryShape.chain>`), then the same over all device kinds
    (``POOLED``); with nothing anywhere, a wide log-normal answers (``FALLBACK``). A key's running
    centre and spread come from coarser keys while it has seen too few residuals.

    **Adaptive conformal inference** (Gibbs and Candès, 2021) runs per cell and per level of
    :data:`GRID`: ``alpha_{t+1} = alpha_t + gamma (alpha - err_t)``, where ``err_t`` says whether
    the outcome exceeded the bound the cell would have answered; a requested confidence uses the
    miss-rate factor ``alpha_t / alpha`` of the nearest grid level. Coverage so recovers after a
    drift within a few hundred observations, in either direction.

    **Calibrated point answer**: the prediction times ``exp(m)`` (its shape's running centre)
    removes the bias an information gap causes (zero signals make predictions low, co-runners of
    unknown overlap taken as fully overlapping make them high). A running centre is a mean of few
    recent residuals, so each is first shrunk towards 0 by :data:`CENTRE_Z` of its standard errors
    (:func:`centre_noise`, soft thresholding): a centre within its own noise corrects nothing, and
    the largest of several centres (monotone, below) is not the largest of their noises. The bound
    uses the centres as they are.

    **Monotone in crowding** (``monotone``): the centre and the width of ``k`` co-runners are the
    largest centre and the largest width ``s z_(k)`` of the counts ``0..k`` (an idle device, one
    co-runner, ...) and of every shape a nested query can have
    (:meth:`~predictor.calibration.shapes.QueryShape.nested`: adding a co-runner of unknown overlap
    to co-runners given with theirs changes the shape), so the corrected prediction and the bound
    never drop when a co-runner is added to a query whose raw prediction does not drop. The price:
    where the bias falls with crowding, the larger counts are over-covered. Without it each count
    uses its own centre and width.

    Parameters
    ----------
    window
        Normalised residuals kept per cell.
    min_residuals
        Fewest residuals a cell needs to answer on its own.
    fallback_sigma
        Log-normal spread of the bound when no cell has residuals.
    gamma
        Step of adaptive conformal inference (0: off); a level ``c`` uses at most
        ``0.1 (1 - c)``, so rare misses move rare levels little.
    spread_rate
        Weight of a new residual in the running centre and spread (it also sets how noisy a
        centre is, so how far a point answer's centres are shrunk: :attr:`noise`).
    min_spread_n
        Residuals a (shape, kind, count, model) key needs before its own spread is used.
    monotone
        Make the bound non-decreasing in the co-runner count (largest factor of counts ``0..k``).
    scaled
        Normalise residuals by the running centre and spread of their key (``False``: raw
        log residuals, one multiplier per cell, as a global calibration would; for comparison).
    max_cells
        Most cells kept (beyond, new cells of new device kinds answer from the pool).
    """

    def __init__(
        self,
        window: int = 1000,
        min_residuals: int = 30,
        fallback_sigma: float = 0.5,
        gamma: float = 0.005,
        spread_rate: float = 0.1,
        min_spread_n: int = 20,
        monotone: bool = True,
        max_cells: int = 20_000,
        scaled: bool = True,
    ):
        if window < 1 or min_residuals < 1 or min_spread_n < 1 or max_cells < 1:
            raise ValueError("window, min_residuals, min_spread_n and max_cells must be >= 1")
        if not (math.isfinite(fallback_sigma) and fallback_sigma > 0):
            raise ValueError(f"fallback_sigma must be > 0, got {fallback_sigma!r}")
        if not 0.0 <= gamma < 1.0:
            raise ValueError(f"gamma must lie in [0, 1), got {gamma!r}")
        if not 0.0 < spread_rate <= 1.0:
            raise ValueError(f"spread_rate must lie in (0, 1], got {spread_rate!r}")
        self.window = window
        self.min_residuals = min_residuals
        self.fallback_sigma = fallback_sigma
        self.gamma = gamma
        self.spread_rate = spread_rate
        self.min_spread_n = min_spread_n
        self.monotone = monotone
        self.scaled = scaled
        self.max_cells = max_cells
        self._windows: dict[Cell, ResidualWindow] = {}
        self._spreads: dict[tuple[str, str, str, int], Spread] = {}
        self._alphas: dict[Cell, list[float]] = {}
        self._kinds: set[str] = set()
        self.n_added = 0
        self._answered: dict[tuple, tuple[list[_Term], tuple[float, Bound]]] | None = None  # of a frozen copy
        self._packed: dict[tuple, _Packed | None] | None = None  # of a frozen copy

    _answered: dict[tuple, tuple[list[_Term], tuple[float, Bound]]] | None = None  # (also for ones pickled before it)
    _packed: dict[tuple, _Packed | None] | None = None

    @property
    def noise(self) -> float:
        """:func:`centre_noise` of the running centres: how far a point answer's centres are shrunk."""
        return centre_noise(self.spread_rate)

    def frozen(self, copies: WindowCopies | None = None) -> ShapeCalibrator:
        """An independent copy to answer from while this one goes on learning (windows copied on
        write, see :class:`~predictor.calibration.conformal.WindowCopies`; spreads and each cell's
        levels shared, each replaced by a new one where it learns)."""
        copies = copies or WindowCopies()
        twin = object.__new__(type(self))  # copy.copy's copy, without the snapshot's columns
        twin.__dict__.update(self.__dict__)
        twin._windows = {cell: copies.of(window) for cell, window in self._windows.items()}
        twin._spreads = dict(self._spreads)  # a spread is replaced, never changed, once in a calibrator
        twin._alphas = dict(self._alphas)  # a cell's levels are replaced, never changed, once in a calibrator
        twin._kinds = set(self._kinds)
        twin._answered = {}  # a copy never learns: its terms and factors, once computed, stay (see _answer_of)
        twin._packed = {}  # and its windows, once packed (see _packed_of)
        return twin

    def __getstate__(self) -> dict:
        """The state with the running spreads as columns (:func:`_spread_columns`): a fleet's
        calibrator holds tens of thousands, which a snapshot then writes as a list of keys and three
        arrays."""
        state = dict(self.__dict__)
        state["_spreads"] = _spread_columns(self._spreads)
        return state

    def __setstate__(self, state: dict) -> None:
        spreads = state["_spreads"]
        if isinstance(spreads, _SpreadColumns):  # (a snapshot from before keeps them as a dict)
            state = dict(state, _spreads=spreads.spreads())
        self.__dict__.update(state)

    def forget_answers(self) -> None:
        """Drop what a frozen copy keeps of its answers: a copy that learns is live from then on."""
        self._answered = self._packed = None

    # ------------------------------------------------------------------ pieces
    def n_residuals(self, shape: QueryShape, kind: str, count: int = ALL) -> int:
        """Residuals held for a cell (``count`` ``ALL``: over every count; ``kind`` ``POOL``: every kind)."""
        window = self._windows.get((shape.key, kind, count))
        return len(window) if window is not None else 0

    def knows_kind(self, kind: str) -> bool:
        """Whether any residual of device kind ``kind`` was recorded."""
        return kind in self._kinds

    def _spread(self, shape_key: str, kind: str, count: int, model: str, *, reading: bool = True) -> tuple[float, float]:
        """The centre and scale of a cell: those of the first running spread of
        :func:`spread_lookups` that has seen ``min_spread_n`` residuals, else ``(0, 1)``
        (``reading``: a bound's, which may borrow; else a residual's normalisation)."""
        if not self.scaled:
            return 0.0, 1.0
        for key in spread_lookups(shape_key, kind, count, model, reading):
            spread = self._spreads.get(key)
            if spread is not None and spread.n >= self.min_spread_n:
                return spread.m, max(spread.s, MIN_SPREAD)
        return 0.0, 1.0

    def miss_factor(self, shape: QueryShape, kind: str, count: int, confidence: float, *,
                    linked: bool = False) -> float:
        """Allowed miss rate over requested miss rate for a cell at ``confidence`` (1 without
        adaptation); ``linked``: of the answers really given rather than the replayed ones."""
        return self._phi(((LINKED if linked else "") + shape.key, kind, count), confidence, None)

    def _phi(self, cell: Cell, confidence: float, override: dict[Cell, float] | None) -> float:
        if override is not None and cell in override:
            return override[cell]
        alphas = self._alphas.get(cell)
        if alphas is None:
            return 1.0
        i = _nearest_level(confidence)
        return alphas[i] / (1.0 - GRID[i])

    def _term_levels(self, shape: QueryShape, kind: str, count: int, model: str,
                     confidences: tuple[float, ...], override: dict[Cell, float] | None = None) -> list[_Term]:
        """One count's term at each of ``confidences``, in one walk over the cells.

        Cells in order of preference; each population (linked, replayed) at the level its own
        adaptive adjustment for the query's (kind, count) sets. Each level takes the first cell
        that supports it, exactly as a walk for that level alone would.
        """
        out: list[_Term | None] = [None] * len(confidences)
        left = len(confidences)
        windows, alphas_of, min_residuals = self._windows, self._alphas, self.min_residuals
        for cell_kind, source in ((kind, BoundSource.DEVICE_KIND), (POOL, BoundSource.POOLED)):
            for key, c in _lookups(shape, count):
                window = windows.get((key, cell_kind, c))
                if window is None:
                    continue
                n = len(window)
                if n < min_residuals:
                    continue
                cell = (key, kind, count)
                if override is not None and cell in override:
                    alphas, fixed = None, override[cell]
                else:
                    alphas, fixed = alphas_of.get(cell), 1.0
                spread = None
                for at, confidence in enumerate(confidences):
                    if out[at] is not None:
                        continue
                    if alphas is None:
                        phi = fixed
                    else:
                        i = _nearest_level(confidence)
                        phi = alphas[i] / (1.0 - GRID[i])
                    level = min(max(1.0 - (1.0 - confidence) * phi, 1e-6), 1.0 - 1e-9)
                    z = window.supported_quantile(level)
                    if z is None:
                        continue
                    if spread is None:
                        spread = self._spread(key, kind, count, model)
                    m, s = spread
                    out[at] = _Term(m + s * z, source, n, window, m, s, phi)
                    left -= 1
                if not left:
                    return out  # type: ignore[return-value]
        # The widest cell left, at its largest residual, before a guess.
        widest = None
        for key in _chain_keys(shape):
            window = windows.get((key, POOL, ALL))
            if window is not None and len(window) >= min_residuals:
                m, s = self._spread(key, kind, count, model)
                widest = _Term(m + s * window.sorted_array()[-1], BoundSource.POOLED, len(window), window, m, s, 1.0)
                break
        for at, confidence in enumerate(confidences):
            if out[at] is None:
                out[at] = widest or _Term(normal_quantile(confidence) * self.fallback_sigma, BoundSource.FALLBACK, 0, None,
                                          0.0, self.fallback_sigma, 1.0)
        return out  # type: ignore[return-value]

    def _terms(self, shape: QueryShape, kind: str, count: int, model: str, confidence: float,
               override: dict[Cell, float] | None = None) -> list[_Term]:
        return [terms[0] for terms in self._terms_levels(shape, kind, count, model, (confidence,), override)]

    def _terms_levels(self, shape: QueryShape, kind: str, count: int, model: str,
                      confidences: tuple[float, ...], override: dict[Cell, float] | None = None) -> list[list[_Term]]:
        """Per cell a bound is made of (:func:`_cells`, the query's own cell last), its term at
        each of ``confidences``."""
        return [self._term_levels(s, kind, j, model, confidences, override)
                for s, j in _cells(shape, count, self.monotone)]

    # ------------------------------------------------------------------ answering
    def bound(self, shape: QueryShape, kind: str, count: int, model: str, predicted: float,
              confidence: float) -> Bound:
        """The upper bound at ``confidence`` of a prediction of ``predicted`` ms."""
        factor = self.factor(shape, kind, count, model, confidence)
        return Bound(predicted * factor.upper_ms, factor.source, factor.n)

    def factor(self, shape: QueryShape, kind: str, count: int, model: str, confidence: float) -> Bound:
        """The bound of a 1 ms prediction (a bound is the prediction times ``upper_ms``);
        ``source`` and ``n`` are those of the cell of the query's own count."""
        return self.factors(shape, kind, count, model, confidence)[1]

    def factors(self, shape: QueryShape, kind: str, count: int, model: str,
                confidence: float) -> tuple[float, Bound]:
        """The correction of a prediction (``exp`` of its centre: the prediction times it is the
        calibrated point answer) and the bound of a 1 ms prediction (see :meth:`factor`)."""
        return self._answer_of(shape, kind, count, model, confidence)[1]

    def _answer_of(self, shape: QueryShape, kind: str, count: int, model: str,
                   confidence: float) -> tuple[list[_Term], tuple[float, Bound]]:
        """The terms a bound at ``confidence`` is made of (:meth:`_terms`) and its :meth:`factors`;
        a frozen copy keeps them, since it never learns."""
        answered = self._answered
        key = (shape, kind, count, model, confidence)
        if answered is not None:
            found = answered.get(key)
            if found is not None:
                return found
        check_confidence(confidence)
        terms = self._terms(shape, kind, count, model, confidence)
        found = (terms, _factors(terms, self.noise))
        if answered is not None:
            if len(answered) >= MAX_ANSWERED:
                answered.clear()
            answered[key] = found
        return found

    def score(self, shape: QueryShape, kind: str, count: int, model: str, confidence: float, *,
              actual: float, predicted: float) -> tuple[float, Bound, float]:
        """:meth:`factors` at ``confidence`` as the calibrator stands, then :meth:`add` the
        outcome (a replayed answer): the correction, the bound of a 1 ms prediction and the
        residual. The same numbers as the two calls in turn, with the cells walked once for
        ``confidence`` and every level adaptive conformal inference tracks."""
        check_confidence(confidence)
        if confidence in GRID:
            levels = self._terms_levels(shape, kind, count, model, GRID)
            at = GRID.index(confidence)
            correction, bound = _factors([cell_terms[at] for cell_terms in levels], self.noise)
        else:
            levels = None
            correction, bound = _factors(self._terms(shape, kind, count, model, confidence), self.noise)
        residual = self.add(shape, kind, count, model, actual=actual, predicted=predicted, levels=levels)
        return correction, bound, residual

    def log_distribution(self, shape: QueryShape, kind: str, count: int, model: str,
                         confidence: float) -> np.ndarray | None:
        """The predictive distribution of a cell as log factors on a raw prediction, sorted:
        ``centre + s * z`` for the normalised residuals ``z`` of the window the cell's bound is
        read from (its own, or the one it borrows), centred as the bound is (the largest centre of
        its terms, unshrunk); ``None`` when the cell answers from the fallback (no residuals).
        What composing bounds of several answers convolves (:mod:`predictor.pipeline.compose`)."""
        check_confidence(confidence)
        terms = self._terms(shape, kind, count, model, confidence)
        own = terms[-1]
        if own.window is None:
            return None
        return _centre(terms) + own.s * own.window.sorted_array()

    def probabilities(self, shape: QueryShape, kind: str, count: int, model: str,
                      predicted: np.ndarray, limit_ms: float, confidence: float) -> np.ndarray:
        """Estimated probability that each latency is at most ``limit_ms``, consistent with
        :meth:`bound` at ``confidence``: ``bound <= limit`` exactly when the probability is at
        least ``confidence``."""
        predicted = np.asarray(predicted, dtype=float)
        if limit_ms <= 0:
            return np.zeros(predicted.shape)
        out = np.ones(predicted.size)
        self.probabilities_at(shape, kind, count, model, log_ratios(limit_ms, predicted.reshape(-1)),
                              np.arange(predicted.size), confidence, out)
        return out.reshape(predicted.shape)

    def probabilities_at(self, shape: QueryShape, kind: str, count: int, model: str, x: np.ndarray,
                         at: np.ndarray, confidence: float, out: np.ndarray) -> None:
        """:meth:`probabilities` of rows ``at`` into ``out[at]``, given every row's log of the limit
        over its prediction (``x``, :func:`log_ratios`: computed once for all of a ranking's cells).
        The same bits as :meth:`probabilities` of those rows' predictions."""
        if at.size == 1:  # one row (a single query): the same arithmetic on floats
            i = int(at[0])
            out[i] = _probability(self._answer_of(shape, kind, count, model, confidence)[0], float(x[i]))
            return
        packed = self._packed_of(shape, kind, count, model, confidence)
        if packed is not None:  # every window's term of every row, compiled (numba)

            probability_kernel.cell_terms(x, at, packed.centre, packed.scales, packed.phis, packed.ordered,
                                          packed.offsets, out)
            return
        terms = self._answer_of(shape, kind, count, model, confidence)[0]
        out[at] = [_probability(terms, v) for v in x[at].tolist()]  # a normal (guessed) term: by the floats

    def _packed_of(self, shape: QueryShape, kind: str, count: int, model: str, confidence: float) -> _Packed | None:
        """The windows of a cell's terms packed for :func:`~predictor.calibration.probability_kernel.cell_terms`
        (None when a guessed, normal term takes part); a frozen copy keeps them."""
        cache = self._packed
        key = (shape, kind, count, model, confidence)
        if cache is not None and key in cache:
            return cache[key]
        packed = _Packed.of(self._answer_of(shape, kind, count, model, confidence)[0])
        if cache is not None:
            if len(cache) >= MAX_PACKED:
                cache.clear()
            cache[key] = packed
        return packed

    # ------------------------------------------------------------------ learning
    def add(self, shape: QueryShape, kind: str, count: int, model: str, *, actual: float,
            predicted: float, linked: bool = False, levels: list[list[_Term]] | None = None) -> float:
        """Record the outcome of an answer of ``shape`` given before ``actual`` was learned;
        returns the residual ``log(actual / predicted)``.

        ``linked``: the answer was really given (matched by batch id), not replayed; such
        residuals have cells of their own, preferred where they hold enough. ``levels``: the
        terms of ``shape`` at every :data:`GRID` level as the calibrator stands now
        (:meth:`_terms_levels`; replayed residuals only), to spare computing them again.
        """
        if not (actual > 0 and predicted > 0 and math.isfinite(actual) and math.isfinite(predicted)):
            raise ValueError(f"actual and predicted must be finite and > 0, got {actual!r}, {predicted!r}")
        if self._answered is not None:
            self.forget_answers()  # a copy that learns is live: nothing of it is cached any more
        residual = math.log(actual / predicted)
        key = (LINKED if linked else "") + shape.key
        log = _WATCHES.get(self) if _WATCHES else None
        if log is not None and len(log) <= WATCH_MOST:
            log.append((key, kind, count, model))
        if self.gamma:
            self._adapt(shape, key, kind, count, model, residual, None if linked else levels)
        m, s = self._spread(key, kind, count, model, reading=False)
        score = (residual - m) / s
        for cell in written_cells(key, kind, count):
            window = self._windows.get(cell)
            if window is None:
                if len(self._windows) >= self.max_cells and cell[1] != POOL:
                    continue
                window = self._windows[cell] = ResidualWindow(self.window)
            window.add(score)
        for spread_key in spread_lookups(key, kind, count, model, False):
            spread = self._spreads.get(spread_key)
            if spread is None:
                if len(self._spreads) >= 4 * self.max_cells and spread_key[1] != POOL:
                    continue
                spread = Spread()
            else:
                spread = spread.clone()  # a frozen copy may hold the one it replaces
            spread.update(residual, self.spread_rate)
            self._spreads[spread_key] = spread
        if len(self._kinds) < self.max_cells:
            self._kinds.add(kind)
        self.n_added += 1
        return residual

    def _adapt(self, shape: QueryShape, key: str, kind: str, count: int, model: str, residual: float,
               levels: list[list[_Term]] | None = None) -> None:
        # alpha_{t+1} = alpha_t + gamma (alpha - err_t), per grid level and per population (``key``:
        # linked or replayed), err_t from the bound answered with this population's adjustment,
        # bounded to [alpha / 20, 5 alpha]; only once the population's own cell answers.
        # ``levels``: the terms at every GRID level, per cell (:meth:`_terms_levels`), when the
        # caller has them. A level's bound reads only its own alpha of this cell, so the terms of
        # all levels, taken before any alpha moves, are those the levels taken one by one would see.
        cell = (key, kind, count)
        own = self._windows.get(cell)
        if own is None or len(own) < self.min_residuals:
            return
        alphas = self._alphas.get(cell)
        if alphas is None:
            if len(self._alphas) >= self.max_cells:
                return
            alphas = [1.0 - level for level in GRID]
        alphas = self._alphas[cell] = list(alphas)  # replaced, not changed: a frozen copy may hold it
        if levels is None:
            levels = self._terms_levels(shape, kind, count, model, GRID)
        for i, level in enumerate(GRID):
            alpha = 1.0 - level
            terms = [cell_terms[i] for cell_terms in levels]
            if terms[-1].source is BoundSource.FALLBACK:
                continue
            missed = residual > _largest(terms)
            gamma = min(self.gamma, 0.1 * alpha)
            alphas[i] = min(max(alphas[i] + gamma * (alpha - float(missed)), alpha / 20.0), min(5.0 * alpha, 0.5))

    def cells(self) -> list[Cell]:
        """The cells holding residuals, sorted."""
        return sorted(self._windows)


_WATCHES: weakref.WeakKeyDictionary[ShapeCalibrator, list[tuple[str, str, int, str]]] = weakref.WeakKeyDictionary()


def watch(calibrator: ShapeCalibrator) -> list[tuple[str, str, int, str]]:
    """A list to which every outcome ``calibrator`` learns call by call (:meth:`ShapeCalibrator.add`) from
    now on is appended, as ``(cell key with its population prefix, kind, count, model)``, up to
    :data:`WATCH_MOST` + 1 of them: what tells a copy of its state kept elsewhere which cells changed
    (:mod:`predictor.calibration.shape_block`). The reader empties it; a calibrator has one at most (the
    last asked for), and neither its copies nor its pickles carry it."""
    log: list[tuple[str, str, int, str]] = []
    _WATCHES[calibrator] = log
    return log


def _probability(terms: list[_Term], x: float) -> float:
    """:meth:`ShapeCalibrator.probabilities` of one row, ``x`` the log of the limit over its
    prediction: the same arithmetic on floats (a NaN kept, as ``np.minimum`` keeps it)."""
    out = 1.0
    centre = _centre(terms)
    for term in terms:
        if term.window is None and term is not terms[-1]:
            continue  # a count without residuals anywhere takes no part (as in the bound)
        if term.window is None:
            p = _NORMAL.cdf(round((x - centre) / term.s, 9))
        else:
            raw = term.window.cdf((x - centre) / term.s)
            p = min(max(1.0 - (1.0 - raw) / term.phi, 0.0), 1.0)
        if not p >= out:
            out = p
    return out


@dataclass(frozen=True, slots=True)
class _Packed:
    """The windows that take part in a cell's probabilities (:func:`_probability`), in the
    terms' order, as arrays: term ``t``'s sorted residuals are ``ordered[offsets[t]:offsets[t + 1]]``."""

    centre: float
    scales: np.ndarray
    phis: np.ndarray
    ordered: np.ndarray
    offsets: np.ndarray

    @staticmethod
    def of(terms: list[_Term]) -> _Packed | None:
        """The packed windows of ``terms``; None when a guessed (normal) term takes part."""
        if terms[-1].window is None:
            return None
        taking_part = [term for term in terms if term.window is not None]  # as _probability skips them
        arrays = [term.window.sorted_array() for term in taking_part]
        return _Packed(_centre(terms), np.array([term.s for term in taking_part]),
                       np.array([term.phi for term in taking_part]), np.concatenate(arrays),
                       np.cumsum([0] + [a.size for a in arrays]))


def log_ratios(limit_ms: float, predicted: np.ndarray) -> np.ndarray:
    """``log(limit_ms / predicted)`` of each prediction, ``-inf`` where the ratio underflows to 0
    (probability 0); ``limit_ms > 0``."""
    ratio = limit_ms / predicted
    x = np.full(ratio.shape, -np.inf)
    np.log(ratio, out=x, where=ratio != 0)  # (spares np.errstate's per-call cost)
    return x


def _centre(terms: list[_Term]) -> float:
    """The log correction of the prediction: the largest centre of the terms (the own cell's
    alone without monotony), leaving out cells with no residuals anywhere (a guess); the own
    cell's when every one is a guess."""
    own = terms[-1]
    learned = [t.m for t in terms if t.source is not BoundSource.FALLBACK]
    return max(learned) if learned else own.m


def _largest(terms: list[_Term]) -> float:
    """The log factor of a bound: the centre (:func:`_centre`) plus the largest width above
    its own centre of the terms, leaving out cells with no residuals anywhere (a guess) but the
    query's own."""
    own = terms[-1]
    widths = [t.log_factor - t.m for t in terms if t.source is not BoundSource.FALLBACK or t is own]
    return _centre(terms) + max(widths)


@functools.lru_cache(maxsize=64)
def centre_noise(rate: float, z: float = CENTRE_Z) -> float:
    """``z`` standard errors of a running centre (:class:`Spread` at weight ``rate``), in units of
    its mean absolute deviation ``s``: residuals of spread ``sqrt(pi / 2) s`` (normal), averaged
    with exponential weights ``rate``, err by ``sqrt(rate / (2 - rate))`` of that.

    >>> round(centre_noise(0.1), 3)
    0.575
    """
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"rate must lie in (0, 1], got {rate!r}")
    return z * math.sqrt(math.pi / 2.0) * math.sqrt(rate / (2.0 - rate))


def shrunk(m: float, s: float, noise: float) -> float:
    """A centre ``m`` of spread ``s`` soft-thresholded by ``noise * s`` (:func:`centre_noise`): 0
    within it, else moved towards 0 by it.

    >>> shrunk(0.05, 0.1, 0.575), round(shrunk(-0.2, 0.1, 0.575), 4)
    (0.0, -0.1425)
    """
    return math.copysign(max(abs(m) - noise * s, 0.0), m)


def _point_centre(terms: list[_Term], noise: float) -> float:
    """The log correction of a point answer: the largest of the terms' centres, each
    :func:`shrunk`, leaving out cells with no residuals anywhere (a guess); 0 when every one is."""
    centre = 0.0
    learned = False
    for t in terms:
        if t.source is BoundSource.FALLBACK:
            continue
        c = shrunk(t.m, t.s, noise)
        if not learned or c > centre:
            centre = c
        learned = True
    return centre


def _factors(terms: list[_Term], noise: float) -> tuple[float, Bound]:
    """The correction and the bound of a 1 ms prediction of a cell's terms (see :meth:`ShapeCalibrator.factors`);
    ``noise``: the calibrator's :func:`centre_noise`."""
    own = terms[-1]
    log_factor = _largest(terms)
    correction = math.exp(min(max(_point_centre(terms, noise), -700.0), 700.0))
    return correction, Bound(math.exp(min(log_factor, 700.0)), own.source, own.n)


@functools.lru_cache(maxsize=1024)
def _nearest_level(confidence: float) -> int:
    """Index of the grid level nearest to ``confidence`` in log miss rate."""
    target = math.log(max(1.0 - confidence, 1e-12))
    return min(range(len(GRID)), key=lambda i: abs(math.log(1.0 - GRID[i]) - target))


@functools.lru_cache(maxsize=1024)
def normal_quantile(confidence: float) -> float:
    """The standard normal quantile at ``confidence`` (looked up: a few levels are asked often)."""
    return _NORMAL.inv_cdf(confidence)


@functools.lru_cache(maxsize=256)
def _chain_keys(shape: QueryShape) -> tuple[str, ...]:
    """The keys of :meth:`QueryShape.chain`."""
    return tuple(stand_in.key for stand_in in shape.chain())


def written_cells(shape_key: str, kind: str, count: int) -> tuple[Cell, Cell, Cell, Cell]:
    """The windows a residual of the cell ``shape_key`` (with its population prefix), ``kind`` and
    ``count`` goes into: the kind's at the count and at all counts, then the pool's."""
    return (shape_key, kind, count), (shape_key, kind, ALL), (shape_key, POOL, count), (shape_key, POOL, ALL)


@functools.lru_cache(maxsize=4096)
def spread_lookups(shape_key: str, kind: str, count: int, model: str,
                   reading: bool = True) -> tuple[tuple[str, str, str, int], ...]:
    """The running spreads of a cell (``shape_key`` with its population prefix), in order of
    preference: the model's, the device kind's, then the pool's, of the same shape and count
    (what a residual of the cell updates, and is normalised by). ``reading`` (a bound's term):
    for answers really given (linked), then the same of the replayed answers of that shape (the
    same predictor's errors).

    A term borrows windows (over all counts, from stand-in shapes), which hold normalised
    scores; without the replayed stand-ins a linked cell whose own spreads at the count were
    still young read such scores as raw log residuals (``(0, 1)``): a co-runner count that
    answers really given had seldom reached, on a device kind new to the service, got bounds
    of 16 to 60 times its prediction.

    >>> [k[0] for k in spread_lookups("linked:unknown/nosig", "cpu", 2, "mlp")][2:4]
    ['linked:unknown/nosig', 'unknown/nosig']
    >>> len(spread_lookups("linked:unknown/nosig", "cpu", 2, "mlp", reading=False))
    3
    """
    own = ((shape_key, kind, model, count), (shape_key, kind, "", count), (shape_key, POOL, "", count))
    if not (reading and shape_key.startswith(LINKED)):
        return own
    replayed = shape_key[len(LINKED):]
    return own + ((replayed, kind, model, count), (replayed, kind, "", count), (replayed, POOL, "", count))


@functools.lru_cache(maxsize=1024)
def _lookups(shape: QueryShape, count: int) -> tuple[tuple[str, int], ...]:
    """The ``(population key, count)`` cells a term of ``shape`` and ``count`` reads, in order of
    preference (per device kind): each stand-in of the chain, linked then replayed, the count
    then all counts."""
    return tuple((prefix + key, c) for key in _chain_keys(shape)
                 for prefix, c in ((LINKED, count), ("", count), (LINKED, ALL), ("", ALL)))


@functools.lru_cache(maxsize=1024)
def _cells(shape: QueryShape, count: int, monotone: bool) -> tuple[tuple[QueryShape, int], ...]:
    """The ``(shape, count)`` terms of a bound, the query's own last. Monotone: every count
    ``0..k`` and every shape a nested query can have, so that adding a co-runner never lowers
    the centre or the width; else the query's own alone."""
    if not monotone:
        return ((shape.idle if count == 0 else shape, count),)
    cells = [(shape.idle, 0)] + [(s, j) for j in range(1, count + 1) for s in shape.nested()]
    cells.sort(key=lambda cell: (cell[0] == shape and cell[1] == count))  # own cell last (stable)
    return tuple(cells)
