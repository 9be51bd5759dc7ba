"""The one-row fast paths (names and values, no feature dict) give the dict paths' numbers, bit for bit."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from strategies import learnable_records, records

from predictor.features.extract import (
    FEATURE_SETS,
    feature_row,
    fine_features,
    interaction_features,
    interaction_row,
    planned_parts,
)
from predictor.predictors import create
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.regressors.least_squares import RLS
from predictor.service.synthetic import synthetic_records


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes and identical float64 bit patterns (NaNs and signed zeros included)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool((a.view(np.int64) == b.view(np.int64)).all())


def dict_row(features: dict[str, float]) -> tuple[tuple[str, ...], np.ndarray]:
    return tuple(features), np.array(list(features.values()), dtype=float)


@settings(max_examples=200, deadline=None)
@given(records)
def test_interaction_row_is_the_dict(record):
    names, values = interaction_row(record)
    expected_names, expected = dict_row(interaction_features(record))
    assert names == expected_names
    assert same_bits(values, expected)


@settings(max_examples=50, deadline=None)
@given(records, st.sampled_from(sorted(FEATURE_SETS)))
def test_feature_row_of_every_set(record, features):
    names, values = feature_row(record, features)
    expected_names, expected = dict_row(FEATURE_SETS[features](record))
    assert names == expected_names
    assert same_bits(values, expected)


def test_colliding_interaction_name_falls_back_to_the_dict():
    """An own attribute named like an interaction term: the dict merges the two, and so does the row."""
    record = Record("gpu0", BatchSpec("a", 2, {"x": 1.5, "y": 2.0, "x*own:y": 5.0}), None,
                    co_runners=(CoRunner("b", 1, {"x": 0.5}, overlap=0.5),))
    features = interaction_features(record)
    names, values = interaction_row(record)
    assert len(names) == len(set(names)) == len(features)
    assert same_bits(values, dict_row(features)[1])


@settings(max_examples=40, deadline=None)
@given(st.lists(records, min_size=1, max_size=12), st.booleans())
def test_rls_rows_equal_dict_vectors_while_columns_grow(stream, scale_features):
    """Two regressors learn the same stream, one from dicts, one from rows: same columns, vectors,
    weights and predictions, as new names keep adding columns (and the cap drops some)."""
    by_dict = RLS(max_features=24, scale_features=scale_features, non_negative_contention=True)
    by_row = RLS(max_features=24, scale_features=scale_features, non_negative_contention=True)
    for i, record in enumerate(stream):
        features = interaction_features(record)
        row = interaction_row(record)
        assert same_bits(by_row.vectorize_row(*row, grow=False), by_dict.vectorize(features, grow=False))
        assert by_row.predict_vector(by_row.vectorize_row(*row, grow=False)) == by_dict.predict_one(features)
        vector = by_dict.vectorize(features, grow=True)
        assert same_bits(by_row.vectorize_row(*row, grow=True), vector)
        assert by_row.index.columns == by_dict.index.columns
        y = math.sin(i) + 1.0
        by_dict.learn_vector(vector, y)
        by_row.learn_one(features, y)
        assert same_bits(by_row._weights, by_dict._weights)


@settings(max_examples=20, deadline=None)
@given(st.lists(learnable_records, min_size=5, max_size=40), st.lists(records, min_size=1, max_size=10),
       st.sampled_from(sorted(FEATURE_SETS)), st.sampled_from([None, "model"]))
def test_rls_predictor_one_row_equals_the_dict_path(train, queries, features, split_by):
    """The predictor's answers (fast path) are what its models make of the feature dicts."""
    predictor = create("rls", features=features, split_by=split_by).fit(train)
    for record in (*queries, *train[:3]):
        model = predictor._models.get(predictor._key(record))
        if model is None:
            slowdown = 1.0
        else:
            slowdown = math.exp(min(model.predict_one(FEATURE_SETS[features](record)), 10.0))
        assert predictor.predict_one(record) == predictor._to_latency(record, slowdown)



_few_models = st.sampled_from(["a", "b", "c"])
_crowded = st.builds(
    Record, device=st.just("d0"),
    batch=st.builds(BatchSpec, model=_few_models, batch_size=st.integers(1, 4), attrs=st.fixed_dictionaries({"u": st.floats(0, 1)})),
    latency_ms=st.just(1.0),
    co_runners=st.lists(st.builds(CoRunner, model=_few_models, batch_size=st.integers(1, 4),
                                  attrs=st.fixed_dictionaries({"u": st.floats(0, 1)}), overlap=st.sampled_from([0.0, 0.5, 1.0])),
                        max_size=5).map(tuple),
    signals=st.fixed_dictionaries({"s": st.floats(0, 1)}),
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_crowded, records), st.sampled_from(sorted(FEATURE_SETS)))
@example(Record("d0", BatchSpec("a", 1), 1.0, co_runners=(CoRunner("a", 1, overlap=0.0), CoRunner("b", 1, overlap=0.5),
                                                          CoRunner("a", 1, overlap=0.5))), "interactions")
def test_planned_parts_from_the_fine_features_are_the_planned_parts(record, features):
    """Several learners share one record's fine features: the planned parts derived from them are
    ``planned_parts``' (the same layout, the same names in the same order, the same bits), co-runners of
    overlap 0 and of one model repeated included."""
    fine = fine_features(record)
    before = list(fine.items())
    layout, base, identity = planned_parts(record, features, fine)
    expected_layout, expected_base, expected_identity = planned_parts(record, features)
    assert layout.names == expected_layout.names
    for got, expected in ((base, expected_base), (identity, expected_identity)):
        assert list(got) == list(expected)
        assert same_bits(list(got.values()), list(expected.values()))
    assert list(fine.items()) == before  # not changed


_LEARNED_ENSEMBLE = create("ensemble:experts='rls,sgd,rls:features=coarse'").fit(
    [r for r in synthetic_records(300, seed=8)])


@settings(max_examples=100, deadline=None)
@given(st.one_of(_crowded, learnable_records, records))
def test_an_ensembles_answer_from_shared_fine_features_is_its_experts_answers_combined(record):
    """The ensemble computes a record's fine features once for its ``rls`` and ``sgd`` experts: its answer is
    the combination of each expert's own ``predict_one``, bit for bit."""
    ensemble = _LEARNED_ENSEMBLE
    expected = ensemble._combine(record, [expert.predict_one(record) for expert in ensemble.expert_predictors])
    assert same_bits([ensemble.predict_one(record)], [expected])
