"""The gRPC-free service: predictions, deadlines, ranking, observations, status, errors."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from manual_clock import ManualClock

from predictor.calibration.conformal import BoundSource
from predictor.predictors import DEFAULT
from predictor.records.record import BatchSpec, record_to_dict
from predictor.service import (
    Candidate,
    CoRunnerSource,
    Deadline,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PlannedCoRunner,
    Query,
    ResourceExhausted,
    Service,
    ServiceConfig,
    Unavailable,
)
from predictor.service.answering import Plan
from predictor.service.synthetic import synthetic_records


@pytest.fixture(scope="module")
def records():
    return synthetic_records(1200, seed=3)


@pytest.fixture
def clock():
    return ManualClock(100.0)


@pytest.fixture
def service(records, clock):
    svc = Service(ServiceConfig(max_candidates=300, max_stream_records=5000), clock=clock)
    svc.open()
    for record in records[:800]:
        svc.observe(record)
    return svc


BATCH = BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})


def explicit(*runners, device="sim0"):
    return Query(device, BATCH, co_runners=tuple(runners), co_runner_source=CoRunnerSource.EXPLICIT)


def test_not_ready_is_unavailable():
    svc = Service()
    with pytest.raises(Unavailable):
        svc.predict(explicit())
    with pytest.raises(Unavailable):
        svc.report_observations([])
    svc.open()
    # Issue 12: with nothing learned and no solo latency there is no basis for a number (it was a made-up 1 ms).
    with pytest.raises(FailedPrecondition):
        svc.predict(explicit())
    given = svc.predict(Query("sim0", BATCH, co_runner_source=CoRunnerSource.EXPLICIT, solo_latency_ms=5.0))
    assert svc.ready and given.bound_source is BoundSource.FALLBACK and given.fallback


def test_predict_explicit_co_runners_slows_down(service):
    alone = service.predict(explicit())
    crowded = service.predict(
        explicit(PlannedCoRunner("mlp", 4, {"l2_util": 0.1, "dram_util": 0.6}, overlap=1.0))
    )
    assert crowded.latency_ms > alone.latency_ms > 0
    assert crowded.slowdown == pytest.approx(crowded.latency_ms / crowded.solo_latency_ms)
    assert crowded.upper_bound_ms > crowded.latency_ms
    # Issue 12: calibrated on its own cell (query shape, kind, one co-runner), not on all 800 residuals.
    assert crowded.bound_source is BoundSource.DEVICE_KIND and 30 <= crowded.residuals < 800
    assert crowded.query_shape == "overlap/nosig" and not crowded.fallback
    assert crowded.device_kind == "SimGPU"  # learned from the observations of sim0
    assert crowded.observations_learned == 800 and crowded.predictor == DEFAULT


def test_remaining_time_becomes_overlap(service):
    short = service.predict(explicit(PlannedCoRunner("mlp", 4, {"dram_util": 0.6}, remaining_ms=0.5)))
    long = service.predict(explicit(PlannedCoRunner("mlp", 4, {"dram_util": 0.6}, remaining_ms=1e6)))
    assert long.co_runners[0].overlap == 1.0
    assert 0 < short.co_runners[0].overlap < 0.2
    assert short.co_runners[0].overlap == pytest.approx(0.5 / short.latency_ms, rel=0.05)
    assert short.latency_ms < long.latency_ms


@pytest.mark.parametrize("deadline_ms", [None, 2.0, 50.0])
def test_single_query_answer_equals_its_one_row_plan(service, clock, deadline_ms):
    """A query's scalar one-row answer and the column answer of its one-row plan agree exactly."""
    service.batch_start("sim1", "SimGPU", "job-9", BatchSpec("mlp", 8, {"dram_util": 0.6}))
    queries = [
        explicit(),
        explicit(PlannedCoRunner("mlp", 4, {"dram_util": 0.6}, overlap=0.3),
                 PlannedCoRunner("bert", 2, {"l2_util": 0.2}, remaining_ms=1.5),
                 PlannedCoRunner("mlp", 2, {"dram_util": 0.1}, remaining_ms=0.0)),
        explicit(PlannedCoRunner("mlp", 4, {"dram_util": 0.6}, remaining_ms=1e6), device="sim1"),
        Query("sim1", BATCH),
    ]
    answers = service.answers
    for query in queries:
        planned = answers.plan_query(query, "query.")
        one, columns = answers.answer(planned, 0.9, deadline_ms), answers.answer(Plan.of([planned]), 0.9, deadline_ms)
        for name in ("latency_ms", "solo_latency_ms", "upper_bound_ms", "slack_ms", "probability", "order"):
            np.testing.assert_array_equal(getattr(one, name), getattr(columns, name), err_msg=name)
        assert one.prediction(0) == columns.prediction(0)
        assert one.rows.overlaps.tolist() == columns.rows.overlaps.tolist()


