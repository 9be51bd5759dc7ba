"""A record's features and an rls prediction as a function of the window (the fixed point's
per-window path) give the numbers of the record built for that window, bit for bit."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import learnable_records, records

from predictor.features.extract import fine_features
from predictor.features.window import at_window, fine_program, overlap_at
from predictor.predictors import create
from predictor.records.record import BatchSpec, CoRunner, Record

overlaps = st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0))
windows = st.one_of(st.just(0.0), st.just(-1.0), st.floats(1e-6, 1e4), st.just(1e300))


def same_bits(a: list[float], b: list[float]) -> bool:
    """Identical float64 bit patterns (signed zeros included)."""
    return np.array_equal(np.array(a, dtype=float).view(np.int64), np.array(b, dtype=float).view(np.int64))


@settings(max_examples=300, deadline=None)
@given(records, st.data())
def test_fine_program_gives_the_fine_features_at_any_overlaps(record, data):
    program = fine_program(record)
    expected = fine_features(record)
    assert program is not None
    assert program.names == tuple(expected)
    assert same_bits(program.values([r.overlap for r in record.co_runners]), list(expected.values()))
    # other overlaps with the same zeros: the features of the record at those overlaps
    new = [0.0 if r.overlap == 0.0 else data.draw(st.floats(1e-9, 1.0)) for r in record.co_runners]
    moved = Record(record.device, record.batch, None, co_runners=tuple(
        CoRunner(r.model, r.batch_size, r.attrs, overlap=o) for r, o in zip(record.co_runners, new, strict=True)),
        signals=record.signals)
    assert same_bits(program.values(new), list(fine_features(moved).values()))


def test_fine_program_refuses_overlaps_with_other_zeros():
    record = Record("gpu0", BatchSpec("a", 2, {"l2": 0.5}), None,
                    co_runners=(CoRunner("b", 1, {"l2": 0.2}, overlap=0.5), CoRunner("c", 4, {}, overlap=0.0)))
    program = fine_program(record)
    assert program.values([0.0, 0.0]) is None
    assert program.values([0.5, 0.3]) is None
    assert program.values([0.25, 0.0]) == list(fine_features(at_window(record, [0.5, None], 2.0)).values())


def test_overlap_at_the_window():
    assert overlap_at(5.0, 10.0) == 0.5
    assert overlap_at(20.0, 10.0) == 1.0
    assert overlap_at(5.0, 0.0) == 1.0


@settings(max_examples=25, deadline=None)
@given(
    st.lists(learnable_records, min_size=5, max_size=40),
    st.lists(records, min_size=1, max_size=6),
    st.sampled_from(["fine", "interactions", "coarse"]),
    st.sampled_from([None, "model"]),
    st.booleans(),
    st.data(),
)
def test_rls_window_latency_is_the_window_records_prediction(train, queries, features, split_by, log_target, data):
    predictor = create("rls", features=features, split_by=split_by, log_target=log_target).fit(train)
    for record in (*queries, *train[:3]):
        remaining = [data.draw(st.one_of(st.none(), st.just(0.0), st.floats(0.0, 1e3))) for _ in record.co_runners]
        latency = predictor.window_latency(record, remaining)
        if latency is None:
            assert features == "coarse" or all(ms is None for ms in remaining) or (
                predictor._models.get(predictor._key(record)) is None)
            continue
        for window in data.draw(st.lists(windows, min_size=1, max_size=6)):
            expected = predictor.predict_many([at_window(record, remaining, window)])[0]
            got = latency(window)
            assert got == expected or (math.isnan(got) and math.isnan(expected))


def test_window_latency_is_not_offered_without_a_moving_co_runner():
    train = [Record("gpu0", BatchSpec("a", 2, {"l2": 0.5}), 10.0 + i, solo_latency_ms=9.0,
                    co_runners=(CoRunner("b", 1, {"l2": 0.2}, overlap=0.5),)) for i in range(10)]
    predictor = create("rls").fit(train)
    assert predictor.window_latency(train[0], [None]) is None
    assert predictor.window_latency(train[0], [3.0]) is not None
    assert create("solo").fit(train).window_latency(train[0], [3.0]) is None


@settings(max_examples=30, deadline=None)
@given(st.lists(learnable_records, min_size=5, max_size=30), st.lists(records, min_size=1, max_size=5))
def test_rls_row_predictor_is_the_vector_path(train, queries):
    """The regressor's row predictor (columns, scales and weights looked up once) answers what
    vectorising each row and predicting it answers, unknown names included."""
    from predictor.features.extract import interaction_row

    predictor = create("rls", split_by=None).fit(train)
    model = predictor._models[""]
    for record in queries:
        names, values = interaction_row(record)
        predict = model.row_predictor(names)
        if predict is None:
            continue
        assert predict(values) == model.predict_vector(model.vectorize_row(names, values, grow=False))
        assert predict(values * 0.5) == model.predict_vector(model.vectorize_row(names, values * 0.5, grow=False))
