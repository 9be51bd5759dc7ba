"""The shape calibrator's one-walk path (every ACI level at once, ``score``) against the level-by-level one.

:meth:`ShapeCalibrator._adapt` takes the terms of all :data:`GRID` levels in one walk over
the cells, and :meth:`ShapeCalibrator.score` reuses them for the bound it reports; the
reference below is the per-level recursion as it was written first (one ``_terms`` walk per
level, the cell's own adjustment passed as an override, ``factors`` then ``add``). On random
streams both must agree to the last bit: bounds, corrections, alphas, windows and spreads.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from predictor.calibration.conformal import BoundSource
from predictor.calibration.shape import GRID, LINKED, ShapeCalibrator, _largest
from predictor.calibration.shapes import QueryShape

SHAPES = [QueryShape.parse(key) for key in ("none/nosig", "overlap/sig", "unknown/nosig", "remaining/nosig", "live/sig")]


class LevelByLevel(ShapeCalibrator):
    """The reference: the adaptive step one level at a time, each with its own walk."""

    def _adapt(self, shape, key, kind, count, model, residual, levels=None):  # noqa: ANN001, ARG002
        cell = (key, kind, count)
        own = self._windows.get(cell)
        if own is None or len(own) < self.min_residuals:
            return
        alphas = self._alphas.get(cell)
        if alphas is None:
            if len(self._alphas) >= self.max_cells:
                return
            alphas = self._alphas[cell] = [1.0 - level for level in GRID]
        for i, level in enumerate(GRID):
            alpha = 1.0 - level
            terms = self._terms(shape, kind, count, model, level, {cell: alphas[i] / alpha})
            if terms[-1].source is BoundSource.FALLBACK:
                continue
            missed = residual > _largest(terms)
            gamma = min(self.gamma, 0.1 * alpha)
            alphas[i] = min(max(alphas[i] + gamma * (alpha - float(missed)), alpha / 20.0), min(5.0 * alpha, 0.5))


def _state(cal: ShapeCalibrator) -> tuple:
    return (
        cal._alphas,
        {cell: window.values() for cell, window in cal._windows.items()},
        {key: (s.m, s.s, s.n) for key, s in cal._spreads.items()},
        cal.n_added,
    )


@pytest.mark.parametrize(
    ("seed", "params"),
    [
        (0, {"min_residuals": 20}),
        (1, {"min_residuals": 10, "monotone": False}),
        (2, {"min_residuals": 30, "window": 60, "gamma": 0.05}),
        (3, {"min_residuals": 15, "scaled": False}),
    ],
)
def test_score_and_adapt_equal_the_level_by_level_recursion(seed: int, params: dict) -> None:
    rng = random.Random(seed)
    fast, reference = ShapeCalibrator(**params), LevelByLevel(**params)
    for t in range(1200):
        shape, kind, count = rng.choice(SHAPES), rng.choice(["k1", "k2"]), rng.randint(0, 2)
        model = rng.choice(["m1", "m2"])
        predicted = math.exp(rng.gauss(2.0, 0.5))
        drift = 0.4 if t > 700 else 0.2  # a drift the adaptive step must follow
        actual = predicted * math.exp(rng.gauss(0.1 * count, drift))
        confidence = rng.choice([*GRID, 0.8, 0.999])
        expected = reference.factors(shape, kind, count, model, confidence)
        if rng.random() < 0.2:  # an answer really given: plain add on both
            got = fast.factors(shape, kind, count, model, confidence)
            reference.add(shape, kind, count, model, actual=actual, predicted=predicted, linked=True)
            fast.add(shape, kind, count, model, actual=actual, predicted=predicted, linked=True)
        else:
            correction, bound, residual = fast.score(shape, kind, count, model, confidence,
                                                     actual=actual, predicted=predicted)
            got = (correction, bound)
            assert residual == reference.add(shape, kind, count, model, actual=actual, predicted=predicted)
        assert got == expected, t
        other = rng.choice(SHAPES)
        assert fast.factors(other, kind, count, model, confidence) == reference.factors(
            other, kind, count, model, confidence)
        latencies = np.array([predicted, 2.0 * predicted])
        np.testing.assert_array_equal(
            fast.probabilities(other, kind, count, model, latencies, 1.5 * predicted, confidence),
            reference.probabilities(other, kind, count, model, latencies, 1.5 * predicted, confidence),
        )
    assert _state(fast) == _state(reference)
    # the adaptive step ran on replayed cells (else the comparison says little about it)
    assert any(not key.startswith(LINKED) for key, _, _ in fast._alphas)
    assert any(a != 1.0 - GRID[i] for alphas in fast._alphas.values() for i, a in enumerate(alphas))
