"""Monotone in crowding: adding a co-runner, raising an overlap, a remaining time or a co-runner's
batch size never lowers the predicted latency nor the bound, for EVERY registered predictor
(the registry is iterated, so predictors added later are covered), on the single-query path
and the column-wise ranking path, with co-runner sets far larger than any seen in training.

Also: the issue's example on a service warm-started from the embedded data, the projected
weights of the linear learners, and RankPlacements preferring the less crowded device through
a real gRPC server.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.features.contention import is_contention
from predictor.predictors import DEFAULT, available, create
from predictor.records.colocations import CoLocations
from predictor.records.logio import iter_records
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.rpc.client import InterferenceClient
from predictor.rpc.server import create_server, stop_server
from predictor.service import (
    Candidate,
    CoRunnerSource,
    Deadline,
    PlannedCoRunner,
    Query,
    Service,
    ServiceConfig,
)
from predictor.service.estimates import monotone
from predictor.service.synthetic import MODELS, synthetic_records

RTOL = 1e-9  # sums over differently ordered feature vectors may differ in the last bits
KIND = "SimGPU"
BATCH = BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})
ALL_MODELS = sorted(MODELS) + ["unseen"]


def _attrs(model: str) -> dict[str, float]:
    l2, dram, _ = MODELS.get(model, (0.7, 0.9, 1.0))
    return {"l2_util": l2, "dram_util": dram}


@pytest.fixture(scope="module", params=sorted({*available(), DEFAULT}))
def trained(request) -> Service:
    service = Service(ServiceConfig(predictor=request.param, observation_log=False, outlier_gate=False))
    service.open()
    for record in synthetic_records(260, seed=11):
        service.observe(record)
    return service


# A co-runner: (model, batch size, overlap or None, remaining ms or None).
runner = st.tuples(
    st.sampled_from(ALL_MODELS),
    st.integers(1, 16),
    st.one_of(st.none(), st.floats(0.0, 1.0)),
    st.one_of(st.none(), st.floats(0.0, 200.0)),
).map(lambda r: r if r[2] is None or r[3] is None else (r[0], r[1], r[2], None))


@st.composite
def nested(draw) -> tuple[list, list]:
    """A co-runner set and a more crowded one: each co-runner's overlap, remaining time and batch
    size raised or kept, more co-runners added (up to 40 more; training had at most 2)."""
    small = draw(st.lists(runner, max_size=5))
    big = []
    for model, size, overlap, remaining in small:
        size = size + draw(st.integers(0, 20))
        if overlap is not None:
            overlap = draw(st.floats(overlap, 1.0))
        if remaining is not None:
            remaining = draw(st.floats(remaining, 400.0))
        big.append((model, size, overlap, remaining))
    big += draw(st.lists(runner, max_size=40))
    return small, big


def _planned(runners: list) -> tuple[PlannedCoRunner, ...]:
    return tuple(PlannedCoRunner(m, b, _attrs(m), overlap=o, remaining_ms=r) for m, b, o, r in runners)


def _query(runners: list, device: str = "sim0") -> Query:
    return Query(device, BATCH, KIND, _planned(runners), CoRunnerSource.EXPLICIT)


def _not_lower(more: float, less: float) -> bool:
    return more >= less * (1 - RTOL)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sets=nested())
def test_more_crowding_never_lowers_the_answer(trained, sets):
    small, big = sets
    less, more = trained.predict(_query(small)), trained.predict(_query(big))
    assert _not_lower(more.latency_ms, less.latency_ms), (trained.predictor_name, less, more)
    assert _not_lower(more.upper_bound_ms, less.upper_bound_ms)
    assert math.isfinite(more.latency_ms) and math.isfinite(more.upper_bound_ms)
    # The column-wise path (a ranking) answers the same way, and is monotone too.
    ranking = trained.rank_placements(
        BATCH,
        [Candidate("sim0", KIND, _planned(small), CoRunnerSource.EXPLICIT),
         Candidate("sim1", KIND, _planned(big), CoRunnerSource.EXPLICIT)],
        Deadline(ms=1000.0),
    )
    by_index = {p.candidate_index: p.prediction for p in ranking.placements}
    assert _not_lower(by_index[1].latency_ms, by_index[0].latency_ms), trained.predictor_name
    assert _not_lower(by_index[1].upper_bound_ms, by_index[0].upper_bound_ms)


def test_every_registered_predictor_is_covered(trained):
    """The construction applies to predictors that are not monotone themselves (forest), the
    predictors' own guarantee to the others."""
    predictor = trained.state.predictor
    assert monotone.direct(predictor) == predictor.monotone_in_crowding()
    if trained.predictor_name in ("rls", "sgd", "static", "ewma", "solo", "ensemble:experts='rls,sgd'"):
        assert predictor.monotone_in_crowding()


