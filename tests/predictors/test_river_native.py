"""River-native learners: river's own estimator checks, pipelines, progressive validation, and
the dict path equal to the service's fast path."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from river import checks, datasets, evaluate, metrics, preprocessing

from predictor.predictors import create
from predictor.predictors.river_native import LatencyRegressor, RiverRLS, record_to_x, x_to_record
from predictor.records.colocations import CoLocations
from predictor.regressors.boosted import BoostedResidual
from predictor.service.synthetic import synthetic_records

FAST = ["rls", "sgd", "ewma:fit_after=20", "static:fit_after=20", "solo",
        "tree:first_fit=50,refit_every=100,swap_after=20,n_estimators=20",
        "ensemble:experts='rls,sgd'"]


@pytest.mark.parametrize("model", [RiverRLS(), RiverRLS(forgetting=0.98, delta=1.0, scale_features=False),
                                   BoostedResidual(window=300, refit_every=100, first_fit=50, swap_after=20,
                                                   n_estimators=20)],
                         ids=["rls", "rls-raw", "boosted"])
def test_regressors_pass_rivers_checks(model):
    checks.check_estimator(model)


@pytest.mark.parametrize("spec", FAST)
def test_predictors_pass_rivers_checks_as_regressors(spec):
    checks.check_estimator(LatencyRegressor(spec))


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["forest", "tree", "ensemble"])
def test_slow_predictors_pass_rivers_checks_as_regressors(spec):
    checks.check_estimator(LatencyRegressor(spec))


def test_compose_in_a_pipeline_under_progressive_validation():
    for learner in (RiverRLS(delta=1.0), BoostedResidual(first_fit=100, refit_every=100, swap_after=10,
                                                         n_estimators=30)):
        pipeline = preprocessing.StandardScaler() | learner.clone()
        score = evaluate.progressive_val_score(datasets.TrumpApproval().take(400), pipeline, metrics.MAE())
        # the same by hand, as the pipeline does it: predict on x scaled by the scaler as it is; then the
        # scaler learns x and the learner learns x scaled anew
        scaler, model, errors = preprocessing.StandardScaler(), learner.clone(), []
        for x, y in datasets.TrumpApproval().take(400):
            errors.append(abs(model.predict_one(scaler.transform_one(x)) - y))
            scaler.learn_one(x)
            model.learn_one(scaler.transform_one(x), y)
        assert score.get() == pytest.approx(np.mean(errors), rel=1e-9)
        assert np.isfinite(score.get())


def test_latency_regressor_under_progressive_validation_matches_the_predictor():
    records = synthetic_records(300, seed=2)
    stream = [(record_to_x(r), r.latency_ms) for r in records]
    score = evaluate.progressive_val_score(stream, LatencyRegressor("rls"), metrics.MAPE())
    predictor = create("rls")
    errors = [abs(predictor.predict_learn_one(r) - r.latency_ms) / r.latency_ms for r in records]
    assert score.get() == pytest.approx(100 * np.mean(errors), rel=1e-9)


@pytest.mark.parametrize("spec", ["rls", "tree:first_fit=50,refit_every=50,swap_after=5,n_estimators=20",
                                  "ensemble:experts='rls,sgd'"])
def test_dict_path_equals_the_fast_path(spec):
    records = synthetic_records(200, seed=4)
    river_model = LatencyRegressor(spec)
    predictor = create(spec)
    for r in records[:150]:
        river_model.learn_one(record_to_x(r), r.latency_ms)
        predictor.learn_one(r)
    dict_path = [river_model.predict_one(record_to_x(r)) for r in records[150:]]
    # equal up to rounding: the dict path takes attributes in sorted order, which can order RLS's columns
    # differently (the same sums in another order)
    np.testing.assert_allclose(dict_path, [predictor.predict_one(r) for r in records[150:]], rtol=1e-9)
    # and the array path the service uses for rankings gives the same numbers
    rows = CoLocations.from_records([r for r in records[150:] if r.batch == records[150].batch] or records[150:151])
    np.testing.assert_allclose(predictor.predict_colocations(rows),
                               [river_model.predict_one(record_to_x(r)) for r in rows.records()], rtol=1e-9)


def test_rls_vector_path_equals_dict_path():
    model = RiverRLS(delta=1.0)
    for x, y in itertools.islice(datasets.TrumpApproval(), 200):
        model.learn_one(x, y)
    xs = [x for x, _ in itertools.islice(datasets.TrumpApproval(), 200, 260)]
    rls = model.regressor
    by_dict = [model.predict_one(x) for x in xs]
    by_vector = [rls.predict_vector(rls.vectorize(x, grow=False)) for x in xs]
    names = tuple(xs[0])
    by_matrix = rls.predict_matrix(names, np.array([[x[k] for k in names] for x in xs]))
    np.testing.assert_allclose(by_vector, by_dict, rtol=1e-12)
    np.testing.assert_allclose(by_matrix, by_dict, rtol=1e-9)


def test_flat_records_round_trip_and_name_bad_values():
    for r in synthetic_records(50, seed=6):
        # what a batch is (not when it ran nor who sent it) survives the round trip
        assert x_to_record(record_to_x(r), r.latency_ms) == dataclasses.replace(r, start_s=None, source="")
    with pytest.raises(ValueError, match="seq"):
        x_to_record({"model": "m", "seq": float("nan")})
    with pytest.raises(ValueError, match="y"):
        LatencyRegressor("rls").learn_one({"a": 1.0}, -1.0)
