"""Roles on tokens and certificates, safe defaults, and refusals that do not flood the log.

Real gRPC servers on port 0, real token files (digests, not tokens), a real metrics endpoint and
real certificates made at test time:

* a ``read`` token answers but cannot report (``PERMISSION_DENIED`` naming ``observe``); an
  ``observe`` token reports but, with ``--protect-reads``, cannot ask (naming ``read``); ``admin``
  does everything; a certificate's roles come from ``--allowed-client CN=roles``;
* with no credential configured, reports are taken from this machine only, unless
  ``--allow-unauthenticated-writes`` (warned at start);
* the metrics endpoint needs a token with the ``metrics`` role whenever tokens are configured;
* 200 refused calls log a handful of lines, the rest counted.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import urllib.error
import urllib.request

import grpc
import pytest
from certs import make_pki
from serve_process import serving_in_thread

from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.processes.options import ServeOptions
from predictor.rpc.security import (
    UNNAMED_ROLES,
    AuthPolicy,
    RefusalLog,
    channel_credentials,
    load_token_entries,
    load_tokens,
    metrics_policy,
    security_from_options,
    server_credentials,
)
from predictor.rpc.server import create_server, stop_server
from predictor.service import CoRunnerSource, Query, Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

TOKENS = {
    "dashboard": "dash-0123456789abcdef",
    "collector": "coll-0123456789abcdef",
    "ops": "opsx-0123456789abcdef",
    "scraper": "scra-0123456789abcdef",
}
ROLES = {"dashboard": "read", "collector": "observe", "ops": "admin", "scraper": "metrics"}
QUERY = Query("sim0", BatchSpec("bert", 4), co_runner_source=CoRunnerSource.EXPLICIT, solo_latency_ms=5.0)
RECORDS = synthetic_records(3, seed=3)


def sha256(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "tokens"
    lines = ["# name  secret  roles"] + [f"{n} {sha256(t)} roles={ROLES[n]}" for n, t in TOKENS.items()]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def serve_with():
    started = []

    def start(policy: AuthPolicy, host: str = "127.0.0.1"):
        service = Service(ServiceConfig(snapshot_every_s=0))
        server, port = create_server(f"{host}:0", service, auth=policy)
        server.start()
        service.open()
        started.append((server, service))
        return service, port

    yield start
    for server, service in started:
        stop_server(server, service, grace=0.1)


def refused(call, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, timeout=5, **kwargs)
    return info.value.code(), info.value.details()


def test_the_token_file_holds_digests_and_roles(tmp_path, token_file, caplog):
    entries = {e.name: e for e in load_token_entries(token_file)}
    assert {n: sorted(e.roles) for n, e in entries.items()} == {n: [r] for n, r in ROLES.items()}
    assert entries["ops"].digest == hashlib.sha256(TOKENS["ops"].encode()).digest()
    assert not any(e.plaintext or e.unnamed_roles for e in entries.values())
    assert all(t not in repr(e) for e in entries.values() for t in TOKENS.values())
    assert "holds a token" not in caplog.text
    # the token itself, and a line without roles: read, with a warning naming the line
    legacy = tmp_path / "legacy"
    legacy.write_text(f"old {TOKENS['ops']}\n{sha256(TOKENS['collector'])} roles=observe,read\n")
    legacy.chmod(0o600)
    with caplog.at_level(logging.WARNING, "predictor.rpc.security"):
        old, anonymous = load_token_entries(legacy)
    assert old.plaintext and old.unnamed_roles and old.roles == UNNAMED_ROLES
    assert anonymous.name == "line2" and anonymous.roles == {"observe", "read"}
    assert "line 1 holds a token, not its digest" in caplog.text and "line 1 names no roles" in caplog.text
    assert TOKENS["ops"] not in caplog.text
    # a client's file holds the token itself; the roles are the server's business
    client = tmp_path / "client"
    client.write_text(f"collector {TOKENS['collector']} roles=observe\n")
    assert load_tokens(client) == {"collector": TOKENS["collector"]}
    for content, message in [
        (f"a {TOKENS['ops']} roles=read,root\n", "line 1: unknown role 'root'"),
        (f"a {TOKENS['ops']} roles=\n", "line 1: no role given"),
        (f"a b {TOKENS['ops']}\n", "line 1: expected '<name> <token>' or '<token>'"),
        ("a sha256:abc\n", "line 1: a token must be at least 16 characters long"),
    ]:
        legacy.write_text(content)
        with pytest.raises(ValueError, match=message) as info:
            load_token_entries(legacy)
        assert TOKENS["ops"] not in str(info.value)
    with pytest.raises(ValueError, match="line 2: holds a sha256: digest; a client needs the token itself"):
        load_tokens(token_file.parent / "tokens")


def test_a_read_token_cannot_report_and_an_observe_token_cannot_ask_when_reads_are_protected(token_file, serve_with):
    _, policy = security_from_options(ServeOptions(auth_token_file=str(token_file)))
    service, port = serve_with(policy)
    target = f"127.0.0.1:{port}"
    with InterferenceClient(target, token=TOKENS["dashboard"]) as dashboard:
        assert dashboard.predict(QUERY).latency_ms > 0
        code, details = refused(dashboard.stub.ReportBatchStart, dashboard._pb2.ReportBatchStartRequest(
            device="sim0", batch_id="b", batch=dashboard._pb2.Batch(model="bert", batch_size=4)))
        assert code is grpc.StatusCode.PERMISSION_DENIED
        assert details == ("token 'dashboard' is not allowed to call ReportBatchStart: it needs the 'observe' role "
                           "(its roles: read)")
        code, details = refused(dashboard.stub.ReportObservations, iter([dashboard._pb2.ReportObservationsRequest()]))
        assert code is grpc.StatusCode.PERMISSION_DENIED and "'observe' role" in details
    assert service.observations_learned == 0 and service.status().batches_running == 0
    for name in ("collector", "ops"):
        with InterferenceClient(target, token=TOKENS[name]) as client:
            assert client.report_observations(RECORDS).accepted == 3
            assert client.batch_start("sim0", f"b-{name}", BatchSpec("bert", 2))[1] >= 1
    # reads protected: the observe-only token may no longer ask
    _, protected = security_from_options(ServeOptions(auth_token_file=str(token_file), protect_reads=True))
    _, port = serve_with(protected)
    with InterferenceClient(f"127.0.0.1:{port}", token=TOKENS["collector"]) as collector:
        code, details = refused(collector.stub.GetStatus, collector._pb2.GetStatusRequest())
        assert code is grpc.StatusCode.PERMISSION_DENIED
        assert "token 'collector' is not allowed to call GetStatus: it needs the 'read' role" in details
        assert collector.report_observations(RECORDS).accepted == 3
    for name in ("dashboard", "ops"):
        with InterferenceClient(f"127.0.0.1:{port}", token=TOKENS[name]) as client:
            assert client.status().ready
    with InterferenceClient(f"127.0.0.1:{port}") as anonymous:
        code, _ = refused(anonymous.stub.GetStatus, anonymous._pb2.GetStatusRequest())
        assert code is grpc.StatusCode.UNAUTHENTICATED


def scrape(port: int, token: str | None = None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_metrics_need_a_token_with_the_metrics_role_whenever_tokens_are_configured(token_file):
    _, policy = security_from_options(ServeOptions(auth_token_file=str(token_file)))
    assert metrics_policy(ServeOptions(auth_token_file=str(token_file)), policy) is policy  # no flag needed
    assert metrics_policy(ServeOptions(auth_token_file=str(token_file), open_metrics=True), policy) is None
    assert metrics_policy(ServeOptions(), AuthPolicy()) is None
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open()
    metrics = ServerMetrics(service)
    try:
        port = metrics.serve(0, auth=metrics_policy(ServeOptions(auth_token_file=str(token_file)), policy))
        assert scrape(port) == 401
        assert scrape(port, "not-a-token-0123456789") == 401
        assert scrape(port, TOKENS["dashboard"]) == 403  # a valid token, without the role
        assert scrape(port, TOKENS["collector"]) == 403
        assert scrape(port, TOKENS["scraper"]) == 200
        assert scrape(port, TOKENS["ops"]) == 200  # admin holds every role
    finally:
        metrics.stop()
    with pytest.raises(ValueError, match="contradict"):
        security_from_options(ServeOptions(auth_token_file=str(token_file), open_metrics=True, metrics_token=True))


def test_serve_guards_its_metrics_without_being_asked(token_file, tmp_path, capsys):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        metrics_port = probe.getsockname()[1]
    options = ServeOptions(host="127.0.0.1", port=0, metrics_port=metrics_port, port_file=str(tmp_path / "port"),
                           auth_token_file=str(token_file), grace_s=0.1)
    with serving_in_thread(ServiceConfig(snapshot_every_s=0), options):
        assert scrape(metrics_port) == 401 and scrape(metrics_port, TOKENS["scraper"]) == 200
    out = capsys.readouterr().out
    assert "/metrics (bearer token required)" in out
    assert "4 bearer token(s) (by role: read 2, observe 2, metrics 2)" in out


def test_certificates_carry_roles(tmp_path):
    pki = make_pki(tmp_path / "pki", clients=("collector-1", "dashboard-1", "intruder"))
    options = ServeOptions(tls_cert=str(pki.server.cert), tls_key=str(pki.server.key), tls_client_ca=str(pki.ca),
                           allowed_clients=("collector-1=observe", "dashboard-1=read"), protect_reads=True)
    credentials, policy = security_from_options(options)
    service = Service(ServiceConfig(snapshot_every_s=0))
    server, port = create_server("127.0.0.1:0", service, credentials=credentials, auth=policy)
    server.start()
    service.open()

    def client(name: str) -> InterferenceClient:
        pair = pki.clients[name]
        return InterferenceClient(f"localhost:{port}", credentials=channel_credentials(pki.ca, pair.cert, pair.key))

    try:
        with client("collector-1") as collector, client("dashboard-1") as dashboard, client("intruder") as intruder:
            assert collector.report_observations(RECORDS).accepted == 3
            code, details = refused(collector.stub.GetStatus, collector._pb2.GetStatusRequest())
            assert code is grpc.StatusCode.PERMISSION_DENIED
            assert "client certificate 'collector-1' is not allowed to call GetStatus: it needs the 'read' role" in details
            assert dashboard.status().observations_learned == 3
            code, details = refused(dashboard.stub.ReportBatchEnd,
                                    dashboard._pb2.ReportBatchEndRequest(device="sim0", batch_id="x"))
            assert code is grpc.StatusCode.PERMISSION_DENIED and "needs the 'observe' role" in details
            code, details = refused(intruder.stub.GetStatus, intruder._pb2.GetStatusRequest())
            assert code is grpc.StatusCode.PERMISSION_DENIED and "(its roles: none)" in details
    finally:
        stop_server(server, service, grace=0.1)
    with pytest.raises(ValueError, match="--allowed-client collector-1: unknown role 'write'"):
        security_from_options(ServeOptions(tls_cert=str(pki.server.cert), tls_key=str(pki.server.key),
                                           tls_client_ca=str(pki.ca), allowed_clients=("collector-1=write",)))
    assert server_credentials  # the same helpers build the server's side


def _this_machine_not_loopback() -> str | None:
    """An address of this machine that is not a loopback one (none: skip)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # no packet is sent: it picks the outgoing interface
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_without_credentials_reports_come_from_this_machine_only_unless_allowed(serve_with, caplog):
    address = _this_machine_not_loopback()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    service, port = serve_with(AuthPolicy(), host="0.0.0.0")
    with InterferenceClient(f"{address}:{port}") as remote:
        assert remote.predict(QUERY).latency_ms > 0  # reads are open
        code, details = refused(remote.stub.ReportBatchStart, remote._pb2.ReportBatchStartRequest(
            device="sim0", batch_id="b", batch=remote._pb2.Batch(model="bert", batch_size=4)))
        assert code is grpc.StatusCode.PERMISSION_DENIED
        assert details.startswith("ReportBatchStart needs the 'observe' role: with no credential configured, only "
                                  "callers on the server's machine may call it")
        assert "--allow-unauthenticated-writes" in details
    with InterferenceClient(f"127.0.0.1:{port}") as local:
        assert local.report_observations(RECORDS).accepted == 3
    _, port = serve_with(AuthPolicy(open_writes=True), host="0.0.0.0")
    with InterferenceClient(f"{address}:{port}") as remote:
        assert remote.report_observations(RECORDS).accepted == 3
    with pytest.raises(ValueError, match="--allow-unauthenticated-writes with credentials configured"):
        AuthPolicy.from_tokens(TOKENS, open_writes=True)


