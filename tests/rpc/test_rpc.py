"""The gRPC layer against a real server on port 0 and a real channel: every RPC, errors, health,
reflection, metrics."""

from __future__ import annotations

import dataclasses
import math
import time
import urllib.request

import grpc
import pytest
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from predictor.calibration.conformal import BoundSource
from predictor.predictors import DEFAULT
from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.rpc.errors import FIELD_KEY
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.protos import SERVICE_NAME, load
from predictor.rpc.server import create_server, stop_server
from predictor.service import (
    Candidate,
    CoRunnerSource,
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
from predictor.service.synthetic import synthetic_records

pb2, pb2_grpc = load()
BATCH = BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})


@pytest.fixture(scope="module")
def records():
    return synthetic_records(700, seed=5)


@pytest.fixture(scope="module")
def running(records):
    service = Service(ServiceConfig(max_candidates=500, max_stream_records=10_000))
    metrics = ServerMetrics(service)
    server, port = create_server("127.0.0.1:0", service, metrics=metrics, max_message_bytes=256 * 1024)
    server.start()
    service.open()
    for record in records[:500]:
        service.observe(record)
    client = InterferenceClient(f"127.0.0.1:{port}")
    client.wait_ready(10)
    yield service, client, port, metrics
    client.close()
    metrics.stop()
    stop_server(server, service, grace=0.5)


@pytest.fixture
def client(running):
    return running[1]


@pytest.fixture
def stub(running):
    channel = grpc.insecure_channel(f"127.0.0.1:{running[2]}")
    yield pb2_grpc.InterferenceServiceStub(channel)
    channel.close()


def explicit_query(*runners, device="sim0"):
    return Query(device, BATCH, co_runners=tuple(runners), co_runner_source=CoRunnerSource.EXPLICIT)


# --------------------------------------------------------------------------- every RPC


def test_predict_latency(client, running):
    service = running[0]
    runner = PlannedCoRunner("mlp", 4, {"l2_util": 0.1, "dram_util": 0.6}, overlap=0.8)
    prediction = client.predict(explicit_query(runner), confidence=0.9)
    direct = service.predict(explicit_query(runner), 0.9)
    assert prediction == direct
    assert prediction.bound_source is BoundSource.DEVICE_KIND and prediction.confidence == 0.9
    assert prediction.co_runners[0].overlap == pytest.approx(0.8)
    assert prediction.observations_learned >= 500


def test_check_deadline_relative_and_absolute(client):
    query = explicit_query()
    relative = client.check_deadline(query, 500.0)
    assert relative.feasible and relative.deadline_ms == 500.0 and relative.probability > 0.99
    absolute = client.check_deadline(query, deadline_time=time.time() + 0.5)
    assert 300 < absolute.deadline_ms <= 500 and absolute.feasible
    tight = client.check_deadline(query, 0.01)
    assert not tight.feasible and tight.slack_ms < 0 and tight.probability == 0.0


def test_rank_placements(client):
    heavy = PlannedCoRunner("mlp", 8, {"dram_util": 0.6}, overlap=1.0)
    candidates = [
        Candidate(f"gpu{i}", "SimGPU", (heavy,) * (i % 3), CoRunnerSource.EXPLICIT) for i in range(300)
    ]
    ranking = client.rank_placements(BATCH, candidates, 40.0, solo_latency_ms=10.0)
    assert len(ranking.placements) == 300 and ranking.deadline_ms == 40.0
    slacks = [p.slack_ms for p in ranking.placements]
    assert slacks == sorted(slacks, reverse=True)
    assert {p.candidate_index % 3 for p in ranking.placements[:100]} == {0}
    assert [p.rank for p in ranking.placements] == list(range(1, 301))


def test_report_observations(client, records):
    before = client.status().observations_learned
    report = client.report_observations(records[500:520])
    assert (report.accepted, report.rejected) == (20, 0)
    assert report.observations_learned == before + 20


