"""Poisoning through the real RPC: one client's absurd latencies do not wreck predictions for everyone.

A real server (port 0, bearer tokens naming two collectors) learns iGniter's V100 co-location data
from the honest collector; then the other sends 1,000 poisoned observations (the same batches, with
latencies 1000x, 50x, 1/50 and 1/1000 of the truth). The error on held-out clean data, asked
through ``PredictLatency``, must stay within 10% of its level before; the poisoned records are
refused as outliers with a reason, counted in the answer and in ``GetStatus``, and not learned.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from predictor.prequential.evaluation import split_records
from predictor.records.importers.igniter import import_igniter
from predictor.rpc.client import InterferenceClient
from predictor.rpc.security import AuthPolicy
from predictor.rpc.server import create_server, stop_server
from predictor.service import CoRunnerSource, PlannedCoRunner, Query, Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

TOKENS = {"collector": "honest-collector-token-0001", "attacker": "attacker-token-00000000001"}


@pytest.fixture
def server():
    def start(**config):
        service = Service(ServiceConfig(snapshot_every_s=0, **config))
        server, port = create_server("127.0.0.1:0", service, auth=AuthPolicy.from_tokens(TOKENS))
        server.start()
        service.open()
        started.append((server, service))
        return service, port

    started: list = []
    yield start
    for server, service in started:
        stop_server(server, service, grace=0.2)


def as_query(record) -> Query:
    runners = tuple(
        PlannedCoRunner(c.model, c.batch_size, c.attrs, overlap=c.overlap) for c in record.co_runners
    )
    return Query(
        record.device,
        record.batch,
        device_kind=record.device_kind,
        co_runners=runners,
        co_runner_source=CoRunnerSource.EXPLICIT,
        signals=record.signals,
        solo_latency_ms=record.solo_latency_ms,
    )


def clean_mape(client: InterferenceClient, records) -> float:
    errors = [abs(client.predict(as_query(r)).latency_ms - r.latency_ms) / r.latency_ms for r in records]
    return 100.0 * float(np.mean(errors))


def test_a_thousand_poisoned_observations_leave_the_clean_error_within_ten_percent(server, igniter_config):
    train, test = split_records(list(import_igniter(igniter_config)), 0.75, seed=0)
    test = test[:150]
    service, port = server()
    honest = InterferenceClient(f"127.0.0.1:{port}", token=TOKENS["collector"])
    attacker = InterferenceClient(f"127.0.0.1:{port}", token=TOKENS["attacker"])
    assert honest.report_observations(train).accepted >= 0.99 * len(train)
    before = clean_mape(honest, test)

    rng = np.random.default_rng(0)
    factors = rng.choice([1000.0, 50.0, 0.02, 1e-3], size=1000)
    poisoned = [
        dataclasses.replace(train[i % len(train)], latency_ms=train[i % len(train)].latency_ms * float(f))
        for i, f in enumerate(factors)
    ]
    report = attacker.report_observations(poisoned)
    after = clean_mape(honest, test)

    assert report.accepted == 0 and report.outliers == 1000 and report.rejected == 1000
    assert report.rejections[0].field == "record.latency_ms" and "outlier" in report.rejections[0].reason
    status = honest.status()
    assert status.observations_outliers == 1000 and status.observations_learned == len(train)
    assert after <= 1.10 * before, (before, after)
    honest.close()
    attacker.close()


@pytest.mark.slow
def test_without_the_gate_the_same_poison_does_damage(server, igniter_config):
    """The control: the gate is what keeps the error down."""
    train, test = split_records(list(import_igniter(igniter_config)), 0.75, seed=0)
    test = test[:150]
    _, port = server(outlier_gate=False)
    client = InterferenceClient(f"127.0.0.1:{port}", token=TOKENS["collector"])
    client.report_observations(train)
    before = clean_mape(client, test)
    rng = np.random.default_rng(0)
    poisoned = [
        dataclasses.replace(train[i % len(train)], latency_ms=train[i % len(train)].latency_ms * float(f))
        for i, f in enumerate(rng.choice([1000.0, 50.0, 0.02, 1e-3], size=1000))
    ]
    assert client.report_observations(poisoned).accepted == 1000
    assert clean_mape(client, test) > 1.5 * before
    client.close()


def test_rate_limits_are_per_client(server):
    service, port = server(rate_limit=20.0, rate_burst=50)
    records = synthetic_records(200, seed=1)
    greedy = InterferenceClient(f"127.0.0.1:{port}", token=TOKENS["attacker"])
    began = time.monotonic()
    report = greedy.report_observations(records)
    most = 50 + 20.0 * (time.monotonic() - began)  # the burst, plus what the bucket refilled meanwhile
    assert 50 <= report.accepted <= most and report.rate_limited == 200 - report.accepted
    limited = [r for r in report.rejections if r.field == "record"]
    assert limited and "token:attacker sends more than 20 observations/s (burst 50)" in limited[0].reason
    # another collector has its own bucket
    other = InterferenceClient(f"127.0.0.1:{port}", token=TOKENS["collector"])
    assert other.report_observations(records[:40]).accepted == 40
    assert other.status().observations_rate_limited == report.rate_limited
    greedy.close()
    other.close()
