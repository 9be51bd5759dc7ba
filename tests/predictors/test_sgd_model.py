"""The ``sgd`` predictor's model (:mod:`predictor.predictors.sgd_model`) is river's
``MaxAbsScaler | LinearRegression(optimizer=SGD)`` pipeline to the bit: the same raw predictions and the
same state over any sequence of rows; a snapshot holding river's pipeline (what the ``sgd`` predictor
pickled before) loads into it and answers as before."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from river import preprocessing
from river_sgd import bits, model_state, river_pipeline, river_state

from predictor.analysis.admission_replay import partial_overlap_records
from predictor.predictors import create
from predictor.predictors.sgd import SgdPredictor
from predictor.predictors.sgd_model import SgdModel
from predictor.snapshot import restore_predictor, snapshot_predictor

values = st.one_of(
    st.just(0.0), st.just(-0.0),
    st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False),
    st.floats(-1e300, 1e300, allow_nan=False, allow_infinity=False),
    st.sampled_from([5e-324, -5e-324, 1e-310, -2.5e-308, 1e-12]),
)
rows = st.lists(
    st.tuples(st.dictionaries(st.sampled_from([f"f{i}" for i in range(12)]), values, max_size=7),
              st.floats(-5, 5, allow_nan=False)),
    min_size=1, max_size=40)
"""Rows of features (names new and seen, in any order, zeros of both signs, negatives, extreme magnitudes)
and their targets."""

hyperparameters = st.fixed_dictionaries({
    "learning_rate": st.sampled_from([0.01, 0.3, 1.0]),
    "intercept_init": st.sampled_from([0.0, 1.0]),
    "intercept_lr": st.sampled_from([0.0, 0.05]),
    "l2": st.sampled_from([0.0, 0.01]),
    "clip_gradient": st.sampled_from([1e12, 0.5]),
})


@settings(max_examples=150, deadline=None)
@given(parameters=hyperparameters, stream=rows, asked=rows)
def test_the_model_is_rivers_pipeline_to_the_bit(parameters, stream, asked):
    model = SgdModel(**parameters)
    river = river_pipeline(model)
    assert model_state(model) == river_state(river)
    for features, target in stream:  # river's predict_one adds the row's unseen names; learning adds them too
        assert bits([model.predict_one(features)]) == bits([river.predict_one(features)])
        model.learn_one(features, target)
        river.learn_one(features, target)
        assert model_state(model) == river_state(river)
    before = model_state(model)
    assert bits(model.predict_one(x) for x, _ in asked) == bits(copy.deepcopy(river).predict_one(x) for x, _ in asked)
    assert model_state(model) == before  # an answer writes nothing


@settings(max_examples=40, deadline=None)
@given(parameters=hyperparameters, stream=rows)
def test_a_pipeline_converts_to_the_same_state_and_learns_on_alike(parameters, stream):
    model = SgdModel(**parameters)
    river = river_pipeline(model)
    half = len(stream) // 2
    for features, target in stream[:half]:
        river.learn_one(features, target)
    converted = SgdModel.from_pipeline(river)
    assert model_state(converted) == river_state(river)
    for features, target in stream[half:]:
        converted.learn_one(features, target)
        river.learn_one(features, target)
    assert model_state(converted) == river_state(river)


def test_only_a_pipeline_the_model_can_be_is_converted():
    river = river_pipeline(SgdModel())
    river.steps["MaxAbsScaler"] = preprocessing.MaxAbsScaler(window_size=10)
    with pytest.raises(ValueError, match="whole stream"):
        SgdModel.from_pipeline(river)


def _sgd_experts(predictor) -> list[SgdPredictor]:
    return [p for p in (predictor, *getattr(predictor, "expert_predictors", ())) if isinstance(p, SgdPredictor)]


@pytest.mark.parametrize("spec", ["sgd", "ensemble:experts='rls,sgd'", "sgd:l2=0.01,log_target=False"])
def test_a_snapshot_holding_rivers_pipeline_loads_and_answers_as_before(spec):
    """A snapshot written before :class:`SgdModel` (the ``sgd`` predictor's state holding river's
    pipeline) restores to a predictor whose model holds the same state to the bit, answering and then
    learning exactly as the predictor that was saved."""
    records = partial_overlap_records(600, seed=3)
    predictor = create(spec)
    for record in records[:300]:
        predictor.learn_one(record)
    old = copy.deepcopy(predictor)
    for expert in _sgd_experts(old):
        expert.__dict__["_model"] = river_pipeline(expert._model)  # what the state held before
    blob = snapshot_predictor(old)
    assert b"river" in blob
    restored = restore_predictor(blob)
    for a, b in zip(_sgd_experts(restored), _sgd_experts(predictor), strict=True):
        assert type(a._model) is SgdModel and model_state(a._model) == model_state(b._model)
    asked = records[300:400]
    assert (np.array([restored.predict_one(r) for r in asked]).tobytes()
            == np.array([predictor.predict_one(r) for r in asked]).tobytes())
    for record in records[300:]:
        restored.learn_one(record)
        predictor.learn_one(record)
    for a, b in zip(_sgd_experts(restored), _sgd_experts(predictor), strict=True):
        assert model_state(a._model) == model_state(b._model)
    assert (np.array([restored.predict_one(r) for r in asked]).tobytes()
            == np.array([predictor.predict_one(r) for r in asked]).tobytes())


@settings(max_examples=60, deadline=None)
@given(parameters=hyperparameters, first=rows, second=rows, third=rows)
def test_a_journal_rewinds_the_model_to_the_bit_and_in_order(parameters, first, second, third):
    # the restore points of ingest: a journal of the names written since it started, not a copy;
    # any journal still held rewinds (the later ones end with it), and what it rewinds to learns on
    # as the model that never learned the undone rows
    model = SgdModel(**parameters)
    for features, target in first:
        model.learn_one(features, target)
    at_first = copy.deepcopy(model)
    older = model.journal()
    older_point = (model.intercept, model.n_iterations)
    for features, target in second:
        model.learn_one(features, target)
    newer = model.journal()
    assert "_journals" not in vars(copy.deepcopy(model)) and "_journals" not in vars(model.copy())
    for features, target in third:
        model.learn_one(features, target)
    model.rewind(older, *older_point)
    assert model_state(model) == model_state(at_first)
    assert list(model.abs_max) == list(at_first.abs_max) and list(model.weights) == list(at_first.weights)
    with pytest.raises(RuntimeError, match="not a journal"):
        model.rewind(newer, *older_point)  # ended with the older one
    for features, target in third:
        model.learn_one(features, target)
        at_first.learn_one(features, target)
    assert model_state(model) == model_state(at_first)


def test_a_journal_dropped_by_its_holder_ends():
    model = SgdModel()
    model.journal()  # not held
    model.learn_one({"a": 1.0}, 1.0)
    assert model._journals is None
