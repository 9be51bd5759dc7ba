"""Answering never writes into a model: answering threads share one published version, so a
prediction must leave every predictor's state as it was (river's ``predict_one`` adds a scaler
entry for each unseen name; the answer paths must not)."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from predictor.predictors import create
from predictor.records.record import BatchSpec
from predictor.service.synthetic import synthetic_records

RECORDS = synthetic_records(300, seed=1)
NEW_NAMES = dataclasses.replace(  # a model, a co-runner and an attribute never learned
    RECORDS[-1], batch=BatchSpec("never-seen", 3, {"never_seen_attr": 0.5}),
    co_runners=(dataclasses.replace(RECORDS[-1].co_runners[0], model="also-never-seen"),) if RECORDS[-1].co_runners else ())


@pytest.mark.parametrize("spec", ["rls", "sgd", "tree", "forest", "ensemble", "ewma", "static", "solo"])
def test_predicting_leaves_the_state_as_it_was(spec):
    predictor = create(spec)
    for record in RECORDS[:200]:
        predictor.predict_learn_one(record)
    before = pickle.dumps(predictor)
    predictor.predict_many([*RECORDS[200:], NEW_NAMES])  # records the model has not seen, names it does not know
    assert pickle.dumps(predictor) == before
