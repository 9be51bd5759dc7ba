"""``ensemble``: follow whichever expert has been best recently.

Runs several registered predictors side by side and weights them by their
recent accuracy (exponentially weighted multiplicative weights, "Hedge",
on each expert's decayed mean absolute log error). With a large ``eta`` it
follows the recent leader; with a small one it averages. Predictions are
combined in log space, i.e. as a weighted geometric mean of latencies.
"""

from __future__ import annotations

import math

from predictor.predictors.base import LatencyPredictor
from predictor.records import Record

DEFAULT_EXPERTS = ("rls", "sgd", "forest")


class EnsemblePredictor(LatencyPredictor):
    """Hedge over expert predictors.

    Parameters
    ----------
    experts
        Registered predictor specs, comma-separated (``"rls,sgd,forest"``).
    decay
        Weight of the past in each expert's running error, in [0, 1).
    eta
        Learning rate of the weights: ``w_i ∝ exp(-eta * error_i)``.
    """

    name = "ensemble"

    def __init__(self, experts: str = ",".join(DEFAULT_EXPERTS), decay: float = 0.97, eta: float = 50.0,
                 seed: int = 0):
        super().__init__(seed=seed)
        from predictor.predictors.registry import create  # cycle: the registry imports this module

        names = [e.strip() for e in experts.split(",") if e.strip()]
        if not names or "ensemble" in names:
            raise ValueError(f"experts must list registered predictors other than ensemble, got {experts!r}")
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must lie in [0, 1), got {decay!r}")
        if not eta >= 0:
            raise ValueError(f"eta must be >= 0, got {eta!r}")
        self.experts = experts
        self.decay = decay
        self.eta = eta
        self._experts = [create(name, seed=seed) for name in names]
        self._errors = [0.0] * len(names)

    @property
    def weights(self) -> dict[str, float]:
        """Current weight of each expert."""
        best = min(self._errors)
        raw = [math.exp(-self.eta * (e - best)) for e in self._errors]
        total = sum(raw)
        return {e.name: w / total for e, w in zip(self._experts, raw, strict=True)}

    def predict_slowdown(self, record: Record) -> float:
        """Weighted geometric mean of the experts' latencies, over the solo latency."""
        solo = self.solo_latency(record)
        weights = self.weights.values()
        log_latency = sum(
            w * math.log(expert.predict_one(record)) for w, expert in zip(weights, self._experts, strict=True)
        )
        return math.exp(log_latency) / solo

    def monotone_in_crowding(self) -> bool:
        """A weighted geometric mean (weights independent of the query) of monotone experts is monotone."""
        return all(expert.monotone_in_crowding() for expert in self._experts)

    def learn_slowdown(self, record: Record, slowdown: float) -> None:
        """Update each expert's decayed absolute log error (from its prediction before learning), then teach it."""
        actual = math.log(record.latency_ms)  # type: ignore[arg-type]
        for i, expert in enumerate(self._experts):
            error = abs(math.log(expert.predict_one(record)) - actual)
            self._errors[i] = self.decay * self._errors[i] + (1 - self.decay) * error
            expert.learn_one(record)
