"""Composing per-stage predictive distributions into an end-to-end bound.

The calibration of a sum is not the sum of calibrations (adding each stage's bound at 0.99 puts
every stage at its own tail at once). Here every stage's latency on every candidate device is a
*distribution* (:class:`StageOption`): its sorted samples at the stratified probabilities
``(j + 0.5) / N``, the service's conformal residuals of that query's cell mapped onto the
prediction (:meth:`~predictor.calibration.shape.ShapeCalibrator.log_distribution`). The completion
time is composed sample by sample along the DAG,
``finish[v] = max(finish[u] for u upstream) + X[v]`` (end-to-end: the max over sinks), the stages
independent: each takes its samples in a fixed random permutation of its own (Latin hypercube
sampling with common random numbers), so every plan of a request is evaluated on the same draws,
deterministically, and each draw's end-to-end time is non-decreasing in each stage's sample.

The composed bound at confidence ``c`` is the ``c`` quantile of the end-to-end draws, never less
than the largest single stage's own bound (one stage answers what CheckDeadline answers); the
probability of meeting the deadline is the fraction of draws within it.

Examples
--------
>>> import numpy as np
>>> dag = Dag.of(2, [])
>>> composer = Composer(dag, n_samples=1000, seed=0)
>>> flat = np.linspace(9.0, 11.0, 1000)
>>> a = StageOption(0, "d0", samples=flat, expected_ms=10.0, bound_ms=10.98, cost=10.0)
>>> ends = composer.end_to_end([composer.draw(0, a), composer.draw(1, a)])
>>> bool(abs(ends.mean() - 20.0) < 1e-9), composer.bound(ends, 0.99, guard=10.98) < 2 * 10.98
(True, True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from predictor.pipeline.graph import Dag

N_SAMPLES = 2000


@dataclass(frozen=True, eq=False)
class StageOption:
    """One stage on one candidate device: its completion-time distribution and its cost.

    Attributes
    ----------
    candidate
        Index of the device in the request's candidates.
    device
        The device's name.
    samples
        Sorted completion times (queue wait + load + latency), ms, at the stratified
        probabilities ``(j + 0.5) / N``.
    expected_ms
        Expected completion time, ms.
    bound_ms
        The stage's own bound at the request's confidence, ms (what CheckDeadline's slack counts from).
    cost
        The stage's cost on this device.
    row
        Position of the option's answer in the stage's answers (for its prediction).
    """

    candidate: int
    device: str
    samples: np.ndarray
    expected_ms: float
    bound_ms: float
    cost: float
    row: int = 0


def quantile_samples(log_values: np.ndarray, n: int) -> np.ndarray:
    """``n`` values at the probabilities ``(j + 0.5) / n`` of the empirical distribution of
    ``log_values`` (sorted), linearly interpolated, exponentiated: a factor on a prediction."""
    values = np.sort(np.asarray(log_values, dtype=float))
    if values.size == 1:
        return np.full(n, math.exp(min(values[0], 700.0)))
    grid = (np.arange(n) + 0.5) / n
    at = np.linspace(0.0, 1.0, values.size)
    return np.exp(np.minimum(np.interp(grid, at, values), 700.0))


class Composer:
    """The end-to-end time of plans of one DAG, on common random draws (see the module doc).

    Parameters
    ----------
    dag
        The pipeline.
    n_samples
        Draws per stage.
    seed
        Seed of the stages' permutations.
    """

    def __init__(self, dag: Dag, n_samples: int = N_SAMPLES, seed: int = 0):
        if n_samples < 1:
            raise ValueError(f"n_samples must be >= 1, got {n_samples!r}")
        self.dag = dag
        self.n_samples = n_samples
        rng = np.random.default_rng(seed)
        self._permutations = [rng.permutation(n_samples) for _ in range(dag.n)]

    def draw(self, stage: int, option: StageOption) -> np.ndarray:
        """The option's samples in the stage's draw order."""
        return option.samples[self._permutations[stage]]

    def end_to_end(self, draws: Sequence[np.ndarray]) -> np.ndarray:
        """End-to-end times per draw, given every stage's draws."""
        finish: list[np.ndarray | None] = [None] * self.dag.n
        for v in self.dag.order:
            upstream = self.dag.preds[v]
            if not upstream:
                finish[v] = draws[v]
            else:
                start = finish[upstream[0]]
                for u in upstream[1:]:
                    start = np.maximum(start, finish[u])
                finish[v] = start + draws[v]
        ends = finish[self.dag.sinks[0]]
        for s in self.dag.sinks[1:]:
            ends = np.maximum(ends, finish[s])
        return ends  # type: ignore[return-value]

    @staticmethod
    def bound(ends: np.ndarray, confidence: float, guard: float = 0.0) -> float:
        """The composed bound: the ``confidence`` quantile of the end-to-end draws (the draw of
        rank ``ceil(confidence * N)``), at least ``guard``."""
        n = ends.size
        k = min(max(math.ceil(confidence * n - 1e-9), 1), n)
        return max(float(np.partition(ends, k - 1)[k - 1]), guard)

    @staticmethod
    def probability(ends: np.ndarray, deadline_ms: float) -> float:
        """Fraction of draws ending within the deadline."""
        return float(np.count_nonzero(ends <= deadline_ms)) / ends.size
