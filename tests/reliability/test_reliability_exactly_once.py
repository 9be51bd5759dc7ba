"""Exactly-once learning: a producer resends streams cut at random points; each record is learned once.

The records carry a producer id and sequence numbers (``ReportObservationsRequest.producer_id``,
``sequence``) or record ids. A real ``predictor serve`` process takes streams that the client
cuts at random points (after a random number of messages the request iterator fails, so the
call is cancelled with records learned but not acknowledged), is killed with SIGKILL once and
restarted on its state folder; after each cut the client resends from before its last
acknowledged record. The service must end having learned every record once, in order, and
predict exactly as an uninterrupted service fed the records once.
"""

from __future__ import annotations

import random
import time

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_answers import answers_of, reference_answers
from serve_process import start_server

from predictor.rpc import convert
from predictor.rpc.client import InterferenceClient
from predictor.rpc.protos import load
from predictor.service import Service, ServiceConfig
from predictor.service.durability.dedup import DedupKey, Deduplicator, ProducerWindow
from predictor.service.errors import InvalidArgument
from predictor.service.synthetic import synthetic_records

pb2, pb2_grpc = load()


class Cut(Exception):
    """The client's stream breaks here."""


def messages(records, first: int, producer: str, cut_after: int | None = None, per_message: int = 1):
    """The stream of ``records`` numbered from ``first``; raises :class:`Cut` after ``cut_after`` messages."""
    sent = 0
    for i in range(0, len(records), per_message):
        if cut_after is not None and sent >= cut_after:
            raise Cut
        chunk = records[i : i + per_message]
        message = pb2.ReportObservationsRequest(producer_id=producer, sequence=first + i)
        message.records.extend(convert.record_to_pb(r) for r in chunk)
        sent += 1
        yield message
    if cut_after is not None:
        raise Cut


# --------------------------------------------------------------------------- the table itself


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), max_size=300), st.integers(1, 64))
def test_the_window_says_duplicate_exactly_for_numbers_taken(taken, window):
    table = ProducerWindow()
    seen: set[int] = set()
    for number in taken:
        verdict = table.verdict(number)
        if number in seen:
            assert verdict in ("duplicate", "too_old")
        else:
            assert verdict in ("new", "too_old")
            if verdict == "new":
                table.take(number, window)
                seen.add(number)
        # never "duplicate" for a number not taken; "too_old" only beyond the window
        if verdict == "too_old":
            assert number < table.highest - window + 1
    for number in range(1, 301):
        verdict = table.verdict(number)
        if verdict == "duplicate":
            assert number in seen
        if verdict == "new":
            assert number not in seen
        if number > table.highest - window:
            assert verdict != "too_old"


def test_keys_are_namespaced_by_identity_and_bounded():
    table = Deduplicator(window=10, max_producers=2, max_record_ids=2)
    for name in ("a", "b", "c"):
        table.take("token:x", DedupKey(producer=name, sequence=1))
    assert table.producers() == 2 and table.n_forgotten_producers == 1
    assert table.verdict("token:x", DedupKey("a", 1)) == "new"  # forgotten: documented limit
    assert table.verdict("token:y", DedupKey("c", 1)) == "new"
    for rid in ("r1", "r2", "r3"):
        table.take("token:x", DedupKey(record_id=rid))
    assert table.record_ids() == 2 and table.verdict("token:x", DedupKey(record_id="r3")) == "duplicate"
    with pytest.raises(InvalidArgument, match="producer_id"):
        DedupKey(sequence=3).validate()


