"""Recursive least squares with forgetting, numerically guarded.

Minimises ``sum_t lam^(n-t) (y_t - w.x_t)^2 + lam^n / delta * |w|^2`` one
observation at a time. With ``forgetting=1`` the weights equal the ridge
solution of all data seen, with penalty ``1 / delta`` (intercept included).

The covariance is kept as ``P = c * S`` with a scalar ``c`` that absorbs the
``1 / lam`` of every step, and ``S`` updated by one symmetric rank-1 BLAS
call (``dsyr``) on its upper triangle only, so ``P`` is symmetric by
construction and a step costs two ``O(d^2)`` BLAS calls. :class:`RLS` guards the covariance
(symmetric, positive definite, bounded trace) and can keep its predictions monotone in crowding
(``non_negative_contention``).

Examples
--------
>>> rls = RLS(forgetting=1.0, delta=1e6)
>>> for x in range(1, 6):
...     rls.learn_one({"x": float(x)}, 2.0 * x + 1.0)
>>> round(rls.predict_one({"x": 10.0}), 3)
21.0
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Mapping

import numpy as np
from scipy.linalg.blas import dsymv, dsyr

from predictor.features.contention import is_contention
from predictor.regressors.feature_index import FeatureIndex
from predictor.regressors.pinned import find_gain
from predictor.runtime.version_memo import memoised, pickled

RESCALE_ABOVE = 1e12
MAX_MAGNITUDE = 1e100
SCALE_FLOOR = 1e-3
PROJECT_EVERY = 32
"""Updates between two scheduled searches of the non-negativity projection's pinned set (see
:meth:`RLS.predicting_weights`)."""
MIN_SEARCH_GAP = 8
"""Updates at least between a search and one made because a row's prediction clipped one of its
contention weights (a stream whose rows keep clipping costs a search per 8 updates at most)."""
SEARCH_COLUMNS = 128
"""Columns up to which the pinned set is searched on :data:`PROJECT_EVERY` and :data:`MIN_SEARCH_GAP`;
past them both grow as the square of the columns (:func:`search_schedule`)."""


def search_schedule(columns: int) -> tuple[int, int]:
    """The updates between two scheduled searches of the pinned set, and at least between a search and
    one made for a clipped row, in a model of ``columns`` columns: :data:`PROJECT_EVERY` and
    :data:`MIN_SEARCH_GAP` up to :data:`SEARCH_COLUMNS` columns, times ``ceil((columns / SEARCH_COLUMNS)^2)``
    past them. A search's cost grows faster than the square of the columns (a factor of the pinned
    block, the gain's solves over the free ones), so searching costs less per update in a model of
    many columns than in one of few, not more.

    >>> search_schedule(123), search_schedule(257)
    ((32, 8), (160, 40))
    """
    factor = max(1, math.ceil((columns / SEARCH_COLUMNS) ** 2))
    return PROJECT_EVERY * factor, MIN_SEARCH_GAP * factor


@functools.lru_cache(maxsize=8)
def _upper_mask(size: int) -> np.ndarray:
    """Where a ``size x size`` matrix's upper triangle (the diagonal included) lies (read only)."""
    mask = np.triu(np.ones((size, size), dtype=bool))
    mask.flags.writeable = False
    return mask


