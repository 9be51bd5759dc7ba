"""The ``sgd`` predictor's steps compiled over blocks (:mod:`predictor.predictors.sgd_kernel`) learn what
river's ``MaxAbsScaler | LinearRegression`` learns one observation at a time: the same raw predictions
and the same state, to the bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from river_sgd import river_pipeline

from predictor.features.contention import is_contention
from predictor.predictors import create
from predictor.predictors.sgd import SgdPredictor
from predictor.predictors.sgd_kernel import SgdRun, supports
from predictor.predictors.sgd_model import SgdModel

NAMES = ("own:a", "log_batch", "co:b", "co:count", "co_model:m", "x:a", "sig:util", "pair:m|n")
"""Feature names, contention ones (``co:``, ``co_model:``, ``x:``, ``pair:``) among them."""

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@st.composite
def streams(draw):
    """Rows of features (a few names each, in any order, some 0) and their targets, in blocks."""
    rows = []
    for _ in range(draw(st.integers(1, 40))):
        names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=len(NAMES), unique=True))
        values = draw(st.lists(st.one_of(finite, st.just(0.0)), min_size=len(names), max_size=len(names)))
        rows.append((dict(zip(names, values, strict=True)), draw(st.floats(-5, 5))))
    cuts = sorted(draw(st.lists(st.integers(0, len(rows)), max_size=4)))
    return rows, cuts


def _reference(predictor: SgdPredictor, rows: list[tuple[dict[str, float], float]]) -> list[float]:
    """River's raw prediction of each row before learning it, as :class:`SgdPredictor` steps, by river's
    own pipeline (holding the predictor's state, written back into the predictor after)."""
    pipeline = river_pipeline(predictor._model)
    weights = pipeline["LinearRegression"]._weights
    out = []
    for features, target in rows:
        out.append(pipeline.predict_one(features))
        pipeline.learn_one(features, target)
        if predictor.non_negative:
            for name in features:
                if is_contention(name) and weights[name] < 0:
                    weights[name] = 0.0
    predictor._model = SgdModel.from_pipeline(pipeline)
    return out


def _compiled(predictor: SgdPredictor, rows: list[tuple[dict[str, float], float]], cuts: list[int]) -> list[float]:
    """The same rows through :class:`SgdRun`, in blocks cut at ``cuts`` (empty blocks included)."""
    run = SgdRun(predictor)
    out: list[float] = []
    for start, stop in zip([0, *cuts], [*cuts, len(rows)], strict=True):
        part = rows[start:stop]
        positions = [run.columns(tuple(features)) for features, _ in part]
        offsets = np.cumsum([0] + [len(p) for p in positions])
        block = run.block(offsets, np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64),
                          np.array([v for features, _ in part for v in features.values()]),
                          np.array([t for _, t in part]))
        block.compute()
        out.extend(block.predictions.tolist())
    run.finish()
    return out


def _state(predictor: SgdPredictor) -> tuple:
    model = predictor._model
    return dict(model.weights), dict(model.abs_max), model.intercept, model.n_iterations


@settings(max_examples=60, deadline=None)
@given(stream=streams(), warm=streams(), non_negative=st.booleans(), learning_rate=st.sampled_from([0.01, 0.3]))
def test_blocks_learn_what_river_learns_to_the_bit(stream, warm, non_negative, learning_rate):
    spec = f"sgd:non_negative={non_negative},learning_rate={learning_rate}"
    reference, compiled = create(spec), create(spec)
    for predictor in (reference, compiled):  # a model that has learned already (read into the run's arrays)
        _reference(predictor, warm[0])
    rows, cuts = stream
    expected = _reference(reference, rows)
    got = _compiled(compiled, rows, cuts)
    _assert_same(got, expected)  # a value near the largest double over a tiny maximum: inf and NaN alike
    _assert_same(_state(compiled), _state(reference))


def _assert_same(got, expected) -> None:
    """Equal to the bit, a NaN equal to a NaN."""
    if isinstance(expected, dict):
        assert list(got) == list(expected)
        got, expected = list(got.values()), list(expected.values())
    if isinstance(expected, (list, tuple)) and expected and isinstance(expected[0], dict):
        for a, b in zip(got, expected, strict=True):
            _assert_same(a, b)
        return
    np.testing.assert_array_equal(np.array(got, dtype=float), np.array(expected, dtype=float), strict=True)


def test_new_names_past_the_arrays_and_a_finished_run():
    """Columns numbered past the arrays' size grow them at the next block (the contention flags too);
    a finished run takes no block."""
    names = [f"co:f{i}" for i in range(40)]
    rows = [({name: -1.0 - i for name in names[: 2 + i]}, 3.0) for i in range(38)]
    reference, compiled = create("sgd"), create("sgd")
    expected = _reference(reference, rows)
    assert _compiled(compiled, rows, [1, 20]) == expected
    assert _state(compiled) == _state(reference)
    assert min(compiled._model.weights.values()) >= 0.0  # projected
    run = SgdRun(compiled)
    run.finish()
    with pytest.raises(RuntimeError, match="finished"):
        run.block(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))


def test_blocks_are_checked():
    run = SgdRun(create("sgd"))
    at = run.columns(("own:a", "co:b"))
    with pytest.raises(ValueError, match="offsets"):
        run.block(np.array([0, 2]), at, np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="column"):
        run.block(np.array([0, 2]), np.array([0, 5]), np.ones(2), np.ones(1))


def test_only_the_pipeline_it_builds_is_supported():
    assert supports(create("sgd")) and supports(create("sgd:log_target=False,intercept_lr=0.0"))
    assert not supports(create("sgd:l2=0.01")) and not supports(create("rls"))
    with pytest.raises(ValueError, match="sgd predictor"):
        SgdRun(create("sgd:l2=0.01"))


@settings(max_examples=60, deadline=None)
@given(warm=streams(), asked=streams())
def test_raw_prediction_is_rivers_predict_one_and_writes_nothing(warm, asked):
    """What an answer computes (:meth:`SgdPredictor.raw_prediction`) is river's ``predict_one`` to the
    bit, without the scaler's entry ``predict_one`` adds for a name it has not seen."""
    predictor = create("sgd")
    _reference(predictor, warm[0])
    before = _state(predictor)
    got = [predictor.raw_prediction(features) for features, _ in asked[0]]
    _assert_same(_state(predictor), before)
    river = river_pipeline(predictor._model)
    _assert_same(got, [river.predict_one(features) for features, _ in asked[0]])
