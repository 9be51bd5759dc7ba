"""Identity bound to credentials: with tokens configured, the gate and the rate limits see the
authenticated caller, not the ``source`` a record claims; the metrics endpoint is local and can
require the same token.

Real gRPC servers on port 0 (in process) and a real ``/metrics`` HTTP endpoint.
"""

from __future__ import annotations

import dataclasses
import re
import socket
import time
import urllib.error
import urllib.request

import pytest
from serve_process import serving_in_thread

from predictor.rpc.client import InterferenceClient
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.processes.options import ServeOptions
from predictor.rpc.security import AuthPolicy, security_from_options
from predictor.rpc.server import create_server, stop_server
from predictor.service import Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

TOKENS = {"collector": "honest-collector-token-0001", "attacker": "attacker-token-00000000001"}


@pytest.fixture
def server():
    started: list = []

    def start(auth: bool, **config):
        service = Service(ServiceConfig(snapshot_every_s=0, **config))
        policy = AuthPolicy.from_tokens(TOKENS) if auth else AuthPolicy()
        grpc_server, port = create_server("127.0.0.1:0", service, auth=policy)
        grpc_server.start()
        service.open()
        started.append((grpc_server, service))
        return service, f"127.0.0.1:{port}"

    yield start
    for grpc_server, service in started:
        stop_server(grpc_server, service, grace=0.1)


def forged(records, factor: float = 50.0):
    """Absurd latencies, each claiming another source."""
    return [
        dataclasses.replace(r, latency_ms=r.latency_ms * factor, source=f"forged-{i}") for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("auth", [True, False])
def test_forged_sources_cannot_open_the_outlier_gate(server, auth):
    """The gate accepts a persistent shift only when several sources see it; a client that forges
    its records' ``source`` is several sources only when nothing binds it to a credential."""
    service, target = server(auth, outlier_warmup=30)
    records = synthetic_records(700, seed=11)
    honest = InterferenceClient(target, token=TOKENS["collector"] if auth else None)
    attacker = InterferenceClient(target, token=TOKENS["attacker"] if auth else None)
    assert honest.report_observations(records[:300]).accepted == 300
    report = attacker.report_observations(forged(records[300:700]))
    if auth:
        assert report.accepted == 0 and report.outliers == 400  # one identity: the gate holds
    else:
        assert report.accepted > 0  # the forged sources pass for a shift seen by many
    honest.close()
    attacker.close()


@pytest.mark.parametrize("auth", [True, False])
def test_rate_limits_follow_the_identity_not_the_claimed_source(server, auth):
    service, target = server(auth, rate_limit=5.0, rate_burst=40, rate_limit_by="source")
    records = [dataclasses.replace(r, source=f"s{i}") for i, r in enumerate(synthetic_records(120, seed=2))]
    greedy = InterferenceClient(target, token=TOKENS["attacker"] if auth else None)
    began = time.monotonic()
    report = greedy.report_observations(records)
    most = 40 + 5.0 * (time.monotonic() - began)  # the burst, plus what the bucket refilled meanwhile
    if auth:
        assert 40 <= report.accepted <= most and report.rate_limited == 120 - report.accepted
        assert "token:attacker sends more than 5 observations/s" in report.rejections[0].reason
        other = InterferenceClient(target, token=TOKENS["collector"])
        assert other.report_observations(records[:30]).accepted == 30  # its own bucket
        other.close()
    else:
        assert report.accepted == 120  # 120 claimed sources, 120 buckets
    greedy.close()


def test_the_identity_is_kept_in_the_log_and_the_record_source_as_a_label(tmp_path):
    from predictor.service.durability.wal import DIR_NAME, ObservationLog

    service = Service(ServiceConfig(snapshot_every_s=0))
    grpc_server, port = create_server("127.0.0.1:0", service, auth=AuthPolicy.from_tokens(TOKENS))
    grpc_server.start()
    service.open(tmp_path / "state")
    with InterferenceClient(f"127.0.0.1:{port}", token=TOKENS["collector"]) as client:
        client.report_observations([dataclasses.replace(r, source="nvml") for r in synthetic_records(5, seed=1)])
    entries = list(ObservationLog(tmp_path / "state" / DIR_NAME).replay())  # before the final snapshot
    stop_server(grpc_server, service, grace=0.1)
    assert len(entries) == 5
    assert {(e.client, e.record.source) for e in entries} == {("token:collector", "nvml")}


# --------------------------------------------------------------------------- metrics endpoint


def scrape(port: int, token: str | None = None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            body = response.read()
            assert b"interference_observations_learned" in body
            assert b"interference_observations_duplicates_total" in body
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_metrics_bind_to_localhost_by_default_and_can_require_the_token():
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open()
    open_metrics, guarded = ServerMetrics(service), ServerMetrics(service)
    try:
        port = open_metrics.serve(0)
        assert open_metrics._http.server_address[0] == "127.0.0.1"
        assert scrape(port) == 200
        port = guarded.serve(0, auth=AuthPolicy.from_tokens(TOKENS))
        assert scrape(port) == 401
        assert scrape(port, "not-a-token-at-all-0000") == 401
        assert scrape(port, TOKENS["collector"]) == 200
    finally:
        open_metrics.stop()
        guarded.stop()
    assert ServeOptions().metrics_host == "127.0.0.1"
    with pytest.raises(ValueError, match="--metrics-token needs --auth-token-file"):
        security_from_options(ServeOptions(metrics_token=True))


def test_serve_puts_metrics_on_localhost_behind_the_token(tmp_path, capsys):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"collector {TOKENS['collector']}\n")
    tokens.chmod(0o600)
    port_file = tmp_path / "port"
    with socket.socket() as probe:  # a free port (0 means no metrics endpoint here)
        probe.bind(("127.0.0.1", 0))
        metrics_port = probe.getsockname()[1]
    options = ServeOptions(
        host="0.0.0.0",  # the service on every interface; its metrics still on this machine only
        port=0,
        metrics_port=metrics_port,
        port_file=str(port_file),
        auth_token_file=str(tokens),
        metrics_token=True,
        grace_s=0.1,
    )
    with serving_in_thread(ServiceConfig(snapshot_every_s=0), options):
        assert scrape(metrics_port) == 401 and scrape(metrics_port, TOKENS["collector"]) == 200
    out = capsys.readouterr().out
    assert re.search(r"Prometheus metrics on http://127\.0\.0\.1:\d+/metrics \(bearer token required\)", out)
