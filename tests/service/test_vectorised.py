"""The fast paths equal the per-record ones they replace.

* features and predictions of many co-locations at once (:func:`predictor.features.extract.feature_matrix`,
  ``predict_colocations``) against the per-record features and ``predict_one``;
* a column-wise ranking (``Service.rank_columns``) against ``check_deadline`` of each
  candidate, and the same errors for bad candidates;
* the column-wise protobuf conversions against the per-object ones;
* the direct ``Record`` conversion against ``parse_record``, batched observation messages;
* the cached or incremental pieces (features, scaled vectors, bisected CDF, running median).
"""

from __future__ import annotations

import functools
import math
import pickle
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.calibration.conformal import ResidualWindow
from predictor.features.extract import feature_matrix, fine_features, interaction_features
from predictor.predictors import DEFAULT, create
from predictor.records.colocations import CoLocations
from predictor.records.record import BatchSpec, RecordError
from predictor.regressors.least_squares import RLS
from predictor.rpc import columns, convert
from predictor.rpc.protos import pb2
from predictor.service import (
    Candidate,
    CoRunnerSource,
    Deadline,
    InvalidArgument,
    NotFound,
    PlannedCoRunner,
    Query,
    Service,
    ServiceConfig,
)
from predictor.service.estimates.placements import CandidateColumns
from predictor.service.guards.robust import OutlierGate
from predictor.service.synthetic import MODELS, synthetic_records

BATCH = BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})


def random_rows(rng: random.Random, n: int, *, kinds=("SimGPU",), zero_overlaps=True) -> CoLocations:
    models = sorted(MODELS)
    runners = []
    for _ in range(n):
        row = []
        for _ in range(rng.randrange(4)):
            other = rng.choice(models)
            l2, dram, _ = MODELS[other]
            attrs = {"l2_util": l2, "dram_util": dram} if rng.random() < 0.8 else {"seq_len": 64.0}
            overlap = 0.0 if zero_overlaps and rng.random() < 0.2 else rng.random()
            row.append((other, rng.randrange(1, 9), attrs, overlap))
        runners.append(row)
    return CoLocations.build(
        BATCH,
        [f"sim{i % 5}" for i in range(n)],
        runners,
        device_kinds=[rng.choice(kinds) for _ in range(n)],
        signals=[{"sm_util": rng.random()} if rng.random() < 0.3 else {} for _ in range(n)],
    )


@pytest.fixture(scope="module")
def learned():
    predictors = {}
    for spec in ("rls", "rls:split_by='device_kind'", "rls:split_by='model'", "rls:features='fine'",
                 "rls:features='coarse'", "rls:log_target=False", "solo", "sgd", "ensemble",
                 "ensemble:split_by='device_kind'", DEFAULT, "ensemble:experts='rls,sgd',split_by='device_kind'"):
        predictor = create(spec)
        for record in synthetic_records(600, seed=1, device_kind="SimGPU"):
            predictor.learn_one(record)
        predictors[spec] = predictor
    return predictors


# --------------------------------------------------------------------------- features and predictions


@pytest.mark.parametrize("name, per_record", [("fine", fine_features), ("interactions", interaction_features)])
def test_feature_matrix_equals_per_record_features(name, per_record):
    rows = random_rows(random.Random(0), 200)
    matrix = feature_matrix(rows, name)
    assert matrix is not None and len(set(matrix.names)) == len(matrix.names)
    for i in range(len(rows)):
        expected = per_record(rows.record(i))
        row = dict(zip(matrix.names, matrix.values[i].tolist(), strict=True))
        assert {k: v for k, v in row.items() if k in expected} == expected  # the same numbers, exactly
        assert all(v == 0 for k, v in row.items() if k not in expected)


def test_feature_matrix_declines_what_it_cannot_match():
    rows = CoLocations.build(BATCH, ["a"], [[("mlp", 1, {"count": 2.0}, 0.5)]])
    assert feature_matrix(rows, "fine") is None  # co:count would merge two features
    starred = CoLocations.build(BatchSpec("bert", 1, {"a*b": 1.0}), ["a"], [[]])
    assert feature_matrix(starred, "fine") is not None and feature_matrix(starred, "interactions") is None
    assert feature_matrix(rows, "coarse") is None


