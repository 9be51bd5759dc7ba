"""Queueing delay in deadline answers: the M/G/1 formula against a simpy simulation, the queue
book, and ReportBatchQueued / CheckDeadline / RankPlacements over a real gRPC server."""

from __future__ import annotations

import math
import urllib.request

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.studies import queue_validation
from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.rpc.errors import FIELD_KEY
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.protos import load
from predictor.rpc.server import create_server, stop_server
from predictor.service import CoRunnerSource, InvalidArgument, Query, Service, ServiceConfig
from predictor.service.live.queueing import mg1_wait
from predictor.service.live.queues import QueueBook, WaitSource
from predictor.service.synthetic import synthetic_records

pb2, pb2_grpc = load()
BATCH = BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})


# --------------------------------------------------------------------------- the formula against simpy


@pytest.mark.parametrize("service", queue_validation.SERVICES)
@pytest.mark.parametrize("rho", queue_validation.RHOS)
def test_predicted_mean_wait_within_10_percent_of_simulated(rho, service):
    """The queue book's P-K wait, learned from the simulated reports, is within 10% of the simulated mean."""
    row = queue_validation.validate(rho, service, queue_validation.customers_for(rho, quick=True), seed=0)
    assert abs(row["error"]) < 0.10, row
    assert abs(row["estimated_rho"] - rho) < 0.05, row


@pytest.mark.parametrize("rho", (0.5, 0.7, 0.9))
def test_tail_quantile_of_exponential_service_within_10_percent(rho):
    """M/M/1: the wait quantile is exact in law; the book's is within 10% of the simulated one."""
    row = queue_validation.validate(rho, "exponential", queue_validation.customers_for(rho, quick=True), seed=1)
    assert row["predicted_quantile_ms"] == pytest.approx(row["simulated_quantile_ms"], rel=0.10), row


@given(rate=st.floats(0.0, 10.0), mean=st.floats(0.0, 10.0), extra=st.floats(0.0, 100.0))
@settings(max_examples=200, deadline=None)
def test_saturated_exactly_when_utilisation_reaches_one(rate, mean, extra):
    wait = mg1_wait(rate, mean, mean * mean + extra)
    assert wait.saturated == (rate * mean >= 1.0)
    if wait.saturated:
        assert wait.utilisation is None and math.isinf(wait.mean_ms) and math.isinf(wait.quantile(0.9))
    else:
        assert wait.mean_ms >= 0 and math.isfinite(wait.mean_ms)
        assert wait.quantile(0.5) <= wait.quantile(0.9) <= wait.quantile(0.999)


def test_mm1_closed_forms():
    lam, mu = 0.08, 0.1  # per ms
    wait = mg1_wait(lam, 1 / mu, 2 / mu**2)
    assert wait.mean_ms == pytest.approx(lam / (mu * (mu - lam)))
    assert wait.exceedance(30.0) == pytest.approx(0.8 * math.exp(-(mu - lam) * 30.0))
    assert wait.quantile(0.95) == pytest.approx(math.log(0.8 / 0.05) / (mu - lam))
    with pytest.raises(ValueError, match="arrival_rate"):
        mg1_wait(-1.0, 1.0, 1.0)


