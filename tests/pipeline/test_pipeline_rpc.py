"""PlanPipeline over a real gRPC server on port 0: answers, validation naming the field, health,
reflection, metrics, the client and ``predictor query plan``; properties through the service."""

from __future__ import annotations

import math
import urllib.request

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.cli import main
from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.rpc.errors import FIELD_KEY
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.protos import load
from predictor.rpc.server import create_server, stop_server
from predictor.service import (
    Candidate,
    CoRunnerSource,
    Deadline,
    FailedPrecondition,
    InvalidArgument,
    PlannedCoRunner,
    Service,
    ServiceConfig,
)
from predictor.service.pipeline_types import PipelineCost, PipelineStage
from predictor.service.synthetic import MODELS, synthetic_records

pb2, pb2_grpc = load()


def _batch(model: str, size: int) -> BatchSpec:
    l2, dram, _ = MODELS[model]
    return BatchSpec(model, size, {"l2_util": l2, "dram_util": dram})


STAGES = [PipelineStage(_batch("resnet", 4), "detect"), PipelineStage(_batch("bert", 2), "caption"),
          PipelineStage(_batch("mlp", 8), "rank")]
IDLE = Candidate("sim0", co_runner_source=CoRunnerSource.EXPLICIT)
BUSY = Candidate("sim1", co_runners=(PlannedCoRunner("bert", 8, {"l2_util": 0.5, "dram_util": 0.4}, overlap=1.0),
                                     PlannedCoRunner("mlp", 8, {"l2_util": 0.1, "dram_util": 0.6}, overlap=1.0)),
                 co_runner_source=CoRunnerSource.EXPLICIT)


@pytest.fixture(scope="module")
def warm_service() -> Service:
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open()
    for record in synthetic_records(600, seed=3):
        service.observe(record)
    return service


@pytest.fixture(scope="module")
def server(warm_service):
    metrics = ServerMetrics(warm_service)
    grpc_server, port = create_server("127.0.0.1:0", warm_service, metrics=metrics)
    grpc_server.start()
    client = InterferenceClient(f"127.0.0.1:{port}")
    client.wait_ready(10)
    yield warm_service, client, port, metrics
    client.close()
    metrics.stop()
    stop_server(grpc_server, warm_service, grace=0.5)


def _finite(plan) -> None:
    numbers = [plan.composed_bound_ms, plan.probability, plan.expected_ms, plan.cost, plan.deadline_ms,
               plan.sum_of_stage_bounds_ms]
    for s in plan.stages:
        numbers += [s.budget_ms, s.expected_ms, s.upper_bound_ms, s.cost, s.expected_start_ms,
                    s.prediction.latency_ms, s.prediction.upper_bound_ms]
    assert all(math.isfinite(v) for v in numbers)


def test_a_chain_plan_meets_its_deadline_with_budgets_that_add_up(server):
    _, client, _, _ = server
    plan = client.plan_pipeline(STAGES, [IDLE, BUSY], 200.0)
    _finite(plan)
    assert plan.feasible and plan.search == "dp" and plan.optimal
    assert plan.composed_bound_ms <= 200.0 and plan.probability >= 0.99
    assert plan.composed_bound_ms <= plan.sum_of_stage_bounds_ms + 1e-9
    assert [s.name for s in plan.stages] == ["detect", "caption", "rank"]
    assert sum(s.budget_ms for s in plan.stages) == pytest.approx(200.0)
    assert all(s.budget_ms >= s.upper_bound_ms for s in plan.stages)  # the bounds fit: each stage its own
    assert list(plan.critical_path) == [0, 1, 2]
    # busy time: the idle device is both faster and cheaper
    assert {s.device for s in plan.stages} == {"sim0"}
    assert plan.cost == pytest.approx(sum(s.prediction.latency_ms for s in plan.stages))


