"""A published copy of an ``sgd`` predictor, alone or an ensemble's expert (:meth:`SgdPredictor.frozen
<predictor.predictors.sgd.SgdPredictor.frozen>`, :meth:`EnsemblePredictor.frozen
<predictor.predictors.ensemble.EnsemblePredictor.frozen>`): the answers of the predictor when it was
taken, to the bit, whatever the predictor learns afterwards."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from predictor.analysis.admission_replay import partial_overlap_records
from predictor.predictors import create
from predictor.predictors.sgd import SgdPredictor


def _answers(predictor, records) -> np.ndarray:
    return np.array([predictor.predict_one(r) for r in records])


@pytest.mark.parametrize("spec", ["sgd", "ensemble:experts='rls,sgd'"])
def test_a_frozen_copy_answers_as_the_predictor_did_when_it_was_taken(spec):
    records = partial_overlap_records(500, seed=5)
    predictor = create(spec)
    for record in records[:300]:
        predictor.learn_one(record)
    then = copy.deepcopy(predictor)
    published = predictor.frozen()
    asked = records[300:400]
    assert _answers(published, asked).tobytes() == _answers(predictor, asked).tobytes()
    for record in records[300:]:
        predictor.learn_one(record)
    assert _answers(predictor, asked).tobytes() != _answers(then, asked).tobytes()
    assert _answers(published, asked).tobytes() == _answers(then, asked).tobytes()
    sgds = [p for p in (published, *getattr(published, "expert_predictors", ())) if isinstance(p, SgdPredictor)]
    kept = [p for p in (then, *getattr(then, "expert_predictors", ())) if isinstance(p, SgdPredictor)]
    for a, b in zip(sgds, kept, strict=True):
        assert a._model.weights == b._model.weights and a._model.abs_max == b._model.abs_max
        assert a._model.weights is not b._model.weights
