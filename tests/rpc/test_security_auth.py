"""Who may teach the model: bearer tokens, protected reads, clear refusals, and no secret in any log."""

from __future__ import annotations

import logging
import threading
import time
from unittest import mock

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from predictor.records.record import BatchSpec
from predictor.rpc import security
from predictor.rpc.client import InterferenceClient
from predictor.rpc.processes.options import ServeOptions
from predictor.rpc.processes.serve import serve
from predictor.rpc.protos import SERVICE_NAME, load
from predictor.rpc.security import AuthPolicy, load_tokens
from predictor.rpc.server import create_server, stop_server
from predictor.service import CoRunnerSource, Query, Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

pb2, pb2_grpc = load()
TOKEN = "tok-5f1c9a2e7b3d4e6f8a0b"
OTHER = "tok-0000aaaa1111bbbb2222"
# Issue 12: a fresh service answers only with a solo latency given (nothing learned: no basis otherwise).
QUERY = Query("sim0", BatchSpec("bert", 4), co_runner_source=CoRunnerSource.EXPLICIT, solo_latency_ms=5.0)
RECORDS = synthetic_records(10, seed=3)


@pytest.fixture
def serve_with():
    started = []

    def start(policy: AuthPolicy):
        service = Service(ServiceConfig(snapshot_every_s=0))
        server, port = create_server("127.0.0.1:0", service, auth=policy)
        server.start()
        service.open()
        started.append((server, service))
        return service, f"127.0.0.1:{port}"

    yield start
    for server, service in started:
        stop_server(server, service, grace=0.1)


def code_and_details(call, *args):
    with pytest.raises(grpc.RpcError) as info:
        call(*args, timeout=5)
    return info.value.code(), info.value.details()