def test_negative_attributes_do_not_break_monotonicity():
    """A co-runner's negative attribute is read as 0 by a monotone learner; a batch with a negative
    attribute of its own is answered by the monotone construction."""
    service = Service(ServiceConfig(observation_log=False, outlier_gate=False))
    service.open()
    for record in synthetic_records(200, seed=2):
        service.observe(record)
    batch = BatchSpec("bert", 4, {"l2_util": -0.5, "dram_util": 0.4})
    runners = [PlannedCoRunner("mlp", 2, {"l2_util": -3.0, "dram_util": 0.6}, overlap=0.5)]
    for own in (BATCH, batch):
        answers = [
            service.predict(Query("sim0", own, KIND, tuple(runners[:1] * k), CoRunnerSource.EXPLICIT)).latency_ms
            for k in range(6)
        ]
        assert all(_not_lower(b, a) for a, b in zip(answers, answers[1:], strict=False)), answers


@pytest.mark.parametrize("name", ["rls:features='fine'", "rls", DEFAULT])
def test_rows_that_differ_in_overlaps_share_one_clipped_form(name):
    """Rows are clipped once per cache: rows that differ only in their overlaps get the same clipped
    attributes (and cache), each with its own overlaps, and answer as rows clipped afresh do."""
    predictor = create(name)
    for record in synthetic_records(120, seed=3):
        predictor.learn_one(record)
    rows = CoLocations.build(BATCH, ["d0", "d1"], [
        [("mlp", 2, {"l2_util": -3.0, "dram_util": 0.6}, 0.5)],
        [("mlp", 2, {"l2_util": 0.2}, 1.0), ("bert", 1, {"l2_util": -0.1}, 0.3)],
    ], solo_latency_ms=10.0)
    first = monotone.clipped(rows)
    assert list(first.attrs) == [{"l2_util": 0.0, "dram_util": 0.6}, {"l2_util": 0.2}, {"l2_util": 0.0}]
    assert monotone.clipped(rows) is first and first.overlaps is rows.overlaps
    other = rows.with_overlaps(np.array([0.1, 0.2, 0.9]))
    again = monotone.clipped(other)
    assert again.attrs is first.attrs and again.cache is first.cache and again.overlaps is other.overlaps
    for each in (rows, other):  # the second from what the first left cached
        fresh = dataclasses.replace(each, cache={})
        np.testing.assert_array_equal(monotone.latencies(predictor, each), monotone.latencies(predictor, fresh))
        subset = np.array([0, 1])
        np.testing.assert_array_equal(monotone.overlap_latencies(predictor, each, subset)(each.overlaps),
                                      monotone.overlap_latencies(predictor, fresh, subset)(fresh.overlaps))


# ------------------------------------------------------------------ the linear learners' weights


@pytest.mark.parametrize("name", ["rls", "rls:features='fine'", "sgd", "static", "ewma"])
def test_contention_weights_are_non_negative(name):
    """On data whose slowdown FALLS with one co-runner's attribute (so that an unconstrained fit
    would weigh it negatively), the weights predictions use stay >= 0 on contention features."""
    rng = np.random.default_rng(0)
    predictor = create(name)
    for _ in range(400):
        x = float(rng.uniform(0, 1))
        runner = CoRunner("b", 1, {"calm": x}, overlap=1.0)
        predictor.learn_one(Record("d", BatchSpec("a", 1, {"l2": 0.5}), 10.0 * (2.0 - x), solo_latency_ms=10.0,
                                   co_runners=(runner,)))
    if name.startswith("rls"):
        model = predictor._models[""]
        names = {c: n for n, c in model.index.columns.items()}
        weights = model.predicting_weights()
        assert any(model._weights[c] < 0 for c, n in names.items() if is_contention(n))  # it wanted to
        assert all(weights[c] >= 0 for c, n in names.items() if is_contention(n))
    elif name == "sgd":
        weights = predictor._model.weights
        assert all(w >= 0 for n, w in weights.items() if is_contention(n))
    else:
        assert all(predictor._weights[c] >= 0 for n, c in predictor._index.columns.items() if is_contention(n))
    calm = [predictor.predict_one(Record("d", BatchSpec("a", 1, {"l2": 0.5}), None, solo_latency_ms=10.0,
                                         co_runners=(CoRunner("b", 1, {"calm": x}),))) for x in (0.0, 0.5, 1.0)]
    assert calm == sorted(calm)


# ------------------------------------------------------------------ the issue's example


@pytest.fixture(scope="module")
def warm(default_dataset) -> tuple[Service, dict]:
    service = Service(ServiceConfig(observation_log=False))
    service.open(warm_start=default_dataset)
    attrs = {(r.batch.model, r.batch.batch_size): r.batch.attrs for r in iter_records(default_dataset)}
    return service, attrs


