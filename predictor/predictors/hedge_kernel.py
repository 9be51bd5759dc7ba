"""The ``ensemble`` predictor's Hedge steps over many records, compiled (numba).

Per record, in stream order, :meth:`EnsemblePredictor.combine_learn
<predictor.predictors.ensemble.EnsemblePredictor.combine_learn>` combines the experts' predictions
with the weights of the record's key (``exp(-eta * (error - best))`` over their sum), then moves the
key's running errors and the overall ones towards the experts' absolute log errors. Over a stream
whose experts' predictions are all known (a replay that runs each expert over it first,
:mod:`predictor.prequential.tree_blocks`), :func:`hedge_steps` does those steps in one compiled
loop: every sum and product in the reference's order, with the C library's ``exp`` and ``log``
(Python's ``math``), so the combined predictions and the errors are the reference's to the bit
(``tests/predictors/test_hedge_kernel.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def hedge_steps(rows: np.ndarray, predictions: np.ndarray, latencies: np.ndarray, overall: np.ndarray,
                per_key: np.ndarray, has_errors: np.ndarray, eta: float, decay: float,
                combined: np.ndarray) -> None:
    """The Hedge steps of ``n`` records, in order.

    ``rows[i]``: the row of ``per_key`` holding record ``i``'s key's errors (``-1``: its key has none:
    no key, or no room for one); ``predictions``: ``n x experts``, each expert's prediction before it
    learned the record; ``latencies``: the measured ones; ``overall``: the errors over all keys;
    ``per_key``: each key's errors, valid where ``has_errors`` (a key's first step starts from the
    overall errors and sets it). ``overall``, ``per_key`` and ``has_errors`` are updated in place;
    ``combined[i]`` is record ``i``'s weighted geometric mean.
    """
    n, experts = predictions.shape
    raw = np.empty(experts)
    errors = np.empty(experts)
    for i in range(n):
        row = rows[i]
        known = row >= 0 and has_errors[row]
        source = per_key[row] if known else overall
        best = source[0]
        for e in range(1, experts):
            if source[e] < best:
                best = source[e]
        total = 0.0
        for e in range(experts):
            raw[e] = math.exp(-eta * (source[e] - best))
            total += raw[e]
        mean = 0.0
        for e in range(experts):
            weight = raw[e] / total
            if weight > 0:
                mean += weight * math.log(predictions[i, e])
        combined[i] = math.exp(mean)
        actual = math.log(latencies[i])
        for e in range(experts):
            errors[e] = abs(math.log(predictions[i, e]) - actual)
        if row >= 0:
            for e in range(experts):
                per_key[row, e] = decay * source[e] + (1 - decay) * errors[e]
            has_errors[row] = True
        for e in range(experts):
            overall[e] = decay * overall[e] + (1 - decay) * errors[e]
