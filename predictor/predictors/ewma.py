"""``ewma``: the static model fed EWMA-smoothed co-location signals.

As in Zhao and Georgantas (2025): the coarse co-location signals (co-runner
intensity sums, counts, device signals) are smoothed per device with an
exponentially weighted moving average before they enter the frozen linear
model, which partially captures how co-location evolves over time. The
smoothing state follows every observation; the linear weights do not.
"""

from __future__ import annotations

from predictor.features.extract import EwmaCoLocation, Features
from predictor.predictors.static import StaticPredictor
from predictor.records.record import Record


class EwmaPredictor(StaticPredictor):
    """Static linear model over per-device EWMA-smoothed co-location features.

    Parameters
    ----------
    alpha
        EWMA weight of the newest observation, in (0, 1].
    """

    name = "ewma"

    def __init__(
        self, alpha: float = 0.3, fit_after: int = 200, ridge: float = 1e-6, non_negative: bool = True, seed: int = 0
    ):
        super().__init__(fit_after=fit_after, ridge=ridge, non_negative=non_negative, seed=seed)
        self.alpha = alpha
        self._smoother = EwmaCoLocation(alpha)

    _taken: tuple[Record, Features] | None = None  # within predict_learn_one: its record's features, the step taken

    def features(self, record: Record, *, learning: bool) -> Features:
        """Coarse features smoothed per device; ``learning`` advances the smoothing state."""
        taken = self._taken
        if taken is not None and taken[0] is record:
            return taken[1]
        if learning:
            return self._smoother.update(record)
        return self._smoother.features(record)

    def predict_learn_one(self, record: Record) -> float:
        """Predict ``record``'s latency, then learn from it: both halves read its features smoothed once."""
        self._taken = (record, self._smoother.update(record))  # the features before the step, the step taken
        try:
            return super().predict_learn_one(record)
        finally:
            del self._taken  # the class's None again: nothing of it kept, nor pickled
