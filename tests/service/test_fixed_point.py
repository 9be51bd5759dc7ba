"""The single-query fixed point (floats) answers what the column-wise one answers, to the last bit.

:func:`~predictor.service.estimates.monotone.fixed_point_one` is the one-row case of
:func:`~predictor.service.estimates.monotone.fixed_point` without arrays; a single query with co-runners
given by remaining time goes through it (:meth:`Answering._latencies`), a ranking through the
column-wise search.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.predictors import available
from predictor.records.record import BatchSpec
from predictor.service import CoRunnerSource, PlannedCoRunner, Query, Service, ServiceConfig
from predictor.service.answering import Plan
from predictor.service.estimates import monotone
from predictor.service.synthetic import MODELS, synthetic_records

KIND = "SimGPU"


@st.composite
def windows_problem(draw) -> tuple:
    """A latency non-increasing in the window: ``base * (1 + sum_i h_i * min(1, r_i / w))``."""
    solo = draw(st.floats(0.01, 500.0))
    low = draw(st.floats(0.05, 0.5))  # the slowdown range always spans 1 (0.5 to 2 at least)
    high = draw(st.floats(2.0, 100.0))
    base = draw(st.floats(0.05, 20.0)) * solo
    terms = draw(st.lists(st.tuples(st.floats(0.0, 10.0), st.floats(0.0, 1000.0)), max_size=4))
    return solo, low, high, base, terms


def _latency(base: float, terms: list, window: float) -> float:
    return base * (1.0 + sum(h * min(1.0, r / window) for h, r in terms))


@settings(max_examples=300, deadline=None)
@given(problem=windows_problem())
def test_one_row_fixed_point_equals_the_column_wise_one(problem):
    solo, low, high, base, terms = problem
    asked: list[float] = []

    def one(window: float) -> float:
        asked.append(window)
        return _latency(base, terms, window)

    vector = monotone.fixed_point(
        lambda w: np.array([_latency(base, terms, float(w[0]))]), np.ones(1, dtype=bool), solo, high, low
    )
    assert monotone.fixed_point_one(one, solo, high, low) == float(vector[0])
    assert asked, "the search asks the predictor"


@pytest.fixture(scope="module", params=available())
def trained(request) -> Service:
    service = Service(ServiceConfig(predictor=request.param, observation_log=False, outlier_gate=False))
    service.open()
    for record in synthetic_records(260, seed=5):
        service.observe(record)
    return service


runner = st.tuples(
    st.sampled_from(sorted(MODELS)),
    st.integers(1, 16),
    st.one_of(st.none(), st.floats(0.0, 1.0)),
    st.floats(0.0, 200.0),
    st.booleans(),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runners=st.lists(runner, min_size=1, max_size=4), size=st.integers(1, 16))
def test_a_moving_query_answers_what_its_row_answers_column_wise(trained, runners, size):
    """A query with co-runners given by remaining time: the one-row path (floats) gives the window
    and the rows the column-wise path gives for the same planned row, exactly."""
    planned_runners = tuple(
        PlannedCoRunner(m, b, {"l2_util": MODELS[m][0], "dram_util": MODELS[m][1]},
                        overlap=None if timed else o, remaining_ms=r if timed else None)
        for m, b, o, r, timed in runners
    )
    if not any(r.remaining_ms is not None for r in planned_runners):
        planned_runners = (PlannedCoRunner("bert", 2, {"l2_util": 0.5}, remaining_ms=7.5), *planned_runners)
    query = Query("sim0", BatchSpec("bert", size, {"l2_util": 0.5, "dram_util": 0.4}), KIND, planned_runners,
                  CoRunnerSource.EXPLICIT)
    answers = trained.answers
    planned = answers.plan_query(query, "query.")
    assert planned.moving
    predictor = trained.state.model().predictor
    solo = predictor.solo_latency(planned.record)
    rows, window = answers._latencies(predictor, planned, solo)
    plan = Plan.of([planned])
    rows_columns, window_columns = answers._latencies(predictor, plan, solo)
    assert window.tolist() == window_columns.tolist()
    assert rows.overlaps.tolist() == rows_columns.overlaps.tolist()
