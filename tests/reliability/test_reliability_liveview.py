"""A durable live view: batch starts and ends survive a kill -9; batches past the horizon expire.

A real ``predictor serve`` process learns a little, is told batches started (one of them started
long ago) and some ended, and is killed with SIGKILL (no final snapshot). Restarted on its state
folder, it must hold the same running batches, minus the one past the horizon, and answer a
live-view query exactly as it did before the kill.
"""

from __future__ import annotations

import os
import time

import pytest
from serve_process import start_server

from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.service import CoRunnerSource, Query
from predictor.service.durability.livelog import DIR_NAME, FILE_NAME, LiveLog
from predictor.service.live.liveview import LiveView
from predictor.service.synthetic import synthetic_records

LIVE = [
    ("sim0", "b1", BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4}), None),
    ("sim0", "b2", BatchSpec("resnet", 8, {"l2_util": 0.3, "dram_util": 0.2}), None),
    ("sim1", "b3", BatchSpec("mlp", 2, {"l2_util": 0.1, "dram_util": 0.6}), None),
    ("sim1", "b4", BatchSpec("bert", 2, {"l2_util": 0.4, "dram_util": 0.3}), None),
    ("sim2", "old", BatchSpec("resnet", 4, {"l2_util": 0.2}), 40_000.0),  # started 40 s ago
]
PLANNED = BatchSpec("mlp", 4, {"l2_util": 0.2, "dram_util": 0.5})


def live_answers(client: InterferenceClient) -> list[float]:
    out = []
    for device in ("sim0", "sim1"):
        p = client.predict(Query(device, PLANNED, co_runner_source=CoRunnerSource.LIVE_VIEW), 0.9)
        out += [p.latency_ms, p.upper_bound_ms]
    return out


def test_kill_9_keeps_what_runs_where_and_expires_what_is_past_the_horizon(tmp_path):
    state = tmp_path / "state"
    args = ("--state", str(state), "--snapshot-every", "0", "--live-horizon", "30")
    server = start_server(tmp_path, *args)
    try:
        client = InterferenceClient(server.target)
        client.wait_ready(30)
        assert client.report_observations(synthetic_records(200, seed=3), timeout=20).accepted == 200
        for device, batch_id, batch, elapsed in LIVE:
            client.batch_start(device, batch_id, batch, device_kind="sim", elapsed_ms=elapsed)
        assert client.batch_end("sim0", "b2") == (True, 1)
        assert client.status().batches_running == 4
        time.sleep(0.5)  # every batch past its prediction: remaining times at their floor
        before = live_answers(client)
        idle = client.predict(Query("sim1", PLANNED, co_runner_source=CoRunnerSource.EXPLICIT), 0.9)
        client.close()
    finally:
        server.kill()

    restarted = start_server(tmp_path, *args, name="restart")
    try:
        client = InterferenceClient(restarted.target)
        client.wait_ready(30)
        status = client.status()
        assert (status.batches_running, status.live_restored, status.live_expired) == (3, 3, 1)
        assert "3 running batches restored, 1 expired" in restarted.wait_for("; SERVING")
        after = live_answers(client)
        assert client.batch_end("sim1", "b3") == (True, 1)  # the restored batch ends as usual
        assert client.batch_end("sim2", "old") == (False, 0)  # expired at the restart
        client.close()
    finally:
        restarted.stop()
    assert after == pytest.approx(before, rel=1e-12)  # the first answer after the restart is the last before
    assert after[2] > idle.latency_ms  # and the restored co-runners do count


def test_the_side_log_tolerates_a_torn_tail_and_compacts(tmp_path):
    wall = [1_000.0]
    journal = LiveLog(tmp_path, compact_after=5, wall=lambda: wall[0])
    view = LiveView()
    journal.restore(view, horizon_s=60)
    journal.attach(view)
    for i in range(12):
        view.start("gpu0", "L4", f"b{i}", BatchSpec("bert", 4), predicted_ms=10.0)
        if i % 2:
            view.end("gpu0", f"b{i}")
    journal.close()
    lines = (tmp_path / FILE_NAME).read_bytes().splitlines()
    assert len(lines) < 18  # compacted: not every start and end is kept
    with open(tmp_path / FILE_NAME, "ab") as out:
        out.write(b"0badc0de {\"op\": \"start\", \"dev")  # a write cut short
    wall[0] += 10
    again = LiveView()
    report = LiveLog(tmp_path, wall=lambda: wall[0]).restore(again, horizon_s=60)
    assert (report.restored, report.skipped) == (6, 1)
    assert sorted(r.batch_id for r, _ in again.running("gpu0")) == [f"b{i}" for i in (0, 10, 2, 4, 6, 8)]
    # restoring rewrote the log with only what runs: the torn line is gone
    assert LiveLog(tmp_path, wall=lambda: wall[0]).restore(LiveView(), horizon_s=60).skipped == 0


def test_a_write_failure_is_counted_and_the_next_report_rewrites_the_log(tmp_path):
    journal = LiveLog(tmp_path / DIR_NAME)
    view = LiveView()
    journal.restore(view, horizon_s=60)
    journal.attach(view)
    view.start("gpu0", "L4", "a", BatchSpec("bert", 4), predicted_ms=10.0)
    os.close(journal._fd)  # the file goes away under the log
    view.start("gpu0", "L4", "b", BatchSpec("bert", 4), predicted_ms=10.0)  # the caller is not failed
    assert journal.n_write_failures == 1
    view.start("gpu0", "L4", "c", BatchSpec("bert", 4), predicted_ms=10.0)
    restored = LiveView()
    assert LiveLog(tmp_path / DIR_NAME).restore(restored, horizon_s=60).restored == 3