# --------------------------------------------------------------------------- in process


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 60)), min_size=1, max_size=12), st.booleans())
def test_resent_streams_are_learned_once_in_process(tmp_path_factory, plan, with_ids):
    records = synthetic_records(120, seed=5)
    folder = tmp_path_factory.mktemp("state")
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open(folder)
    acked, dropped = 0, 0
    for back, length in plan + [(0, len(records))]:
        start = max(0, acked - back)
        end = min(len(records), start + length)
        items = [
            (r, "", DedupKey("p", 0, f"id{start + i}") if with_ids else DedupKey("p", start + i + 1))
            for i, r in enumerate(records[start:end])
        ]
        report = service.report_observations(items)
        assert report.accepted + report.duplicates == end - start and report.rejected == 0
        dropped += report.duplicates
        acked = max(acked, end)
    assert service.observations_learned == len(records)
    assert service.status().observations_duplicates == dropped
    service.close()
    again = Service(ServiceConfig(snapshot_every_s=0))
    again.open(folder)  # the window survives a restart (here: in the snapshot)
    items = [(r, "", DedupKey("p", 0, f"id{i}") if with_ids else DedupKey("p", i + 1)) for i, r in enumerate(records)]
    assert again.report_observations(items).duplicates == len(records)
    again.close()


def test_without_names_a_resent_record_is_learned_twice():
    records = synthetic_records(40, seed=5)
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open()
    service.report_observations((r, "") for r in records[:30])
    report = service.report_observations((r, "") for r in records[20:])  # resent from 20
    assert report.duplicates == 0 and service.observations_learned == 50  # 10 learned twice


# --------------------------------------------------------------------------- a real server process


def test_streams_cut_at_random_points_and_a_kill_learn_each_record_once(tmp_path):
    rng = random.Random(17)
    records = synthetic_records(500, seed=23)
    state = tmp_path / "state"
    args = ("--state", str(state), "--snapshot-every", "0.2")
    server = start_server(tmp_path, *args)
    client = InterferenceClient(server.target)
    client.wait_ready(30)
    acked = sent = cuts = dropped = 0
    killed = False
    try:
        while acked < len(records):
            start = max(0, acked - rng.randint(0, 40))  # resend some acknowledged records too
            end = min(len(records), acked + rng.randint(10, 80))
            per_message = rng.choice([1, 1, 3, 7])
            chunk = records[start:end]
            if rng.random() < 0.5:  # cut this stream at a random point
                cut_after = rng.randint(0, (len(chunk) - 1) // per_message)
                with pytest.raises(grpc.RpcError):
                    client.stub.ReportObservations(
                        messages(chunk, start + 1, "collector-1", cut_after, per_message), timeout=10
                    )
                sent += min(len(chunk), cut_after * per_message)
                cuts += 1
            else:
                response = client.stub.ReportObservations(
                    messages(chunk, start + 1, "collector-1", None, per_message), timeout=10
                )
                sent += len(chunk)
                assert response.rejected == 0
                assert response.accepted + response.duplicates == len(chunk)
                assert response.duplicates >= acked - start  # at least what was acknowledged before
                dropped += response.duplicates
                acked = end
            if not killed and acked > len(records) // 2:
                # a stream cut, learned in part, then the process killed: its records are in the log
                with pytest.raises(grpc.RpcError):
                    client.stub.ReportObservations(
                        messages(records[acked : acked + 30], acked + 1, "collector-1", 20), timeout=10
                    )
                sent += 20
                time.sleep(0.3)
                client.close()
                server.kill()
                server = start_server(tmp_path, *args, name="restart")
                client = InterferenceClient(server.target)
                client.wait_ready(30)
                killed = True
        status = client.status()
        restored = answers_of(client.predict)
        client.close()
    finally:
        server.stop()
    assert killed and cuts > 3
    learned_twice = status.observations_learned - len(records)
    print(
        f"\nexactly-once: {len(records)} records, {sent} sent ({sent - len(records)} resent), "
        f"{cuts} streams cut + 1 kill -9, {dropped} dropped as duplicates in acknowledged answers, "
        f"learned twice: {learned_twice}"
    )
    assert learned_twice == 0
    assert restored == pytest.approx(reference_answers(records), rel=1e-12)