def test_a_dag_plan_goes_by_astar_and_a_price_moves_it(server):
    _, client, _, _ = server
    edges = [(0, 1), (0, 2)]
    cheap_busy = client.plan_pipeline(STAGES, [IDLE, BUSY], 500.0, edges=edges, cost=PipelineCost.PRICE,
                                      price_per_s=[10.0, 1.0])
    _finite(cheap_busy)
    assert cheap_busy.search == "astar" and cheap_busy.feasible
    assert {s.device for s in cheap_busy.stages} == {"sim1"}  # the busy device is cheap and the deadline loose
    assert cheap_busy.stages[1].expected_start_ms == pytest.approx(cheap_busy.stages[0].expected_ms)
    tight = client.plan_pipeline(STAGES, [IDLE, BUSY], cheap_busy.composed_bound_ms * 0.7, edges=edges,
                                 cost=PipelineCost.PRICE, price_per_s=[10.0, 1.0])
    if tight.feasible:
        assert tight.cost >= cheap_busy.cost
        assert any(s.device == "sim0" for s in tight.stages)


def test_an_impossible_deadline_is_infeasible_with_finite_numbers(server):
    _, client, _, _ = server
    plan = client.plan_pipeline(STAGES, [IDLE, BUSY], 1.0)
    _finite(plan)
    assert not plan.feasible and plan.probability < 0.5 and plan.composed_bound_ms > 1.0


def test_a_stage_limited_to_some_candidates(server):
    _, client, _, _ = server
    stages = [STAGES[0], PipelineStage(_batch("bert", 2), "pinned", candidates=(1,))]
    plan = client.plan_pipeline(stages, [IDLE, BUSY], 500.0)
    assert plan.stages[1].device == "sim1" and plan.stages[1].candidate_index == 1


def _code_and_field(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code(), dict(err.value.trailing_metadata() or ()).get(FIELD_KEY, "")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r.stages[1].batch.__setattr__("batch_size", 0), "stages[1].batch.batch_size"),
        (lambda r: r.stages[0].batch.attrs.__setitem__("l2_util", math.nan), "stages[0].batch.attrs.l2_util"),
        (lambda r: r.edges.add(from_stage=0, to_stage=9), "edges[0].to_stage"),
        (lambda r: (r.edges.add(from_stage=0, to_stage=1), r.edges.add(from_stage=1, to_stage=0)), "edges"),
        (lambda r: r.stages[0].candidates.append(5), "stages[0].candidates[0]"),
        (lambda r: r.candidates[1].signals.__setitem__("sm_util", math.inf), "candidates[1].signals.sm_util"),
        (lambda r: r.__setattr__("confidence", 1.5), "confidence"),
        (lambda r: r.__setattr__("deadline_ms", -3.0), "deadline_ms"),
        (lambda r: r.ClearField("deadline_ms"), "deadline"),
        (lambda r: r.__setattr__("cost", 2), "price_per_s"),
        (lambda r: r.price_per_s.extend([1.0, -1.0]), "price_per_s[1]"),
        (lambda r: r.__setattr__("cost", 7), "cost"),
        (lambda r: r.ClearField("stages"), "stages"),
        (lambda r: r.ClearField("candidates"), "candidates"),
    ],
)
def test_bad_input_is_invalid_argument_naming_the_field(server, change, field):
    _, _, port, _ = server
    request = pb2.PlanPipelineRequest(
        stages=[pb2.PipelineStage(name=s.name, batch=pb2.Batch(model=s.batch.model, batch_size=s.batch.batch_size,
                                                                attrs=dict(s.batch.attrs))) for s in STAGES[:2]],
        candidates=[pb2.PlacementCandidate(device="sim0", co_runner_source=1),
                    pb2.PlacementCandidate(device="sim1", co_runner_source=1)],
        deadline_ms=100.0,
    )
    change(request)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = pb2_grpc.InterferenceServiceStub(channel)
        code, got = _code_and_field(lambda: stub.PlanPipeline(request, timeout=10))
    finally:
        channel.close()
    assert (code, got) == (grpc.StatusCode.INVALID_ARGUMENT, field)


def test_client_raises_the_domain_error(server):
    _, client, _, _ = server
    with pytest.raises(InvalidArgument) as err:
        client.plan_pipeline(STAGES, [IDLE], 100.0, edges=[(0, 5)])
    assert err.value.field == "edges[0].to_stage"
    unknown = PipelineStage(BatchSpec("never-seen", 1), "x")
    with pytest.raises(InvalidArgument) as err:
        client.plan_pipeline([unknown], ["sim0", "nowhere"], 100.0, price_per_s=[1.0])
    assert err.value.field == "price_per_s"


