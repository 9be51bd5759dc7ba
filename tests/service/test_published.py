"""Answers from published model versions (issue 14 item 5): equal to the live model's once
published, immutable while learning goes on, renewed while a stream learns, and never
waiting for the learner, over a real gRPC server."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

from predictor.records.record import BatchSpec, Record
from predictor.rpc import convert
from predictor.rpc.client import InterferenceClient
from predictor.rpc.protos import load
from predictor.rpc.server import create_server, stop_server
from predictor.service import (
    Candidate,
    CoRunnerSource,
    PlannedCoRunner,
    Query,
    Service,
    ServiceConfig,
)
from predictor.service.answering import Answering
from predictor.service.estimates.placements import CandidateColumns
from predictor.service.published import ModelVersion
from predictor.service.synthetic import synthetic_records
from predictor.service.types import Deadline

pb2, pb2_grpc = load()
BATCH = BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})
RUNNERS = (
    (),
    (PlannedCoRunner("mlp", 4, {"l2_util": 0.1, "dram_util": 0.6}, overlap=0.8),),
    (PlannedCoRunner("mlp", 2, {"dram_util": 0.3}, remaining_ms=3.0), PlannedCoRunner("resnet", 8, overlap=0.4)),
)
FIELDS = ("latency_ms", "upper_bound_ms", "slack_ms", "probability", "raw_latency_ms")


def queries() -> list[Query]:
    """Queries of several shapes: no co-runner, overlaps given, remaining times, signals, solo given."""
    out = []
    for i, runners in enumerate(RUNNERS):
        out.append(Query("sim0", BATCH, device_kind="SimGPU", co_runners=runners,
                         co_runner_source=CoRunnerSource.EXPLICIT))
        out.append(Query(f"sim{i % 2}", BatchSpec("mlp", 1 + i), co_runners=runners,
                         co_runner_source=CoRunnerSource.EXPLICIT, signals={"sm_util": 0.5}))
        out.append(Query("sim1", BATCH, co_runners=runners, co_runner_source=CoRunnerSource.EXPLICIT,
                         solo_latency_ms=12.0))
    return out


def candidates() -> CandidateColumns:
    heavy = PlannedCoRunner("mlp", 8, {"dram_util": 0.6}, overlap=1.0)
    return CandidateColumns.from_candidates(
        [Candidate(f"gpu{i}", "SimGPU", (heavy,) * (i % 3), CoRunnerSource.EXPLICIT) for i in range(12)]
    )


def answers_of(answers: Answering, model: ModelVersion | None) -> list[dict[str, np.ndarray]]:
    """Every query's answer and one ranking, from ``model`` (``None``: the latest published version)."""
    plans = [answers.plan_query(q, "query.") for q in queries()]
    plans.append(answers.plan_candidates(BATCH, candidates(), 10.0))
    out = []
    for plan in plans:
        for deadline in (None, 30.0):
            columns = answers.answer(plan, 0.95, deadline, model=model)
            out.append({name: getattr(columns, name) for name in FIELDS}
                       | {"order": columns.order, "learned": columns.observations_learned})
    return out


