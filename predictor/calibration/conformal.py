"""Online conformal upper bounds on latency, from the predictor's own residuals.

For each device kind the calibrator keeps the last ``window`` scale-free residuals
``r = log(actual / predicted)``, recorded *prequentially* (the prediction is made before the model
learns from the observation). Under exchangeability, the split-conformal quantile ``q = r_(k)``,
the ``k``-th smallest of ``n`` residuals with ``k = ceil((n + 1) c)``, gives an upper bound
``predicted * exp(q)`` that a new latency exceeds with probability at most ``1 - c`` (and not much
less). The probability of meeting a deadline ``D`` is the number of residuals at or below
``log(D / predicted)`` over ``n + 1``; bound and probability agree: ``predicted * exp(q) <= D``
exactly when that probability is at least ``c``.

A device kind with too few residuals answers from the pool of all kinds; with too few there too, a
deliberately wide log-normal fallback answers and says so (:attr:`BoundSource.FALLBACK`).
Optionally the level adapts online to drift (:class:`ConformalCalibrator`'s ``adapt``).

Examples
--------
>>> cal = ConformalCalibrator(window=100, min_residuals=10)
>>> for i in range(99):
...     _ = cal.add("cpu", actual=10.0 * (1 + i / 1000), predicted=10.0)
>>> bound = cal.upper_bound(10.0, "cpu", 0.9)
>>> bound.source.value, round(bound.upper_ms, 3), bound.n
('device_kind', 10.89, 99)
>>> round(cal.probability_within(10.0, 10.455, "cpu"), 2)
0.46
>>> cal.upper_bound(10.0, "unseen", 0.9).source.value  # from the pool
'pooled'
"""

from __future__ import annotations

import bisect
import copy
import enum
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from predictor.records.rules import check_confidence

POOL = "*"
_STANDARD_NORMAL = NormalDist()
_EPS = 1e-9


class BoundSource(enum.Enum):
    """Where an upper bound came from."""

    DEVICE_KIND = "device_kind"  # residuals of the same device kind
    POOLED = "pooled"  # residuals of every device kind
    FALLBACK = "fallback"  # too few residuals anywhere: a wide log-normal guess


@dataclass(frozen=True, slots=True)
class Bound:
    """An upper latency bound and how it was obtained."""

    upper_ms: float
    source: BoundSource
    n: int  # residuals it was computed from (0 for the fallback)


def conformal_rank(n: int, confidence: float) -> int:
    """The 1-based rank ``ceil((n + 1) c)`` of the conformal quantile among ``n`` residuals.

    Examples
    --------
    >>> conformal_rank(99, 0.99), conformal_rank(98, 0.99), conformal_rank(1999, 0.9)
    (99, 99, 1800)
    """
    return max(1, math.ceil((n + 1) * confidence - _EPS))


