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

    def features(self, record: Record, *, learning: bool) -> Features:
        """Coarse features smoothed per device; ``learning`` advances the smoothing state."""
        if learning:
            return self._smoother.update(record)
        return self._smoother.features(record)