def test_report_observations_rejections_name_the_field(stub, records):
    good = pb2.ReportObservationsRequest(
        record=pb2.Record(device="sim0", batch=pb2.Batch(model="bert", batch_size=2), latency_ms=5.0)
    )
    bad = [
        pb2.ReportObservationsRequest(
            record=pb2.Record(device="sim0", batch=pb2.Batch(model="bert", batch_size=2))
        ),
        pb2.ReportObservationsRequest(
            record=pb2.Record(device="sim0", batch=pb2.Batch(model="bert", batch_size=0), latency_ms=5.0)
        ),
        pb2.ReportObservationsRequest(
            record=pb2.Record(device="sim0", batch=pb2.Batch(model="bert", batch_size=2), latency_ms=math.inf)
        ),
        pb2.ReportObservationsRequest(
            record=pb2.Record(
                device="sim0",
                batch=pb2.Batch(model="bert", batch_size=2),
                latency_ms=5.0,
                co_runners=[pb2.CoRunner(model="m", batch_size=1, overlap=-0.1)],
            )
        ),
        pb2.ReportObservationsRequest(
            record=pb2.Record(
                device="sim0",
                batch=pb2.Batch(model="bert", batch_size=2),
                latency_ms=5.0,
                co_runners=[pb2.CoRunner(model="m", batch_size=1, remaining_ms=3.0)],
            )
        ),
        pb2.ReportObservationsRequest(
            record=pb2.Record(
                schema="coloc/v0", device="sim0", batch=pb2.Batch(model="bert", batch_size=2), latency_ms=5.0
            )
        ),
        pb2.ReportObservationsRequest(),
    ]
    response = stub.ReportObservations(iter([good, *bad, good]), timeout=10)
    assert (response.accepted, response.rejected) == (2, 7)
    assert [(r.index, r.field) for r in response.rejections] == [
        (1, "record.latency_ms"),
        (2, "record.batch.batch_size"),
        (3, "record.latency_ms"),
        (4, "record.co_runners[0].overlap"),
        (5, "record.co_runners[0].remaining_ms"),
        (6, "record.schema"),
        (7, "record.latency_ms"),
    ]
    assert all(r.reason for r in response.rejections)


def test_batch_start_end_feed_the_live_view(client):
    predicted, running_now = client.batch_start(
        "sim1", "b-1", BatchSpec("mlp", 8, {"dram_util": 0.6}), device_kind="SimGPU"
    )
    assert predicted > 0 and running_now == 1
    with_runner = client.predict(Query("sim1", BATCH))
    assert [c.model for c in with_runner.co_runners] == ["mlp"]
    assert 0 < with_runner.co_runners[0].overlap <= 1
    assert client.status().batches_running == 1
    assert client.batch_end("sim1", "b-1") == (True, 0)
    assert client.batch_end("sim1", "b-1") == (False, 0)
    assert client.predict(Query("sim1", BATCH)).co_runners == ()


def test_get_status(client):
    status = client.status()
    assert status.ready and status.predictor == DEFAULT
    assert status.observations_learned >= 500 and status.coverage_confidence == 0.99
    assert 0 < status.rolling_mape < 100 and 0.8 < status.coverage <= 1
    assert [k.device_kind for k in status.device_kinds] == ["SimGPU"]
    assert status.uptime_s > 0 and status.devices >= 2


# --------------------------------------------------------------------------- errors


def _code_and_field(call):
    with pytest.raises(grpc.RpcError) as info:
        call()
    metadata = dict(info.value.trailing_metadata() or ())
    return info.value.code(), metadata.get(FIELD_KEY), info.value.details()