class ResidualWindow:
    """The last ``size`` residuals, kept both in arrival order and sorted.

    Insertion and eviction cost ``O(size)`` memory moves (fast for a few
    thousand); a quantile is ``O(1)`` and a CDF value ``O(log size)``.

    A window the shape calibrator's block path wrote (:meth:`take_arrays`) holds its residuals as
    that path's arrays; the list and deque are made from them when first needed (an :meth:`add`, a
    CDF, :meth:`values`, a pickle), while lengths, quantiles and copies read the arrays.
    """

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"window must be >= 1, got {size!r}")
        self.size = size
        self._order: deque[float] = deque()
        self._sorted: list[float] = []
        self._array: np.ndarray | None = None
        self._adds = 0

    def __getattr__(self, name: str) -> Any:
        # the list and deque of a window kept as arrays (take_arrays), made on first use
        kept = self.__dict__
        if name == "_sorted" and kept.get("_array") is not None:
            value = kept["_sorted"] = kept["_array"].tolist()
            return value
        if name == "_order" and "_ring" in kept:
            ring, head = kept["_ring"]
            n = len(kept["_array"])
            value = kept["_order"] = deque(ring[:n].tolist() if n < self.size
                                           else ring[head:].tolist() + ring[:head].tolist())
            kept.pop("_ring", None)  # after: a reader on another thread finds one or the other
            return value
        raise AttributeError(name)

    def take_arrays(self, added: int, ring: np.ndarray, head: int, ordered: np.ndarray) -> None:
        """Become the window the block path left after ``added`` more residuals: ``ring`` holds them
        in arrival order (the oldest at ``head`` once full), ``ordered`` sorted (its length is the
        window's); both are the window's from now on and never changed in place."""
        kept = self.__dict__
        kept.pop("_order", None)
        kept.pop("_sorted", None)
        self._ring = (ring, head)
        self._array = ordered
        self._adds += added

    def __len__(self) -> int:
        return len(self._ordered())

    def _ordered(self) -> list[float] | np.ndarray:
        """The residuals sorted, for a reader: the list where it is made, else the block path's array
        (a window kept as arrays), else the list made now (a window read from a version file)."""
        ordered = self.__dict__.get("_sorted")
        if ordered is None:
            ordered = self._array
            if ordered is None:
                ordered = self._sorted
        return ordered

    def add(self, residual: float) -> None:
        """Append a residual, evicting the oldest when the window is full."""
        if len(self._order) == self.size:
            oldest = self._order.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, oldest)]
        self._order.append(residual)
        bisect.insort(self._sorted, residual)
        self._array = None
        self._adds += 1

    @property
    def adds(self) -> int:
        """Residuals added since this window was made (or unpickled): a change count, not kept in snapshots."""
        return self._adds

    def clone(self) -> ResidualWindow:
        """An independent copy (the same residuals, no re-sorting; a window kept as arrays shares them)."""
        twin = ResidualWindow.__new__(ResidualWindow)
        twin.size = self.size
        kept = self.__dict__
        if "_ring" in kept:
            twin._ring = kept["_ring"]
        else:
            twin._order = deque(self._order)
        if "_sorted" in kept:
            twin._sorted = list(self._sorted)
        twin._array = self._array  # never changed in place: shared
        twin._adds = self.adds
        return twin

    def quantile(self, confidence: float) -> float:
        """The conformal quantile at ``confidence``; ``inf`` when ``n`` is too small for it."""
        ordered = self._ordered()
        n = len(ordered)
        k = conformal_rank(n, confidence)
        return float(ordered[k - 1]) if k <= n else math.inf

    def supports(self, confidence: float) -> bool:
        """Whether the window holds enough residuals for a finite quantile at ``confidence``."""
        n = len(self)
        return n > 0 and conformal_rank(n, confidence) <= n

    def supported_quantile(self, confidence: float) -> float | None:
        """:meth:`quantile` where :meth:`supports` holds, else ``None`` (one rank computed for both)."""
        ordered = self._ordered()
        n = len(ordered)
        if not n:
            return None
        k = conformal_rank(n, confidence)
        return float(ordered[k - 1]) if k <= n else None

    def cdf(self, x: float) -> float:
        """Conformal ``P(r <= x)``: residuals at or below ``x`` over ``n + 1``."""
        return bisect.bisect_right(self._sorted, x) / (len(self._sorted) + 1)

    def cdf_many(self, xs: np.ndarray) -> np.ndarray:
        """Conformal ``P(r <= x)`` for each of ``xs`` (as :meth:`cdf`, vectorised)."""
        if self._array is None and len(xs) <= 16:
            # A few look-ups bisect the sorted list (the same counts) rather than build its array,
            # which the next residual would make stale again.
            n = len(self._sorted) + 1
            return np.array([bisect.bisect_right(self._sorted, x) / n for x in np.asarray(xs).tolist()])
        return np.searchsorted(self.sorted_array(), xs, side="right") / (len(self) + 1)

    def sorted_array(self) -> np.ndarray:
        """The residuals in ascending order as an array (cached until the next :meth:`add`)."""
        if self._array is None:
            self._array = np.asarray(self._sorted, dtype=float)
        return self._array

    def values(self) -> list[float]:
        """Residuals in arrival order."""
        return list(self._order)

    def __getstate__(self) -> dict:
        return {"size": self.size, "order": list(self._order)}

    def __setstate__(self, state: dict) -> None:
        self.size = state["size"]
        self._order = deque(state["order"])
        self._sorted = sorted(self._order)
        self._array = None
        self._adds = 0