def test_state_changing_rpcs_need_a_valid_token_reads_stay_open(serve_with):
    service, target = serve_with(AuthPolicy.from_tokens({"collector": TOKEN}))
    anonymous = InterferenceClient(target)
    assert anonymous.predict(QUERY).latency_ms > 0 and anonymous.status().ready
    before = service.state_payload()
    stub = anonymous.stub
    writes = [
        (stub.ReportObservations, iter([pb2.ReportObservationsRequest()])),
        (stub.ReportBatchStart, pb2.ReportBatchStartRequest(device="sim0", batch_id="b", batch=pb2.Batch())),
        (stub.ReportBatchEnd, pb2.ReportBatchEndRequest(device="sim0", batch_id="b")),
    ]
    for call, request in writes:
        code, details = code_and_details(call, request)
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert "changes the model's state: send 'authorization: Bearer <token>' metadata" in details
    wrong = InterferenceClient(target, token=OTHER)
    code, details = code_and_details(wrong.stub.ReportBatchEnd, writes[2][1])
    assert (code, details) == (grpc.StatusCode.UNAUTHENTICATED, "the bearer token is not valid")
    code, _ = code_and_details(
        wrong.stub.GetStatus, pb2.GetStatusRequest()
    )  # a wrong token is refused anywhere
    assert code == grpc.StatusCode.UNAUTHENTICATED
    malformed = stub.ReportBatchEnd
    with pytest.raises(grpc.RpcError) as info:
        malformed(writes[2][1], metadata=(("authorization", f"Basic {TOKEN}"),), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED and "malformed" in info.value.details()
    assert service.state_payload() == before and service.observations_learned == 0
    with InterferenceClient(target, token=TOKEN) as good:
        assert good.report_observations(RECORDS).accepted == 10
        assert good.batch_start("sim0", "b1", BatchSpec("bert", 2))[1] == 1
        assert good.batch_end("sim0", "b1") == (True, 0)
    anonymous.close()
    wrong.close()


def test_protected_reads_leave_health_and_reflection_open(serve_with):
    _, target = serve_with(AuthPolicy.from_tokens({"scheduler": TOKEN}, protect_reads=True))
    anonymous = InterferenceClient(target)
    code, details = code_and_details(anonymous.stub.GetStatus, pb2.GetStatusRequest())
    assert code == grpc.StatusCode.UNAUTHENTICATED and "is protected (--protect-reads)" in details
    health = health_pb2_grpc.HealthStub(anonymous.channel)
    answer = health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    with InterferenceClient(target, token=TOKEN) as client:
        assert client.predict(QUERY).latency_ms > 0
    anonymous.close()


def test_tokens_are_compared_in_constant_time_over_every_entry():
    policy = AuthPolicy.from_tokens({"a": TOKEN, "b": OTHER, "c": "tok-" + "c" * 20})
    with mock.patch.object(security.hmac, "compare_digest", wraps=security.hmac.compare_digest) as compare:
        assert policy.match(TOKEN) == "a"
    assert compare.call_count == 3  # no early exit on the first match
    assert all(len(call.args[0]) == len(call.args[1]) == 32 for call in compare.call_args_list)  # digests
    assert policy.match(TOKEN[:-1]) is None and policy.match("") is None
    assert TOKEN not in repr(policy) and TOKEN not in policy.describe()


def test_token_files(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"# collectors\ncollector-a {TOKEN}\n\n{OTHER}\n")
    assert load_tokens(path) == {"collector-a": TOKEN, "line4": OTHER}
    for content, message in [
        ("short-one\n", "line 1: a token must be at least 16 characters long"),
        (f"a b {TOKEN}\n", "line 1: expected '<name> <token>' or '<token>'"),
        (f"a {TOKEN}\na {OTHER}\n", "line 2: token name 'a' given twice"),
        ("# nothing\n", "no token in the file"),
    ]:
        path.write_text(content)
        with pytest.raises(ValueError, match=message) as info:
            load_tokens(path)
        assert TOKEN not in str(info.value) and OTHER not in str(info.value)
    with pytest.raises(ValueError, match="protecting reads needs"):
        AuthPolicy(protect_reads=True)
    with pytest.raises(ValueError, match="need mutual TLS"):
        AuthPolicy.from_tokens({"a": TOKEN}, allowed_clients=frozenset({"x"}))


def test_no_secret_in_any_log(tmp_path, capfd, caplog):
    """``predictor serve`` with a token file, right, wrong and malformed tokens: the tokens appear in no
    output, no log record and no error message (gRPC's C core writes to the same descriptors)."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"collector {TOKEN}\n")
    tokens.chmod(0o600)
    port_file = tmp_path / "port"
    options = ServeOptions(
        host="127.0.0.1",
        port=0,
        metrics_port=0,
        state_dir=str(tmp_path / "state"),
        port_file=str(port_file),
        auth_token_file=str(tokens),
        grace_s=0.2,
    )
    stop = threading.Event()
    caplog.set_level(logging.DEBUG)
    thread = threading.Thread(target=serve, args=(ServiceConfig(snapshot_every_s=0), options, stop))
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        target = f"127.0.0.1:{port_file.read_text().strip()}"
        messages = []
        with InterferenceClient(target, token=TOKEN) as client:
            client.wait_ready(20)
            client.report_observations(RECORDS)
        near_miss = TOKEN[:-1] + "x"
        for token in (near_miss, OTHER):
            with InterferenceClient(target, token=token) as client:
                with pytest.raises(Exception) as info:
                    client.report_observations(RECORDS)
                messages.append(str(info.value))
        with InterferenceClient(target) as client:
            with pytest.raises(grpc.RpcError) as info:
                client.stub.GetStatus(
                    pb2.GetStatusRequest(), metadata=(("authorization", f"Token {TOKEN}"),), timeout=5
                )
            messages.append(info.value.details())
    finally:
        stop.set()
        thread.join(timeout=20)
    out, err = capfd.readouterr()
    logged = "\n".join(f"{r.name} {r.getMessage()}" for r in caplog.records)
    assert "refused ReportObservations from 127.0.0.1: the bearer token is not valid" in logged
    assert "writes need 1 bearer token(s)" in out
    for secret in (TOKEN, near_miss, OTHER, TOKEN[4:16]):
        for text in (out, err, logged, *messages):
            assert secret not in text
