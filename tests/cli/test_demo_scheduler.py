"""The demo's sample scheduler against a real server (port 0): it dispatches on the answer's
probability of meeting the deadline, not on the upper bound; its questions, silent about the
host's load, get the load of other processes (``other_cpu``) filled in from the observations."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from collectors.workload import InFlight, PlannedBatch
from predictor.cli.demo import SampleScheduler
from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.rpc.server import create_server, stop_server
from predictor.service import CoRunnerSource, PlannedCoRunner, Query, Service, ServiceConfig
from predictor.service.synthetic import synthetic_records


@pytest.fixture(scope="module")
def client():
    service = Service(ServiceConfig(observation_log=False))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    for record in synthetic_records(600, seed=3, devices=("cpu0",)):
        service.observe(dataclasses.replace(record, signals={"other_cpu": 0.2}))
    client = InterferenceClient(f"127.0.0.1:{port}")
    yield client
    client.close()
    stop_server(server, service, grace=0.5)


def _planned() -> PlannedBatch:
    record = next(r for r in synthetic_records(50, seed=9, devices=("cpu0",)) if r.co_runners)
    return PlannedBatch(record.batch.model, record.batch.batch_size, dict(record.batch.attrs),
                        record.solo_latency_ms, "cpu0", record.device_kind,
                        tuple(InFlight(c.model, c.batch_size, dict(c.attrs)) for c in record.co_runners),
                        workers=len(record.co_runners) + 1)


def _answers(client, planned: PlannedBatch) -> list[tuple[float, float, bool]]:
    """``(deadline, probability, feasible at 0.95)`` over deadlines around the prediction."""
    query = Query(device=planned.device, batch=BatchSpec(planned.model, planned.batch_size, planned.attrs),
                  device_kind=planned.device_kind,
        co_runners=tuple(PlannedCoRunner(r.model, r.batch_size, r.attrs) for r in planned.beside),
        co_runner_source=CoRunnerSource.EXPLICIT, solo_latency_ms=planned.solo_latency_ms)
    prediction = client.predict(query, confidence=0.95)
    assert "signals.other_cpu" in prediction.estimated  # the load nobody reported, filled from observations
    predicted = prediction.latency_ms
    out = []
    for factor in np.linspace(0.3, 3.0, 55):
        answer = client.check_deadline(query, factor * predicted, confidence=0.95)
        out.append((factor * predicted, answer.probability, answer.feasible))
    return out


def test_dispatches_on_the_probability_of_meeting_the_deadline(client):
    planned = _planned()
    answers = _answers(client, planned)
    likely = [d for d, p, feasible in answers if 0.5 <= p < 0.95 and not feasible]
    unlikely = [d for d, p, _ in answers if p < 0.5]
    assert likely and unlikely, answers  # deadlines the bound refuses but the batch likely meets, and worse
    solo = planned.solo_latency_ms
    for deadline, admitted in ((likely[0], True), (unlikely[-1], False)):
        scheduler = SampleScheduler(client, deadline / solo, 0.95, explore=0.0)
        assert scheduler.admit(planned) is admitted
        decision = scheduler.decisions[-1]
        assert decision.feasible is admitted and (decision.probability >= 0.5) is admitted
    # with the threshold at the bound's confidence the rule refuses what the bound refuses
    strict = SampleScheduler(client, likely[0] / solo, 0.95, explore=0.0, admit_probability=0.95)
    assert strict.admit(planned) is False


def test_the_threshold_must_be_a_probability(client):
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="admit_probability"):
            SampleScheduler(client, 2.5, 0.95, admit_probability=bad)
