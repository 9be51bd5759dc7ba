"""Pipeline planning without a service: the DAG and its SLO split, the composed bound, and the
search (chain DP and DAG A* against brute force; tighter deadlines never cheaper; finite plans)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.pipeline.compose import Composer, StageOption, quantile_samples
from predictor.pipeline.distributions import stage_factors
from predictor.pipeline.graph import Dag, GraphError, split_deadline
from predictor.pipeline.search import Problem, brute_force, plan

N = 200  # draws per stage in these tests (the service uses 2000)


# --------------------------------------------------------------------------- the DAG


def test_no_edges_is_a_chain_in_order():
    dag = Dag.of(3, [])
    assert dag.is_chain and dag.order == [0, 1, 2] and dag.sink_dominators() == [0, 1, 2]


def test_diamond_dominators_and_critical_path():
    dag = Dag.of(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    assert not dag.is_chain
    assert dag.sink_dominators() == [0, 3]
    assert dag.critical_path([1.0, 1.0, 5.0, 1.0]) == [0, 2, 3]


@pytest.mark.parametrize(
    ("edges", "field"),
    [([(0, 3)], "edges[0].to_stage"), ([(0, 1), (1, 1)], "edges[1]"), ([(0, 1), (1, 2), (2, 0)], "edges")],
)
def test_bad_edges_name_the_field(edges, field):
    with pytest.raises(GraphError) as err:
        Dag.of(3, edges)
    assert err.value.field == field


@st.composite
def dags(draw: st.DrawFn, max_stages: int = 6) -> Dag:
    n = draw(st.integers(1, max_stages))
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
    chosen = draw(st.lists(st.sampled_from(pairs), max_size=8, unique=True)) if pairs else []
    if not chosen and n > 1:
        return Dag.of(n, [])  # a chain
    return Dag.of(n, chosen)


def _paths(dag: Dag) -> list[list[int]]:
    out: list[list[int]] = []

    def walk(path: list[int]) -> None:
        succs = dag.succs[path[-1]]
        if not succs:
            out.append(path)
        for v in succs:
            walk(path + [v])

    for source in dag.sources:
        walk([source])
    return out


@given(dag=dags(), data=st.data(), deadline=st.floats(1.0, 1e4))
@settings(max_examples=150, deadline=None)
def test_split_fits_every_path_and_fills_the_critical_one(dag, data, deadline):
    weights = data.draw(st.lists(st.floats(0.01, 100.0), min_size=dag.n, max_size=dag.n))
    budgets = split_deadline(dag, weights, deadline)
    assert all(math.isfinite(b) and b > 0 for b in budgets)
    sums = [sum(budgets[v] for v in path) for path in _paths(dag)]
    assert max(sums) <= deadline * (1 + 1e-9)
    critical = dag.critical_path(weights)
    assert sum(budgets[v] for v in critical) == pytest.approx(deadline, rel=1e-9)


# --------------------------------------------------------------------------- composing


def test_one_stage_composes_to_its_own_bound():
    factors = stage_factors(np.log(np.linspace(0.9, 1.3, 500)), np.log(1.25), 0.99, 2000)
    option = StageOption(0, "d", 10.0 * factors, 10.0, 12.5, 10.0)
    composer = Composer(Dag.of(1, []), 2000)
    ends = composer.end_to_end([composer.draw(0, option)])
    assert composer.bound(ends, 0.99, option.bound_ms) == pytest.approx(12.5, rel=0.01)


def test_a_sum_is_tighter_than_the_sum_of_bounds_and_covers():
    """Ten independent stages: the composed bound is far below the sum of their 0.99 bounds and
    still covers about 99% of fresh sums."""
    rng = np.random.default_rng(0)
    sigma, n_stages = 0.3, 10
    factors = quantile_samples(rng.normal(0.0, sigma, 5000), 2000)
    bound_one = 10.0 * math.exp(sigma * 2.3263)
    option = StageOption(0, "d", 10.0 * factors, 10.0, bound_one, 10.0)
    dag = Dag.of(n_stages, [])
    composer = Composer(dag, 2000)
    bound = composer.bound(composer.end_to_end([composer.draw(s, option) for s in range(n_stages)]), 0.99, bound_one)
    assert bound < 0.8 * n_stages * bound_one
    fresh = (10.0 * np.exp(rng.normal(0.0, sigma, (20000, n_stages)))).sum(axis=1)
    assert 0.98 <= float(np.mean(fresh <= bound)) <= 0.997


# --------------------------------------------------------------------------- searching


@st.composite
def problems(draw: st.DrawFn, chain: bool) -> Problem:
    if chain:
        dag = Dag.of(draw(st.integers(1, 4)), [])
    else:
        dag = draw(dags(max_stages=4))
    n_devices = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    options = []
    for _ in range(dag.n):
        stage = []
        for d in range(n_devices):
            mean = float(rng.uniform(1.0, 20.0))
            samples = np.sort(mean * np.exp(rng.normal(0.0, float(rng.uniform(0.01, 0.5)), N)))
            bound = float(np.quantile(samples, 0.99))
            stage.append(StageOption(d, f"d{d}", samples, mean, bound, float(rng.uniform(0.0, 10.0))))
        options.append(stage)
    deadline = draw(st.floats(1.0, 120.0))
    return Problem(dag, options, deadline, draw(st.sampled_from([0.9, 0.95, 0.99])), n_samples=N)


def _same(found, truth) -> None:
    assert found.feasible == truth.feasible
    if truth.feasible:
        assert found.cost == pytest.approx(truth.cost, rel=1e-9, abs=1e-9)


@given(problem=problems(chain=True))
@settings(max_examples=80, deadline=None)
def test_chain_dp_agrees_with_brute_force(problem):
    found, truth = plan(problem), brute_force(problem)
    assert found.search == "dp" and found.optimal
    _same(found, truth)
    if found.feasible:
        assert found.bound_ms <= problem.deadline_ms


@given(problem=problems(chain=False))
@settings(max_examples=80, deadline=None)
def test_dag_search_agrees_with_brute_force(problem):
    found, truth = plan(problem), brute_force(problem)
    assert found.optimal
    _same(found, truth)
    if found.feasible:
        assert found.bound_ms <= problem.deadline_ms


@given(problem=problems(chain=False), tighter=st.floats(0.1, 1.0))
@settings(max_examples=60, deadline=None)
def test_a_tighter_deadline_never_yields_a_cheaper_plan(problem, tighter):
    loose = plan(problem)
    tight_problem = Problem(problem.dag, problem.options, problem.deadline_ms * tighter, problem.confidence,
                            n_samples=N)
    tight = plan(tight_problem)
    if tight.feasible:
        assert loose.feasible and loose.cost <= tight.cost + 1e-9


@given(problem=problems(chain=False))
@settings(max_examples=40, deadline=None)
def test_plans_are_finite(problem):
    result = plan(problem)
    assert all(math.isfinite(v) for v in (result.cost, result.bound_ms, result.probability, result.expected_ms))
    assert 0.0 <= result.probability <= 1.0
    assert len(result.choice) == problem.dag.n


def test_brute_force_enumerates_every_plan():
    option = StageOption(0, "d", np.full(N, 1.0), 1.0, 1.0, 1.0)
    problem = Problem(Dag.of(3, [(0, 2), (1, 2)]), [[option] * 2] * 3, 10.0, 0.99, n_samples=N)
    assert brute_force(problem).evaluated == len(list(itertools.product(range(2), repeat=3)))


def test_coverage_study_on_a_short_synthetic_stream():
    """The study's protocol end to end on a short stream: the composed 0.99 bound covers (loosely
    here: a few hundred pipelines) and is tighter than adding the stages' bounds."""
    import random

    from experiments.studies.pipeline_coverage import Config, run_stream
    from predictor.service.synthetic import synthetic_records

    records = synthetic_records(1500, seed=1, devices=("sim0", "sim1"), noise=0.2)
    config = Config(confidences=(0.99,), warmup=500)
    (row,) = run_stream("synthetic", records, config, random.Random(0))
    assert row["pipelines"] > 150
    assert row["coverage"] >= 0.96
    assert row["bound_over_naive"] < 0.95