def test_without_credentials_a_caller_over_ipv6_loopback_may_report(serve_with):
    # gRPC writes an IPv6 peer percent-encoded (ipv6:%5B::1%5D:port): "localhost" resolves to ::1 first here
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        _, port = serve_with(AuthPolicy(), host="[::1]")
    except RuntimeError:
        pytest.skip("cannot listen on ::1 here")
    with InterferenceClient(f"[::1]:{port}") as local:
        assert local.report_observations(RECORDS).accepted == 3


def test_allowing_unauthenticated_writes_is_warned_at_start(tmp_path, caplog, capsys):
    options = ServeOptions(host="127.0.0.1", port=0, metrics_port=0, port_file=str(tmp_path / "port"),
                           allow_unauthenticated_writes=True, grace_s=0.1)
    with caplog.at_level(logging.WARNING), serving_in_thread(ServiceConfig(snapshot_every_s=0), options):
        pass
    assert "--allow-unauthenticated-writes: anyone who can connect to 127.0.0.1:0 can report" in caplog.text
    assert "state-changing RPCs are open to anyone who can connect" in capsys.readouterr().out
    options = ServeOptions(host="127.0.0.1", port=0, metrics_port=0, port_file=str(tmp_path / "port2"), grace_s=0.1)
    with serving_in_thread(ServiceConfig(snapshot_every_s=0), options):
        pass
    assert "state-changing RPCs only from this machine" in capsys.readouterr().out


