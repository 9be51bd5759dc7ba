"""Overload shed by time on a real server: an answer that would wait too long for a thread is refused at
once with RESOURCE_EXHAUSTED (by gRPC's polling thread, not behind the queue), the calls taken are
answered, and the server takes calls again once its queue has drained; streams run apart and never
hold the answers' threads.

The answers' two threads are held by CheckDeadline calls of a servicer that blocks them until released,
so that every answer queues: the first few (an expected wait within the bound) are taken, the rest
refused while the threads are still held. No timing is asserted: the figures are the overload
benchmark's (``experiments/bench/bench_overload.py``).
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from predictor.records.record import BatchSpec
from predictor.rpc import convert
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.overload import QueueClock
from predictor.rpc.processes.options import ServeOptions
from predictor.rpc.protos import load
from predictor.rpc.security import AuthPolicy
from predictor.rpc.server import create_server, public_server, stop_server
from predictor.rpc.servicer import InterferenceServicer
from predictor.rpc.tracing import Tracing
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


class _HeldServicer(InterferenceServicer):
    """The service's servicer, with CheckDeadline (an answer) holding its thread until ``release``, and
    ReportObservations (a stream) too when ``streams``."""

    def __init__(self, service: Service, release: threading.Event, streams: bool = False):
        super().__init__(service)
        self.release = release
        self.streams = streams
        self.holding = threading.Semaphore(0)

    def _hold(self) -> None:
        self.holding.release()
        self.release.wait(60)

    def CheckDeadline(self, request, context):  # noqa: N802 - the RPC's name
        self._hold()
        return pb2.CheckDeadlineResponse()

    def ReportObservations(self, requests, context):  # noqa: N802 - the RPC's name
        if not self.streams:
            return super().ReportObservations(requests, context)
        self._hold()
        return pb2.ReportObservationsResponse(accepted=sum(1 for _ in requests))


def _build(build: str, service: Service, metrics: ServerMetrics, servicer=None, max_workers: int = 2):
    if build in ("create_server", "traced"):  # traced: OpenTelemetry's interceptor wraps every handler
        tracing = Tracing(InMemorySpanExporter(), batch=False).interceptor if build == "traced" else None
        return create_server("127.0.0.1:0", service, metrics=metrics, max_workers=max_workers, shed_wait_ms=5.0,
                             answer_threads=2, servicer=servicer, tracing=tracing)
    # what `predictor serve` and each answering worker of --workers N build
    options = ServeOptions(max_workers=max_workers, shed_wait_ms=5.0, answer_threads=2, max_concurrent_rpcs=64)
    return public_server(options, "127.0.0.1:0", service, metrics, None, AuthPolicy(), None, servicer)


@pytest.mark.parametrize("build", ["create_server", "public_server", "traced"])
def test_calls_beyond_the_wait_bound_are_refused_at_once_and_the_taken_ones_answered(build):
    service = _service()
    metrics = ServerMetrics(service)
    release = threading.Event()
    servicer = _HeldServicer(service, release)
    server, port = _build(build, service, metrics, servicer)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = pb2_grpc.InterferenceServiceStub(channel)
    try:
        assert stub.PredictLatency(_request(), timeout=10).prediction.latency_ms > 0
        held = [stub.CheckDeadline.future(pb2.CheckDeadlineRequest(), timeout=90) for _ in range(2)]
        for _ in held:  # both answer threads held
            assert servicer.holding.acquire(timeout=30)
        taken, refusal = [], None
        deadline = time.monotonic() + 30
        while refusal is None and time.monotonic() < deadline:  # queue calls until one is refused
            call = stub.PredictLatency.future(_request(), timeout=60)
            try:
                call.result(timeout=0.2)
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
        # writes are never shed: they run on the server's other threads
        record = convert.record_to_pb(synthetic_records(1, seed=9)[0])
        assert stub.ReportObservations(iter([pb2.ReportObservationsRequest(record=record)]), timeout=30).accepted == 1
        assert not any(h.done() for h in held) and not any(c.done() for c in taken)
        release.set()
        assert all(h.result(timeout=60) is not None for h in held)
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


def test_open_streams_do_not_hold_the_answers_threads():
    service = _service()
    release = threading.Event()
    servicer = _HeldServicer(service, release, streams=True)
    server, port = _build("public_server", service, None, servicer, max_workers=2)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = pb2_grpc.InterferenceServiceStub(channel)
    record = convert.record_to_pb(synthetic_records(1, seed=9)[0])
    try:
        streams = [stub.ReportObservations.future(iter([pb2.ReportObservationsRequest(record=record)]), timeout=90)
                   for _ in range(2)]
        for _ in streams:  # both of the server's other threads held
            assert servicer.holding.acquire(timeout=30)
        for _ in range(20):  # answered, none queued behind the streams
            assert stub.PredictLatency(_request(), timeout=10).prediction.latency_ms > 0
        assert not any(s.done() for s in streams)
        release.set()
        assert all(s.result(timeout=60).accepted == 1 for s in streams)
    finally:
        release.set()
        channel.close()
        stop_server(server, service, grace=0.5)


def test_the_answer_threads_are_checked():
    with pytest.raises(ValueError, match="--answer-threads must be a whole number >= 1, got 0"):
        create_server("127.0.0.1:0", _service(), shed_wait_ms=5.0, answer_threads=0)


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


def test_the_queue_clock_expects_at_least_the_time_gone_without_a_completion():
    pool = QueueClock(max_workers=1)
    hold, started = threading.Event(), threading.Event()
    try:
        pool.submit(lambda: (started.set(), hold.wait(10)))
        assert started.wait(10)
        waiting = pool.submit(time.sleep, 0)
        time.sleep(0.05)  # the thread is held: no completion for 50 ms
        assert pool.expected_wait_s() >= 0.05 > 2 * pool.interval_s
        hold.set()
        waiting.result(timeout=10)
    finally:
        hold.set()
        pool.shutdown()