@pytest.mark.parametrize("spec", ["rls", "rls:split_by='device_kind'", "rls:split_by='model'",
                                  "rls:features='fine'", "rls:features='coarse'", "rls:log_target=False",
                                  "solo", "sgd", "ensemble", "ensemble:split_by='device_kind'"])
def test_predict_colocations_equals_predict_one(learned, spec):
    predictor = learned[spec]
    rows = random_rows(random.Random(1), 150, kinds=("SimGPU", "other"))
    fast = predictor.predict_colocations(rows)
    slow = np.array([predictor.predict_one(r) for r in rows.records()])
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=0)


def test_sgd_colocation_form_answers_as_each_record_and_leaves_the_model_as_it_was(learned):
    """``sgd``'s form of some rows (what a fixed point over windows asks) gives each record's
    ``predict_one`` at any overlaps; neither it nor ``predict_colocations`` adds to the model's scaler the
    names it has not seen (river's ``predict_one`` does, with maximum 0)."""
    import copy

    predictor = copy.deepcopy(learned["sgd"])
    rows = random_rows(random.Random(2), 80)
    maxima = predictor._model.abs_max
    before = dict(maxima)
    subset = np.arange(0, len(rows), 3)
    form = predictor.colocation_form(rows, subset)
    assert form is not None
    rng = np.random.default_rng(0)
    for _ in range(3):
        overlaps = rng.random(rows.overlaps.size)
        fast = form(overlaps)
        predictor.predict_colocations(rows.with_overlaps(overlaps))
        assert maxima == before
        records = rows.with_overlaps(overlaps).records()
        np.testing.assert_allclose(fast, [predictor.predict_one(records[i]) for i in subset], rtol=1e-12, atol=0)


@pytest.mark.parametrize("spec", [DEFAULT, "ensemble:experts='rls,sgd',split_by='device_kind'"])
def test_an_ensemble_of_experts_with_forms_has_a_form_that_answers_as_its_rows(learned, spec):
    """The default ensemble's form (each expert's, combined as the rows' answers are) gives
    ``predict_colocations`` of the rows at any overlaps; with several device kinds among the rows,
    split by kind, it has none (the rows are predicted)."""
    predictor = learned[spec]
    rows = random_rows(random.Random(4), 60)
    subset = np.arange(0, len(rows), 2)
    form = predictor.colocation_form(rows, subset)
    assert form is not None
    rng = np.random.default_rng(1)
    for _ in range(3):
        overlaps = rng.random(rows.overlaps.size)
        np.testing.assert_allclose(form(overlaps), predictor.predict_colocations(rows.with_overlaps(overlaps))[subset],
                                   rtol=1e-12, atol=0)
    assert (predictor.colocation_form(random_rows(random.Random(5), 30, kinds=("SimGPU", "other")), subset[:5])
            is None) == (predictor.split_by == "device_kind")


def test_predict_colocations_with_unseen_features(learned):
    rows = CoLocations.build(BATCH, ["x", "y"], [[("new_model", 3, {"new_attr": 0.7}, 0.4)], []],
                             signals=[{"new_signal": 1.0}, {}])
    predictor = learned["rls"]
    np.testing.assert_allclose(predictor.predict_colocations(rows),
                               [predictor.predict_one(r) for r in rows.records()], rtol=1e-12)


def test_predict_matrix_equals_predict_one():
    rls = RLS(forgetting=0.99, delta=10.0)
    rng = np.random.default_rng(0)
    for _ in range(200):
        x = {f"f{k}": float(rng.normal()) for k in range(6) if rng.random() < 0.8}
        rls.learn_one(x, float(rng.normal()))
    names = tuple(f"f{k}" for k in range(8))  # f6, f7: never seen
    values = rng.normal(size=(20, len(names)))
    expected = [rls.predict_one(dict(zip(names, row, strict=True))) for row in values.tolist()]
    np.testing.assert_allclose(rls.predict_matrix(names, values), expected, rtol=1e-12)


