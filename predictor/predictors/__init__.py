"""The registered latency predictors."""

from predictor.predictors.base import LatencyPredictor
from predictor.predictors.registry import available, create, register

__all__ = ["LatencyPredictor", "available", "create", "register"]
