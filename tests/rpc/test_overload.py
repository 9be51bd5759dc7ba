"""Overload on a real server: beyond the in-flight limit calls are refused at once with
RESOURCE_EXHAUSTED (never queued), and a call whose deadline passed while it waited is not computed."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from predictor.records.record import BatchSpec
from predictor.rpc import convert
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.protos import load
from predictor.rpc.server import create_server, stop_server
from predictor.service import CoRunnerSource, Query, Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

pb2, pb2_grpc = load()
QUERY = Query("sim0", BatchSpec("bert", 4, {"l2_util": 0.5}), co_runner_source=CoRunnerSource.EXPLICIT)


def _served(**options):
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open()
    for record in synthetic_records(200, seed=1):
        service.observe(record)
    metrics = ServerMetrics(service)
    server, port = create_server("127.0.0.1:0", service, metrics=metrics, **options)
    server.start()
    return service, server, metrics, grpc.insecure_channel(f"127.0.0.1:{port}")


def _held_streams(stub, count: int, release: threading.Event) -> list:
    """``count`` ReportObservations streams that stay open (each holds an RPC slot) until ``release``."""
    record = convert.record_to_pb(synthetic_records(1, seed=9)[0])

    def messages():
        yield pb2.ReportObservationsRequest(record=record)
        release.wait(30)

    return [stub.ReportObservations.future(messages(), timeout=60) for _ in range(count)]


def _predict(stub, timeout: float = 10):
    return stub.PredictLatency(pb2.PredictLatencyRequest(query=convert.query_to_pb(QUERY)), timeout=timeout)


def _count(metrics: ServerMetrics, method: str, code: str) -> float:
    return metrics.registry.get_sample_value("interference_rpc_requests_total", {"method": method, "code": code}) or 0


def test_calls_beyond_the_limit_are_refused_at_once_not_queued():
    service, server, metrics, channel = _served(max_workers=4, max_concurrent_rpcs=2)
    stub = pb2_grpc.InterferenceServiceStub(channel)
    release = threading.Event()
    try:
        assert _predict(stub).prediction.latency_ms > 0
        streams = _held_streams(stub, 2, release)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until both streams hold their slot
            # a stream refused while the call before it still held its slot is opened again
            streams = [_held_streams(stub, 1, release)[0] if s.done() else s for s in streams]
            try:
                _predict(stub)
            except grpc.RpcError as error:
                assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
                break
            time.sleep(0.01)
        # the slots are still held: a refused call comes back without waiting for them
        for _ in range(5):
            with pytest.raises(grpc.RpcError) as caught:
                _predict(stub)
            assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert not any(s.done() for s in streams)
        release.set()
        assert all(s.result(timeout=30).accepted == 1 for s in streams)
        assert _predict(stub).prediction.latency_ms > 0  # capacity is back
    finally:
        release.set()
        channel.close()
        stop_server(server, service, grace=0.5)


def test_a_call_whose_deadline_passed_while_waiting_is_not_computed():
    service, server, metrics, channel = _served(max_workers=1)
    stub = pb2_grpc.InterferenceServiceStub(channel)
    release = threading.Event()
    try:
        _predict(stub)
        answered = _count(metrics, "PredictLatency", "OK")
        (stream,) = _held_streams(stub, 1, release)  # the only worker is busy with it
        time.sleep(0.3)
        with pytest.raises(grpc.RpcError) as caught:
            _predict(stub, timeout=0.3)
        assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        release.set()
        stream.result(timeout=30)
        _predict(stub)  # the worker is free again, and has drawn every queued call by now
        # the expired call was dropped by gRPC or refused by the interceptor's deadline check: never computed
        assert _count(metrics, "PredictLatency", "OK") == answered + 1
    finally:
        release.set()
        channel.close()
        metrics.stop()
        stop_server(server, service, grace=0.5)