def test_live_view_supplies_co_runners(service, clock):
    idle = service.predict(Query("sim0", BATCH))
    assert idle.co_runners == ()
    predicted, running = service.batch_start(
        "sim0", "SimGPU", "job-1", BatchSpec("mlp", 8, {"dram_util": 0.6})
    )
    assert running == 1 and predicted > 0
    clock.now += predicted / 1000.0 / 2  # half-way through
    busy = service.predict(Query("sim0", BATCH))
    assert [c.model for c in busy.co_runners] == ["mlp"]
    assert busy.co_runners[0].overlap == pytest.approx(min(1.0, (predicted / 2) / busy.latency_ms), rel=0.05)
    assert busy.latency_ms > idle.latency_ms
    assert service.batch_end("sim0", "job-1") == (True, 0)
    assert service.batch_end("sim0", "job-1") == (False, 0)
    assert service.predict(Query("sim0", BATCH)).co_runners == ()


def test_unknown_device_in_live_view_is_not_found(service):
    with pytest.raises(NotFound) as info:
        service.predict(Query("nowhere", BATCH))
    assert info.value.field == "query.device"
    with pytest.raises(NotFound):
        service.batch_end("nowhere", "x")
    # explicit co-runners need no live view
    assert service.predict(explicit(device="nowhere")).latency_ms > 0


@pytest.mark.parametrize(
    "query, field",
    [
        (Query("sim0", BatchSpec("bert", 0)), "query.batch.batch_size"),
        (Query("", BATCH), "query.device"),
        (Query("sim0", BatchSpec("", 1)), "query.batch.model"),
        (Query("sim0", BatchSpec("bert", 1, {"x": math.nan})), "query.batch.attrs.x"),
        (explicit(PlannedCoRunner("mlp", 1, overlap=1.5)), "query.co_runners[0].overlap"),
        (explicit(PlannedCoRunner("mlp", 1, overlap=0.5, remaining_ms=3.0)), "query.co_runners[0]"),
        (explicit(PlannedCoRunner("mlp", 1, remaining_ms=-1.0)), "query.co_runners[0].remaining_ms"),
        (explicit(PlannedCoRunner("mlp", 1, remaining_ms=math.inf)), "query.co_runners[0].remaining_ms"),
        (explicit(PlannedCoRunner("mlp", -2)), "query.co_runners[0].batch_size"),
        (Query("sim0", BATCH, solo_latency_ms=-1.0), "query.solo_latency_ms"),
        (Query("sim0", BATCH, signals={"s": math.inf}), "query.signals.s"),
        (
            Query(
                "sim0",
                BATCH,
                co_runners=(PlannedCoRunner("mlp", 1),),
                co_runner_source=CoRunnerSource.LIVE_VIEW,
            ),
            "query.co_runners",
        ),
    ],
)
def test_bad_queries_name_the_field(service, query, field):
    with pytest.raises(InvalidArgument) as info:
        service.predict(query)
    assert info.value.field == field
    assert str(info.value).startswith(field + ": ")


@pytest.mark.parametrize(
    "query, field",
    [
        (Query("sim0", BATCH, solo_latency_ms=1e10), "query.solo_latency_ms"),
        (Query("sim0", BATCH, solo_latency_ms=1e308), "query.solo_latency_ms"),
        (Query("sim0", BATCH, solo_latency_ms=5e-324), "query.solo_latency_ms"),
        (Query("sim0", BatchSpec("bert", 1, {"x": 1e300})), "query.batch.attrs.x"),
        (Query("sim0", BATCH, signals={"s": -1e10}), "query.signals.s"),
        (explicit(PlannedCoRunner("mlp", 1, {"a": 1e300})), "query.co_runners[0].attrs.a"),
    ],
)
def test_queries_get_the_magnitude_limits_of_records(service, query, field):
    """One rule set: what a record may not carry, a query may not either (named, INVALID_ARGUMENT)."""
    with pytest.raises(InvalidArgument) as info:
        service.predict(query)
    assert info.value.field == field
    with pytest.raises(InvalidArgument) as info:
        service.check_deadline(query, Deadline(ms=10.0))
    assert info.value.field == field
    record = {**record_to_dict(synthetic_records(1)[0]), "device": "sim0"}
    rejected = service.report_observations([(
        {**record, "solo_latency_ms": query.solo_latency_ms or 1.0,
         "batch": {"model": "bert", "batch_size": 1, "attrs": dict(query.batch.attrs)},
         "signals": dict(query.signals),
         "co_runners": [{"model": c.model, "batch_size": c.batch_size, "attrs": dict(c.attrs)}
                        for c in query.co_runners]},
        "",
    )])
    assert [r.field for r in rejected.rejections] == ["record." + field.removeprefix("query.")]