def test_two_hundred_refusals_log_a_few_lines_and_count_the_rest(token_file, serve_with, caplog):
    _, policy = security_from_options(ServeOptions(auth_token_file=str(token_file)))
    _, port = serve_with(policy)
    caplog.clear()
    with caplog.at_level(logging.WARNING, "predictor.rpc.security"), \
            InterferenceClient(f"127.0.0.1:{port}", token="wrong-token-0123456789") as wrong:
        for _ in range(200):
            code, _ = refused(wrong.stub.ReportBatchEnd, wrong._pb2.ReportBatchEndRequest(device="d", batch_id="b"))
            assert code is grpc.StatusCode.UNAUTHENTICATED
    lines = [r for r in caplog.records if r.getMessage().startswith("refused ")]
    assert 1 <= len(lines) <= 10, len(lines)
    # the ones left out are counted in the next line logged
    now = [0.0]
    refusals = RefusalLog(logging.getLogger("predictor.rpc.security"), burst=3, period_s=10, clock=lambda: now[0])
    caplog.clear()
    with caplog.at_level(logging.WARNING, "predictor.rpc.security"):
        for _ in range(200):
            refusals.refused("ReportBatchEnd", "10.0.0.5", "the bearer token is not valid")
        now[0] = 10.0
        refusals.refused("ReportBatchEnd", "10.0.0.5", "the bearer token is not valid")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 4 and refusals.total == 201
    assert messages[-1].endswith("(197 refusals not logged since the last line)")