def test_book_needs_min_samples_then_uses_rates_then_saturates():
    now = [0.0]
    book = QueueBook(clock=lambda: now[0], min_samples=20)
    for i in range(19):
        now[0] = i * 0.1  # an arrival every 100 ms
        book.started("d", str(i))
        now[0] += 0.01  # served in 10 ms
        book.ended("d", str(i))
    assert book.wait("d", [], 0.99, 1.0).source is WaitSource.NONE
    now[0] = 1.9
    book.started("d", "19")
    now[0] = 1.91
    book.ended("d", "19")
    wait = book.wait("d", [], 0.99, 1.0)
    assert wait.source is WaitSource.RATES and wait.utilisation == pytest.approx(0.1, rel=1e-6)
    assert wait.mean_ms == pytest.approx(mg1_wait(0.01, 10.0, 100.0).mean_ms, rel=1e-6)
    small = QueueBook(clock=lambda: now[0], window=40, min_samples=20, stale_after_s=1.0)
    for i in range(40):  # queued every 5 ms ...
        now[0] = 10 + i * 0.005
        small.queued("e", str(i), BatchSpec("bert", 1), predicted_ms=10.0)
    for i in range(40):  # ... served one at a time in 10 ms each: rho 2
        small.started("e", str(i))
        now[0] += 0.010
        small.ended("e", str(i))
    assert small.wait("e", [], 0.99, 1.0).source is WaitSource.QUEUE  # the queue is known (and empty)
    now[0] += 2.0  # the last queue report is stale: the rates answer
    wait = small.wait("e", [], 0.99, 1.0)
    assert wait.saturated and wait.utilisation is None and math.isinf(wait.bound_ms)
    # a device seen running 3 batches at once is an M/G/3 queue: the same rates do not saturate it
    multi = QueueBook(clock=lambda: now[0], window=40, min_samples=20)
    for i in range(40):
        now[0] = 100 + i * 0.005
        multi.started("f", str(i))
        if i >= 2:
            multi.ended("f", str(i - 2))
    wait = multi.wait("f", [], 0.99, 1.0)
    assert not wait.saturated and wait.utilisation == pytest.approx(2 / 3, rel=0.05)
    assert small.summary() == {"queued": 0, "saturated": 1}


# --------------------------------------------------------------------------- the service over gRPC


@pytest.fixture(scope="module")
def server():
    now = [1000.0]
    service = Service(ServiceConfig(snapshot_every_s=0), clock=lambda: now[0])
    metrics = ServerMetrics(service)
    grpc_server, port = create_server("127.0.0.1:0", service, metrics=metrics)
    grpc_server.start()
    service.open()
    for record in synthetic_records(300, seed=3):
        service.observe(record)
    client = InterferenceClient(f"127.0.0.1:{port}")
    client.wait_ready(10)
    yield service, client, port, metrics, now
    client.close()
    metrics.stop()
    stop_server(grpc_server, service, grace=0.5)


def idle(device):
    return Query(device, BATCH, device_kind="SimGPU", co_runner_source=CoRunnerSource.LIVE_VIEW)


def test_queued_batches_add_their_predicted_latency_behind_the_first_running_end(server):
    service, client, _, _, now = server
    predicted_running, _ = client.batch_start("q0", "r1", BATCH, device_kind="SimGPU")
    client.batch_start("q1", "r1", BATCH, device_kind="SimGPU")  # the same, without a queue
    assert client.batch_queued("q0", "a", BATCH, device_kind="SimGPU") == (1, 0.0)
    queued, wait_b = client.batch_queued("q0", "b", BATCH, device_kind="SimGPU")
    assert queued == 2 and wait_b > 0
    now[0] += 0.002  # 2 ms later
    answer = client.check_deadline(idle("q0"), deadline_ms=500.0, confidence=0.9)
    plain = client.check_deadline(idle("q1"), deadline_ms=500.0, confidence=0.9)
    p = answer.prediction
    assert p.queue_wait_source == "queue" and not p.queue_saturated
    running_remaining = service.live.running("q0")[0][1]
    assert p.queue_wait_ms == pytest.approx(running_remaining + wait_b * 2, rel=1e-6)
    assert p.queue_wait_bound_ms >= p.queue_wait_ms
    assert plain.prediction.queue_wait_source == "none" and plain.prediction.queue_wait_ms == 0
    assert answer.slack_ms == pytest.approx(500.0 - p.upper_bound_ms - p.queue_wait_bound_ms, rel=1e-9)
    assert answer.slack_ms < plain.slack_ms and answer.probability <= plain.probability
    assert p.completion_bound_ms == pytest.approx(p.queue_wait_bound_ms + p.upper_bound_ms)
    # the head starts: it leaves the queue; the other is dropped (an end report on a queued id)
    client.batch_start("q0", "a", BATCH, device_kind="SimGPU")
    assert service.state.queues.queue_length("q0") == 1
    assert client.batch_end("q0", "b") == (True, 2)
    assert service.state.queues.queue_length("q0") == 0
    empty = client.check_deadline(idle("q0"), deadline_ms=500.0, confidence=0.9)
    assert empty.prediction.queue_wait_source == "queue" and empty.prediction.queue_wait_ms == 0