def test_rankings_get_the_magnitude_limits_of_records(service):
    huge = Candidate("x", co_runner_source=CoRunnerSource.EXPLICIT, signals={"s": 1e300})
    with pytest.raises(InvalidArgument) as info:
        service.rank_placements(BATCH, [Candidate("sim0"), huge], Deadline(ms=10.0))
    assert info.value.field == "candidates[1].signals.s"
    with pytest.raises(InvalidArgument) as info:
        service.rank_placements(BATCH, [Candidate("sim0")], Deadline(ms=10.0), solo_latency_ms=1e10)
    assert info.value.field == "solo_latency_ms"
    with pytest.raises(InvalidArgument) as info:
        service.rank_placements(BatchSpec("m", 1, {"a": -1e300}), [Candidate("sim0")], Deadline(ms=10.0))
    assert info.value.field == "batch.attrs.a"


@pytest.mark.parametrize("confidence", [1.0, -0.5, math.nan, 2.0])
def test_bad_confidence(service, confidence):
    with pytest.raises(InvalidArgument) as info:
        service.predict(explicit(), confidence)
    assert info.value.field == "confidence"


def test_check_deadline(service):
    prediction = service.predict(explicit(), 0.9)
    loose = service.check_deadline(explicit(), Deadline(ms=prediction.upper_bound_ms * 2), 0.9)
    tight = service.check_deadline(explicit(), Deadline(ms=prediction.latency_ms * 0.5), 0.9)
    assert loose.feasible and loose.slack_ms > 0 and loose.probability >= 0.9
    assert not tight.feasible and tight.slack_ms < 0 and tight.probability < 0.5
    assert loose.prediction.upper_bound_ms == pytest.approx(prediction.upper_bound_ms)


def test_absolute_deadline(service):
    import time

    answer = service.check_deadline(explicit(), Deadline(at=time.time() + 10.0))
    assert 9_000 < answer.deadline_ms <= 10_000 and answer.feasible


@pytest.mark.parametrize(
    "deadline, field",
    [
        (Deadline(), "deadline"),
        (Deadline(ms=-1.0), "deadline_ms"),
        (Deadline(ms=math.nan), "deadline_ms"),
        (Deadline(ms=1.0, at=2.0), "deadline"),
        (Deadline(at=math.inf), "deadline_time"),
    ],
)
def test_bad_deadlines(service, deadline, field):
    with pytest.raises(InvalidArgument) as info:
        service.check_deadline(explicit(), deadline)
    assert info.value.field == field


def test_rank_placements_orders_by_slack(service):
    heavy = PlannedCoRunner("mlp", 8, {"l2_util": 0.1, "dram_util": 0.6}, overlap=1.0)
    candidates = [
        Candidate("a", "SimGPU", (heavy, heavy), CoRunnerSource.EXPLICIT),
        Candidate("b", "SimGPU", (), CoRunnerSource.EXPLICIT),
        Candidate("c", "SimGPU", (heavy,), CoRunnerSource.EXPLICIT),
        Candidate("sim1"),  # from the live view: idle
    ]
    ranking = service.rank_placements(BATCH, candidates, Deadline(ms=1000.0), solo_latency_ms=10.0)
    order = [p.device for p in ranking.placements]
    assert order[-2:] == ["c", "a"] and set(order[:2]) == {"b", "sim1"}
    assert [p.rank for p in ranking.placements] == [1, 2, 3, 4]
    slacks = [p.slack_ms for p in ranking.placements]
    assert slacks == sorted(slacks, reverse=True)
    for p in ranking.placements:
        single = service.check_deadline(
            Query.for_candidate(BATCH, candidates[p.candidate_index], 10.0), Deadline(ms=1000.0)
        )
        assert p.prediction.latency_ms == pytest.approx(single.prediction.latency_ms)
        assert p.slack_ms == pytest.approx(single.slack_ms)
        assert p.probability == pytest.approx(single.probability)