class WindowCopies:
    """Copies of residual windows, remade only for windows that changed since the last copy.

    What :meth:`ConformalCalibrator.frozen` and
    :meth:`~predictor.calibration.shape.ShapeCalibrator.frozen` use to publish an immutable
    calibrator often without copying every window each time (copy on write: a copy is never
    changed, so consecutive frozen calibrators share the copies of unchanged windows).

    Examples
    --------
    >>> window, copies = ResidualWindow(3), WindowCopies()
    >>> window.add(0.5)
    >>> first = copies.of(window)
    >>> copies.of(window) is first
    True
    >>> window.add(0.7)
    >>> copies.of(window) is first, first.values(), copies.of(window).values()
    (False, [0.5], [0.5, 0.7])
    """

    def __init__(self) -> None:
        self._copies: dict[int, tuple[ResidualWindow, int, ResidualWindow]] = {}
        self._used: dict[int, tuple[ResidualWindow, int, ResidualWindow]] = {}

    def of(self, window: ResidualWindow) -> ResidualWindow:
        """A copy of ``window`` as it is now (the previous one when it has not changed since)."""
        key = id(window)
        held = self._used.get(key) or self._copies.get(key)
        if held is None or held[0] is not window or held[1] != window.adds:
            held = (window, window.adds, window.clone())
        self._used[key] = held
        return held[2]

    def done(self) -> None:
        """End one round of copies: forget the windows not copied in it (gone from the calibrators)."""
        self._copies, self._used = self._used, {}


