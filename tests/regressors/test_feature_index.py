"""The feature index (:mod:`predictor.regressors.feature_index`): layouts cached, those with names it
does not hold included, without changing a vector, a position or the count of dropped names; and the
``rls`` predictor's vector of a record from its planned parts (identity features apart) equal to the
whole row's, to the bit, past the index's cap too."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.features.extract import feature_row
from predictor.predictors import create
from predictor.regressors.feature_index import FeatureIndex
from predictor.service.synthetic import fleet_records, synthetic_records

NAMES = [f"f{i}" for i in range(12)]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.lists(st.tuples(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True),
                                             st.booleans()), min_size=1, max_size=40))
def test_cached_layouts_give_what_the_columns_give(cap, rows):
    # each row asked twice (the second from the cache), against what the columns say at that moment
    index = FeatureIndex(max_features=cap)
    for names, grow in rows:
        names = tuple(names)
        values = np.arange(1.0, len(names) + 1.0)
        for _ in range(2):
            dropped, columns = index.dropped, dict(index.columns)
            vector = index.vector_of(names, values, grow=grow)
            if grow:
                for name in names:
                    if name not in columns and len(columns) < cap:
                        columns[name] = len(columns) + 1
                assert index.dropped == dropped + sum(name not in columns for name in names)
            else:
                assert index.dropped == dropped
            assert index.columns == columns
            expected = np.zeros(len(columns) + 1)
            expected[0] = 1.0
            for name, value in zip(names, values, strict=True):
                if name in columns:
                    expected[columns[name]] = value
            assert vector.tolist() == expected.tolist()


def test_an_rls_vector_from_planned_parts_is_the_whole_rows():
    for spec in ("rls", "rls:features='fine'", "rls:features='coarse'"):
        for records in (fleet_records(1500, models=120, device_kinds=12, seed=1), synthetic_records(600, seed=3)):
            predictor = create(spec)
            compared = 0
            for record in records:
                model = predictor._models.get(predictor._key(record))
                if model is not None:
                    whole = model.vectorize_row(*feature_row(record, predictor.features), grow=False)
                    assert predictor._vector(model, record).tobytes() == whole.tobytes()
                    compared += 1
                predictor.predict_learn_one(record)
            assert compared == len(records) - 1
            index = predictor._models[""].index
            if spec == "rls" and len(records) == 1500:  # the fleet's: past the cap, names dropped
                assert len(index.columns) == index.max_features and index.dropped > 0
