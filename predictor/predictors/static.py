"""``static``: the coarse GPUlet linear model, fitted once and never updated.

Slowdown is linear in the batch's own profiled attributes (L2 and DRAM
utilisation, partition share, ...) and the plain sums of its co-runners',
co-runners taken as fully overlapping. The model is fitted with
scikit-learn's least squares on the training records (:meth:`fit`) or, when
used online, on the first ``fit_after`` records seen; afterwards it is frozen.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import numpy as np

from predictor.features.contention import is_contention
from predictor.features.extract import Features, coarse_features
from predictor.predictors.base import LatencyPredictor
from predictor.records.record import Record
from predictor.regressors.feature_index import FeatureIndex


class StaticPredictor(LatencyPredictor):
    """GPUlet-style linear slowdown model fitted once offline.

    Parameters
    ----------
    fit_after
        When trained online, fit once this many records have been seen.
    ridge
        L2 penalty of the least-squares fit (tiny: numerical safety only).
    non_negative
        Fit the weights of contention features (:mod:`predictor.features.contention`) under ``w >= 0``
        (bounded least squares): more co-runners never predict a lower latency.
    """

    name = "static"
    reads_rows = True

    def __init__(self, fit_after: int = 200, ridge: float = 1e-6, non_negative: bool = True, seed: int = 0):
        super().__init__(seed=seed)
        if fit_after < 1:
            raise ValueError(f"fit_after must be >= 1, got {fit_after!r}")
        if ridge < 0:
            raise ValueError(f"ridge must be >= 0, got {ridge!r}")
        self.fit_after = fit_after
        self.ridge = ridge
        self.non_negative = non_negative
        self._index = FeatureIndex(max_features=512)
        self._weights: np.ndarray | None = None
        self._pending: list[tuple[Features, float]] = []

    @property
    def fitted(self) -> bool:
        """Whether the weights have been fitted (and frozen)."""
        return self._weights is not None

    def features(self, record: Record, *, learning: bool) -> Features:
        """The coarse features (subclasses smooth them)."""
        return coarse_features(record)

    def predict_slowdown(self, record: Record) -> float:
        """The linear model on the coarse features; 1 before it is fitted."""
        if self._weights is None:
            return 1.0
        x = self._index.vector(self.features(record, learning=False), grow=False)
        return float(x @ self._weights)

    def learn_slowdown(self, record: Record, slowdown: float) -> None:
        """Collect the record until ``fit_after`` are pending, then fit once; afterwards only the features' state moves."""
        features = self.features(record, learning=True)
        if self._weights is not None:
            return
        self._pending.append((features, slowdown))
        if len(self._pending) >= self.fit_after:
            self._fit_pending()

    def fit(self, records: Iterable[Record]) -> StaticPredictor:
        """Fit on all ``records`` at once, then freeze."""
        for record in records:
            slowdown = record.latency_ms / self.solo_latency(record)
            if self._weights is None:
                self._pending.append((self.features(record, learning=True), slowdown))
            else:
                self.features(record, learning=True)
            self._observed(record, slowdown)
        if self._weights is None and self._pending:
            self._fit_pending()
        return self

    def _fit_pending(self) -> None:
        matrix = self._pending_matrix()
        target = np.array([y for _, y in self._pending])
        if self.non_negative:
            self._weights = self._fit_bounded(matrix, target)
        else:
            # imported where used: scikit-learn takes longer to import than a fit
            from sklearn.linear_model import Ridge

            model = Ridge(alpha=self.ridge, fit_intercept=False)
            model.fit(matrix, target)
            self._weights = np.asarray(model.coef_, dtype=float)
        self._pending = []

    def _pending_matrix(self) -> np.ndarray:
        """The vectors of the pending features, one row each, their names given columns in the order
        they were first seen: the matrix, columns and dropped names that building each record's vector
        with ``grow``, then each again without, would give."""
        rows_of: dict[tuple[str, ...], list[int]] = {}
        for row, (features, _) in enumerate(self._pending):
            rows_of.setdefault(tuple(features), []).append(row)
        index = self._index
        for names, rows in rows_of.items():  # in first-seen order: the columns a record at a time would give
            index.take(names, times=len(rows))
        matrix = np.zeros((len(self._pending), index.size))
        matrix[:, 0] = 1.0
        for names, rows in rows_of.items():
            positions, known = index.positions(names)
            values = np.fromiter(itertools.chain.from_iterable(self._pending[row][0].values() for row in rows),
                                 dtype=float, count=len(rows) * len(names)).reshape(len(rows), len(names))
            if known is not None:
                positions, values = positions[known], values[:, known]
            matrix[np.ix_(rows, positions)] = values
        return matrix

    def _fit_bounded(self, matrix: np.ndarray, target: np.ndarray) -> np.ndarray:
        """Ridge least squares with the contention weights bounded below by 0."""
        from scipy.optimize import lsq_linear  # imported by the first fit, not by every import of the class

        lower = np.full(matrix.shape[1], -np.inf)
        for name, column in self._index.columns.items():
            if column < lower.size and is_contention(name):
                lower[column] = 0.0
        if self.ridge > 0:  # the ridge penalty as extra rows: |Ax - b|^2 + ridge |x|^2
            matrix = np.vstack([matrix, np.sqrt(self.ridge) * np.eye(matrix.shape[1])])
            target = np.concatenate([target, np.zeros(matrix.shape[1])])
        matrix, target = _reduced(matrix, target)
        return np.asarray(lsq_linear(matrix, target, bounds=(lower, np.inf)).x, dtype=float)

    def monotone_in_crowding(self) -> bool:
        """Whether the contention weights were fitted non-negative (see ``non_negative``)."""
        return self.non_negative


def _reduced(matrix: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A least-squares problem of one row per column with the minimiser of ``|matrix x - target|^2``,
    under any bounds: ``R`` and ``c`` of the QR factorisation of ``[matrix | target]``, since
    ``|Ax - b|^2 = |Rx - c|^2 + |r|^2`` with ``r`` the residual, which no ``x`` moves. The bounded
    solver's iterations then cost per column, not per record. Fewer rows than columns: as it is.

    >>> a, b = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0], [1.0, 3.0]]), np.array([1.0, 2.0, 2.0, 4.0])
    >>> r, c = _reduced(a, b)
    >>> r.shape, bool(np.allclose(np.linalg.solve(r, c), np.linalg.lstsq(a, b, rcond=None)[0]))
    ((2, 2), True)
    """
    rows, columns = matrix.shape
    if rows <= columns + 1:
        return matrix, target
    r = np.linalg.qr(np.column_stack([matrix, target]), mode="r")
    return r[:-1, :-1], r[:-1, -1]
