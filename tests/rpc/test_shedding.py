"""Overload shed by time on a real server: a call that would wait too long for a thread is refused at
once with RESOURCE_EXHAUSTED (on threads of its own, not behind the queue), the calls taken are
answered, and the server takes calls again once its queue has drained.

Both handler threads are held by open ReportObservations streams, so that every call queues: the
first few (an expected wait within the bound) are taken, the rest refused while the threads are
still held. No timing is asserted: the figures are the overload benchmark's
(``experiments/bench/bench_overload.py``).
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from predictor.records.record import BatchSpec
from predictor.rpc import convert
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.overload import QueueClock
from predictor.rpc.processes.options import ServeOptions
from predictor.rpc.protos import load
from predictor.rpc.security import AuthPolicy
from predictor.rpc.server import create_server, public_server, stop_server
from predictor.service import CoRunnerSource, Query, Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

pb2, pb2_grpc = load()
QUERY = Query("sim0", BatchSpec("bert", 4, {"l2_util": 0.5}), co_runner_source=CoRunnerSource.EXPLICIT)


def _service() -> Service:
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open()
    for record in synthetic_records(200, seed=1):
        service.observe(record)
    return service


def _held_streams(stub, count: int, release: threading.Event) -> list:
    record = convert.record_to_pb(synthetic_records(1, seed=9)[0])

    def messages():
        yield pb2.ReportObservationsRequest(record=record)
        release.wait(60)

    return [stub.ReportObservations.future(messages(), timeout=90) for _ in range(count)]


def _request():
    return pb2.PredictLatencyRequest(query=convert.query_to_pb(QUERY))


@pytest.mark.parametrize("build", ["create_server", "public_server"])
def test_calls_beyond_the_wait_bound_are_refused_at_once_and_the_taken_ones_answered(build):
    service = _service()
    metrics = ServerMetrics(service)
    if build == "create_server":
        server, port = create_server("127.0.0.1:0", service, metrics=metrics, max_workers=2, shed_wait_ms=5.0)
    else:  # what `predictor serve` and each answering worker of --workers N build
        options = ServeOptions(max_workers=2, shed_wait_ms=5.0, max_concurrent_rpcs=64)
        server, port = public_server(options, "127.0.0.1:0", service, metrics, None, AuthPolicy(), None)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = pb2_grpc.InterferenceServiceStub(channel)
    release = threading.Event()
    try:
        assert stub.PredictLatency(_request(), timeout=10).prediction.latency_ms > 0
        streams = _held_streams(stub, 2, release)
        taken, refusal = [], None
        deadline = time.monotonic() + 30
        while refusal is None and time.monotonic() < deadline:  # queue calls until one is refused
            call = stub.PredictLatency.future(_request(), timeout=60)
            try:
                call.result(timeout=0.2)  # answered: the streams do not hold both threads yet
            except grpc.FutureTimeoutError:
                taken.append(call)  # queued behind the held threads
            except grpc.RpcError as error:
                refusal = error
        assert refusal is not None and refusal.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refusal.details().startswith("overloaded: PredictLatency would wait more than 5 ms for a thread")
        assert 1 <= len(taken) <= 20
        for _ in range(5):  # the threads are still held: refused without waiting for them
            with pytest.raises(grpc.RpcError) as caught:
                stub.GetStatus(pb2.GetStatusRequest(), timeout=10)
            assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert not any(s.done() for s in streams) and not any(c.done() for c in taken)
        release.set()
        assert all(s.result(timeout=60).accepted == 1 for s in streams)
        assert all(c.result(timeout=60).prediction.latency_ms > 0 for c in taken)  # the taken ones answered
        deadline = time.monotonic() + 30
        while True:  # the queue drained: calls are taken again
            try:
                assert stub.PredictLatency(_request(), timeout=10).prediction.latency_ms > 0
                break
            except grpc.RpcError as error:
                assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() < deadline
                time.sleep(0.05)
        refused = metrics.registry.get_sample_value(
            "interference_rpc_requests_total", {"method": "PredictLatency", "code": "RESOURCE_EXHAUSTED"})
        assert refused and refused >= 1
    finally:
        release.set()
        channel.close()
        stop_server(server, service, grace=0.5)


def test_the_queue_clock_expects_no_wait_with_a_thread_free_and_counts_the_calls_waiting():
    pool = QueueClock(max_workers=1)
    hold, started = threading.Event(), threading.Event()
    try:
        assert pool.expected_wait_s() == 0.0
        first = pool.submit(lambda: (started.set(), hold.wait(10)))
        assert started.wait(10)
        one_busy = pool.expected_wait_s()
        assert one_busy == pytest.approx(pool.interval_s) and pool.waiting == 0
        queued = [pool.submit(time.sleep, 0.001) for _ in range(4)]
        assert pool.waiting == 4 and pool.expected_wait_s() == pytest.approx(5 * pool.interval_s)
        hold.set()
        first.result(timeout=10)
        for call in queued:
            call.result(timeout=10)
        assert pool.waiting == 0 and pool.expected_wait_s() == 0.0
    finally:
        hold.set()
        pool.shutdown()