def test_rank_limits_and_errors(service):
    too_many = [Candidate(f"d{i}", co_runner_source=CoRunnerSource.EXPLICIT) for i in range(301)]
    with pytest.raises(ResourceExhausted) as info:
        service.rank_placements(BATCH, too_many, Deadline(ms=10.0))
    assert info.value.field == "candidates"
    with pytest.raises(InvalidArgument):
        service.rank_placements(BATCH, [], Deadline(ms=10.0))
    with pytest.raises(NotFound) as info:
        service.rank_placements(BATCH, [Candidate("sim0"), Candidate("ghost")], Deadline(ms=10.0))
    assert info.value.field == "candidates[1].device"
    bad = Candidate("x", co_runners=(PlannedCoRunner("m", 1, overlap=2.0),))
    with pytest.raises(InvalidArgument) as info:
        service.rank_placements(BATCH, [bad], Deadline(ms=10.0))
    assert info.value.field == "candidates[0].co_runners[0].overlap"
    with pytest.raises(InvalidArgument) as info:
        service.rank_placements(BatchSpec("m", 0), [Candidate("sim0")], Deadline(ms=10.0))
    assert info.value.field == "batch.batch_size"


def test_rank_hundreds_of_candidates(service):
    candidates = [
        Candidate(
            f"gpu{i}",
            "SimGPU",
            (PlannedCoRunner("mlp", 1 + i % 8, {"dram_util": 0.6}, overlap=(i % 10) / 10),),
            CoRunnerSource.EXPLICIT,
        )
        for i in range(300)
    ]
    ranking = service.rank_placements(BATCH, candidates, Deadline(ms=50.0))
    assert len(ranking.placements) == 300
    assert sorted(p.candidate_index for p in ranking.placements) == list(range(300))


def test_observations_are_prequential(records):
    svc = Service(ServiceConfig(predictor="rls"))
    svc.open()
    for record in records[:100]:
        svc.observe(record)
    record = records[100]
    before = svc.state.predictor.predict_one(record)
    svc.observe(record)
    residual = svc.state.calibrator.residuals("SimGPU")[-1]
    assert residual == pytest.approx(math.log(record.latency_ms / before))
    assert svc.state.predictor.predict_one(record) != before  # it learned afterwards


def test_report_observations_counts_and_names_rejections(service, records):
    good = [(record_to_dict(r), "") for r in records[800:810]]
    bad = [
        ({**record_to_dict(records[0]), "latency_ms": -3.0}, ""),
        ({**record_to_dict(records[0]), "latency_ms": math.nan}, ""),
        ({**record_to_dict(records[0]), "batch": {"model": "m", "batch_size": 0}}, ""),
        ({**record_to_dict(records[0]), "schema": "other"}, ""),
    ]
    before = service.observations_learned
    report = service.report_observations(good[:5] + bad + good[5:])
    assert (report.accepted, report.rejected) == (10, 4)
    assert [(r.index, r.field) for r in report.rejections] == [
        (5, "record.latency_ms"),
        (6, "record.latency_ms"),
        (7, "record.batch.batch_size"),
        (8, "record.schema"),
    ]
    assert report.observations_learned == before + 10
    assert service.status().observations_rejected == 4


def test_stream_length_limit(records):
    svc = Service(ServiceConfig(max_stream_records=5, max_rejections_reported=1))
    svc.open()
    with pytest.raises(ResourceExhausted):
        svc.report_observations((r, "") for r in records[:6])
    assert svc.observations_learned == 5


def test_observation_with_batch_id_ends_the_running_batch(service):
    service.batch_start("sim1", "SimGPU", "j9", BatchSpec("mlp", 2))
    assert service.live.running_count() == 1
    record = dataclasses.replace(synthetic_records(1)[0], device="sim1")
    service.report_observations([(record, "j9")])
    assert service.live.running_count() == 0


def test_status(service):
    status = service.status()
    assert status.ready and status.observations_learned == 800
    assert status.predictor == DEFAULT and status.coverage_confidence == 0.99
    assert 0 < status.rolling_mape < 50
    assert 0.9 < status.coverage <= 1.0
    (kind,) = status.device_kinds
    assert kind.device_kind == "SimGPU" and kind.observations == 800 and kind.residuals == 800
    assert status.devices == 2 and status.batches_running == 0


def test_learning_improves_predictions(records):
    svc = Service()
    svc.open()
    test = records[1000:1200]
    actual = np.array([r.latency_ms for r in test])

    def mape() -> float:
        predicted = np.array([svc.state.predictor.predict_one(r) for r in test])
        return float(np.mean(np.abs(predicted - actual) / actual))

    before = mape()
    for record in records[:1000]:
        svc.observe(record)
    assert mape() < before / 3


def test_coverage_replay_of_a_log(tmp_path):
    from predictor.records.logio import write_records
    from predictor.service.coverage import main, measure

    path = tmp_path / "synthetic.jsonl.gz"
    write_records(path, synthetic_records(3000, seed=9))
    result = measure(path, ServiceConfig(snapshot_every_s=0))
    assert result.records == 3000 and result.calibrated_records >= 2900
    assert 0.98 <= result.calibrated_coverage <= 0.997
    assert result.mape < 10
    assert main([str(path), "--confidence", "0.9"]) == 0