def test_scaled_vector_fast_path_equals_masked_division():
    rls = RLS()
    rng = np.random.default_rng(1)
    for _ in range(100):
        x = {f"f{k}": float(rng.normal()) * (k % 3 != 0 or rng.random() < 0.5) for k in range(5)}
        vector = rls.vectorize(x, grow=True)
        raw = rls.index.vector(x, grow=False)
        scale = rls._column_scale[: raw.size]
        np.testing.assert_array_equal(vector, np.divide(raw, scale, out=np.zeros_like(raw), where=scale > 0))
        rls.learn_vector(vector, float(rng.normal()))
    assert rls._all_scaled


def test_predicting_before_learning_changes_nothing_learned(learned):
    records = synthetic_records(300, seed=9)
    gated, plain = create("rls"), create("rls")
    for record in records:
        gated.predict_one(record)  # the outlier-gated path: predict, then learn the same record
        gated.learn_one(record)
        plain.learn_one(record)
    assert gated._models[""].weights == plain._models[""].weights
    assert pickle.dumps(gated._models[""]) == pickle.dumps(plain._models[""])


# --------------------------------------------------------------------------- ranking


@pytest.fixture
def service():
    # A frozen clock: live-view remaining times must not move between the ranking and the checks.
    svc = Service(ServiceConfig(max_candidates=600), clock=lambda: 100.0)
    svc.open()
    for record in synthetic_records(800, seed=3):
        svc.observe(record)
    return svc


def mixed_candidates(rng: random.Random, n: int) -> list[Candidate]:
    models = sorted(MODELS)
    out = []
    for i in range(n):
        if i % 7 == 3:
            out.append(Candidate(f"sim{i % 2}"))  # co-runners from the live view
            continue
        runners = []
        for _ in range(rng.randrange(3)):
            model = rng.choice(models)
            l2, dram, _ = MODELS[model]
            how = rng.randrange(3)
            runners.append(PlannedCoRunner(
                model, rng.randrange(1, 9), {"l2_util": l2, "dram_util": dram},
                overlap=rng.random() if how == 0 else None, remaining_ms=rng.uniform(0, 30) if how == 1 else None,
            ))
        kind = rng.choice(["SimGPU", "", "other"])
        out.append(Candidate(f"gpu{i}", kind, tuple(runners), CoRunnerSource.EXPLICIT,
                             {"sm_util": rng.random()} if rng.random() < 0.3 else {}))
    return out


def assert_ranking_matches_single_checks(service, ranking, candidates, solo):
    assert [p.rank for p in ranking.placements] == list(range(1, len(candidates) + 1))
    # Most slack first; ties to the less crowded (fewer co-runners, then less total overlap), then request order.
    keys = [(-p.slack_ms, len(p.prediction.co_runners), sum(c.overlap for c in p.prediction.co_runners),
             p.candidate_index) for p in ranking.placements]
    assert keys == sorted(keys)
    for p in ranking.placements:
        single = service.check_deadline(Query.for_candidate(BATCH, candidates[p.candidate_index], solo),
                                        Deadline(ms=40.0))
        assert p.device == candidates[p.candidate_index].device
        assert p.prediction.latency_ms == pytest.approx(single.prediction.latency_ms, rel=1e-12)
        assert p.prediction.upper_bound_ms == pytest.approx(single.prediction.upper_bound_ms, rel=1e-12)
        assert p.slack_ms == pytest.approx(single.slack_ms, rel=1e-9, abs=1e-12)
        assert p.probability == single.probability
        assert p.feasible == single.feasible
        assert p.prediction.bound_source == single.prediction.bound_source
        assert p.prediction.residuals == single.prediction.residuals
        assert p.prediction.device_kind == single.prediction.device_kind
        assert p.prediction.solo_latency_ms == single.prediction.solo_latency_ms
        got = [(c.model, c.batch_size, dict(c.attrs)) for c in p.prediction.co_runners]
        assert got == [(c.model, c.batch_size, dict(c.attrs)) for c in single.prediction.co_runners]
        np.testing.assert_allclose([c.overlap for c in p.prediction.co_runners],
                                   [c.overlap for c in single.prediction.co_runners], rtol=1e-12)


