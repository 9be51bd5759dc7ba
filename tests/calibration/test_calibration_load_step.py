"""The shape calibrator's bound under a step of load nobody reported: it widens within a few dozen
answers when the load rises (the residuals scatter more) and narrows again when it falls."""

from __future__ import annotations

import math

import numpy as np

from predictor.calibration.shape import ShapeCalibrator
from predictor.calibration.shapes import QueryShape

SHAPE = QueryShape("unknown", False)
QUIET, LOADED = 0.05, 0.35  # spread of log(actual / predicted): a quiet host, then one with a neighbour


def _factor(cal: ShapeCalibrator) -> float:
    return cal.bound(SHAPE, "cpu", 1, "mlp", 10.0, 0.95).upper_ms / 10.0


def _feed(cal: ShapeCalibrator, rng: np.random.Generator, spread: float, n: int) -> list[float]:
    """``n`` answers of 10 ms whose outcomes scatter by ``spread``; the bound factor after each."""
    factors = []
    for _ in range(n):
        cal.add(SHAPE, "cpu", 1, "mlp", actual=10.0 * math.exp(rng.normal(0.0, spread)), predicted=10.0)
        factors.append(_factor(cal))
    return factors


def test_the_bound_widens_quickly_when_load_rises_and_narrows_when_it_falls():
    rng = np.random.default_rng(5)
    cal = ShapeCalibrator(window=300)  # the demo's window
    _feed(cal, rng, QUIET, 600)
    quiet = _factor(cal)
    assert quiet < math.exp(2.5 * QUIET)
    rising = _feed(cal, rng, LOADED, 600)
    loaded = rising[-1]
    assert loaded > math.exp(1.3 * LOADED)  # about exp(1.64 x 0.35) when settled
    widened = next(i for i, f in enumerate(rising) if math.log(f) >= 0.8 * math.log(loaded))
    assert widened < 60, widened
    falling = _feed(cal, rng, QUIET, 600)
    narrowed = next(i for i, f in enumerate(falling) if math.log(f) <= 2 * math.log(quiet))
    assert narrowed < 60, narrowed
    assert falling[-1] < math.exp(2.5 * QUIET)