def test_issue_example_crowded_cpu_is_never_faster_than_idle(warm):
    """mobilenet b2 on cpu0: idle <= 8 vgg b8 <= vgg, bert, gpt2, resnet (8 each, at their largest
    recorded batch size); bounds too."""
    service, attrs = warm

    def largest(model: str) -> int:  # the issue's b8, or the largest batch the recording has
        return max(bs for m, bs in attrs if m == model)

    def ask(models: list[str]):
        runners = tuple(PlannedCoRunner(m, largest(m), attrs[(m, largest(m))]) for m in models)
        return service.predict(
            Query("cpu0", BatchSpec("mobilenet", 2, attrs[("mobilenet", 2)]), co_runners=runners,
                  co_runner_source=CoRunnerSource.EXPLICIT)
        )

    idle = ask([])
    vgg = ask(["vgg"] * 8)
    mix = ask([m for m in ("vgg", "bert", "gpt2", "resnet") for _ in range(8)])
    assert idle.latency_ms <= vgg.latency_ms <= mix.latency_ms
    assert idle.upper_bound_ms <= vgg.upper_bound_ms <= mix.upper_bound_ms
    assert vgg.latency_ms > idle.latency_ms  # eight co-runners on a CPU do cost something


# ------------------------------------------------------------------ RankPlacements, through gRPC


@pytest.mark.parametrize("name", ["rls", "solo"])
def test_rank_placements_prefers_the_less_crowded_device(name):
    """Two devices equal but for their co-runners: the idle one ranks first, then the lightly
    loaded one, whatever the predictor (``solo`` ties them all: the tie-break decides)."""
    service = Service(ServiceConfig(predictor=name, observation_log=False))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    try:
        for record in synthetic_records(300, seed=4):
            service.observe(record)
        client = InterferenceClient(f"127.0.0.1:{port}")
        client.wait_ready(10)
        heavy = PlannedCoRunner("mlp", 8, _attrs("mlp"), overlap=1.0)
        light = PlannedCoRunner("mlp", 8, _attrs("mlp"), overlap=0.3)
        candidates = [
            Candidate("busy", KIND, (heavy, heavy), CoRunnerSource.EXPLICIT),
            Candidate("light", KIND, (light,), CoRunnerSource.EXPLICIT),
            Candidate("idle", KIND, (), CoRunnerSource.EXPLICIT),
        ]
        ranking = client.rank_placements(BATCH, candidates, 1000.0, solo_latency_ms=10.0)
        assert [p.device for p in ranking.placements] == ["idle", "light", "busy"]
        client.close()
    finally:
        stop_server(server, service, grace=0.5)


def test_crowding_study_counts_lowered_steps():
    """The study behind the README figure, small: the service's answers never fall when a co-runner
    is added, on a log whose slowdown rises strictly (sets up to 8 + 1, training saw at most 3)."""
    from experiments.studies.crowding import Config, monotonicity

    result = monotonicity(Config(n_train=400, n_steps=150), np.random.default_rng(1))
    assert result["after"]["steps"] == 150 and result["after"]["lowered_share"] == 0.0
    assert 0.0 <= result["before"]["lowered_share"] <= 1.0


def test_merged_rls_keeps_the_constraint():
    """Two learners merged (information form) predict with non-negative contention weights too."""
    from predictor.regressors.least_squares import RLS
    from predictor.regressors.merge import merge

    rng = np.random.default_rng(3)
    parts = [RLS(forgetting=1.0, non_negative_contention=True) for _ in range(2)]
    for part in parts:
        for _ in range(100):
            x = float(rng.uniform(0, 1))
            part.learn_one({"co:calm": x, "own:a": 1.0}, 2.0 - x)
    merged = merge(*parts)
    assert merged.non_negative_contention and merged.weights["co:calm"] < 0
    assert merged.predicting_weights()[merged.index.columns["co:calm"]] >= 0


@pytest.mark.parametrize("name", ["solo", "static", "ewma", "tree", "rls:non_negative=False"])
def test_a_subset_of_rows_without_a_form_answers_as_among_all_rows(name):
    """Where a predictor has no overlap form (or does not answer directly), the rows a fixed point asks
    about are predicted alone (``CoLocations.take``): each gives what it gives among all the rows (to the
    bit for a per-record predictor; within rounding where a matrix's sums run over the columns the rows
    present)."""
    predictor = create(name)
    for record in synthetic_records(300, seed=4):
        predictor.learn_one(record)
    rng = np.random.default_rng(1)
    names = sorted(MODELS)
    co_runners = [[(names[int(rng.integers(len(names)))], int(rng.integers(1, 9)),
                    {"l2_util": float(rng.uniform(-0.2, 1)), "dram_util": float(rng.random())}, float(rng.random()))
                   for _ in range(int(rng.integers(0, 4)))] for _ in range(40)]
    rows = CoLocations.build(BatchSpec("bert", 4, {"l2_util": 0.5}), [f"d{i}" for i in range(40)], co_runners,
                             device_kinds=["SimGPU"] * 40, solo_latency_ms=9.0)
    for subset in (np.flatnonzero(rng.random(40) < 0.4), np.array([7]), np.array([31, 2, 5])):
        evaluate = monotone.overlap_latencies(predictor, rows, subset)
        for _ in range(3):
            overlaps = rng.random(rows.overlaps.size)
            np.testing.assert_allclose(evaluate(overlaps),
                                       monotone.latencies(predictor, rows.with_overlaps(overlaps))[subset],
                                       rtol=0 if name in ("solo", "static", "ewma") else 1e-12)
