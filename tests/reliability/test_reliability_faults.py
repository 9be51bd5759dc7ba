"""Faults tried on purpose, with real files and a real ``predictor serve`` process.

* **Disk full while logging**: the running server's file-size limit (``RLIMIT_FSIZE``, set on the
  live process with ``prlimit``, no privilege needed) is lowered below its log segment, so every
  ``write`` of the observation log fails at the OS boundary (``EFBIG``: the same ``OSError`` path as
  ``ENOSPC``; Python ignores ``SIGXFSZ``). Streams fail with ``UNAVAILABLE`` saying why, nothing
  unlogged is learned, nothing acknowledged is lost; once the limit is lifted ("space returns")
  the same server takes the resent records, and a kill -9 and restart restores them all.
* **A truncated or corrupted log tail**: after a kill -9, the last segment is cut in the middle
  of its last line and a byte of an earlier line is flipped; the restarted server comes up with
  every other entry, counts and reports the two bad lines, and comes up again after a second
  kill (never a crash loop).
* **kill -9 during a snapshot**: the server snapshots every 20 ms while a client streams; the
  moment a snapshot's temporary file exists the server is stopped (``SIGSTOP``), and if the file
  is still there with every thread stopped it is killed, else it goes on (``SIGCONT``) until a
  later snapshot is caught; the previous snapshot and the log restore exactly the acknowledged
  records (and the temporary file is removed at start-up).
"""

from __future__ import annotations

import os
import resource
import signal
import threading
import time
from pathlib import Path

import grpc
import pytest
from reference_answers import answers_of, reference_answers
from serve_process import start_server

from predictor.rpc.client import InterferenceClient
from predictor.service import Unavailable
from predictor.service.durability.wal import DIR_NAME
from predictor.service.synthetic import synthetic_records

STREAM = 25


def segments(state: Path) -> list[Path]:
    return sorted((state / DIR_NAME).glob("observations-*.log"))


def restart_and_read(tmp_path: Path, state: Path, name: str):
    server = start_server(tmp_path, "--state", str(state), "--snapshot-every", "0", name=name)
    try:
        client = InterferenceClient(server.target)
        client.wait_ready(30)
        status = client.status()
        answers = answers_of(client.predict)
        client.close()
    finally:
        server.kill()
    return status, answers, server.output()


# --------------------------------------------------------------------------- disk full


