"""The registered latency predictors."""

from predictor.predictors.base import LatencyPredictor
from predictor.predictors.registry import DEFAULT, available, create, register

__all__ = ["DEFAULT", "LatencyPredictor", "available", "create", "register"]