def assert_same(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for name in x:
            np.testing.assert_array_equal(x[name], y[name], err_msg=name)


def learned_service(spec: str, n: int = 600, **config) -> tuple[Service, list[Record]]:
    service = Service(ServiceConfig(predictor=spec, snapshot_every_s=0, **config))
    service.open()
    records = synthetic_records(n + 400, seed=3)
    service.report_observations([(r, "") for r in records[:n]])
    return service, records[n:]


@pytest.mark.parametrize("spec", ["rls", "rls:split_by='device_kind'", "sgd", "ewma"])
def test_published_answers_equal_the_live_models(spec):
    service, _ = learned_service(spec)
    state = service.state
    published = state.model()
    assert published.predictor is not state.predictor and published.shapes is not state.admission.calibrator
    assert published.observations_learned == state.predictor.n_learned == 600
    assert_same(answers_of(service.answers, None), answers_of(service.answers, state.live_model()))
    # the requests answer from it too: the same numbers as from the live model
    query = queries()[4]
    live = service.answers.answer(service.answers.plan_query(query, "query."), 0.95, model=state.live_model())
    assert service.predict(query, 0.95) == live.prediction(0)


def test_a_version_is_immutable_while_learning_goes_on():
    service, more = learned_service("rls")
    state = service.state
    held = state.model()
    before = answers_of(service.answers, held)
    for record in more[:300]:
        service.observe(record)
    assert_same(answers_of(service.answers, held), before)  # the copy did not move
    assert held.observations_learned == 600
    fresh = state.model()  # nothing learning now: the stale version is replaced on reading
    assert fresh is not held and fresh.observations_learned == 900
    assert_same(answers_of(service.answers, None), answers_of(service.answers, state.live_model()))
    assert not np.array_equal(answers_of(service.answers, fresh)[2]["latency_ms"], before[2]["latency_ms"])


def test_the_learner_publishes_every_n_records_of_a_stream():
    every = 40
    service, more = learned_service("rls", publish_every_records=every, publish_every_s=3600.0)
    state = service.state
    seen: list[tuple[int, int]] = []  # (records handed to the stream, observations in the published version)

    def stream() -> Iterator[tuple[Record, str]]:
        for i, record in enumerate(more[:300]):
            seen.append((i, state.model().observations_learned - 600))
            yield record, ""

    report = service.report_observations(stream())
    assert report.accepted == 300
    lags = [i - published for i, published in seen]
    assert all(0 <= lag < every for lag in lags), lags  # never more than N records behind
    assert [p for _, p in seen] == sorted(p for _, p in seen)  # versions only move forward
    assert {p for _, p in seen} >= {every * k for k in range(300 // every)}
    assert state.model().observations_learned == 900  # the end of the stream is published


# --------------------------------------------------------------------------- over gRPC


@pytest.fixture
def server():
    service = Service(ServiceConfig(snapshot_every_s=0, max_stream_records=100_000))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    records = synthetic_records(2300, seed=9)
    service.report_observations([(r, "") for r in records[:300]])
    client = InterferenceClient(f"127.0.0.1:{port}")
    client.wait_ready(10)
    channel_stub = pb2_grpc.InterferenceServiceStub(client.channel)
    yield service, client, channel_stub, records[300:]
    client.close()
    stop_server(server, service, grace=0.5)


def _messages(records: list[Record], size: int = 50) -> Iterator[object]:
    for i in range(0, len(records), size):
        yield pb2.ReportObservationsRequest(records=[convert.record_to_pb(r) for r in records[i:i + size]])


def test_answers_proceed_while_the_learner_holds_the_state(server):
    """A stream learns 200 records and pauses; the learner's lock is then held (as during a long
    update): every answering RPC still answers, from the version published before."""
    service, client, stub, records = server
    paused, resume = threading.Event(), threading.Event()
    reply: list[object] = []

    def requests() -> Iterator[object]:
        yield from _messages(records[:200])
        paused.set()
        resume.wait(60)
        yield from _messages(records[200:400])

    ingest = threading.Thread(target=lambda: reply.append(stub.ReportObservations(requests(), timeout=120)))
    ingest.start()
    try:
        assert paused.wait(60)
        while service.observations_learned < 500:  # the server has taken in all 200 (progress, not time)
            threading.Event().wait(0.01)
        query = Query("sim0", BATCH, co_runners=RUNNERS[1], co_runner_source=CoRunnerSource.EXPLICIT,
                      batch_id="b-1")
        with service.state.lock:  # the learner, mid-update
            prediction = client.predict(query, 0.95)
            deadline = client.check_deadline(query, 50.0)
            ranking = client.rank_placements(BATCH, [Candidate(f"gpu{i}", "SimGPU", RUNNERS[i % 3],
                                                               CoRunnerSource.EXPLICIT) for i in range(6)],
                                             40.0, solo_latency_ms=10.0)
        assert 300 <= prediction.observations_learned <= 500
        assert deadline.prediction.observations_learned >= prediction.observations_learned
        assert len(ranking.placements) == 6
    finally:
        resume.set()
        ingest.join(120)
    assert reply and reply[0].accepted == 400
    after = client.predict(Query("sim0", BATCH, co_runners=RUNNERS[1], co_runner_source=CoRunnerSource.EXPLICIT))
    assert after.observations_learned == 700  # acknowledged: in the answers that follow
    assert after == service.predict(Query("sim0", BATCH, co_runners=RUNNERS[1],
                                          co_runner_source=CoRunnerSource.EXPLICIT))


def test_answers_during_a_long_ingest_move_forward(server):
    """While another client streams 2,000 records, one client's answers all come back and the
    versions they come from only move forward; after the acknowledgement, all is in them."""
    service, client, stub, records = server
    reply: list[object] = []
    ingest = threading.Thread(target=lambda: reply.append(stub.ReportObservations(_messages(records, 20),
                                                                                  timeout=300)))
    query = Query("sim1", BATCH, co_runners=RUNNERS[2], co_runner_source=CoRunnerSource.EXPLICIT)
    learned = []
    ingest.start()
    while ingest.is_alive():
        learned.append(client.predict(query, 0.9).observations_learned)
        learned.append(client.check_deadline(query, 40.0, confidence=0.9).prediction.observations_learned)
    ingest.join()
    assert reply and reply[0].accepted == 2000
    assert learned == sorted(learned) and learned[0] >= 300
    final = client.predict(query, 0.9)
    assert final.observations_learned == 2300 and final == service.predict(query, 0.9)
    assert service.check_deadline(query, Deadline(ms=40.0), 0.9).prediction == final
