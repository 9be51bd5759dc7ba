"""The queue's clock: a start reported late with its ``elapsed_ms``, and reports stamped with the
client's ``client_time``, give the queue book the same service times and waits as reports made on time.

The service runs on clocks the test moves (its monotonic clock and its wall clock), so that each report
arrives exactly when the test says; the RPC test checks the new fields' validation on a real server.
"""

from __future__ import annotations

import math
import random
import time

import grpc
import pytest

from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.rpc.errors import FIELD_KEY
from predictor.rpc.server import create_server, stop_server
from predictor.service import Service, ServiceConfig
from predictor.service.errors import InvalidArgument
from predictor.service.synthetic import synthetic_records

BATCH = BatchSpec("bert", 4)


class Clocks:
    """A monotonic and a wall clock that move together, by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1.7e9 + self.now


def _served(clocks: Clocks) -> Service:
    service = Service(ServiceConfig(snapshot_every_s=0, observation_log=False), clock=clocks.monotonic,
                      wall=clocks.wall)
    service.open()
    return service


def _run(start_delay_ms: float, how: str, end_delay_ms: float = 0.0, batches: int = 200, seed: int = 1) -> tuple:
    """One device serving ``batches`` one after another (Poisson arrivals, service times of 60 ms and
    an exponential part, 100 ms on average: longer than any report's delay), each
    start reported ``start_delay_ms`` late and each end ``end_delay_ms`` late: ``how`` = "elapsed" (the
    start says how long the batch has run), "client_time" (every report says when it happened) or
    "none" (nothing said)."""
    rng = random.Random(seed)
    clocks = Clocks()
    service = _served(clocks)
    events = []
    free_at = 0.0
    arrival = 0.0
    for i in range(batches):
        arrival += rng.expovariate(1 / 140.0)  # ms
        start = max(arrival, free_at)
        end = start + 60.0 + rng.expovariate(1 / 40.0)
        free_at = end
        events += [(start + start_delay_ms, start, "start", i), (end + end_delay_ms, end, "end", i)]
    for reported, at, kind, i in sorted(events):  # in the order the reports arrive
        delay = reported - at
        clocks.now = 1000.0 + reported / 1000.0
        stamp = clocks.wall() - delay / 1000.0 if how == "client_time" else None
        if kind == "start":
            elapsed = delay if how == "elapsed" else None
            service.batch_start("gpu0", "SimGPU", f"b{i}", BATCH, elapsed, client_time_s=stamp)
        else:
            service.batch_end("gpu0", f"b{i}", client_time_s=stamp)
    rates = service.state.queues.rates("gpu0")
    wait = service.state.queues.wait("gpu0", [], 0.9, 1.0)
    service.close()
    return rates, wait.mean_ms


def test_a_start_reported_late_with_its_elapsed_time_gives_the_same_wait():
    (_, m1, m2, _), on_time = _run(0.0, "none")
    (_, late_m1, _, _), late_unsaid = _run(50.0, "none")
    (_, said_m1, said_m2, _), late_said = _run(50.0, "elapsed")
    assert late_m1 == pytest.approx(m1 - 50.0)  # the start stamped at the report: 50 ms of each service lost
    assert late_unsaid < 0.8 * on_time
    assert said_m1 == pytest.approx(m1, rel=1e-9) and said_m2 == pytest.approx(m2, rel=1e-9)
    assert late_said == pytest.approx(on_time, rel=0.05)


def test_reports_stamped_by_the_client_are_placed_when_they_happened():
    (rate, m1, m2, _), on_time = _run(0.0, "none")
    (s_rate, s_m1, s_m2, _), stamped = _run(35.0, "client_time", end_delay_ms=8.0)
    (_, d_m1, _, _), _ = _run(35.0, "none", end_delay_ms=8.0)
    assert d_m1 == pytest.approx(m1 - 27.0)  # unstamped, the reports' own delays would be counted
    # equal but for the wall clock's float resolution (Unix seconds near 1.7e9: ~0.2 µs)
    assert (s_rate, s_m1, s_m2) == pytest.approx((rate, m1, m2), rel=1e-4)
    assert stamped == pytest.approx(on_time, rel=1e-4)


def test_client_time_beyond_the_skew_bound_is_refused_naming_it():
    clocks = Clocks()
    service = _served(clocks)
    bound = service.config.max_clock_skew_ms
    assert service.event_age_ms(None) == 0.0
    assert service.event_age_ms(clocks.wall() - 0.25) == pytest.approx(250.0)
    assert service.event_age_ms(clocks.wall() + 0.1) == 0.0  # a little ahead: now
    for stamp, way in ((clocks.wall() + 2 * bound / 1000, "ahead of"), (clocks.wall() - 2 * bound / 1000, "behind"),
                       (math.nan, None)):
        with pytest.raises(InvalidArgument, match=way) as info:
            service.batch_start("gpu0", "SimGPU", "b", BATCH, client_time_s=stamp)
        assert info.value.field == "client_time"
    with pytest.raises(InvalidArgument) as info:
        service.batch_start("gpu0", "SimGPU", "b", BATCH, elapsed_ms=math.inf)
    assert info.value.field == "elapsed_ms"
    assert service.live.running("gpu0") == []  # nothing was taken in
    service.close()


def _refused(call, request) -> tuple[grpc.StatusCode, str, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=5)
    field = dict(info.value.trailing_metadata() or ()).get(FIELD_KEY, "")
    return info.value.code(), field, info.value.details()


def test_the_report_rpcs_take_a_client_time_and_refuse_a_bad_one():
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open()
    for record in synthetic_records(100, seed=1):  # something learned: a queued batch is predicted
        service.observe(record)
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    try:
        with InterferenceClient(f"127.0.0.1:{port}") as client:
            pb2 = client._pb2
            assert client.batch_queued("sim0", "q1", BATCH, client_time=time.time() - 0.02)[0] == 1
            assert client.batch_start("sim0", "q1", BATCH, elapsed_ms=5.0, client_time=time.time())[1] == 1
            assert client.batch_end("sim0", "q1", client_time=time.time()) == (True, 0)
            waits = service.state.queues.observed_wait(["sim0"], 0.5)
            assert waits[1] == 1
            batch = pb2.Batch(model="bert", batch_size=4)
            ahead = pb2.ReportBatchStartRequest(device="gpu0", batch_id="b", batch=batch)
            ahead.client_time.seconds = int(time.time()) + 3600
            bad_nanos = pb2.ReportBatchEndRequest(device="gpu0", batch_id="b")
            bad_nanos.client_time.seconds, bad_nanos.client_time.nanos = int(time.time()), 10**9
            old = pb2.ReportBatchQueuedRequest(device="gpu0", batch_id="b", batch=batch)
            old.client_time.seconds = int(time.time()) - 60
            negative = pb2.ReportBatchStartRequest(device="gpu0", batch_id="b", batch=batch, elapsed_ms=-1.0)
            for call, request, field, words in [
                (client.stub.ReportBatchStart, ahead, "client_time", "ahead of the service's clock"),
                (client.stub.ReportBatchEnd, bad_nanos, "client_time.nanos", "must lie in [0, 1e9)"),
                (client.stub.ReportBatchQueued, old, "client_time", "behind the service's clock"),
                (client.stub.ReportBatchStart, negative, "elapsed_ms", ""),
            ]:
                code, named, details = _refused(call, request)
                assert (code, named) == (grpc.StatusCode.INVALID_ARGUMENT, field), details
                assert details.startswith(f"{field}: ") and words in details
            assert client.status().ready and client.batch_start("gpu0", "b2", BATCH)[1] == 1  # still serving
    finally:
        stop_server(server, service, grace=0.1)
