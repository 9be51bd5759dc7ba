"""Recursive least squares with forgetting, numerically guarded.

Minimises ``sum_t lam^(n-t) (y_t - w.x_t)^2 + lam^n / delta * |w|^2`` one
observation at a time. With ``forgetting=1`` the weights equal the ridge
solution of all data seen, with penalty ``1 / delta`` (intercept included).

Guards
------
* the covariance update is in Joseph form and symmetrised, so ``P`` stays
  symmetric positive definite in floating point;
* the trace of ``P`` is bounded (``max_trace``) against covariance windup
  when the input does not excite every direction and ``forgetting < 1``;
* :meth:`reset_covariance` (called on a drift alarm by the owner) re-opens
  ``P`` to ``delta * I`` while keeping the weights, so learning speeds up again;
* an observation that would produce non-finite weights is refused.

Examples
--------
>>> rls = RLS(forgetting=1.0, delta=1e6)
>>> for x in range(1, 6):
...     rls.learn_one({"x": float(x)}, 2.0 * x + 1.0)
>>> round(rls.predict_one({"x": 10.0}), 3)
21.0
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from predictor.regressors.feature_index import FeatureIndex


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
        self._index = FeatureIndex(max_features)
        self._weights = np.zeros(1)
        self._cov = np.eye(1) * delta
        self.n_updates = 0
        self.n_refused = 0

    # ------------------------------------------------------------------ state
    @property
    def weights(self) -> dict[str, float]:
        """Learned weights by feature name (``"intercept"`` for column 0)."""
        names = {0: "intercept"} | {c: n for n, c in self._index.columns.items()}
        return {names[i]: float(w) for i, w in enumerate(self._weights)}

    @property
    def covariance(self) -> np.ndarray:
        return self._cov.copy()

    def _grow(self, size: int) -> None:
        old = self._weights.size
        if size == old:
            return
        self._weights = np.concatenate([self._weights, np.zeros(size - old)])
        cov = np.zeros((size, size))
        cov[:old, :old] = self._cov
        # New directions start with the prior, scaled like the current one so
        # that forgetting and trace bounds stay consistent.
        cov[old:, old:] = np.eye(size - old) * self.delta
        self._cov = cov
        self._bound_trace()

    def _bound_trace(self) -> None:
        trace = float(np.trace(self._cov))
        if trace > self.max_trace:
            self._cov *= self.max_trace / trace

    def reset_covariance(self) -> None:
        """Re-open the covariance to ``delta * I`` (after drift); weights kept."""
        self._cov = np.eye(self._weights.size) * self.delta
        self._bound_trace()

    # ------------------------------------------------------------- learning
    def predict_one(self, x: Mapping[str, float]) -> float:
        vector = self._index.vector(x, grow=False)
        return float(vector @ self._weights[: vector.size])

    def predict_many(self, xs: list[Mapping[str, float]]) -> np.ndarray:
        """Predictions for many feature dicts at once."""
        if not xs:
            return np.zeros(0)
        matrix = np.stack([self._index.vector(x, grow=False) for x in xs])
        return matrix @ self._weights

    def learn_one(self, x: Mapping[str, float], y: float) -> None:
        vector = self._index.vector(x, grow=True)
        self._grow(vector.size)
        with np.errstate(over="ignore", invalid="ignore"):
            self._update(vector, y)

    def _update(self, vector: np.ndarray, y: float) -> None:
        lam = self.forgetting
        cov = self._cov
        px = cov @ vector
        denominator = lam + float(vector @ px)
        gain = px / denominator
        error = y - float(vector @ self._weights)
        weights = self._weights + gain * error
        # Joseph form: (I - k x^T) P (I - k x^T)^T + lam k k^T, all over lam.
        a = cov - np.outer(gain, px)
        joseph = a - np.outer(a @ vector, gain) + lam * np.outer(gain, gain)
        new_cov = (joseph + joseph.T) / (2.0 * lam)
        if not (np.all(np.isfinite(weights)) and np.all(np.isfinite(new_cov))):
            self.n_refused += 1
            return
        self._weights = weights
        self._cov = new_cov
        self._bound_trace()
        self.n_updates += 1