def test_disk_full_while_logging_fails_clearly_loses_nothing_and_recovers(tmp_path):
    records = synthetic_records(300, seed=31)
    state = tmp_path / "state"
    server = start_server(tmp_path, "--state", str(state), "--snapshot-every", "0")
    learned_order = []
    try:
        client = InterferenceClient(server.target)
        client.wait_ready(30)
        for start in range(0, 100, STREAM):
            assert client.report_observations(records[start : start + STREAM], producer_id="c", first_sequence=start + 1).accepted == STREAM
        learned_order += records[:100]
        # the disk fills: no file may grow past 100 bytes (a log line is longer), so the current
        # segment takes nothing more and a new one only the first 100 bytes of a line
        soft, hard = resource.prlimit(server.proc.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(server.proc.pid, resource.RLIMIT_FSIZE, (100, hard))
        failures = []
        for _attempt in range(3):
            with pytest.raises(Unavailable) as info:
                client.report_observations(records[100:125], producer_id="c", first_sequence=101)
            failures.append(str(info.value))
        assert all("not logged, so not learned" in f and "File too large" in f for f in failures)
        assert client.status().observations_learned == 100  # nothing unlogged was learned
        assert server.proc.poll() is None  # and the server is up
        # space returns: the same server takes the resent stream
        resource.prlimit(server.proc.pid, resource.RLIMIT_FSIZE, (soft, hard))
        for start in range(100, 200, STREAM):
            report = client.report_observations(records[start : start + STREAM], producer_id="c", first_sequence=start + 1)
            assert report.accepted == STREAM and report.duplicates == 0
        learned_order += records[100:200]
        client.close()
    finally:
        server.kill()
    status, restored, output = restart_and_read(tmp_path, state, "restart")
    print(
        f"\ndisk full: 100 acknowledged before, 3 streams refused ({failures[0][:90]}...), 100 after; "
        f"restart: {status.observations_learned} recovered, {status.log.replay_skipped} torn line(s) skipped"
    )
    assert status.observations_learned == 200
    # the lines cut at the limit were in a segment started afresh when space returned
    assert status.log.replay_skipped == 0
    assert restored == pytest.approx(reference_answers(learned_order), rel=1e-12)


# --------------------------------------------------------------------------- torn and corrupted tail


def test_a_truncated_and_corrupted_log_tail_recovers_every_valid_entry_twice(tmp_path):
    records = synthetic_records(200, seed=32)
    state = tmp_path / "state"
    server = start_server(tmp_path, "--state", str(state), "--snapshot-every", "0")
    try:
        client = InterferenceClient(server.target)
        client.wait_ready(30)
        for start in range(0, 200, STREAM):
            assert client.report_observations(records[start : start + STREAM]).accepted == STREAM
        client.close()
    finally:
        server.kill()
    (segment,) = segments(state)
    data = bytearray(segment.read_bytes())
    lines = data.split(b"\n")
    flip_at = sum(len(line) + 1 for line in lines[:120]) + 40  # inside line 121
    data[flip_at] ^= 0x01
    last_start = sum(len(line) + 1 for line in lines[:199])
    data = data[: last_start + len(lines[199]) // 2]  # the last line cut in its middle
    segment.write_bytes(bytes(data))

    status, restored, output = restart_and_read(tmp_path, state, "restart")
    survivors = records[:120] + records[121:199]
    print(
        f"\ntorn + corrupt tail: 200 logged, {status.observations_learned} recovered, "
        f"{status.log.replay_skipped} lines skipped"
    )
    assert status.observations_learned == 198 and status.log.replay_skipped == 2
    assert "checksum mismatch" in output and "torn final line" in output and "line 121" in output
    assert restored == pytest.approx(reference_answers(survivors), rel=1e-12)
    again, restored_again, _ = restart_and_read(tmp_path, state, "restart-again")  # no crash loop
    assert again.observations_learned == 198 and restored_again == restored


# --------------------------------------------------------------------------- kill -9 during a snapshot


def snapshot_in_flight(state: Path) -> bool:
    return any(name.startswith(".service.snapshot") and name.endswith(".tmp") for name in os.listdir(state))


def stop_and_wait(pid: int, timeout: float = 5.0) -> None:
    """``SIGSTOP`` ``pid`` and return once every thread of it is stopped (state ``T`` in ``/proc``;
    a thread that exited meanwhile counts as stopped)."""
    os.kill(pid, signal.SIGSTOP)
    end = time.monotonic() + timeout
    while not all(thread_stopped(task) for task in Path(f"/proc/{pid}/task").iterdir()):
        assert time.monotonic() < end, f"process {pid} did not stop"
        time.sleep(0.0005)


def thread_stopped(task: Path) -> bool:
    try:
        fields = (task / "stat").read_text().rpartition(")")[2].split()
    except FileNotFoundError:
        return True
    return fields[0] in "TtZX"


def test_kill_9_during_a_snapshot_restores_the_previous_snapshot_and_the_log(tmp_path):
    records = synthetic_records(4000, seed=33)
    state = tmp_path / "state"
    server = start_server(tmp_path, "--state", str(state), "--snapshot-every", "0.02")
    caught = threading.Event()
    done = threading.Event()

    def kill_mid_snapshot():
        """Kill the server while a snapshot's temporary file exists: seen, stopped, still there."""
        while not done.is_set():
            if snapshot_in_flight(state):
                stop_and_wait(server.proc.pid)
                if snapshot_in_flight(state):
                    server.proc.kill()
                    caught.set()
                    return
                os.kill(server.proc.pid, signal.SIGCONT)  # renamed meanwhile: wait for the next one

    acknowledged = 0
    try:
        client = InterferenceClient(server.target)
        client.wait_ready(30)
        watcher = threading.Thread(target=kill_mid_snapshot, daemon=True)
        for start in range(0, len(records), 20):
            if start == 400:  # earlier snapshots stand by now: armed
                assert client.status().last_snapshot_time is not None
                watcher.start()
            try:
                report = client.report_observations(records[start : start + 20], timeout=10)
            except (Unavailable, grpc.RpcError, Exception):
                break
            acknowledged += report.accepted
            if caught.is_set():
                break
        done.set()
        if watcher.is_alive():
            watcher.join(5)
        client.close()
    finally:
        server.kill()
    assert caught.is_set(), f"no snapshot was caught in flight in {acknowledged} records"
    assert list(state.glob(".service.snapshot.*.tmp"))  # killed with the snapshot's temporary file there
    status, restored, output = restart_and_read(tmp_path, state, "restart")
    print(
        f"\nkill -9 during a snapshot: {acknowledged} acknowledged, {status.observations_learned} recovered "
        f"(snapshot covered {status.log.snapshot_sequence}, log replayed {status.log.replayed})"
    )
    assert acknowledged >= 400 and status.observations_learned >= acknowledged  # nothing acknowledged lost
    assert status.log.snapshot_sequence > 0  # a previous snapshot restored, the log after it replayed
    assert status.log.snapshot_sequence + status.log.replayed == status.observations_learned
    assert "left by a snapshot cut short" in output and not list(state.glob(".service.snapshot.*.tmp"))
    assert restored == pytest.approx(reference_answers(records[: status.observations_learned]), rel=1e-12)