@pytest.mark.parametrize("solo", [None, 12.0])
def test_rank_equals_single_deadline_checks(service, solo):
    service.batch_start("sim0", "SimGPU", "b1", BatchSpec("mlp", 2, {"l2_util": 0.1, "dram_util": 0.6}))
    candidates = mixed_candidates(random.Random(2), 120)
    ranking = service.rank_placements(BATCH, candidates, Deadline(ms=40.0), solo_latency_ms=solo)
    assert_ranking_matches_single_checks(service, ranking, candidates, solo)


def rank_request(batch: BatchSpec, candidates: list[Candidate]):
    messages = pb2()
    return messages.RankPlacementsRequest(
        batch=convert.batch_to_pb(batch),
        candidates=[convert.candidate_to_pb(c) for c in candidates],
        deadline_ms=40.0,
    )


@pytest.mark.parametrize("live", [False, True])
def test_rank_from_protobuf_columns(service, live):
    service.batch_start("sim1", "SimGPU", "b2", BatchSpec("resnet", 1, {"l2_util": 0.3, "dram_util": 0.2}))
    candidates = [c for c in mixed_candidates(random.Random(3), 200) if live or c.co_runners]
    request = rank_request(BATCH, candidates)
    given = columns.candidate_columns_from_pb(request.candidates)
    assert given.typed
    ranking = service.rank_columns(convert.batch_from_pb(request.batch), given, Deadline(ms=40.0))
    assert_ranking_matches_single_checks(service, ranking.to_ranking(), candidates, None)
    # The direct response equals the per-object conversion of the same ranking.
    assert columns.ranking_columns_to_pb(ranking) == convert.ranking_to_pb(ranking.to_ranking())
    # Written from the calibration cells the answer tells, the bytes are those written from each row's fields.
    assert ranking.row_cells is not None and len(set(ranking.row_cells.tolist())) > 1
    told = columns.ranking_columns_to_pb(ranking).data
    ranking.row_cells = None
    assert columns.ranking_columns_to_pb(ranking).data == told


BAD = [
    (Candidate("x", co_runners=(PlannedCoRunner("m", 1, overlap=2.0),)), InvalidArgument,
     "candidates[1].co_runners[0].overlap"),
    (Candidate("x", co_runners=(PlannedCoRunner("m", 1, remaining_ms=-1.0),)), InvalidArgument,
     "candidates[1].co_runners[0].remaining_ms"),
    (Candidate("x", co_runners=(PlannedCoRunner("m", 1, overlap=0.5, remaining_ms=1.0),)), InvalidArgument,
     "candidates[1].co_runners[0]"),
    (Candidate("x", co_runners=(PlannedCoRunner("", 1),)), InvalidArgument, "candidates[1].co_runners[0].model"),
    (Candidate("x", co_runners=(PlannedCoRunner("m", 0),)), InvalidArgument,
     "candidates[1].co_runners[0].batch_size"),
    (Candidate("x", co_runners=(PlannedCoRunner("m", 1, {"a": math.inf}),)), InvalidArgument,
     "candidates[1].co_runners[0].attrs.a"),
    (Candidate("x", signals={"": 1.0}), InvalidArgument, "candidates[1].signals."),
    (Candidate("", co_runner_source=CoRunnerSource.EXPLICIT), InvalidArgument, "candidates[1].device"),
    (Candidate("x" * 300, co_runner_source=CoRunnerSource.EXPLICIT), InvalidArgument, "candidates[1].device"),
    (Candidate("x", co_runners=(PlannedCoRunner("m", 1),), co_runner_source=CoRunnerSource.LIVE_VIEW),
     InvalidArgument, "candidates[1].co_runners"),
    (Candidate("ghost"), NotFound, "candidates[1].device"),
]


@pytest.mark.parametrize("bad, error, field", BAD)
@pytest.mark.parametrize("via_protobuf", [False, True])
def test_rank_errors_name_the_same_field(service, bad, error, field, via_protobuf):
    candidates = [Candidate("ok", co_runner_source=CoRunnerSource.EXPLICIT), bad,
                  Candidate("y", co_runners=(PlannedCoRunner("m", 1, overlap=-1.0),))]
    given = columns.candidate_columns_from_pb(rank_request(BATCH, candidates).candidates) if via_protobuf \
        else CandidateColumns.from_candidates(candidates)
    with pytest.raises(error) as info:
        service.rank_columns(BATCH, given, Deadline(ms=40.0))
    assert info.value.field == field


