"""Restart is exact: a snapshot plus the log after it equals a service that never died, at the same
sequence number, to the bit (``docs/design.md``, One truth).

In process: a service fed a drawn cut of the records, snapshotted at drawn points, abandoned without
closing (no final snapshot, as after ``kill -9``; the log is synced before each acknowledgement),
then opened again on its folder. Black-box: a real ``predictor serve`` killed with SIGKILL with a
message in flight, restarted on its folder and fed the rest by an exactly-once producer.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from one_truth_data import answers_of, chunked, max_relative, records
from serve_process import start_server

from predictor.rpc import convert
from predictor.rpc.client import InterferenceClient
from predictor.rpc.protos import load
from predictor.service import Service, ServiceConfig

pb2, _ = load()
RECORDS = records(500)
CONFIG = ServiceConfig(snapshot_every_s=0, replay_every_records=64)


def _answers(service: Service) -> list[float]:
    return answers_of(service.predict, service.check_deadline)


def _never_died(n: int) -> list[float]:
    service = Service(ServiceConfig(snapshot_every_s=0, observation_log=False, replay_every_records=64))
    service.open()
    service.report_observations(chunked(RECORDS[:n], [n]))
    return _answers(service)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # an example takes seconds: no shrinking
@given(chunks=st.lists(st.integers(1, 120), min_size=1, max_size=4),
       snapshots=st.lists(st.integers(1, 480), min_size=0, max_size=3, unique=True),
       crash=st.integers(100, 500))
def test_snapshot_and_log_replay_equal_a_service_that_never_died(tmp_path_factory, chunks, snapshots, crash):
    folder = tmp_path_factory.mktemp("state")
    service = Service(CONFIG)
    service.open(folder)
    fed = 0
    for point in sorted(p for p in snapshots if p < crash) + [crash]:
        service.report_observations(chunked(RECORDS[fed:point], chunks))
        fed = point
        if point != crash:
            service.save_snapshot()
    del service  # crashed: no final snapshot; what was acknowledged is in the log
    restarted = Service(CONFIG)
    restarted.open(folder)
    assert restarted.state.sequence == crash
    assert _answers(restarted) == _never_died(crash)  # to the bit
    restarted.report_observations(chunked(RECORDS[crash:], chunks))
    assert _answers(restarted) == _never_died(len(RECORDS))
    restarted.close()


def _message(items, first: int):
    return pb2.ReportObservationsRequest(records=[convert.record_to_pb(r) for r in items], producer_id="p",
                                         sequence=first)


def _send(client: InterferenceClient, at: int, size: int) -> None:
    client.stub.ReportObservations(iter([_message(RECORDS[at:at + size], at + 1)]), timeout=60)


def _answers_over(client: InterferenceClient) -> list[float]:
    return answers_of(client.predict, lambda q, d, c: client.check_deadline(q, d.ms, confidence=c))


@pytest.mark.slow
def test_kill_9_at_random_points_restarts_to_the_answers_of_a_server_never_killed(tmp_path):
    size, rng = 25, random.Random(39)
    points = sorted(rng.sample(range(2, len(RECORDS) // size - 1), 3))
    steady = start_server(tmp_path, "--snapshot-every", "0", name="steady")
    args = ("--state", str(tmp_path / "state"), "--snapshot-every", "0.2", "--fsync", "batch")
    server = start_server(tmp_path, *args, name="killed-0")
    try:
        with InterferenceClient(steady.target) as reference:
            reference.wait_ready(60)
            sent = 0
            for k, point in enumerate([*points, len(RECORDS) // size]):
                client = InterferenceClient(server.target)
                client.wait_ready(60)
                while sent < point:
                    _send(client, sent * size, size)
                    _send(reference, sent * size, size)
                    sent += 1
                if k == len(points):
                    worst = max_relative(_answers_over(reference), _answers_over(client))
                    client.close()
                    break
                release = threading.Event()

                def in_flight(at=sent * size, release=release):
                    yield _message(RECORDS[at:at + size], at + 1)
                    release.wait(10)

                future = client.stub.ReportObservations.future(in_flight(), timeout=30)
                time.sleep(rng.uniform(0.0, 0.2))
                server.kill()
                release.set()
                with pytest.raises(Exception):  # noqa: B017 - the stream dies with the server
                    future.result()
                client.close()
                server = start_server(tmp_path, *args, name=f"killed-{k + 1}")
    finally:
        server.kill()
        steady.stop()
    assert worst == 0.0