def test_ranking_prefers_the_device_without_a_queue(server):
    service, client, _, _, now = server
    client.batch_start("r0", "x", BATCH, device_kind="SimGPU")
    client.batch_start("r1", "x", BATCH, device_kind="SimGPU")
    for i in range(3):
        client.batch_queued("r0", f"w{i}", BATCH, device_kind="SimGPU")
    ranking = client.rank_placements(BATCH, ["r0", "r1"], deadline_ms=400.0)
    assert [p.device for p in ranking.placements] == ["r1", "r0"]
    queued = ranking.placements[1]
    assert queued.prediction.queue_wait_ms > 0 and queued.deciding_term in {"queue", "solo", "interference"}
    assert queued.slack_ms == pytest.approx(400.0 - queued.prediction.completion_bound_ms)


def test_rates_and_saturation_through_the_service(server):
    service, client, _, _, now = server
    for i in range(30):  # one arrival every 50 ms, each served in 5 ms: rho 0.1
        client.batch_start("m0", f"m{i}", BATCH, device_kind="SimGPU")
        now[0] += 0.005
        client.batch_end("m0", f"m{i}")
        now[0] += 0.045
    p = client.predict(idle("m0"), confidence=0.99)
    assert p.queue_wait_source == "rates" and p.queue_utilisation == pytest.approx(0.1, rel=0.05)
    rate, m1, m2, _ = service.state.queues.rates("m0")
    assert p.queue_wait_ms == pytest.approx(mg1_wait(rate, m1, m2).mean_ms)
    for i in range(600):  # now queued every 2 ms, served one at a time in 5 ms: saturated
        client.batch_queued("m0", f"s{i}", BATCH, device_kind="SimGPU")
        now[0] += 0.002
    for i in range(600):
        client.batch_start("m0", f"s{i}", BATCH, device_kind="SimGPU")
        now[0] += 0.005
        client.batch_end("m0", f"s{i}")
    now[0] += service.config.stale_after_s + 1  # no queue report since: the rates answer
    answer = client.check_deadline(idle("m0"), deadline_ms=1e6)
    assert answer.prediction.queue_saturated and answer.prediction.queue_utilisation is None
    assert math.isinf(answer.prediction.queue_wait_ms) and not answer.feasible and answer.probability == 0.0
    # no infinity on the wire: the wait fields are left unset (read back as infinite), the slack is
    # the most negative number answered
    assert math.isinf(answer.prediction.completion_bound_ms) and answer.slack_ms == -service.config.max_value


def test_report_batch_queued_validation_names_the_field(server):
    _, client, port, _, _ = server
    with pytest.raises(InvalidArgument) as info:
        client.batch_queued("v0", "", BATCH)
    assert info.value.field == "batch_id"
    with pytest.raises(InvalidArgument) as info:
        client.batch_queued("", "x", BATCH)
    assert info.value.field == "device"
    with pytest.raises(InvalidArgument) as info:
        client.batch_queued("v0", "x", BatchSpec("bert", 0))
    assert info.value.field == "batch.batch_size"
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = pb2_grpc.InterferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.ReportBatchQueued(pb2.ReportBatchQueuedRequest(device="v0", batch_id="y" * 300,
                                                                batch=pb2.Batch(model="bert", batch_size=1)))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(err.value.trailing_metadata()).get(FIELD_KEY) == "batch_id"
    finally:
        channel.close()


def test_reflection_health_and_metrics_cover_report_batch_queued(server):
    from google.protobuf import descriptor_pool
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    _, client, port, metrics, _ = server
    assert client.health() == "SERVING"
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
        service = pool.FindServiceByName("interference.v1.InterferenceService")
        assert "ReportBatchQueued" in {m.name for m in service.methods}
        assert "queue_wait_ms" in pool.FindMessageTypeByName("interference.v1.Prediction").fields_by_name
    finally:
        channel.close()
    client.batch_queued("g0", "z", BATCH)
    http = metrics.serve(0, "127.0.0.1")
    text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5).read().decode()
    assert 'interference_rpc_requests_total{code="OK",method="ReportBatchQueued"}' in text
    assert "interference_batches_queued" in text and "interference_devices_saturated" in text
