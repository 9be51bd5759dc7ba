"""``forest``: a non-linear online learner, river's adaptive random forest.

An ``ARFRegressor`` (Gomes et al., 2018: Hoeffding trees on bagged streams
with per-tree drift detection and background replacement) over the
fine-grained co-location features, learning ``log(slowdown)``.
"""

from __future__ import annotations

import math

from river import forest

from predictor.features.extract import fine_features
from predictor.predictors.base import LatencyPredictor
from predictor.records.record import Record


class ForestPredictor(LatencyPredictor):
    """Adaptive random forest regression on the log slowdown.

    Parameters
    ----------
    n_models
        Number of trees.
    max_depth
        Depth limit of each tree (bounded memory).
    """

    name = "forest"

    def __init__(self, n_models: int = 5, max_depth: int = 12, seed: int = 0):
        super().__init__(seed=seed)
        if n_models < 1:
            raise ValueError(f"n_models must be >= 1, got {n_models!r}")
        if max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {max_depth!r}")
        self.n_models = n_models
        self.max_depth = max_depth
        self._model = forest.ARFRegressor(n_models=n_models, max_depth=max_depth, seed=seed)

    def predict_slowdown(self, record: Record) -> float:
        """``exp`` of the forest's log-slowdown (capped at ``e**10``)."""
        return math.exp(min(self._model.predict_one(fine_features(record)), 10.0))

    def learn_slowdown(self, record: Record, slowdown: float) -> None:
        """One forest update towards ``log(slowdown)``."""
        self._model.learn_one(fine_features(record), math.log(slowdown))
