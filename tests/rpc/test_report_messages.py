"""The client's ReportObservations packs the records at hand many to a message: the service learns
and answers the same as one record a message, numbers them alike (exactly once), ends each record's
started batch by position, and names a rejected record by its place in the stream."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading

import pytest
from one_truth_data import answers_of, records

from predictor.records.record import BatchSpec, CoRunner
from predictor.rpc import convert
from predictor.rpc.client import MESSAGE_BYTES, RECORDS_PER_MESSAGE, InterferenceClient
from predictor.rpc.server import create_server, stop_server
from predictor.service import Service, ServiceConfig

RECORDS = records(600)  # with outliers the gate refuses
CONFIG = ServiceConfig(snapshot_every_s=0, observation_log=False, replay_every_records=64)


@contextlib.contextmanager
def served():
    service = Service(CONFIG)
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    try:
        with InterferenceClient(f"127.0.0.1:{port}") as client:
            yield service, client
    finally:
        stop_server(server, service, grace=0.1)


def _watch(client, seen):
    """Call ``seen(message)`` on each ReportObservations message ``client`` sends, as it is sent."""
    stub = client.stub.ReportObservations

    def watched(requests, **options):
        def each():
            for message in requests:
                seen(message)
                yield message
        return stub(each(), **options)

    client.stub.ReportObservations = watched


def _records_in(message) -> int:
    return len(message.records) + message.HasField("record")


def _sent(per_message, items=RECORDS, **kwargs):
    """Messages, records and answers of a fresh service fed ``items`` ``per_message`` to a message."""
    sizes = []
    with served() as (service, client):
        _watch(client, lambda message: sizes.append(_records_in(message)))
        report = client.report_observations(items, per_message=per_message, **kwargs)
        return sizes, report, answers_of(service.predict, service.check_deadline), service


def test_records_at_hand_fill_each_message():
    sizes, report, _, _ = _sent(RECORDS_PER_MESSAGE)
    assert sizes == [RECORDS_PER_MESSAGE, RECORDS_PER_MESSAGE, len(RECORDS) - 2 * RECORDS_PER_MESSAGE]
    assert report.accepted + report.rejected == len(RECORDS) and report.outliers > 0
    sizes, _, _, _ = _sent(RECORDS_PER_MESSAGE, (r for r in RECORDS))  # read as they come, all at hand
    assert sum(sizes) == len(RECORDS) and max(sizes) == RECORDS_PER_MESSAGE


def test_a_live_stream_sends_each_record_as_it_comes():
    arrived = [threading.Event() for _ in range(3)]
    sizes = []

    def live():
        for i, record in enumerate(RECORDS[:3]):
            yield record
            assert arrived[i].wait(10), "the record before was not sent before the next one came"

    with served() as (service, client):
        def seen(message):
            sizes.append(_records_in(message))
            arrived[len(sizes) - 1].set()

        _watch(client, seen)
        assert client.report_observations(live()).accepted == 3
    assert sizes == [1, 1, 1]


@pytest.mark.parametrize("per_message", [RECORDS_PER_MESSAGE, 37])
def test_many_to_a_message_learns_and_answers_as_one_by_one(per_message):
    _, one_report, one_answers, _ = _sent(1)
    sizes, report, answers, _ = _sent(per_message)
    assert max(sizes) > 1
    assert (report.accepted, report.rejected, report.outliers) == (
        one_report.accepted, one_report.rejected, one_report.outliers)
    assert [(r.index, r.field) for r in report.rejections] == [(r.index, r.field) for r in one_report.rejections]
    assert answers == one_answers and all(math.isfinite(a) for a in answers)


def test_numbered_records_are_learned_once_however_they_are_cut():
    with served() as (_, client):
        first = client.report_observations(RECORDS[:100], producer_id="p", first_sequence=1, per_message=30)
        again = client.report_observations(RECORDS[50:150], producer_id="p", first_sequence=51, per_message=7)
        assert first.accepted + first.rejected == 100
        assert again.duplicates == 50 and again.accepted + again.rejected == 50


def test_each_record_ends_its_own_started_batch():
    devices = [f"dev{i}" for i in range(4)]
    items = [(dataclasses.replace(record, device=device), f"b{i}" if i % 2 else "")
             for i, (record, device) in enumerate(zip(RECORDS, devices, strict=False))]
    with served() as (service, client):
        for i, device in enumerate(devices):
            client.batch_start(device, f"b{i}", BatchSpec("bert", 2), device_kind="SimGPU")
        assert client.report_observations(items, per_message=4).accepted == 4
        running = [len(service.state.live.running(device)) for device in devices]
        assert running == [1, 0, 1, 0]  # the batches of the records given their ids ended, the others run


def test_per_message_below_one_is_refused():
    with served() as (_, client), pytest.raises(ValueError, match="per_message"):
        client.report_observations(RECORDS[:3], per_message=0)


def test_large_records_are_packed_within_a_message_budget():
    attrs = {f"{'k' * 90}{i:03d}": 0.5 for i in range(64)}  # ~6.6 KB a co-runner
    runners = tuple(CoRunner(f"m{i}", 1, attrs, 0.5) for i in range(16))
    big = [dataclasses.replace(record, co_runners=runners) for record in RECORDS[:40]]
    assert sum(convert.record_to_pb(r).ByteSize() for r in big) > 4 * 1024 * 1024  # the server's limit, at once
    sizes, bytes_sent = [], []
    with served() as (_, client):
        def seen(message):
            sizes.append(_records_in(message))
            bytes_sent.append(message.ByteSize())

        _watch(client, seen)
        report = client.report_observations(big)
    assert report.accepted + report.rejected == 40 and sum(sizes) == 40
    assert max(sizes) > 1 and max(bytes_sent) <= MESSAGE_BYTES + 1024