def test_rank_bad_batch_and_solo(service):
    good = [Candidate("ok", co_runner_source=CoRunnerSource.EXPLICIT)]
    given = columns.candidate_columns_from_pb(rank_request(BATCH, good).candidates)
    with pytest.raises(InvalidArgument) as info:
        service.rank_columns(BatchSpec("bert", 0), given, Deadline(ms=40.0))
    assert info.value.field == "batch.batch_size"
    with pytest.raises(InvalidArgument) as info:
        service.rank_columns(BATCH, given, Deadline(ms=40.0), solo_latency_ms=-1.0)
    assert info.value.field == "solo_latency_ms"
    for solo in (1e10, 1e308):  # the magnitude limit of records, column-wise too
        with pytest.raises(InvalidArgument) as info:
            service.rank_columns(BATCH, given, Deadline(ms=40.0), solo_latency_ms=solo)
        assert info.value.field == "solo_latency_ms"


def test_rank_columns_magnitudes_name_the_candidate(service):
    huge = Candidate("ok", co_runners=(PlannedCoRunner("mlp", 1, {"l2_util": 1e300}, overlap=0.5),),
                     co_runner_source=CoRunnerSource.EXPLICIT)
    given = columns.candidate_columns_from_pb(rank_request(BATCH, [Candidate("ok", co_runner_source=CoRunnerSource.EXPLICIT), huge]).candidates)
    with pytest.raises(InvalidArgument) as info:
        service.rank_columns(BATCH, given, Deadline(ms=40.0))
    assert info.value.field == "candidates[1].co_runners[0].attrs.l2_util"


# --------------------------------------------------------------------------- observations


def slow_record_from_pb(message):
    saved = convert._record_as_given
    convert._record_as_given = lambda _message: None
    try:
        return convert.record_from_pb(message)
    finally:
        convert._record_as_given = saved


def outcome(convert_fn, message):
    try:
        return convert_fn(message)
    except RecordError as exc:
        return ("error", exc.field, exc.message)


MUTATIONS = [
    lambda m, v: setattr(m, "latency_ms", v),
    lambda m, v: m.ClearField("latency_ms"),
    lambda m, v: setattr(m, "solo_latency_ms", v),
    lambda m, v: setattr(m, "start_s", v),
    lambda m, v: setattr(m, "device", "" if v < 1 else "d" * 300),
    lambda m, v: setattr(m, "device_kind", "k" * 300),
    lambda m, v: setattr(m, "source", "s" * 300),
    lambda m, v: setattr(m, "schema", "coloc/v2"),
    lambda m, v: setattr(m.batch, "batch_size", 0),
    lambda m, v: setattr(m.batch, "model", ""),
    lambda m, v: m.batch.attrs.__setitem__("a", v),
    lambda m, v: m.batch.attrs.__setitem__("", 1.0),
    lambda m, v: m.signals.__setitem__("s", v),
    lambda m, v: m.co_runners.add(model="m", batch_size=1, overlap=v),
    lambda m, v: m.co_runners.add(model="m", batch_size=1, remaining_ms=1.0),
    lambda m, v: m.co_runners.add(model="", batch_size=1),
    lambda m, v: m.co_runners.add(model="m", batch_size=-2),
    lambda m, v: m.co_runners.add(model="m", batch_size=1, attrs={"x": v}),
    lambda m, v: None,
]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 99), st.sampled_from(range(len(MUTATIONS))),
       st.sampled_from([0.0, -1.0, 0.5, 2.0, 1e300, math.nan, math.inf, -math.inf]))
def test_direct_record_conversion_equals_parse_record(index, mutation, value):
    record = synthetic_records(100, seed=4)[index]
    message = convert.record_to_pb(record)
    MUTATIONS[mutation](message, value)
    assert outcome(convert.record_from_pb, message) == outcome(slow_record_from_pb, message)


