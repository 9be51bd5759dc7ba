"""Recursive least squares with forgetting, numerically guarded.

Minimises ``sum_t lam^(n-t) (y_t - w.x_t)^2 + lam^n / delta * |w|^2`` one
observation at a time. With ``forgetting=1`` the weights equal the ridge
solution of all data seen, with penalty ``1 / delta`` (intercept included).

The covariance is kept as ``P = c * S`` with a scalar ``c`` that absorbs the
``1 / lam`` of every step, and ``S`` updated by one symmetric rank-1 BLAS
call (``dsyr``) on its upper triangle only, so ``P`` is symmetric by
construction and a step costs two ``O(d^2)`` BLAS calls.

Guards
------
* ``P`` stays symmetric (one stored triangle) and positive definite: an
  update that would produce non-finite values is refused and leaves the
  state unchanged; one whose ``x'Px`` comes out negative in floating point
  (lost definiteness) re-opens the covariance instead;
* the trace of ``P`` is bounded (``max_trace``) against covariance windup
  when the input does not excite every direction and ``forgetting < 1``;
* :meth:`reset_covariance` (called on a drift alarm by the owner) re-opens
  ``P`` to ``delta * I`` while keeping the weights, so learning speeds up again.

Examples
--------
>>> rls = RLS(forgetting=1.0, delta=1e6)
>>> for x in range(1, 6):
...     rls.learn_one({"x": float(x)}, 2.0 * x + 1.0)
>>> round(rls.predict_one({"x": 10.0}), 3)
21.0
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np
from scipy.linalg.blas import dsymv, dsyr

from predictor.regressors.feature_index import FeatureIndex

RESCALE_ABOVE = 1e12


class RLS:
    """Recursive least-squares regressor over dict features.

    Parameters
    ----------
    forgetting
        Forgetting factor ``lam`` in (0, 1]; 1 never forgets.
    delta
        Initial covariance scale: ``P = delta * I`` (prior precision ``1/delta``).
    max_trace
        Upper bound on ``trace(P)``; ``P`` is rescaled when it grows beyond.
    max_features
        Cap on distinct feature names (memory bound).
    """

    def __init__(
        self,
        forgetting: float = 0.999,
        delta: float = 100.0,
        max_trace: float = 1e6,
        max_features: int = 256,
    ):
        if not 0.0 < forgetting <= 1.0:
            raise ValueError(f"forgetting must lie in (0, 1], got {forgetting!r}")
        if not delta > 0:
            raise ValueError(f"delta must be > 0, got {delta!r}")
        if not max_trace > 0:
            raise ValueError(f"max_trace must be > 0, got {max_trace!r}")
        self.forgetting = forgetting
        self.delta = delta
        self.max_trace = max_trace
        self.index = FeatureIndex(max_features)
        self._weights = np.zeros(1)
        self._s = np.asfortranarray(np.eye(1) * delta)
        self._scale = 1.0
        self._trace_s = delta
        self.n_updates = 0
        self.n_refused = 0

    # ------------------------------------------------------------------ state
    @property
    def weights(self) -> dict[str, float]:
        """Learned weights by feature name (``"intercept"`` for column 0)."""
        names = {0: "intercept"} | {c: n for n, c in self.index.columns.items()}
        return {names[i]: float(w) for i, w in enumerate(self._weights)}

    @property
    def covariance(self) -> np.ndarray:
        """``P`` as a full symmetric matrix (a copy)."""
        upper = np.triu(self._s)
        return self._scale * (upper + np.triu(upper, 1).T)

    def _grow(self, size: int) -> None:
        old = self._weights.size
        if size == old:
            return
        self._weights = np.concatenate([self._weights, np.zeros(size - old)])
        s = np.zeros((size, size), order="F")
        s[:old, :old] = self._s
        # New directions start with the prior delta in P = c * S.
        s[range(old, size), range(old, size)] = self.delta / self._scale
        self._s = s
        self._trace_s += (size - old) * self.delta / self._scale
        self._bound_trace()

    def _bound_trace(self) -> None:
        if self._scale * self._trace_s > self.max_trace:
            self._scale = self.max_trace / self._trace_s

    def reset_covariance(self) -> None:
        """Re-open the covariance to ``delta * I`` (after drift); weights kept."""
        size = self._weights.size
        self._s = np.asfortranarray(np.eye(size) * self.delta)
        self._scale = 1.0
        self._trace_s = self.delta * size
        self._bound_trace()

    # ------------------------------------------------------------- learning
    def vectorize(self, x: Mapping[str, float], *, grow: bool) -> np.ndarray:
        """The column vector of ``x``; with ``grow``, new names get columns."""
        vector = self.index.vector(x, grow=grow)
        if grow:
            self._grow(vector.size)
        return vector

    def predict_vector(self, vector: np.ndarray) -> float:
        return float(vector @ self._weights[: vector.size])

    def predict_one(self, x: Mapping[str, float]) -> float:
        return self.predict_vector(self.index.vector(x, grow=False))

    def predict_many(self, xs: list[Mapping[str, float]]) -> np.ndarray:
        """Predictions for many feature dicts at once."""
        if not xs:
            return np.zeros(0)
        matrix = np.stack([self.index.vector(x, grow=False) for x in xs])
        return matrix @ self._weights

    def learn_one(self, x: Mapping[str, float], y: float) -> None:
        self.learn_vector(self.vectorize(x, grow=True), y)

    def learn_vector(self, vector: np.ndarray, y: float) -> None:
        """One RLS step on a vector from :meth:`vectorize` (``grow=True``)."""
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
