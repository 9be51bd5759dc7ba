"""``solo``: no interference; the latency is the solo latency."""

from __future__ import annotations

from predictor.predictors.base import LatencyPredictor
from predictor.records.record import Record


class SoloPredictor(LatencyPredictor):
    """Predicts the solo latency (profiled, or learned online), slowdown 1."""

    name = "solo"
    reads_rows = True

    def predict_slowdown(self, record: Record) -> float:
        """Always 1: no interference."""
        return 1.0

    def monotone_in_crowding(self) -> bool:
        """Co-runners never change its answer."""
        return True

    def learn_slowdown(self, record: Record, slowdown: float) -> None:
        """Nothing to learn beyond the solo profile the base class keeps."""
        return None
