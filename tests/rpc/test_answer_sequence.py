"""Every answer names the version it was computed from: the sequence of records the learner had
taken in when that version was published, over a real gRPC server and after a restart."""

from __future__ import annotations

import pytest

from predictor.rpc.client import InterferenceClient
from predictor.rpc.server import create_server, stop_server
from predictor.service import Candidate, CoRunnerSource, Query, Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

RECORDS = synthetic_records(300, seed=5)
QUERY = Query(RECORDS[0].device, RECORDS[0].batch, device_kind=RECORDS[0].device_kind,
              co_runner_source=CoRunnerSource.EXPLICIT)


@pytest.fixture
def served(tmp_path):
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open(tmp_path / "state")
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    client = InterferenceClient(f"127.0.0.1:{port}")
    client.wait_ready(30)
    yield service, client, tmp_path / "state"
    client.close()
    stop_server(server, service, 1.0)


def _sequences(client: InterferenceClient) -> set[int]:
    predicted = client.predict(QUERY).sequence
    checked = client.check_deadline(QUERY, deadline_ms=50.0).prediction.sequence
    candidates = [Candidate(d, device_kind=RECORDS[0].device_kind, co_runner_source=CoRunnerSource.EXPLICIT)
                  for d in ("sim0", "sim1")]
    ranked = {p.prediction.sequence for p in client.rank_placements(QUERY.batch, candidates, 50.0).placements}
    return {predicted, checked, *ranked}


def test_answers_carry_the_sequence_of_the_version_they_read(served):
    service, client, _ = served
    client.report_observations(RECORDS[:120])
    assert _sequences(client) == {120}  # an acknowledged stream is in the answers that follow
    client.report_observations(RECORDS[120:])
    assert _sequences(client) == {len(RECORDS)}
    assert service.state.model().sequence == len(RECORDS)


def test_a_restarted_service_answers_at_the_sequence_it_had_reached(served, tmp_path):
    service, client, folder = served
    client.report_observations(RECORDS)
    before = client.predict(QUERY)
    service.save_snapshot()
    restarted = Service(ServiceConfig(snapshot_every_s=0))
    restarted.open(folder)
    after = restarted.predict(QUERY)
    assert after.sequence == before.sequence == len(RECORDS)
    assert after.latency_ms == before.latency_ms and after.upper_bound_ms == before.upper_bound_ms