def test_unknown_live_device_is_not_found_naming_the_candidate(server):
    _, client, _, _ = server
    from predictor.service import NotFound

    with pytest.raises(NotFound) as err:
        client.plan_pipeline(STAGES, [IDLE, "nowhere"], 100.0)
    assert err.value.field == "candidates[1].device"


def test_reflection_health_and_metrics_cover_plan_pipeline(server):
    from google.protobuf import descriptor_pool
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    _, client, port, metrics = server
    assert client.health() == "SERVING"
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
        service = pool.FindServiceByName("interference.v1.InterferenceService")
        assert "PlanPipeline" in {m.name for m in service.methods}
        assert "composed_bound_ms" in pool.FindMessageTypeByName("interference.v1.PlanPipelineResponse").fields_by_name
    finally:
        channel.close()
    client.plan_pipeline(STAGES, [IDLE], 100.0)
    with pytest.raises(InvalidArgument):
        client.plan_pipeline(STAGES, [IDLE], 100.0, confidence=2.0)
    http = metrics.serve(0, "127.0.0.1")
    text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5).read().decode()
    assert 'interference_rpc_requests_total{code="OK",method="PlanPipeline"}' in text
    assert 'interference_rpc_requests_total{code="INVALID_ARGUMENT",method="PlanPipeline"}' in text
    assert 'interference_pipeline_plans_total{outcome="feasible"}' in text
    assert "interference_pipeline_searches_cut_total" in text


def test_nothing_learned_and_no_solo_is_failed_precondition_naming_the_stage():
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open()
    with pytest.raises(FailedPrecondition) as err:
        service.plan_pipeline(STAGES, [], [IDLE], Deadline(ms=100.0))
    assert err.value.field == "stages[0].solo_latency_ms"


def test_cli_query_plan(server, capsys):
    _, _, port, _ = server
    target = ["--target", f"127.0.0.1:{port}"]
    assert main(["query", *target, "plan", "--stage", "resnet:4", "--stage", "bert:2", "--edge", "0:1",
                 "--devices", "sim0,sim1", "--idle", "--deadline-ms", "300"]) == 0
    out = capsys.readouterr().out
    assert "feasible" in out and "budget ms" in out and "sim0" in out
    assert main(["query", *target, "plan", "--stage", "resnet", "--devices", "sim0", "--deadline-ms", "3"]) == 2
    assert main(["query", *target, "plan", "--stage", "resnet:4", "--edge", "0:4", "--devices", "sim0", "--idle",
                 "--deadline-ms", "30"]) == 1


# --------------------------------------------------------------------------- properties through the service


@given(deadline=st.floats(0.5, 400.0), confidence=st.sampled_from([0.5, 0.9, 0.99, 0.999]),
       edges=st.sampled_from([[], [(0, 1), (0, 2)], [(0, 2), (1, 2)]]))
@settings(max_examples=25, deadline=None)
def test_service_plans_are_never_non_finite(warm_service, deadline, confidence, edges):
    plan = warm_service.plan_pipeline(STAGES, edges, [IDLE, BUSY], Deadline(ms=deadline), confidence)
    _finite(plan)
    assert 0.0 <= plan.probability <= 1.0
    assert plan.feasible == (plan.composed_bound_ms <= deadline)


@given(deadline=st.floats(20.0, 300.0), tighter=st.floats(0.3, 1.0), prices=st.tuples(st.floats(0, 5), st.floats(0, 5)))
@settings(max_examples=25, deadline=None)
def test_service_tighter_deadline_never_cheaper(warm_service, deadline, tighter, prices):
    def at(ms: float):
        return warm_service.plan_pipeline(STAGES, [(0, 1), (0, 2)], [IDLE, BUSY], Deadline(ms=ms),
                                          cost=PipelineCost.PRICE, price_per_s=list(prices))

    loose, tight = at(deadline), at(deadline * tighter)
    if tight.feasible:
        assert loose.feasible and loose.cost <= tight.cost + 1e-9