class ConformalCalibrator:
    """Per-device-kind online conformal calibration of latency predictions.

    With ``adapt > 0`` the level is adjusted online per device kind as in adaptive conformal
    inference (Gibbs and Candès, 2021), one-sided: when recent misses at ``target`` exceed
    ``1 - target`` (the residuals drifted wider), the bounds widen until the long-run miss rate is
    back at the target; they never become narrower than the plain conformal ones. The adjustment
    scales the allowed miss rate of every requested confidence by the same factor in (0.1, 1], and
    the probabilities are mapped consistently, so that a bound at ``c`` is within a deadline
    exactly when the probability of meeting it is at least ``c``.

    Parameters
    ----------
    window
        Residuals kept per device kind (and in the pool).
    min_residuals
        Fewest residuals a device kind needs before its own window is used.
    fallback_sigma
        Standard deviation of the log-normal used while too few residuals
        exist anywhere; ``0.5`` makes the 99% bound about 3.2 times the prediction.
    adapt
        Step size of the adaptive-conformal level adjustment; ``0`` disables it.
    target
        Confidence at which the adaptive adjustment is tracked.
    """

    def __init__(
        self,
        window: int = 2000,
        min_residuals: int = 50,
        fallback_sigma: float = 0.5,
        adapt: float = 0.0,
        target: float = 0.99,
    ):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window!r}")
        if min_residuals < 1:
            raise ValueError(f"min_residuals must be >= 1, got {min_residuals!r}")
        if not (math.isfinite(fallback_sigma) and fallback_sigma > 0):
            raise ValueError(f"fallback_sigma must be > 0, got {fallback_sigma!r}")
        if not 0.0 <= adapt < 1.0:
            raise ValueError(f"adapt must lie in [0, 1), got {adapt!r}")
        check_confidence(target)
        self.window = window
        self.min_residuals = min_residuals
        self.fallback_sigma = fallback_sigma
        self.adapt = adapt
        self.target = target
        self._windows: dict[str, ResidualWindow] = {}
        self._miss_shift: dict[str, float] = {}
        self.n_added = 0

    # ----------------------------------------------------------------- learning
    def add(self, kind: str, actual: float, predicted: float) -> float:
        """Record the residual of a prediction made *before* learning ``actual``; returns it."""
        if not (actual > 0 and predicted > 0 and math.isfinite(actual) and math.isfinite(predicted)):
            raise ValueError(f"actual and predicted must be finite and > 0, got {actual!r}, {predicted!r}")
        residual = math.log(actual / predicted)
        if self.adapt:
            self._adapt(kind, residual)
        for key in (kind, POOL) if kind != POOL else (POOL,):
            window = self._windows.get(key)
            if window is None:
                window = self._windows[key] = ResidualWindow(self.window)
            window.add(residual)
        self.n_added += 1
        return residual

    def _adapt(self, kind: str, residual: float) -> None:
        # Adaptive conformal inference: alpha_{t+1} = alpha_t + gamma (alpha - err_t), kept
        # here as a shift of the miss rate at ``target``, one-sided (<= 0: wider bounds only) and
        # bounded so that the miss factor stays in [0.1, 1].
        level, source = self._level_and_window(kind, self.target)
        if level is None or source is not BoundSource.DEVICE_KIND:
            return
        window, confidence = level
        missed = residual > window.quantile(confidence)
        alpha = 1.0 - self.target
        shift = self._miss_shift.get(kind, 0.0) + self.adapt * (alpha - float(missed))
        self._miss_shift[kind] = min(max(shift, -0.9 * alpha), 0.0)

    def frozen(self, copies: WindowCopies | None = None) -> ConformalCalibrator:
        """An independent copy to answer from while this one goes on learning (see :class:`WindowCopies`)."""
        copies = copies or WindowCopies()
        twin = copy.copy(self)
        twin._windows = {key: copies.of(window) for key, window in self._windows.items()}
        twin._miss_shift = dict(self._miss_shift)
        return twin

    # -------------------------------------------------------------- answering
    def n_residuals(self, kind: str) -> int:
        """Residuals held for ``kind`` (at most ``window``; ``POOL`` for the pool)."""
        window = self._windows.get(kind)
        return len(window) if window is not None else 0

    def kinds(self) -> list[str]:
        """Device kinds that have residuals, sorted (the pool left out)."""
        return sorted(k for k in self._windows if k != POOL)

    def miss_factor(self, kind: str) -> float:
        """Raw-window miss rate allowed per requested miss rate (1 without adaptation)."""
        return 1.0 + self._miss_shift.get(kind, 0.0) / (1.0 - self.target)

    def effective_confidence(self, kind: str, confidence: float) -> float:
        """``confidence`` after the adaptive adjustment for ``kind`` (unchanged without it)."""
        factor = self.miss_factor(kind)
        if factor == 1.0:
            return confidence
        return min(max(1.0 - (1.0 - confidence) * factor, 1e-6), 1.0 - 1e-9)

    def _adjusted_probability(self, kind: str, raw: float, source: BoundSource) -> float:
        # The inverse of effective_confidence: p >= c exactly when raw >= effective_confidence(c).
        if source is not BoundSource.DEVICE_KIND:
            return raw
        return min(max(1.0 - (1.0 - raw) / self.miss_factor(kind), 0.0), 1.0)

    def _level_and_window(
        self, kind: str, confidence: float
    ) -> tuple[tuple[ResidualWindow, float] | None, BoundSource]:
        own = self._windows.get(kind)
        level = self.effective_confidence(kind, confidence)
        if own is not None and len(own) >= self.min_residuals and own.supports(level):
            return (own, level), BoundSource.DEVICE_KIND
        pool = self._windows.get(POOL)
        if pool is not None and pool.supports(confidence):
            return (pool, confidence), BoundSource.POOLED
        return None, BoundSource.FALLBACK

    def upper_bound(self, predicted: float, kind: str, confidence: float) -> Bound:
        """The upper latency bound at ``confidence`` for a prediction of ``predicted`` ms."""
        check_confidence(confidence)
        level, source = self._level_and_window(kind, confidence)
        if level is None:
            z = _STANDARD_NORMAL.inv_cdf(confidence)
            return Bound(predicted * math.exp(z * self.fallback_sigma), source, 0)
        window, conf = level
        return Bound(predicted * math.exp(window.quantile(conf)), source, len(window))

    def probability_within(
        self, predicted: float, limit_ms: float, kind: str, confidence: float | None = None
    ) -> float:
        """Estimated probability that the latency is at most ``limit_ms``.

        ``confidence`` selects the residual window the same way :meth:`upper_bound`
        does at that level (default: ``target``), so the two answers agree.
        """
        if limit_ms <= 0:
            return 0.0
        x = math.log(limit_ms / predicted)
        level, source = self._level_and_window(kind, confidence or self.target)
        if level is None:
            return _STANDARD_NORMAL.cdf(x / self.fallback_sigma)
        return self._adjusted_probability(kind, level[0].cdf(x), source)

    def bound_factors(self, kinds: Iterable[str], confidence: float) -> dict[str, Bound]:
        """The bound of a 1 ms prediction for each distinct kind: a bound is the prediction times
        its kind's ``upper_ms`` (one quantile look-up per kind)."""
        check_confidence(confidence)
        return {kind: self.upper_bound(1.0, kind, confidence) for kind in set(kinds)}

    def upper_bounds(
        self, predicted: Sequence[float] | np.ndarray, kinds: Sequence[str], confidence: float
    ) -> tuple[np.ndarray, list[Bound]]:
        """Bounds for many predictions at once (one quantile look-up per distinct kind)."""
        predicted = np.asarray(predicted, dtype=float)
        factors = self.bound_factors(kinds, confidence)
        scale = np.array([factors[k].upper_ms for k in kinds], dtype=float)
        uppers = predicted * scale
        bounds = [
            Bound(float(u), factors[k].source, factors[k].n) for u, k in zip(uppers, kinds, strict=True)
        ]
        return uppers, bounds

    def probabilities_within(
        self,
        predicted: np.ndarray,
        limits_ms: np.ndarray,
        kinds: Sequence[str],
        confidence: float | None = None,
    ) -> np.ndarray:
        """:meth:`probability_within` for many predictions at once."""
        predicted = np.asarray(predicted, dtype=float)
        limits = np.asarray(limits_ms, dtype=float)
        out = np.zeros(predicted.shape)
        kinds_array = np.asarray(kinds, dtype=object)
        for kind in set(kinds):
            mask = kinds_array == kind
            positive = mask & (limits > 0)
            if not positive.any():
                continue
            xs = np.log(limits[positive] / predicted[positive])
            level, source = self._level_and_window(kind, confidence or self.target)
            if level is None:
                out[positive] = [_STANDARD_NORMAL.cdf(x / self.fallback_sigma) for x in xs]
            elif source is BoundSource.DEVICE_KIND and self.miss_factor(kind) != 1.0:
                raw = level[0].cdf_many(xs)
                out[positive] = np.clip(1.0 - (1.0 - raw) / self.miss_factor(kind), 0.0, 1.0)
            else:
                out[positive] = level[0].cdf_many(xs)
        return out

    def residuals(self, kind: str = POOL) -> list[float]:
        """The residuals kept for ``kind`` (the pool by default), oldest first."""
        window = self._windows.get(kind)
        return window.values() if window is not None else []
