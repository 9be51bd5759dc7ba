"""A published copy remembers its look-ups by feature names (:mod:`predictor.runtime.version_memo`):
what it remembers is its own state's, never another version's or the live model's, and it
survives a pickle as an empty memo."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from predictor.analysis.admission_replay import partial_overlap_records
from predictor.features.extract import feature_row
from predictor.predictors import create
from predictor.predictors.ensemble import EnsemblePredictor
from predictor.predictors.rls import RlsPredictor
from predictor.predictors.sgd import SgdPredictor

RECORDS = partial_overlap_records(600, seed=11)


def _parts(predictor) -> list:
    """The sgd predictors and RLS models whose look-ups are remembered, in a fixed order."""
    out = []
    for p in (predictor, *getattr(predictor, "expert_predictors", ())):
        if isinstance(p, SgdPredictor):
            out.append(p)
        elif isinstance(p, RlsPredictor):
            out += [p._models[key] for key in sorted(p._models)]
    return out


def _asked(predictor) -> bytes:
    """Every remembered look-up, for the rows of a few records, as bytes (asked twice: the second from the memo)."""
    out = []
    for _ in range(2):
        if isinstance(predictor, EnsemblePredictor):  # each key's weighted experts
            for key in (None, *sorted({r.batch.model for r in RECORDS})):
                out += [np.float64(weight).tobytes() + type(expert).__name__.encode()
                        for weight, expert in predictor._weighted(key)]
                out += [np.float64(weight).tobytes() for weight in predictor._weights_of(key)]
        for record in RECORDS[:40]:
            for part in _parts(predictor):
                if isinstance(part, SgdPredictor):
                    names, values = feature_row(record, "fine")
                    scaled = part._scaled_weights(names)
                    out += [b"-" if scaled is None else scaled.tobytes(),
                            part._matrix_predictor(names)(values[None, :]).tobytes()]
                else:
                    names, values = feature_row(record, "interactions")
                    weights, intercept = part.matrix_weights(names)
                    row = part.row_coefficients(names)
                    out += [weights.tobytes(), np.float64(intercept).tobytes(),
                            b"-" if row is None else row[1].tobytes() + np.float64(row[0]).tobytes(),
                            part.matrix_predictor(names)(values[None, :]).tobytes()]
    return b"".join(out)


def _memo_off(predictor):
    """A copy that computes every look-up (no memo)."""
    twin = copy.deepcopy(predictor)
    for part in _memoising(twin):
        part._memo = None
    return twin


def _memoising(predictor) -> list:
    """Everything of ``predictor`` that remembers look-ups: an ensemble, its sgd experts and RLS models."""
    return [predictor] * isinstance(predictor, EnsemblePredictor) + _parts(predictor)


@pytest.mark.parametrize("spec", ["rls", "sgd", "ensemble:experts='rls,sgd'"])
def test_each_version_remembers_its_own_look_ups_and_the_live_model_none(spec):
    predictor = create(spec)
    for record in RECORDS[:300]:
        predictor.learn_one(record)
    first = predictor.frozen()
    assert all(part._memo == {} for part in _memoising(first))
    assert _asked(first) == _asked(_memo_off(first))
    assert all(part._memo for part in _memoising(first))
    for record in RECORDS[300:]:
        predictor.learn_one(record)
    second = predictor.frozen()
    assert _asked(second) == _asked(_memo_off(second))
    assert _asked(second) != _asked(first)  # the versions differ, and so do their memos
    assert all(part._memo is None for part in _memoising(predictor))  # the live model computes each time
    reloaded = pickle.loads(pickle.dumps(first))
    assert all(part._memo == {} for part in _memoising(reloaded))
    assert _asked(reloaded) == _asked(first)

