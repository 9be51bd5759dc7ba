"""The C++ admission front (``front/admission_front.cc``, :mod:`predictor.rpc.front`) before a real server.

Everything passes through unchanged (answers, streams, statuses, tokens); answers beyond its limit in
flight are refused with RESOURCE_EXHAUSTED before the server sees them, while the server's threads are
held, and taken again once released; the caller's address it passes is the one a server behind it
checks, and a caller cannot pass its own. Skipped where the front is not built (``make front`` needs
Debian's libgrpc++-dev). No timing is asserted: the figures are ``experiments/bench/bench_overload.py``'s.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from serve_process import start_server

from predictor.records.record import BatchSpec
from predictor.rpc import convert
from predictor.rpc.client import InterferenceClient
from predictor.rpc.front import Front, front_binary
from predictor.rpc.protos import load
from predictor.rpc.security import FRONT_PEER_KEY, AuthPolicy, TokenEntry
from predictor.rpc.server import create_server, stop_server
from predictor.rpc.servicer import InterferenceServicer
from predictor.service import CoRunnerSource, Query, Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

pytestmark = pytest.mark.skipif(front_binary() is None, reason="the admission front is not built (make front: "
                                                               "needs libgrpc++-dev)")
pb2, pb2_grpc = load()
QUERY = Query("sim0", BatchSpec("bert", 4, {"l2_util": 0.5}), co_runner_source=CoRunnerSource.EXPLICIT)


def _request():
    return pb2.PredictLatencyRequest(query=convert.query_to_pb(QUERY))


def _observations(count: int, seed: int = 9):
    return [pb2.ReportObservationsRequest(record=convert.record_to_pb(r)) for r in synthetic_records(count, seed=seed)]


class _Held(InterferenceServicer):
    """CheckDeadline (an answer) holds its thread until ``release``."""

    def __init__(self, service: Service, release: threading.Event):
        super().__init__(service)
        self.release, self.holding = release, threading.Semaphore(0)

    def CheckDeadline(self, request, context):  # noqa: N802 - the RPC's name
        self.holding.release()
        self.release.wait(60)
        return pb2.CheckDeadlineResponse()


@pytest.fixture
def served():
    """A learned service on a real server (its policy ``behind_front``) and a front of limit 2 before it;
    yields ``(stub through the front, stub of the server, servicer, front)``."""
    started = []

    def start(policy: AuthPolicy | None = None, limit: int = 2, servicer_of=None):
        service = Service(ServiceConfig(snapshot_every_s=0))
        service.open()
        for record in synthetic_records(200, seed=1):
            service.observe(record)
        servicer = servicer_of(service) if servicer_of else None
        server, port = create_server("127.0.0.1:0", service, max_workers=4, shed_wait_ms=0, servicer=servicer,
                                     auth=policy or AuthPolicy(behind_front=True))
        server.start()
        front = Front("127.0.0.1:0", f"127.0.0.1:{port}", limit=limit)
        front_port = front.start()
        channels = [grpc.insecure_channel(f"127.0.0.1:{p}") for p in (front_port, port)]
        started.append((server, service, front, channels))
        return (*(pb2_grpc.InterferenceServiceStub(c) for c in channels), servicer, front)

    yield start
    for server, service, front, channels in started:
        for channel in channels:
            channel.close()
        front.stop()
        stop_server(server, service, grace=1)


def test_answers_streams_and_errors_pass_through_unchanged(served):
    through, direct, _, _ = served()
    assert through.PredictLatency(_request(), timeout=10) == direct.PredictLatency(_request(), timeout=10)
    ranking = pb2.RankPlacementsRequest(batch=convert.batch_to_pb(QUERY.batch), deadline_ms=30.0, confidence=0.99,
                                        candidates=[pb2.PlacementCandidate(device=f"sim{i}", device_kind="SimGPU", co_runner_source=pb2.CO_RUNNER_SOURCE_EXPLICIT)
                                                    for i in range(20)])
    assert through.RankPlacements(ranking, timeout=10) == direct.RankPlacements(ranking, timeout=10)
    report = through.ReportObservations(iter(_observations(300)), timeout=30)  # a client stream of 300 messages
    assert report.accepted == 300
    assert direct.GetStatus(pb2.GetStatusRequest(), timeout=10).observations_learned == 500
    bad = _request()
    bad.query.batch.batch_size = -3
    errors = []
    for stub in (through, direct):
        with pytest.raises(grpc.RpcError) as caught:
            stub.PredictLatency(bad, timeout=10)
        errors.append((caught.value.code(), caught.value.details()))
    assert errors[0] == errors[1] and errors[0][0] is grpc.StatusCode.INVALID_ARGUMENT
    assert "batch_size" in errors[0][1]


def test_server_and_bidirectional_streams_pass_through(served):
    through, _, _, front = served()
    with grpc.insecure_channel(f"127.0.0.1:{front.port}") as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING  # a server stream
        watch.cancel()
        services = ProtoReflectionDescriptorDatabase(channel).get_services()  # a bidirectional stream
        assert "interference.v1.InterferenceService" in services
    assert through.PredictLatency(_request(), timeout=10).prediction.latency_ms > 0  # the front goes on


def test_answers_beyond_the_limit_are_refused_before_the_server_and_taken_again_after(served):
    release = threading.Event()
    through, direct, servicer, front = served(limit=2, servicer_of=lambda s: _Held(s, release))
    held = [through.CheckDeadline.future(pb2.CheckDeadlineRequest(), timeout=60) for _ in range(2)]
    try:
        for _ in held:  # both answers in flight behind the front, held in the server
            assert servicer.holding.acquire(timeout=30)
        for call in (lambda: through.PredictLatency(_request(), timeout=10),
                     lambda: through.GetStatus(pb2.GetStatusRequest(), timeout=10)):
            with pytest.raises(grpc.RpcError) as caught:
                call()
            assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert caught.value.details() == "overloaded: 2 answers in flight at the front; retry later or fall back"
        # not an answer: never refused by the front; the server itself still answers directly
        assert through.ReportObservations(iter(_observations(5)), timeout=30).accepted == 5
        assert direct.PredictLatency(_request(), timeout=10).prediction.latency_ms > 0
        assert not any(call.done() for call in held)
    finally:
        release.set()
    assert all(call.result(timeout=30) is not None for call in held)
    assert through.PredictLatency(_request(), timeout=10).prediction.latency_ms > 0


def test_the_callers_address_is_the_one_the_front_saw(served):
    through, direct, _, _ = served()  # no credential configured: writes from this machine only
    remote = ((FRONT_PEER_KEY, "ipv4:10.0.0.5:40000"),)
    # straight to the server, the address passed as the front's is believed: a remote caller's write is refused
    with pytest.raises(grpc.RpcError) as caught:
        direct.ReportObservations(iter(_observations(1)), timeout=10, metadata=remote)
    assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert direct.ReportObservations(iter(_observations(1)), timeout=10).accepted == 1
    # through the front, a caller's own value is dropped: this caller is on the server's machine
    assert through.ReportObservations(iter(_observations(1)), timeout=10, metadata=remote).accepted == 1


def test_tokens_reach_the_server(served):
    token = "s3cret-token-for-the-front"
    policy = AuthPolicy.from_entries([TokenEntry("collector", hashlib.sha256(token.encode()).digest(), frozenset({"observe", "read"}))],
                                     behind_front=True)
    through, _, _, _ = served(policy=policy)
    with pytest.raises(grpc.RpcError) as caught:
        through.ReportObservations(iter(_observations(1)), timeout=10)
    assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
    signed = (("authorization", f"Bearer {token}"),)
    assert through.ReportObservations(iter(_observations(1)), timeout=10, metadata=signed).accepted == 1


def test_a_used_port_is_refused_naming_it(served):
    _, _, _, front = served()
    second = Front(f"127.0.0.1:{front.port}", front.backend, limit=2)
    with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{front.port}"):
        second.start()


def test_predictor_serve_front_refuses_what_it_cannot_do():
    for args, said in ((["--front", "--workers", "2"], "--front takes plaintext calls to one process"),
                       (["--front", "--front-limit", "-1"], "--front-limit must be >= 0")):
        done = subprocess.run([sys.executable, "-m", "predictor.cli", "serve", "--port", "0", "--metrics-port", "0",
                               *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and said in done.stderr


def test_predictor_serve_front_answers_through_the_front(tmp_path):
    served = start_server(tmp_path, "--front", "--front-limit", "3")
    try:
        with InterferenceClient(served.target) as client:
            client.wait_ready(60)
            assert client.report_observations(synthetic_records(300, seed=2)).accepted == 300
            assert client.predict(QUERY).latency_ms > 0
        output = served.wait_for("SERVING")
        assert f"listening on 127.0.0.1:{served.port} (plaintext, through the admission front (at most 3 answers " \
               "in flight)" in output
    finally:
        assert served.stop() == 0
