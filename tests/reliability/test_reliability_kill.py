"""Nothing acknowledged is lost: a real server process killed with SIGKILL in the middle of a stream.

The client streams observations in batches (each stream's answer is its acknowledgement) while the
server snapshots every 0.3 s; then it opens one more stream, sends part of it, and the server is
killed while that stream is open. Restarted on the same state folder, the server must hold every
acknowledged record, and predict exactly as a service that was never interrupted and was fed the
same records in the same order.

``predictor serve`` is started as a real process (``python -m predictor.cli serve``); the
``never`` fsync variant is marked slow (a kill of the process keeps the page cache either way).
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from serve_process import start_server

from predictor.records.record import BatchSpec
from predictor.rpc import convert
from predictor.rpc.client import InterferenceClient
from predictor.rpc.protos import load
from predictor.service import CoRunnerSource, PlannedCoRunner, Query, Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

pb2, pb2_grpc = load()
STREAM = 25
QUERIES = [
    Query(
        "sim0",
        BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4}),
        co_runner_source=CoRunnerSource.EXPLICIT,
    ),
    Query(
        "sim1",
        BatchSpec("mlp", 2, {"l2_util": 0.1, "dram_util": 0.6}),
        co_runners=(PlannedCoRunner("resnet", 8, {"l2_util": 0.3, "dram_util": 0.2}, overlap=0.7),),
        co_runner_source=CoRunnerSource.EXPLICIT,
    ),
    Query("sim0", BatchSpec("resnet", 8, {"l2_util": 0.3}), co_runner_source=CoRunnerSource.EXPLICIT),
]


def answers_of(predict) -> list[float]:
    out = []
    for query in QUERIES:
        for confidence in (0.5, 0.9, 0.99):
            p = predict(query, confidence)
            out += [p.latency_ms, p.upper_bound_ms]
    return out


@pytest.mark.parametrize("fsync", ["always", pytest.param("never", marks=pytest.mark.slow)])
def test_kill_9_mid_stream_loses_no_acknowledged_record(tmp_path, fsync):
    records = synthetic_records(400, seed=21)
    state = tmp_path / "state"
    server = start_server(tmp_path, "--state", str(state), "--snapshot-every", "0.3", "--fsync", fsync)
    acknowledged = 0
    try:
        client = InterferenceClient(server.target)
        client.wait_ready(30)
        for start in range(0, 300, STREAM):
            report = client.report_observations(records[start : start + STREAM], timeout=10)
            assert report.accepted == STREAM and report.log_sequence >= start + STREAM
            acknowledged += report.accepted
            time.sleep(0.04)  # let periodic snapshots (and log truncation) happen meanwhile
        assert client.status().last_snapshot_time is not None
        # one more stream: 10 records sent, then the client waits; the server is killed meanwhile
        release = threading.Event()

        def open_stream():
            for record in records[300:310]:
                yield pb2.ReportObservationsRequest(record=convert.record_to_pb(record))
            release.wait(10)

        future = client.stub.ReportObservations.future(open_stream(), timeout=20)
        deadline = time.monotonic() + 10
        while client.status().observations_learned < acknowledged + 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.kill()
        release.set()
        with pytest.raises(grpc.RpcError):
            future.result()
        client.close()
    finally:
        server.kill()

    restarted = start_server(tmp_path, "--state", str(state), "--snapshot-every", "0", name="restart")
    try:
        client = InterferenceClient(restarted.target)
        client.wait_ready(30)
        status = client.status()
        learned = status.observations_learned
        # zero acknowledged records lost; the open stream's records were logged before they were learned
        assert learned >= acknowledged
        assert learned == acknowledged + 10
        assert status.log is not None and status.log.replay_skipped == 0
        # recovery = last snapshot + the log after it; a periodic snapshot (every 0.3 s) may
        # have covered every record before the kill, and then nothing is left to replay
        assert status.log.snapshot_sequence + status.log.replayed == learned
        if status.log.replayed:
            assert "replayed" in restarted.wait_for("; SERVING")
        restored = answers_of(client.predict)
        client.close()
    finally:
        restarted.stop()

    # an uninterrupted service fed the same records, through the same conversion
    reference = Service(ServiceConfig(snapshot_every_s=0))
    reference.open()
    items = ((convert.record_from_pb(convert.record_to_pb(r)), "") for r in records[:learned])
    assert reference.report_observations(items).accepted == learned
    # the same to the last few bits (BLAS sums may round differently with the memory alignment of arrays)
    assert restored == pytest.approx(answers_of(reference.predict), rel=1e-12)
