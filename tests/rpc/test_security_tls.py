"""TLS and mutual TLS between the client and a real server, with certificates generated at test time."""

from __future__ import annotations

import grpc
import pytest
from certs import make_pki

from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.rpc.security import AuthPolicy, channel_credentials, server_credentials
from predictor.rpc.server import create_server, stop_server
from predictor.service import CoRunnerSource, Query, Service, ServiceConfig, Unavailable
from predictor.service.durability.wal import ObservationLog
from predictor.service.synthetic import synthetic_records

# Issue 12: a fresh service answers only with a solo latency given (nothing learned: no basis otherwise).
QUERY = Query("sim0", BatchSpec("bert", 4), co_runner_source=CoRunnerSource.EXPLICIT, solo_latency_ms=5.0)
RECORDS = synthetic_records(20, seed=3)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def serve():
    started = []

    def start(credentials, auth=None, state=None):
        service = Service(ServiceConfig(snapshot_every_s=0, fsync="never"))
        server, port = create_server("127.0.0.1:0", service, credentials=credentials, auth=auth)
        server.start()
        service.open(state)
        started.append((server, service))
        return service, f"localhost:{port}"

    yield start
    for server, service in started:
        stop_server(server, service, grace=0.1)


def test_tls_server_and_client(pki, serve):
    service, target = serve(server_credentials(pki.server.cert, pki.server.key))
    with InterferenceClient(target, credentials=channel_credentials(pki.ca), timeout=5) as client:
        client.wait_ready(10)
        assert client.report_observations(RECORDS).accepted == 20
        assert client.predict(QUERY).latency_ms > 0
    # a plaintext client, or one that does not trust the server's CA, cannot talk to it
    for credentials in (None, channel_credentials(pki.rogue_ca)):
        with InterferenceClient(target, credentials=credentials, timeout=2) as client:
            with pytest.raises(Unavailable):
                client.status()


def test_mutual_tls_requires_a_client_certificate_from_the_ca(pki, serve):
    credentials = server_credentials(pki.server.cert, pki.server.key, pki.ca)
    service, target = serve(credentials, AuthPolicy(mutual_tls=True))
    good = pki.clients["collector-1"]
    with InterferenceClient(
        target, credentials=channel_credentials(pki.ca, good.cert, good.key), timeout=5
    ) as c:
        assert c.report_observations(RECORDS).accepted == 20
        assert c.status().observations_learned == 20
    # no client certificate, or one from another CA: the handshake fails
    for cert in (None, pki.rogue_client):
        creds = channel_credentials(pki.ca, cert.cert, cert.key) if cert else channel_credentials(pki.ca)
        with InterferenceClient(target, credentials=creds, timeout=2) as client:
            with pytest.raises(Unavailable):
                client.status()
    assert service.observations_learned == 20


def test_mutual_tls_allowed_clients_and_identity(pki, serve, tmp_path):
    credentials = server_credentials(pki.server.cert, pki.server.key, pki.ca)
    policy = AuthPolicy(mutual_tls=True, allowed_clients=frozenset({"collector-1"}))
    service, target = serve(credentials, policy, tmp_path / "state")
    intruder = pki.clients["intruder"]
    creds = channel_credentials(pki.ca, intruder.cert, intruder.key)
    with InterferenceClient(target, credentials=creds, timeout=5) as client:
        assert client.predict(QUERY).latency_ms > 0  # reads are open to any verified certificate
        with pytest.raises(grpc.RpcError) as info:
            client.stub.ReportBatchEnd(
                client._pb2.ReportBatchEndRequest(device="sim0", batch_id="x"), timeout=5
            )
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "client certificate 'intruder' is not allowed to call ReportBatchEnd" in info.value.details()
    good = pki.clients["collector-1"]
    with InterferenceClient(target, credentials=channel_credentials(pki.ca, good.cert, good.key)) as client:
        assert client.report_observations(RECORDS[:3]).accepted == 3
    # the observation log records who taught the model what
    entries = list(ObservationLog(tmp_path / "state" / "wal").replay())
    assert [e.client for e in entries] == ["cert:collector-1"] * 3


def test_query_command_over_mutual_tls_with_a_token(pki, serve, tmp_path, capsys):
    from predictor.cli import main

    credentials = server_credentials(pki.server.cert, pki.server.key, pki.ca)
    policy = AuthPolicy.from_tokens({"ops": "ops-token-0123456789ab"}, mutual_tls=True, protect_reads=True)
    _, target = serve(credentials, policy)
    token_file = tmp_path / "token"
    token_file.write_text("ops-token-0123456789ab\n")
    good = pki.clients["collector-1"]
    common = ["query", "--target", target, "--tls-ca", str(pki.ca), "--tls-cert", str(good.cert)]
    common += ["--tls-key", str(good.key)]
    assert main([*common, "--auth-token-file", str(token_file), "status"]) == 0
    assert "observations learned" in capsys.readouterr().out
    # reads are protected: the certificate alone authenticates (mutual TLS), no token needed
    assert main([*common, "status"]) == 0
    # a wrong token is refused with a clear message, not a traceback
    token_file.write_text("not-the-ops-token-at-all\n")
    assert main([*common, "--auth-token-file", str(token_file), "status"]) == 1
    assert "UNAUTHENTICATED: the bearer token is not valid" in capsys.readouterr().out


def test_serve_options_build_the_credentials_and_policy(pki):
    from predictor.rpc.processes.options import ServeOptions
    from predictor.rpc.security import security_from_options

    options = ServeOptions(
        tls_cert=str(pki.server.cert),
        tls_key=str(pki.server.key),
        tls_client_ca=str(pki.ca),
        allowed_clients=("collector-1",),
    )
    credentials, policy = security_from_options(options)
    assert credentials is not None and policy.mutual_tls and policy.enforced
    assert (
        policy.allowed_clients == {"collector-1"} and "client certificates (collector-1)" in policy.describe()
    )
    for bad, message in [
        (ServeOptions(tls_cert=str(pki.server.cert)), "both --tls-cert and --tls-key"),
        (ServeOptions(tls_client_ca=str(pki.ca)), "needs --tls-cert"),
        (ServeOptions(protect_reads=True), "protecting reads needs"),
        (
            ServeOptions(tls_cert="/nonexistent.pem", tls_key=str(pki.server.key)),
            "cannot read the TLS certificate",
        ),
    ]:
        with pytest.raises(ValueError, match=message):
            security_from_options(bad)