@pytest.mark.parametrize(
    "request_, field",
    [
        (
            pb2.PredictLatencyRequest(
                query=pb2.BatchQuery(device="sim0", batch=pb2.Batch(model="bert", batch_size=0))
            ),
            "query.batch.batch_size",
        ),
        (
            pb2.PredictLatencyRequest(
                query=pb2.BatchQuery(device="sim0", batch=pb2.Batch(model="", batch_size=1))
            ),
            "query.batch.model",
        ),
        (
            pb2.PredictLatencyRequest(
                query=pb2.BatchQuery(
                    device="sim0", batch=pb2.Batch(model="b", batch_size=1, attrs={"x": math.nan})
                )
            ),
            "query.batch.attrs.x",
        ),
        (
            pb2.PredictLatencyRequest(
                query=pb2.BatchQuery(
                    device="sim0",
                    batch=pb2.Batch(model="b", batch_size=1),
                    co_runners=[pb2.CoRunner(model="m", batch_size=1, overlap=math.inf)],
                )
            ),
            "query.co_runners[0].overlap",
        ),
        (
            pb2.PredictLatencyRequest(
                query=pb2.BatchQuery(device="sim0", batch=pb2.Batch(model="b", batch_size=1)), confidence=1.5
            ),
            "confidence",
        ),
        (pb2.PredictLatencyRequest(), "query.device"),
    ],
)
def test_invalid_argument_names_the_field(stub, request_, field):
    code, metadata_field, details = _code_and_field(lambda: stub.PredictLatency(request_, timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert metadata_field == field and details.startswith(field + ": ")


def test_deadline_errors(stub):
    query = pb2.BatchQuery(
        device="sim0",
        batch=pb2.Batch(model="b", batch_size=1),
        co_runner_source=pb2.CO_RUNNER_SOURCE_EXPLICIT,
    )
    code, field, _ = _code_and_field(
        lambda: stub.CheckDeadline(pb2.CheckDeadlineRequest(query=query), timeout=5)
    )
    assert (code, field) == (grpc.StatusCode.INVALID_ARGUMENT, "deadline")
    request = pb2.CheckDeadlineRequest(query=query, deadline_ms=-5)
    code, field, _ = _code_and_field(lambda: stub.CheckDeadline(request, timeout=5))
    assert (code, field) == (grpc.StatusCode.INVALID_ARGUMENT, "deadline_ms")


def test_client_raises_domain_errors(client):
    with pytest.raises(InvalidArgument) as info:
        client.predict(Query("sim0", BatchSpec("bert", 0)))
    assert info.value.field == "query.batch.batch_size" and "integer >= 1" in info.value.message
    with pytest.raises(NotFound) as info:
        client.predict(Query("no-such-device", BATCH))
    assert info.value.field == "query.device"
    with pytest.raises(NotFound):
        client.batch_end("no-such-device", "x")
    with pytest.raises(ResourceExhausted) as info:
        client.rank_placements(
            BATCH, [Candidate(f"d{i}", co_runner_source=CoRunnerSource.EXPLICIT) for i in range(501)], 10.0
        )
    assert info.value.field == "candidates"


def test_oversized_message_is_resource_exhausted(stub):
    request = pb2.PredictLatencyRequest(
        query=pb2.BatchQuery(device="sim0", batch=pb2.Batch(model="x" * (300 * 1024), batch_size=1))
    )
    code, _, _ = _code_and_field(lambda: stub.PredictLatency(request, timeout=5))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_unavailable_until_ready_and_health():
    service = Service()
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    try:
        with InterferenceClient(f"127.0.0.1:{port}") as client:
            assert client.health() == "NOT_SERVING"
            channel = client.channel
            health = health_pb2_grpc.HealthStub(channel)
            overall = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert overall.status == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(Unavailable):
                client.predict(explicit_query())
            assert client.status().ready is False  # status answers before ready
            service.open(ready=False)  # loaded, its caller's start-up not done (predictor serve: the gc freeze)
            assert client.health() == "NOT_SERVING"
            with pytest.raises(Unavailable):
                client.predict(explicit_query())
            service.mark_ready()
            client.wait_ready(5)
            assert client.health() == "SERVING"
            overall = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert overall.status == health_pb2.HealthCheckResponse.SERVING
            # Issue 12: nothing learned and no solo latency: FAILED_PRECONDITION, not a made-up 1 ms.
            with pytest.raises(FailedPrecondition):
                client.predict(explicit_query())
            given = client.predict(dataclasses.replace(explicit_query(), solo_latency_ms=3.0))
            assert given.latency_ms > 0 and given.fallback
    finally:
        stop_server(server, service, grace=0.2)


# --------------------------------------------------------------------------- reflection, metrics


def test_reflection_lists_and_calls_predict_latency(running):
    """A generic client that only uses reflection discovers and calls PredictLatency."""
    channel = grpc.insecure_channel(f"127.0.0.1:{running[2]}")
    try:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = database.get_services()
        assert SERVICE_NAME in services and "grpc.health.v1.Health" in services
        pool = descriptor_pool.DescriptorPool(database)
        service = pool.FindServiceByName(SERVICE_NAME)
        assert {m.name for m in service.methods} >= {
            "PredictLatency",
            "CheckDeadline",
            "RankPlacements",
            "ReportObservations",
            "ReportBatchStart",
            "ReportBatchEnd",
            "GetStatus",
        }
        method = service.FindMethodByName("PredictLatency")
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        request = json_format.ParseDict(
            {
                "query": {
                    "device": "sim0",
                    "batch": {"model": "bert", "batch_size": 4},
                    "co_runner_source": "CO_RUNNER_SOURCE_EXPLICIT",
                }
            },
            request_class(),
        )
        call = channel.unary_unary(
            f"/{SERVICE_NAME}/PredictLatency",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_class.FromString,
        )
        response = json_format.MessageToDict(call(request, timeout=5))
        assert response["prediction"]["latencyMs"] > 0
        assert response["prediction"]["upperBoundMs"] >= response["prediction"]["latencyMs"]
    finally:
        channel.close()


def test_prometheus_metrics(running, client):
    _, _, _, metrics = running
    client.predict(explicit_query())
    with pytest.raises(InvalidArgument):
        client.predict(Query("sim0", BatchSpec("bert", 0)))
    port = metrics.serve(0, "127.0.0.1")
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'interference_rpc_requests_total{code="OK",method="PredictLatency"}' in text
    assert 'interference_rpc_requests_total{code="INVALID_ARGUMENT",method="PredictLatency"}' in text
    assert 'interference_rpc_latency_seconds_count{method="PredictLatency"}' in text
    assert "interference_observations_learned_total" in text
    assert 'interference_bound_coverage_ratio{device_kind="SimGPU"}' in text
    assert 'interference_rolling_mape_percent{device_kind="SimGPU"}' in text
    assert "interference_ready 1.0" in text


def test_graceful_stop_snapshots_and_goes_not_serving(records, tmp_path):
    service = Service(ServiceConfig(snapshot_every_s=0))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open(tmp_path)
    with InterferenceClient(f"127.0.0.1:{port}") as client:
        client.report_observations(records[:30])
        stop_server(server, service, grace=0.5)
        assert client.health(timeout=0.5) == "UNKNOWN"
    assert (tmp_path / "service.snapshot").exists()
    restored = Service()
    assert "restored 30 observations" in restored.open(tmp_path)
