"""The calibrated point answer: a running centre corrects it only by what exceeds the centre's noise."""

from __future__ import annotations

import math
import random

import pytest

from predictor.calibration.shape import ShapeCalibrator, centre_noise, shrunk
from predictor.calibration.shapes import QueryShape

IDLE = QueryShape("none", False)
ONE = QueryShape("unknown", False)


def _fed(bias: dict[QueryShape, float], sd: float = 0.1, n: int = 600, seed: int = 0) -> ShapeCalibrator:
    """A calibrator given ``n`` answers per shape whose log residuals are ``bias + N(0, sd)``."""
    rng, calibrator = random.Random(seed), ShapeCalibrator(min_residuals=20)
    for _ in range(n):
        for shape, b in bias.items():
            count = 0 if shape.runners == "none" else 1
            calibrator.add(shape, "cpu", count, "mlp", actual=10.0 * math.exp(b + rng.gauss(0.0, sd)), predicted=10.0)
    return calibrator


def test_the_noise_is_the_standard_error_of_the_running_centre():
    # an exponentially weighted mean at weight a of residuals of sd sigma errs by sigma sqrt(a / (2 - a));
    # sigma = sqrt(pi / 2) times the mean absolute deviation s for a normal
    rate = 0.1
    rng = random.Random(3)
    centres, m = [], 0.0
    for i in range(40_000):
        m += rate * (rng.gauss(0.0, 1.0) - m)
        if i > 100 and i % 25 == 0:
            centres.append(m)
    sd = math.sqrt(sum(c * c for c in centres) / len(centres))
    assert centre_noise(rate, z=1.0) * math.sqrt(2.0 / math.pi) == pytest.approx(sd, rel=0.1)
    with pytest.raises(ValueError, match="rate"):
        centre_noise(0.0)


def test_shrinking_moves_a_centre_towards_zero_by_its_noise_and_never_past_it():
    assert shrunk(0.03, 0.1, 0.5) == 0.0 and shrunk(-0.03, 0.1, 0.5) == 0.0
    assert shrunk(0.2, 0.1, 0.5) == pytest.approx(0.15) and shrunk(-0.2, 0.1, 0.5) == pytest.approx(-0.15)


def test_an_unbiased_cell_leaves_the_answer_alone_and_a_biased_one_is_corrected():
    idle, _ = _fed({IDLE: 0.0}).factors(IDLE, "cpu", 0, "mlp", 0.95)
    assert idle == 1.0  # a centre within its noise corrects nothing
    one, bound = _fed({IDLE: -0.3, ONE: -0.3}).factors(ONE, "cpu", 1, "mlp", 0.95)
    # the bias less its noise (~0.05 for residuals of sd 0.1), never more than the bias
    assert math.exp(-0.3) < one < math.exp(-0.2)
    # the bound stands on the centre as it is: its 0.95 quantile, about 1.64 sd above the bias
    assert math.exp(-0.3 + 0.1) < bound.upper_ms < math.exp(-0.3 + 0.25)


def test_the_correction_stays_monotone_in_crowding():
    # the idle cell is biased high: the corrected answer with a co-runner never falls below it
    calibrator = _fed({IDLE: 0.3, ONE: 0.0})
    idle, _ = calibrator.factors(IDLE, "cpu", 0, "mlp", 0.95)
    one, _ = calibrator.factors(ONE, "cpu", 1, "mlp", 0.95)
    assert idle > 1.2 and one >= idle
