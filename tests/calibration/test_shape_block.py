"""The per-shape calibrator learned by blocks (compiled) equals it learned call by call, bit for bit.

Random streams of outcomes (shapes, device kinds, counts, models, linked answers, confidences on
and off the adaptive grid, residuals of any size) go into two equal calibrators: one by
:func:`predictor.calibration.shape_block.learn_block` in random blocks, the other by ``score``/``add`` one
at a time. The answers and every piece of state (windows in arrival order, spreads, adaptive
levels, the order cells were made in, kinds, counters) must be equal exactly, and so must
what their pickles restore.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.calibration.conformal import ResidualWindow
from predictor.calibration.shape import ShapeCalibrator
from predictor.calibration.shape_block import Outcome, learn_block, learn_one
from predictor.calibration.shapes import QueryShape

SHAPES = [QueryShape.parse(key) for key in
          ("none/nosig", "overlap/sig", "overlap/nosig", "unknown/nosig", "remaining/sig", "live/nosig")]


def _state(cal: ShapeCalibrator) -> tuple:
    """Everything a calibrator holds, dict order included (a bit-for-bit comparison: floats by repr)."""
    return (
        [(cell, w.size, [repr(v) for v in w.values()], [repr(v) for v in w._sorted], w.adds)
         for cell, w in cal._windows.items()],
        [(key, repr(s.m), repr(s.s), s.n) for key, s in cal._spreads.items()],
        [(cell, [repr(a) for a in alphas]) for cell, alphas in cal._alphas.items()],
        sorted(cal._kinds), cal.n_added,
    )


def _same(a, b) -> bool:
    return repr(a) == repr(b)


outcomes_strategy = st.lists(
    st.tuples(
        st.integers(0, len(SHAPES) - 1),
        st.sampled_from(["cpu", "gpu", "*", ""]),
        st.integers(0, 3),
        st.sampled_from(["m", "n", ""]),
        st.floats(0.05, 200.0),  # predicted
        st.one_of(st.floats(-3.0, 3.0), st.floats(-30.0, 30.0)),  # log(actual / predicted)
        st.booleans(),  # linked
        st.sampled_from([None, 0.9, 0.95, 0.99, 0.5, 0.975, 0.999]),
    ),
    min_size=1, max_size=160,
)


def _outcomes(raw: list) -> list[Outcome]:
    out = []
    for shape, kind, count, model, predicted, log_ratio, linked, confidence in raw:
        if linked:
            confidence = None
        out.append(Outcome(SHAPES[shape], kind, count, model, predicted * math.exp(log_ratio), predicted,
                           linked, confidence))
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    raw=outcomes_strategy,
    cuts=st.lists(st.tuples(st.integers(1, 60), st.booleans()), min_size=1, max_size=8),
    window=st.sampled_from([1, 3, 8, 40]),
    min_residuals=st.sampled_from([1, 2, 5]),
    min_spread_n=st.sampled_from([1, 3]),
    gamma=st.sampled_from([0.0, 0.005, 0.05]),
    monotone=st.booleans(),
    scaled=st.booleans(),
    max_cells=st.sampled_from([3, 12, 20_000]),
)
def test_blocks_equal_calls(raw, cuts, window, min_residuals, min_spread_n, gamma, monotone, scaled, max_cells):
    settings_ = dict(window=window, min_residuals=min_residuals, min_spread_n=min_spread_n, gamma=gamma,
                     monotone=monotone, scaled=scaled, max_cells=max_cells)
    by_block, by_call = ShapeCalibrator(**settings_), ShapeCalibrator(**settings_)
    outcomes = _outcomes(raw)
    got, at, c = [], 0, 0
    while at < len(outcomes):
        size, blockwise = cuts[c % len(cuts)]
        c += 1
        part = outcomes[at:at + size]
        got += learn_block(by_block, part, fewest=2) if blockwise else [learn_one(by_block, o) for o in part]
        at += size
    expected = [learn_one(by_call, o) for o in outcomes]
    assert _same(got, expected)
    assert _state(by_block) == _state(by_call)
    # a snapshot of each restores the same calibrator (the bytes may differ: pickle shares equal
    # float objects where the calls happened to make one object, the block one per window)
    assert _state(pickle.loads(pickle.dumps(by_block))) == _state(pickle.loads(pickle.dumps(by_call)))


@settings(max_examples=30, deadline=None)
@given(raw=outcomes_strategy)
def test_a_frozen_copy_is_not_changed_by_its_source_learning_a_block(raw):
    cal = ShapeCalibrator(window=8, min_residuals=2, min_spread_n=1, gamma=0.05)
    outcomes = _outcomes(raw)
    half = len(outcomes) // 2
    learn_block(cal, outcomes[:half], fewest=2)
    frozen = cal.frozen()
    before = _state(frozen)
    learn_block(cal, outcomes[half:], fewest=2)
    assert _state(frozen) == before
    twin = pickle.loads(pickle.dumps(cal))
    assert _state(twin)[1:] == _state(cal)[1:]
    assert [(cell, w.values()) for cell, w in twin._windows.items()] == [
        (cell, w.values()) for cell, w in cal._windows.items()]


@settings(max_examples=30, deadline=None)
@given(raw=outcomes_strategy)
def test_a_frozen_copy_is_not_changed_by_its_source_learning_call_by_call(raw):
    cal = ShapeCalibrator(window=8, min_residuals=2, min_spread_n=1, gamma=0.05)
    outcomes = _outcomes(raw)
    half = len(outcomes) // 2
    for outcome in outcomes[:half]:
        learn_one(cal, outcome)
    frozen = cal.frozen()
    before = _state(frozen)
    for outcome in outcomes[half:]:
        learn_one(cal, outcome)
    assert _state(frozen) == before


@pytest.mark.parametrize("by_block", [True, False])
def test_a_frozen_copy_keeps_its_levels_while_its_source_adapts_them(by_block):
    # a cell's adaptive levels move once it answers on its own; the copy published before must not
    rng = np.random.default_rng(3)
    outcomes = [Outcome(SHAPES[0], "cpu", 1, "m", 10.0 * math.exp(r), 10.0, False, 0.9)
                for r in rng.normal(0.0, 0.3, 200)]
    cal = ShapeCalibrator(window=50, min_residuals=5, min_spread_n=1, gamma=0.05)
    learn_block(cal, outcomes[:100], fewest=2)
    assert cal._alphas
    frozen = cal.frozen()
    before = _state(frozen)
    if by_block:
        learn_block(cal, outcomes[100:], fewest=2)
    else:
        for outcome in outcomes[100:]:
            learn_one(cal, outcome)
    assert _state(cal)[2] != before[2]  # the source's levels moved
    assert _state(frozen) == before


def test_an_outcome_the_calls_refuse_is_refused_the_same_way():
    shape = SHAPES[1]
    good = [Outcome(shape, "cpu", 1, "m", 10.0 + i, 10.0, False, 0.95) for i in range(5)]
    for bad in (Outcome(shape, "cpu", 1, "m", -1.0, 10.0), Outcome(shape, "cpu", 1, "m", 1.0, math.inf),
                Outcome(shape, "cpu", 1, "m", 1.0, 1.0, False, 1.5)):
        by_block, by_call = ShapeCalibrator(min_residuals=2), ShapeCalibrator(min_residuals=2)
        with pytest.raises(ValueError):
            learn_block(by_block, [*good, bad, *good], fewest=2)
        with pytest.raises(ValueError):
            for o in [*good, bad, *good]:
                learn_one(by_call, o)
        assert _state(by_block) == _state(by_call)  # what came before the refused one is learned, the rest not


def test_a_long_stream_by_blocks_and_calls_mixed_equals_calls():
    """Full windows (residuals evicted, blocks that add few residuals to a window and many),
    blocks between calls (what a block left cached must not outlive a call's change)."""
    rng = np.random.default_rng(7)
    settings_ = dict(window=200, min_residuals=20, min_spread_n=10, gamma=0.05)
    by_block, by_call = ShapeCalibrator(**settings_), ShapeCalibrator(**settings_)
    outcomes = []
    for _ in range(6000):
        count = int(rng.integers(0, 4))
        shape = SHAPES[0] if count == 0 else SHAPES[int(rng.integers(1, len(SHAPES)))]
        predicted = float(rng.uniform(1.0, 50.0))
        outcomes.append(Outcome(shape, str(rng.choice(["cpu", "gpu"])), count, str(rng.choice(["a", "b"])),
                                predicted * float(np.exp(rng.normal(0.2, 0.4))), predicted,
                                bool(rng.random() < 0.1), None))
        outcomes[-1] = outcomes[-1]._replace(confidence=None if outcomes[-1].linked else 0.95)
    got, at = [], 0
    for size in rng.integers(1, 400, 200).tolist():
        part = outcomes[at:at + size]
        got += [learn_one(by_block, o) for o in part] if size < 20 else learn_block(by_block, part)
        at += size
    got += learn_block(by_block, outcomes[at:])
    assert _same(got, [learn_one(by_call, o) for o in outcomes])
    assert _state(by_block) == _state(by_call)


def test_a_window_of_another_size_sends_the_block_the_per_call_way():
    shape = SHAPES[1]
    by_block, by_call = ShapeCalibrator(window=8, min_residuals=2), ShapeCalibrator(window=8, min_residuals=2)
    for cal in (by_block, by_call):
        odd = cal._windows[(shape.key, "cpu", 1)] = ResidualWindow(5)  # as a merge of other sizes leaves
        for value in (0.1, -0.2, 0.3):
            odd.add(value)
    outcomes = [Outcome(shape, "cpu", 1, "m", 10.0 + i, 10.0, False, 0.9) for i in range(12)]
    assert _same(learn_block(by_block, outcomes, fewest=2), [learn_one(by_call, o) for o in outcomes])
    assert _state(by_block) == _state(by_call)
    assert by_block._windows[(shape.key, "cpu", 1)].size == 5


@pytest.mark.parametrize("watch_most, most", [(4, 500_000), (4096, 60), (4, 60)])
def test_a_mirror_that_starts_over_or_reads_a_long_watch_list_equals_calls(monkeypatch, watch_most, most):
    """The block path's mirror of the state is brought up to what the calls between blocks changed:
    cell by cell from the watch list, or all of it once the list ran over; and a mirror with too many
    names starts over."""
    from predictor.calibration import shape, shape_block

    monkeypatch.setattr(shape, "WATCH_MOST", watch_most)
    monkeypatch.setattr(shape_block, "WATCH_MOST", watch_most)
    monkeypatch.setattr(shape_block._Mirror, "MOST", most)
    rng = np.random.default_rng(11)
    settings_ = dict(window=30, min_residuals=3, min_spread_n=2, gamma=0.05)
    by_block, by_call = ShapeCalibrator(**settings_), ShapeCalibrator(**settings_)
    outcomes = [Outcome(SHAPES[int(rng.integers(0, len(SHAPES)))], str(rng.choice(["cpu", "gpu", "tpu"])),
                        int(rng.integers(0, 4)), str(rng.choice(["a", "b", "c"])), 5.0 * float(np.exp(rng.normal(0, 0.5))),
                        5.0, False, float(rng.choice([0.9, 0.95, 0.97]))) for _ in range(1500)]
    got, at = [], 0
    for size in rng.integers(1, 60, 60).tolist():
        part = outcomes[at:at + size]
        got += [learn_one(by_block, o) for o in part] if size % 3 == 0 else learn_block(by_block, part, fewest=2)
        at += size
    got += learn_block(by_block, outcomes[at:])
    assert _same(got, [learn_one(by_call, o) for o in outcomes])
    assert _state(by_block) == _state(by_call)


@settings(max_examples=20, deadline=None)
@given(raw=outcomes_strategy)
def test_a_pickle_from_before_the_spreads_were_columns_restores_the_same_calibrator(raw):
    # snapshots written before hold the running spreads as a dict of Spread objects: the state pickle
    # hands to __setstate__ then; they must load as they were
    cal = ShapeCalibrator(window=8, min_residuals=2, min_spread_n=1, gamma=0.05)
    learn_block(cal, _outcomes(raw), fewest=2)
    twin = ShapeCalibrator.__new__(ShapeCalibrator)
    twin.__setstate__(pickle.loads(pickle.dumps(dict(cal.__dict__))))
    assert _state(twin)[1:] == _state(cal)[1:]  # (a window's change count starts again once unpickled)
    assert _state(twin)[1:] == _state(pickle.loads(pickle.dumps(cal)))[1:]