class RLS:
    """Recursive least-squares regressor over dict features.

    Guards: ``P`` stays symmetric (one stored triangle) and positive definite: an update that
    would produce non-finite values is refused and leaves the state unchanged; one whose ``x'Px``
    comes out negative in floating point (lost definiteness) re-opens the covariance instead. The
    trace of ``P`` is bounded (``max_trace``) against covariance windup when the input does not
    excite every direction and ``forgetting < 1``. :meth:`reset_covariance` (called on a drift
    alarm by the owner) re-opens ``P`` to ``delta * I`` while keeping the weights, so learning
    speeds up again.

    With ``non_negative_contention``, predictions use the weights projected onto ``w_c >= 0`` for
    the contention features ``c`` (:func:`predictor.features.contention.is_contention`), so that the
    model never predicts a lower value for a more crowded device. The projection is the constrained
    least-squares solution in the metric of the posterior precision ``P^-1``
    (:meth:`predicting_weights`); learning itself stays exact, unconstrained RLS (projecting the
    state it learns from makes RLS diverge: its gain assumes the least-squares solution).

    Parameters
    ----------
    forgetting
        Forgetting factor ``lam`` in (0, 1]; 1 never forgets.
    delta
        Initial covariance scale: ``P = delta * I`` (prior precision ``1/delta``).
    max_trace
        Upper bound on ``trace(P)``; ``P`` is rescaled when it grows beyond.
        ``None`` (the default) bounds it by the prior, ``delta`` per column.
    max_features
        Cap on distinct feature names (memory bound).
    scale_features
        Divide each feature by its first non-zero magnitude (see
        :meth:`_set_column_scales`); ``False`` uses raw features, so the
        prior is a plain ridge penalty ``1 / delta`` on every weight.
    non_negative_contention
        Project the weights of contention features onto ``w >= 0`` after each step.
    """

    _memo: dict | None = None
    """A frozen copy's :func:`~predictor.runtime.version_memo.memoised` look-ups by feature names (``None``:
    a learning model's, none)."""

    def __init__(
        self,
        forgetting: float = 0.999,
        delta: float = 100.0,
        max_trace: float | None = None,
        max_features: int = 256,
        scale_features: bool = True,
        non_negative_contention: bool = False,
    ):
        if not 0.0 < forgetting <= 1.0:
            raise ValueError(f"forgetting must lie in (0, 1], got {forgetting!r}")
        if not delta > 0:
            raise ValueError(f"delta must be > 0, got {delta!r}")
        if max_trace is not None and not max_trace > 0:
            raise ValueError(f"max_trace must be > 0, got {max_trace!r}")
        self.forgetting = forgetting
        self.delta = delta
        self.max_trace = max_trace
        self.scale_features = scale_features
        self.non_negative_contention = non_negative_contention
        self._constrained = np.zeros(1, dtype=bool)
        self.index = FeatureIndex(max_features)
        self._weights = np.zeros(1)
        self._column_scale = np.ones(1)
        self._s = np.asfortranarray(np.eye(1) * delta)
        self._scale = 1.0
        self._trace_s = delta
        self._all_scaled = True  # every column has its scale (see vectorize)
        self.n_updates = 0
        self.n_refused = 0
        self.n_resets = 0
        self._gain: tuple[np.ndarray, np.ndarray] | None = None  # the projection's pinned set and gain
        self._searched_at = 0  # the update after which the pinned set was last searched
        self._projected: tuple | None = None  # cache of _projection, not state

    # ------------------------------------------------------------------ state
    def __getstate__(self) -> dict:
        """The learned state, without what is derived from it (the projected weights)."""
        state = dict(self.__dict__)
        state.pop("_projected", None)
        return pickled(state)

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._projected = None

    def restore_point(self) -> dict:
        """The model's state now, for :meth:`restore` to bring it back to after more learning: the
        arrays learning changes in place (the covariance, the column scales) and the feature index
        copied, the rest shared (learning rebinds it, never changes it in place). Far cheaper than
        a pickle of the model."""
        state = dict(self.__dict__)
        state["_s"] = self._s.copy(order="K")
        state["_column_scale"] = self._column_scale.copy()
        index = state["index"] = copy.copy(self.index)
        index.columns = dict(self.index.columns)
        index._layouts = dict(self.index._layouts)  # arrays never changed in place: shared
        state["_projected"] = None
        return state

    def restore(self, point: dict) -> None:
        """Bring the model back to the state of ``point`` (from :meth:`restore_point`; used once)."""
        self.__dict__.clear()
        self.__dict__.update(point)

    def frozen(self) -> RLS:
        """An independent copy for predicting only: the same predictions as this model now.

        The covariance, which only learning reads, is left out (``None``: the copy cannot
        learn); the projected weights are computed once here, not by each reader.
        """
        twin = copy.copy(self)
        twin._projected = None
        twin._s = None
        twin._weights = self._weights.copy()
        twin._column_scale = self._column_scale.copy()
        twin._constrained = self._constrained.copy()
        twin.index = copy.copy(self.index)
        twin.index.columns = dict(self.index.columns)
        twin.index._layouts = dict(self.index._layouts)  # arrays never changed in place: shared
        twin.predicting_weights()
        twin._memo = {}
        return twin

    @property
    def weights(self) -> dict[str, float]:
        """Learned weights by feature name, on the raw feature scale (``"intercept"`` for column 0)."""
        names = {0: "intercept"} | {c: n for n, c in self.index.columns.items()}
        raw = np.divide(self._weights, self._column_scale, out=np.zeros_like(self._weights),
                        where=self._column_scale > 0)
        return {names[i]: float(w) for i, w in enumerate(raw)}

    @property
    def covariance(self) -> np.ndarray:
        """``P`` over the scaled features, as a full symmetric matrix (a copy)."""
        full = np.where(_upper_mask(self._s.shape[0]), self._s, self._s.T)
        full *= self._scale
        return full

    @property
    def trace_bound(self) -> float:
        """The most the covariance trace may reach: ``max_trace``, or ``delta`` per column."""
        return self.max_trace if self.max_trace is not None else self.delta * self._weights.size

    def _grow(self, size: int) -> None:
        old = self._weights.size
        if size == old:
            return
        self._weights = np.concatenate([self._weights, np.zeros(size - old)])
        self._column_scale = np.concatenate([self._column_scale, np.zeros(size - old)])
        s = np.zeros((size, size), order="F")
        s[:old, :old] = self._s
        # New directions start with the prior delta in P = c * S.
        s[range(old, size), range(old, size)] = self.delta / self._scale
        self._s = s
        self._trace_s += (size - old) * self.delta / self._scale
        self._all_scaled = False
        self._bound_trace()

    def _constrained_columns(self) -> np.ndarray:
        """Which columns hold a contention feature (their weights are kept >= 0)."""
        mask = self._constrained
        size = self._weights.size
        if mask.size != size:
            mask = np.zeros(size, dtype=bool)
            for name, column in self.index.columns.items():
                if column < size:
                    mask[column] = is_contention(name)
            self._constrained = mask
        return mask

    def _bound_trace(self) -> None:
        bound = self.trace_bound
        if self._scale * self._trace_s > bound:
            self._scale = bound / self._trace_s

    def _set_column_scales(self, vector: np.ndarray) -> None:
        """Fix the scale of columns seen non-zero for the first time.

        A feature enters the model divided by the magnitude it had the first
        time it was non-zero (at least ``SCALE_FLOOR``), so the prior
        ``delta`` means about the same for every feature whatever its units:
        on the raw weight of column k it is a ridge penalty ``s_k^2 / delta``.
        Scales never change afterwards, so learning stays exact RLS.
        """
        if not self.scale_features:
            self._column_scale[: vector.size][self._column_scale[: vector.size] == 0] = 1.0
            self._all_scaled = bool((self._column_scale > 0).all())
            return
        fresh = (self._column_scale[: vector.size] == 0) & (vector != 0)
        if fresh.any():
            self._column_scale[: vector.size][fresh] = np.maximum(np.abs(vector[fresh]), SCALE_FLOOR)
            self._all_scaled = bool((self._column_scale > 0).all())

    def reset_covariance(self) -> None:
        """Re-open the covariance to ``delta * I`` (after drift); weights kept."""
        self.n_resets += 1
        size = self._weights.size
        self._s = np.asfortranarray(np.eye(size) * self.delta)
        self._scale = 1.0
        self._trace_s = self.delta * size
        self._bound_trace()

    # ------------------------------------------------------------- learning
    def vectorize(self, x: Mapping[str, float], *, grow: bool) -> np.ndarray:
        """The scaled column vector of ``x``; with ``grow``, new names get columns and scales."""
        return self.vectorize_row(tuple(x), np.fromiter(x.values(), dtype=float, count=len(x)), grow=grow)

    def vectorize_row(self, names: tuple[str, ...], values: np.ndarray, *, grow: bool) -> np.ndarray:
        """:meth:`vectorize` of the features ``names`` (distinct) with ``values``, without a dict."""
        vector = self.index.vector_of(names, values, grow=grow)
        # Once every column has its scale (the usual case), scaling is one division.
        all_scaled = self._all_scaled
        if grow:
            self._grow(vector.size)
            all_scaled = self._all_scaled
            if not all_scaled and np.abs(vector).max() < MAX_MAGNITUDE:  # an absurd value must not set a scale
                self._set_column_scales(vector)
        return self._scaled(vector, all_scaled)

    def scaled(self, vector: np.ndarray) -> np.ndarray:
        """An index vector (:meth:`FeatureIndex.vector_of <predictor.regressors.feature_index.FeatureIndex.vector_of>`
        of :attr:`index`) scaled as :meth:`vectorize_row` scales it without ``grow``: the same numbers."""
        return self._scaled(vector, self._all_scaled)

    def _scaled(self, vector: np.ndarray, all_scaled: bool) -> np.ndarray:
        scale = self._column_scale[: vector.size]
        if all_scaled:
            return vector / scale
        return np.divide(vector, scale, out=np.zeros(vector.size), where=scale > 0)

    def predicting_weights(self) -> np.ndarray:
        """The weights predictions use (scaled features): the learned ones, or with
        ``non_negative_contention`` their projection onto ``w_c >= 0`` (cached until they change).

        The projection pins the negative contention weights at 0 and moves the others by their
        covariance with them, ``w - P[:, A] P[A, A]^-1 w[A]`` (the least-squares solution with
        ``w[A] = 0``), growing the pinned set ``A`` while that pushes another below 0; whatever is
        still below 0 is clipped. The pinned set and its gain ``P[:, A] P[A, A]^-1`` are found
        anew every :data:`PROJECT_EVERY` updates, and after an update whose row was predicted
        with one of its own contention weights clipped (:meth:`_clips`: the pinned set had gone
        stale for rows like it) once :data:`MIN_SEARCH_GAP` updates have passed since the last
        search (both longer in a model of more than :data:`SEARCH_COLUMNS` columns:
        :func:`search_schedule`), by :meth:`learn_vector`, so they depend on the history learned only, not on when
        predictions were asked; they are reused in between (``O(d |A|)`` per update). The result
        is always feasible, so predictions are monotone whichever gain was used.
        """
        if not self.non_negative_contention:
            return self._weights
        return self._projection()[1]

    def _projection(self) -> tuple[np.ndarray, np.ndarray]:
        """The moved weights ``w - gain @ w[A]`` (the pinned at 0) and :meth:`predicting_weights`,
        their constrained ones clipped at 0; cached until the state changes."""
        key = (self.n_updates, self.n_refused, self.n_resets, self._weights.size)
        cached = self._projected
        if cached is not None and cached[0] == key:
            return cached[1]
        gain = self._gain
        active, matrix = gain if gain is not None else (np.zeros(0, dtype=np.intp), None)
        moved = self._weights
        if active.size:
            if matrix.shape[0] < moved.size:  # columns added since: no covariance with the pinned ones yet
                matrix = np.vstack([matrix, np.zeros((moved.size - matrix.shape[0], active.size))])
            moved = moved - matrix @ moved[active]
            moved[active] = 0.0
        found = (moved, np.where(self._constrained_columns(), np.maximum(moved, 0.0), moved))
        self._projected = (key, found)
        return found

    def _clips(self, vector: np.ndarray) -> bool:
        """Whether :meth:`predicting_weights` clips a contention weight at one of ``vector``'s
        non-zero positions (one neither pinned nor kept non-negative by the gain as it stands)."""
        return bool(np.any(self._constrained_columns() & (vector != 0) & (self._projection()[0] < 0)))

    def searched_at(self) -> int:
        """The update after which the pinned set was last searched (0 before the first search)."""
        return self._searched_at

    def search_pinned(self) -> None:
        """Search the projection's pinned set and gain anew for the current state (:meth:`_find_gain`)."""
        self._gain = self._find_gain(self._constrained_columns())
        self._searched_at = self.n_updates

    def _find_gain(self, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pinned set ``A`` of the projection (ascending) and its gain ``P[:, A] P[A, A]^-1``.

        :func:`predictor.regressors.pinned.find_gain` of the current covariance and weights: the
        search needs only the moved weights ``w - P[:, A] P[A, A]^-1 w[A]`` (one right-hand side per
        candidate set) from a Cholesky factor of ``P[A, A]`` extended as ``A`` grows; the gain is
        computed once, for the set found, from that factor, and only on the rows outside it (its
        rows in ``A`` are the identity's). The compiled kernel
        (:func:`predictor.regressors.gain_kernel.find_gain`) follows the same steps.
        """
        return find_gain(self.covariance, self._weights, mask)

    def row_predictor(self, names: tuple[str, ...]) -> Callable[[np.ndarray], float] | None:
        """``predict_vector(vectorize_row(names, values, grow=False))`` as a function of ``values``,
        for many rows of the same ``names`` and an unchanging model (a query's fixed point over its
        window): the columns, scales and weights looked up once, the same arithmetic per row.
        ``None`` until every column has its scale (the masked division's path)."""
        if not self._all_scaled:
            return None
        positions, known = self.index.positions(names)
        size = self.index.size
        scale, weights = self._column_scale[:size], self.predicting_weights()[:size]
        if known is not None:
            positions = positions[known]

        def predict(values: np.ndarray) -> float:
            x = np.zeros(size)
            x[0] = 1.0
            x[positions] = values if known is None else values[known]
            return float((x / scale) @ weights)

        return predict

    def row_coefficients(self, names: tuple[str, ...]) -> tuple[float, np.ndarray] | None:
        """The prediction of a row of ``names`` as ``intercept + coefficients @ values`` (each
        known name's weight over its column's scale, 0 for a name the model does not know): what
        :meth:`row_predictor` computes, the terms summed in another order. ``None`` where
        :meth:`row_predictor` is."""
        return memoised(self._memo, ("row", names), lambda: self._row_coefficients(names))

    def _row_coefficients(self, names: tuple[str, ...]) -> tuple[float, np.ndarray] | None:
        if not self._all_scaled:
            return None
        positions, known = self.index.positions(names)
        size = self.index.size
        per_column = self.predicting_weights()[:size] / self._column_scale[:size]
        coefficients = per_column[positions]
        if known is not None:
            coefficients[~known] = 0.0
        return float(per_column[0]), coefficients

    def predict_vector(self, vector: np.ndarray) -> float:
        """Prediction for a scaled vector from :meth:`vectorize`."""
        return float(vector @ self.predicting_weights()[: vector.size])

    def predict_one(self, x: Mapping[str, float]) -> float:
        """Prediction for a feature dict (unseen names ignored)."""
        return self.predict_vector(self.vectorize(x, grow=False))

    def predict_many(self, xs: list[Mapping[str, float]]) -> np.ndarray:
        """Predictions for many feature dicts at once."""
        if not xs:
            return np.zeros(0)
        matrix = np.stack([self.index.vector(x, grow=False) for x in xs])
        return matrix @ (self.predicting_weights() / np.where(self._column_scale > 0, self._column_scale, np.inf))

    def predict_matrix(self, names: tuple[str, ...], values: np.ndarray) -> np.ndarray:
        """Predictions for the rows of ``values``, whose columns are the features ``names``.

        Row ``i`` gets what :meth:`predict_one` answers for ``dict(zip(names, values[i]))``
        (up to rounding): unseen names are ignored, like an unseen feature.
        """
        return self.matrix_predictor(names)(values)

    def matrix_weights(self, names: tuple[str, ...]) -> tuple[np.ndarray, float]:
        """The weight of each of the columns ``names`` (0 for a name never seen) and the intercept
        that :meth:`matrix_predictor` applies to matrices of those columns."""
        return memoised(self._memo, ("matrix", names), lambda: self._matrix_weights(names))

    def _matrix_weights(self, names: tuple[str, ...]) -> tuple[np.ndarray, float]:
        positions, known = self.index.positions(names)
        effective = self.predicting_weights() / np.where(self._column_scale > 0, self._column_scale, np.inf)
        weights = np.zeros(len(names))
        if known is None:
            weights[:] = effective[positions]
        else:
            weights[known] = effective[positions[known]]
        return weights, float(effective[0])

    def matrix_predictor(self, names: tuple[str, ...]) -> Callable[[np.ndarray], np.ndarray]:
        """:meth:`predict_matrix` for matrices of the columns ``names``, with the weights of those
        columns looked up once (valid while the model does not learn: a frozen version's)."""
        known, weights, intercept = memoised(self._memo, ("predictor", names), lambda: self._predictor_weights(names))
        if known is None:
            return lambda values: values @ weights + intercept
        return lambda values: values[:, known] @ weights + intercept

    def _predictor_weights(self, names: tuple[str, ...]) -> tuple[np.ndarray | None, np.ndarray, float]:
        """What :meth:`matrix_predictor` applies: the mask of the known columns (``None``: all), their
        weights, the intercept."""
        positions, known = self.index.positions(names)
        if known is not None:
            positions = positions[known]
        effective = self.predicting_weights() / np.where(self._column_scale > 0, self._column_scale, np.inf)
        return known, effective[positions], effective[0]

    def learn_one(self, x: Mapping[str, float], y: float) -> None:
        """One RLS step towards ``y`` on the features ``x`` (new names get columns)."""
        self.learn_vector(self.vectorize(x, grow=True), y)

    def learn_vector(self, vector: np.ndarray, y: float) -> None:
        """One RLS step on a vector from :meth:`vectorize` (``grow=True``)."""
        constrained = self.non_negative_contention
        after = self.n_updates + 1  # the update this step makes, if taken
        # whether the row, as predicted before the step, clipped a weight: only where that searches
        every, gap = search_schedule(self._weights.size)
        stale = constrained and after % every != 0 and after - self.searched_at() >= gap and self._clips(vector)
        lam = self.forgetting
        c = self._scale
        with np.errstate(over="ignore", invalid="ignore"):
            sx = dsymv(1.0, self._s, vector)
            quad = c * float(vector @ sx)
            denominator = lam + quad
            error = y - float(vector @ self._weights)
            step = c * error / denominator
            weights = self._weights + step * sx
        if not (math.isfinite(denominator) and np.isfinite(weights).all()):
            self.n_refused += 1  # refused whole: the state is unchanged
            return
        if quad < 0:  # rounding has cost positive definiteness: re-open, skip this step
            self.n_refused += 1
            self.reset_covariance()
            return
        self._weights = weights
        alpha = -c / denominator
        self._s = dsyr(alpha, sx, a=self._s, overwrite_a=1)
        self._trace_s += alpha * float(sx @ sx)
        self._scale = c / lam
        if self._trace_s <= 0 or not math.isfinite(self._trace_s):
            self._trace_s = float(np.trace(self._s))
        self._bound_trace()
        if self._scale > RESCALE_ABOVE:
            self._s *= self._scale
            self._trace_s *= self._scale
            self._scale = 1.0
        self.n_updates += 1
        if constrained and (stale or self.n_updates % every == 0):
            self.search_pinned()