def test_batched_observation_messages():
    messages = pb2()
    records = [convert.record_to_pb(r) for r in synthetic_records(7, seed=5)]
    stream = [
        messages.ReportObservationsRequest(record=records[0], batch_id="a"),
        messages.ReportObservationsRequest(records=records[1:4], batch_ids=["b", "", "c"]),
        messages.ReportObservationsRequest(record=records[4], records=records[5:7], batch_ids=["d"]),
        messages.ReportObservationsRequest(),  # an empty message stands for one (invalid) record
    ]
    items = list(convert.observations_from_pb(stream))
    assert [batch_id for _, batch_id in items] == ["a", "b", "", "c", "", "d", "", ""]
    assert [item for item, _ in items[:7]] == [convert.record_from_pb(r) for r in records]
    assert isinstance(items[7][0], RecordError)  # converted by the transport layer, reported by the service
    service = Service(ServiceConfig())
    service.open()
    report = service.report_observations(convert.observations_from_pb(stream))
    assert (report.accepted, report.rejected) == (7, 1)
    assert report.rejections[0].index == 7


# --------------------------------------------------------------------------- incremental pieces


def test_bisected_cdf_equals_searchsorted():
    window = ResidualWindow(300)
    rng = random.Random(0)
    for _ in range(600):
        window.add(round(rng.gauss(0, 1), 2))
        xs = np.array([rng.gauss(0, 1) for _ in range(rng.randrange(1, 20))] + [window.values()[-1]])
        fast = window.cdf_many(xs)
        expected = np.searchsorted(np.sort(window.values()), xs, side="right") / (len(window) + 1)
        np.testing.assert_array_equal(fast, expected)


def test_gate_median_equals_numpy_median():
    gate = OutlierGate(warmup=5, window=37, escape_window=20)
    rng = random.Random(1)
    for i in range(3000):
        gate.admit(1.0, rng.lognormvariate(0, 0.3) * (50 if rng.random() < 0.05 else 1), rng.choice("ab"))
        if gate._residuals:
            assert gate._center() == float(np.median(np.fromiter(gate._residuals, dtype=float)))
        if i == 1500:
            gate = pickle.loads(pickle.dumps(gate))


_numbers = st.sampled_from([0.0, 0.5, 1.0, -0.1, 1.5, 2e9, math.inf, -math.inf, math.nan])


@st.composite
def _runner(draw: st.DrawFn) -> PlannedCoRunner:
    given = draw(st.sampled_from(["overlap", "remaining", "both", "neither"]))
    return PlannedCoRunner(
        draw(st.sampled_from(["resnet", "bert"])), 2,
        draw(st.dictionaries(st.sampled_from(["l2_util", "seq_len"]), _numbers, max_size=2)),
        overlap=draw(_numbers) if given in ("overlap", "both") else None,
        remaining_ms=draw(_numbers) if given in ("remaining", "both") else None,
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_runner(), max_size=3), min_size=1, max_size=4), st.booleans())
def test_the_column_check_vouches_exactly_for_candidates_plan_query_takes(runners, via_protobuf):
    """``valid_columns`` (the rules on every candidate's numbers at once, compiled) says yes exactly where
    ``plan_query`` takes every candidate: a refused one goes the per-candidate way, which names it."""
    from predictor.service.errors import ServiceError
    from predictor.service.estimates.column_checks import valid_columns

    answers = _checking_service().answers
    candidates = [Candidate(f"d{i}", co_runners=tuple(r), co_runner_source=CoRunnerSource.EXPLICIT)
                  for i, r in enumerate(runners)]
    given = columns.candidate_columns_from_pb(rank_request(BATCH, candidates).candidates) if via_protobuf \
        else CandidateColumns.from_candidates(candidates)
    limit = answers.state.config.max_value
    taken = True
    for candidate in candidates:
        try:
            answers.plan_query(Query.for_candidate(BATCH, candidate, None), "query.")
        except ServiceError:
            taken = False
    assert valid_columns(given, BATCH, None, limit) == (taken and given.typed)
    assert given.typed or not via_protobuf  # the protobuf's columns are typed: the column check decides there


@functools.cache
def _checking_service() -> Service:
    svc = Service(ServiceConfig())
    svc.open()
    for record in synthetic_records(100, seed=3):
        svc.observe(record)
    return svc
