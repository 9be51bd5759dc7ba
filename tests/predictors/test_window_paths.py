"""``sgd``'s and ``ensemble``'s answers as a function of the window (the fixed point's per-window
path of a single query) give the numbers of the record built for that window, bit for bit."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import learnable_records, records

from predictor.features.window import at_window
from predictor.predictors import create
from predictor.records.record import BatchSpec, CoRunner, Record

windows = st.one_of(st.just(0.0), st.just(-1.0), st.floats(1e-6, 1e4), st.just(1e300))


@settings(max_examples=25, deadline=None)
@given(
    st.lists(learnable_records, min_size=5, max_size=40),
    st.lists(records, min_size=1, max_size=6),
    st.sampled_from(["sgd", "sgd:log_target=False", "ensemble:experts='rls,sgd'",
                     "ensemble:experts='rls,sgd,solo',split_by=None", "ensemble:experts='sgd,solo',eta=0"]),
    st.data(),
)
def test_window_latency_is_the_window_records_prediction(train, queries, spec, data):
    predictor = create(spec).fit(train)
    for record in (*queries, *train[:3]):
        remaining = [data.draw(st.one_of(st.none(), st.just(0.0), st.floats(0.0, 1e3))) for _ in record.co_runners]
        latency = predictor.window_latency(record, remaining)
        if latency is None:
            assert spec.startswith("sgd") and all(ms is None for ms in remaining)
            continue
        for window in data.draw(st.lists(windows, min_size=1, max_size=6)):
            expected = predictor.predict_many([at_window(record, remaining, window)])[0]
            got = latency(window)
            assert got == expected or (math.isnan(got) and math.isnan(expected))


def test_window_paths_are_offered_where_a_co_runner_moves():
    train = [Record("gpu0", BatchSpec("a", 2, {"l2": 0.5}), 10.0 + i, solo_latency_ms=9.0,
                    co_runners=(CoRunner("b", 1, {"l2": 0.2}, overlap=0.5),)) for i in range(10)]
    sgd = create("sgd").fit(train)
    assert sgd.window_latency(train[0], [None]) is None
    assert sgd.window_latency(train[0], [3.0]) is not None
    assert create("ensemble:experts='rls,sgd'").fit(train).window_latency(train[0], [3.0]) is not None
