"""A frozen :class:`ShapeCalibrator` keeps the factors it answered; a live one never does.

Published versions answer from frozen copies, which never learn, so their factors are
looked up once per cell and confidence. The live calibrator (the learner's, answering
admission replays) goes on learning: each of its answers must reflect every residual
added so far, and so must a copy that is made to learn after all.
"""

from __future__ import annotations

import numpy as np
import pytest

from predictor.calibration.shape import MAX_ANSWERED, MAX_PACKED, ShapeCalibrator, log_ratios
from predictor.calibration.shapes import QueryShape

SHAPES = [QueryShape.parse(key) for key in ("none/nosig", "overlap/sig", "remaining/nosig")]
CELLS = [(shape, kind, count) for shape in SHAPES for kind in ("A", "B") for count in (0, 1, 3)]
LEVELS = (0.9, 0.95, 0.99, 0.975)


def _learn(calibrator: ShapeCalibrator, rng: np.random.Generator, n: int) -> None:
    for _ in range(n):
        shape, kind, count = CELLS[int(rng.integers(len(CELLS)))]
        predicted = float(rng.uniform(1.0, 20.0))
        calibrator.add(shape, kind, count, "m", actual=predicted * float(np.exp(rng.normal(0.1, 0.3))),
                       predicted=predicted)


def _all_factors(calibrator: ShapeCalibrator) -> list:
    return [calibrator.factors(shape, kind, count, "m", level) for shape, kind, count in CELLS for level in LEVELS]


def test_frozen_copy_answers_as_fresh_computation_and_stays_put() -> None:
    rng = np.random.default_rng(3)
    live = ShapeCalibrator(min_residuals=5, min_spread_n=3)
    _learn(live, rng, 400)
    frozen = live.frozen()
    first = _all_factors(frozen)
    assert first == _all_factors(live)  # the same numbers as computed afresh
    assert _all_factors(frozen) == first  # looked up: the same again

    _learn(live, rng, 400)  # the live one moves on; the copy does not
    assert _all_factors(frozen) == first
    assert _all_factors(live) != first
    assert _all_factors(live.frozen()) == _all_factors(live)


def test_live_and_learning_copies_are_never_answered_stale() -> None:
    rng = np.random.default_rng(4)
    live = ShapeCalibrator(min_residuals=5, min_spread_n=3)
    _learn(live, rng, 200)
    before = _all_factors(live)
    _learn(live, rng, 200)
    assert _all_factors(live) != before  # the live calibrator is never cached

    frozen = live.frozen()
    cached = _all_factors(frozen)
    _learn(frozen, rng, 300)  # a copy made to learn is live from then on
    assert _all_factors(frozen) != cached
    reference = ShapeCalibrator(min_residuals=5, min_spread_n=3)
    rng_a, rng_b = np.random.default_rng(9), np.random.default_rng(9)
    _learn(reference, rng_a, 50)
    copy = reference.frozen()
    _all_factors(copy)
    _learn(copy, rng_b, 50)
    _learn(reference, np.random.default_rng(9), 50)
    assert _all_factors(copy) == _all_factors(reference)


def test_cache_is_bounded_and_checks_confidence() -> None:
    frozen = ShapeCalibrator().frozen()
    for i in range(MAX_ANSWERED + 10):
        frozen.factors(SHAPES[0], f"kind{i}", 1, "m", 0.9)
    assert len(frozen._answered) <= MAX_ANSWERED
    with pytest.raises(ValueError):
        frozen.factors(SHAPES[0], "A", 1, "m", 1.5)


def _all_probabilities(calibrator: ShapeCalibrator, predicted: np.ndarray, limits: list[float]) -> list:
    return [calibrator.probabilities(shape, kind, count, "m", predicted, limit, level).tolist()
            for shape, kind, count in CELLS for level in LEVELS for limit in limits]


@pytest.mark.parametrize("frozen", [False, True])
def test_one_rows_probability_is_the_rows_of_many(frozen: bool) -> None:
    # a single query's probability takes the float path; rows of a ranking the array path: the same numbers
    rng = np.random.default_rng(5)
    live = ShapeCalibrator(min_residuals=5, min_spread_n=3)
    _learn(live, rng, 300)
    calibrator = live.frozen() if frozen else live
    predicted = rng.uniform(0.5, 30.0, size=7)
    limits = [0.0, 1e-300, 3.0, 10.0, 25.0, 1e300]
    many = _all_probabilities(calibrator, predicted, limits)
    for i, value in enumerate(predicted.tolist()):
        one = _all_probabilities(calibrator, np.array([value]), limits)
        assert [row[0] for row in one] == [row[i] for row in many]
    assert _all_probabilities(calibrator, predicted, limits) == many  # looked up or computed afresh, the same
    if frozen:
        assert _all_probabilities(calibrator, predicted, limits) == _all_probabilities(live, predicted, limits)


def test_rows_of_a_ranking_are_answered_as_their_own_probabilities() -> None:
    # probabilities_at reads a ranking's rows from the log ratios of all its rows, taken once
    rng = np.random.default_rng(6)
    live = ShapeCalibrator(min_residuals=5, min_spread_n=3)
    _learn(live, rng, 300)
    predicted = np.concatenate([rng.uniform(0.5, 30.0, size=9), [1e-300, np.inf]])
    for calibrator in (live, live.frozen()):
        for shape, kind, count in CELLS:
            for limit in (3.0, 10.0, 1e5):
                x = log_ratios(limit, predicted)
                for at in (np.arange(predicted.size), np.array([2]), np.array([0, 4, 9, 10])):
                    out = np.full(predicted.size, -1.0)
                    calibrator.probabilities_at(shape, kind, count, "m", x, at, 0.95, out)
                    want = calibrator.probabilities(shape, kind, count, "m", predicted[at], limit, 0.95)
                    assert out[at].tolist() == want.tolist()
                    assert (np.delete(out, at) == -1.0).all()  # the other rows untouched


def test_packed_windows_are_kept_by_a_frozen_copy_only_until_it_learns() -> None:
    rng = np.random.default_rng(7)
    live = ShapeCalibrator(min_residuals=5, min_spread_n=3)
    _learn(live, rng, 300)
    predicted = rng.uniform(0.5, 30.0, size=12)
    frozen = live.frozen()
    kept = _all_probabilities(frozen, predicted, [10.0])
    assert frozen._packed
    _learn(live, rng, 300)  # the live one moves on; the copy's answers do not
    assert _all_probabilities(frozen, predicted, [10.0]) == kept
    assert _all_probabilities(live, predicted, [10.0]) != kept
    _learn(frozen, np.random.default_rng(8), 300)  # a copy made to learn forgets what it kept
    assert frozen._packed is None and frozen._answered is None
    twin = ShapeCalibrator(min_residuals=5, min_spread_n=3)
    _learn(twin, np.random.default_rng(7), 300)
    _learn(twin, np.random.default_rng(8), 300)
    assert _all_probabilities(frozen, predicted, [10.0]) == _all_probabilities(twin, predicted, [10.0])


def test_packed_cache_is_bounded() -> None:
    rng = np.random.default_rng(9)
    live = ShapeCalibrator(min_residuals=5, min_spread_n=3)
    _learn(live, rng, 200)
    frozen = live.frozen()
    x = np.zeros(3)
    for i in range(MAX_PACKED + 10):
        frozen.probabilities_at(SHAPES[1], "A", 1, "m", x, np.arange(3), 0.5 + i / (4 * MAX_PACKED), np.ones(3))
    assert 0 < len(frozen._packed) <= MAX_PACKED
