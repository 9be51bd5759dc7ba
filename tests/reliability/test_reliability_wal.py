"""The observation log: write-ahead, replayed after the snapshot, truncated by it, tolerant of torn lines."""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time

import pytest
import strategies
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor import snapshot as snap
from predictor.records.record import BatchSpec
from predictor.service import CoRunnerSource, PlannedCoRunner, Query, Service, ServiceConfig, Unavailable
from predictor.service.durability import wal
from predictor.service.durability.dedup import DUPLICATE, NEW, DedupKey, Deduplicator
from predictor.service.durability.wal import (
    DIR_NAME,
    LogEntry,
    LogError,
    ObservationLog,
    ReplayReport,
    decode_entry,
    encode_entry,
)
from predictor.service.ingest import MESSAGE_END
from predictor.service.state import SNAPSHOT_FILE
from predictor.service.synthetic import synthetic_records

QUERIES = [
    Query(
        "sim0",
        BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4}),
        co_runner_source=CoRunnerSource.EXPLICIT,
    ),
    Query(
        "sim1",
        BatchSpec("mlp", 2, {"l2_util": 0.1, "dram_util": 0.6}),
        co_runners=(PlannedCoRunner("resnet", 8, {"l2_util": 0.3}, overlap=0.7),),
        co_runner_source=CoRunnerSource.EXPLICIT,
    ),
]


@pytest.fixture(scope="module")
def records():
    return synthetic_records(300, seed=8)


def answers(service: Service) -> list[float]:
    out = []
    for query in QUERIES:
        p = service.predict(query, 0.9)
        out += [p.latency_ms, p.upper_bound_ms]
    return out


def new_service(**kwargs) -> Service:
    return Service(ServiceConfig(snapshot_every_s=0, **kwargs))


def crash(service: Service) -> None:
    """What a kill leaves: open files are closed by the kernel, nothing else happens."""
    log = service.obs_log
    if log is not None and log._fd is not None:
        os.close(log._fd)
        log._fd = None
        log._open = False


# --------------------------------------------------------------------------- the log itself


def test_entries_round_trip_in_order(tmp_path, records):
    log = ObservationLog(tmp_path, fsync="never")
    log.open(1)
    for i, record in enumerate(records[:50]):
        assert log.append(record, client="token:a" if i % 2 else "", batch_id=f"b{i}") == i + 1
    log.close()
    entries = list(ObservationLog(tmp_path).replay())
    assert [e.seq for e in entries] == list(range(1, 51))
    assert [e.record for e in entries] == records[:50]
    assert entries[1].client == "token:a" and entries[1].batch_id == "b1"


def _write_log(folder, records) -> ObservationLog:
    log = ObservationLog(folder, fsync="never")
    log.open(1)
    for record in records:
        log.append(record)
    log.close()
    return log


def test_a_torn_final_line_is_skipped_and_reported_with_its_byte_offset(tmp_path, records):
    log = _write_log(tmp_path, records[:10])
    ((_, path),) = log.segments()
    size = path.stat().st_size
    whole = encode_entry(LogEntry(11, records[10]))
    with open(path, "ab") as out:
        out.write(whole[: len(whole) // 2])  # a kill in the middle of a write
    report = ReplayReport()
    assert len(list(log.replay(report=report))) == 10
    assert report.skipped == 1 and report.last_seq == 10
    assert f"line 11 (byte offset {size}): torn final line" in report.errors[0]
    with pytest.raises(LogError, match=f"byte offset {size}"):
        list(log.replay(tolerant=False))


@pytest.mark.parametrize("damage", ["flip", "garbage", "no-checksum"])
def test_a_corrupt_line_is_skipped_counted_and_located(tmp_path, records, damage):
    log = _write_log(tmp_path, records[:10])
    ((_, path),) = log.segments()
    lines = path.read_bytes().splitlines(keepends=True)
    offset = sum(len(line) for line in lines[:4])
    if damage == "flip":
        lines[4] = lines[4][:30] + bytes([lines[4][30] ^ 0x01]) + lines[4][31:]
        reason = "checksum mismatch"
    elif damage == "garbage":
        lines[4] = b"\x00\xff garbage\n"
        reason = "no checksum"
    else:
        lines[4] = lines[4][9:]
        reason = "no checksum"
    path.write_bytes(b"".join(lines))
    report = ReplayReport()
    seqs = [e.seq for e in log.replay(report=report)]
    assert seqs == [1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert report.skipped == 1 and f"line 5 (byte offset {offset}): {reason}" in report.errors[0]


# --------------------------------------------------------------------------- the service


def test_restart_replays_the_log_after_the_snapshot(tmp_path, records):
    state = tmp_path / "state"
    live = new_service()
    live.open(state)
    for record in records[:100]:
        live.observe(record)
    live.save_snapshot()
    header, _ = snap.read_header(state / SNAPSHOT_FILE)
    assert header["log_sequence"] == 100
    assert [p.stat().st_size for p in sorted((state / DIR_NAME).iterdir())] == [0]  # covered segments gone
    for record in records[100:160]:
        live.observe(record)
    crash(live)

    restored = new_service()
    said = restored.open(state)
    assert "restored 100 observations" in said and "replayed 60 logged observations" in said
    status = restored.status()
    assert status.observations_learned == 160
    assert (
        status.log.replayed == 60 and status.log.snapshot_sequence == 100 and status.log.last_sequence == 160
    )
    assert answers(restored) == pytest.approx(answers(live), rel=1e-12)
    # both keep learning the same way, and the restored one keeps logging after entry 160
    for record in records[160:180]:
        live.observe(record)
        restored.observe(record)
    assert restored.obs_log.last_seq == 180
    assert answers(restored) == pytest.approx(answers(live), rel=1e-12)
    restored.close()


def test_restart_after_a_kill_mid_write_skips_the_torn_line(tmp_path, records):
    state = tmp_path / "state"
    live = new_service(fsync="never")
    live.open(state)
    for record in records[:40]:
        live.observe(record)
    crash(live)
    (path,) = sorted((state / DIR_NAME).iterdir())
    size = path.stat().st_size
    with open(path, "ab") as out:
        out.write(b'1234abcd {"seq": 41, "record": {"schema": "coloc/v1", "dev')
    restored = new_service()
    said = restored.open(state)
    assert "cold start; replayed 40 logged observations, skipped 1 bad lines" in said
    assert f"byte offset {size}): torn final line" in said
    assert restored.status().log.replay_skipped == 1
    assert answers(restored) == pytest.approx(answers(live), rel=1e-12)
    # new entries go to a new segment, never after the torn bytes
    restored.observe(records[40])
    restored.close()
    again = new_service()
    assert "restored 41 observations" in again.open(state)


def test_concurrent_streams_and_snapshots_restore_the_exact_live_model(tmp_path, records):
    """Four streams at once while snapshots rotate the log: what the log replays is what was learned."""
    state = tmp_path / "state"
    live = Service(ServiceConfig(snapshot_every_s=0.02, fsync="batch", fsync_interval_s=0.01))
    live.open(state)

    def stream(part):
        for start in range(0, len(part), 15):
            report = live.report_observations(
                ((r, "") for r in part[start : start + 15]), client=f"c{len(part)}"
            )
            assert report.accepted == len(part[start : start + 15])

    threads = [threading.Thread(target=stream, args=(records[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(0.05)
    assert live.obs_log.synced_seq == live.obs_log.last_seq == 300  # the batch fsync caught up
    assert live.snapshot_sequence > 0
    live.state.stop.set()  # stop the snapshot thread, then crash
    live.state.snapshotter.join()
    crash(live)
    restored = new_service()
    restored.open(state)
    assert restored.status().observations_learned == 300
    assert answers(restored) == pytest.approx(answers(live), rel=1e-12)


def test_fsync_policies(tmp_path, records):
    always = new_service()
    always.open(tmp_path / "always")
    report = always.report_observations((r, "") for r in records[:5])
    assert report.log_sequence == 5 and always.obs_log.synced_seq == 5  # fsynced before the answer
    never = new_service(fsync="never")
    never.open(tmp_path / "never")
    never.report_observations((r, "") for r in records[:5])
    assert never.obs_log.synced_seq == 0  # the page cache holds it: survives a kill, not a power cut
    with pytest.raises(ValueError, match="fsync"):
        ServiceConfig(fsync="sometimes")
    always.close()
    never.close()


def test_an_observation_that_cannot_be_logged_is_not_learned(tmp_path, records):
    service = new_service()
    service.open(tmp_path / "state")
    first, second = [r for r in records if r.device == records[0].device][:2]
    service.observe(first)
    before = service.state_payload()
    os.close(service.obs_log._fd)  # the disk goes away under the log
    with pytest.raises(Unavailable, match="not logged, so not learned"):
        service.observe(second)
    assert service.state_payload() == before and service.observations_learned == 1
    service.observe(second)  # the log continues in a new segment (the dropped entry's number is not reused)
    assert service.obs_log.last_seq == 3 and len(service.obs_log.segments()) == 2
    entries = list(ObservationLog(tmp_path / "state" / DIR_NAME).replay())
    assert [e.seq for e in entries] == [1, 3]


def test_a_message_is_written_in_one_write(tmp_path, records, monkeypatch):
    """Group commit: a message's records are logged by one ``write`` syscall, not one per record."""
    writes = []
    real = wal._write_all
    monkeypatch.setattr(wal, "_write_all", lambda fd, data: (writes.append(data.count(b"\n")), real(fd, data)))
    service = new_service()
    service.open(tmp_path / "state")
    items = [*((r, "") for r in records[:100]), MESSAGE_END, *((r, "") for r in records[100:300]), MESSAGE_END]
    report = service.report_observations(items)
    assert report.accepted == 300 and writes == [100, 200]
    assert [e.seq for e in ObservationLog(tmp_path / "state" / DIR_NAME).replay()] == list(range(1, 301))
    service.close()


def test_a_failed_write_tells_each_appender_whose_entries_it_dropped(tmp_path, records):
    log = ObservationLog(tmp_path, fsync="never")
    log.open(1)
    first = [log.append(r) for r in records[:3]]
    log.write_through(first)  # written
    mine, theirs = [log.append(r) for r in records[3:5]], [log.append(records[5])]  # two streams' blocks
    os.close(log._fd)  # the disk goes away under the log
    with pytest.raises(LogError, match="cannot write"):
        log.write_through(theirs)  # writes both blocks' entries at once, and fails
    with pytest.raises(LogError, match="cannot write"):
        log.write_through(mine)  # dropped with theirs
    log.write_through(first)  # written before: not lost
    after = [log.append(r) for r in records[6:8]]
    log.write_through(after)  # a new segment
    log.close()
    assert [e.seq for e in ObservationLog(tmp_path).replay()] == [1, 2, 3, 7, 8]


@pytest.mark.parametrize("by", ["sequence", "record_id"])
def test_a_key_in_flight_is_a_duplicate_and_a_failed_write_takes_no_key(tmp_path, records, by):
    """Keys are taken once their records are written; meanwhile the same key again is a duplicate, and
    when the write fails none of them is taken: the records sent again are learned."""
    service = new_service()
    service.open(tmp_path / "state")
    keys = [DedupKey("p", i + 1) if by == "sequence" else DedupKey("p", 0, f"r{i}") for i in range(10)]
    items = [(r, "", k) for r, k in zip(records[:10], keys, strict=True)]
    report = service.report_observations([*items[:5], items[2], *items[5:]])  # one block, a key twice
    assert (report.accepted, report.duplicates) == (10, 1)
    fresh = [DedupKey("p", i + 11) if by == "sequence" else DedupKey("p", 0, f"r{i + 10}") for i in range(10)]
    again = [(r, "", k) for r, k in zip(records[10:20], fresh, strict=True)]
    os.close(service.obs_log._fd)
    with pytest.raises(Unavailable, match="not logged, so not learned"):
        service.report_observations(again)
    assert service.observations_learned == 10 and not service.state.dedup._reserved
    report = service.report_observations(again)  # sent again: learned, not refused as duplicates
    assert (report.accepted, report.duplicates, service.observations_learned) == (10, 0, 20)
    service.close()


def test_a_key_in_flight_is_not_saved_with_the_taken_ones():
    """A snapshot holds the keys taken; one in flight is in the log (replayed and taken then) or was lost."""
    dedup = Deduplicator()
    dedup.take("c", DedupKey("p", 1))
    dedup.reserve("c", DedupKey("p", 2))
    assert dedup.verdict("c", DedupKey("p", 2)) == DUPLICATE
    restored, _ = snap.loads(snap.dumps(dedup, predictor="rls", observations=1))
    assert restored.verdict("c", DedupKey("p", 1)) == DUPLICATE and restored.verdict("c", DedupKey("p", 2)) == NEW


def test_no_log_without_a_state_folder_or_when_disabled(tmp_path, records):
    plain = new_service()
    plain.open()
    assert plain.obs_log is None and plain.status().log is None
    off = new_service(observation_log=False)
    off.open(tmp_path / "state")
    off.observe(records[0])
    assert off.obs_log is None and not (tmp_path / "state" / DIR_NAME).exists()


def test_a_warm_start_is_covered_by_an_immediate_snapshot(tmp_path, records):
    from predictor.records.logio import write_records

    log = tmp_path / "warm.jsonl"
    write_records(log, records[:50])
    service = new_service()
    assert "warm start" in service.open(tmp_path / "state", warm_start=log)
    assert snap.read_header(tmp_path / "state" / SNAPSHOT_FILE)[0]["log_sequence"] == 0
    service.observe(records[50])
    crash(service)
    restored = new_service()
    said = restored.open(tmp_path / "state", warm_start=log)
    assert "restored 50 observations" in said and "replayed 1" in said
    assert restored.observations_learned == 51


@given(record=strategies.records, seq=st.integers(1, 2**53), client=st.text(max_size=20))
@settings(max_examples=200, deadline=None)
def test_an_entry_reads_back_as_written(record, seq, client):
    # msgspec encodes the line (small floats without an exponent): every value reads back exactly
    line = encode_entry(LogEntry(seq, record, client, "b"))
    assert line.endswith(b"\n")
    entry = decode_entry(line[:-1])
    assert (entry.seq, entry.record, entry.client, entry.batch_id) == (seq, record, client, "b")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_number_is_never_logged(records, bad):
    # NaN would be written as null by msgspec: refused as before (what cannot be read back is not logged)
    record = dataclasses.replace(records[0], latency_ms=bad)
    with pytest.raises(ValueError):
        encode_entry(LogEntry(1, record))


@pytest.mark.parametrize("keyed", [False, True])
def test_a_snapshot_between_logging_a_record_and_learning_it_leaves_it_to_the_log(tmp_path, keyed):
    """A record is logged as it comes and learned with its block; a snapshot taken in between covers
    the log only up to the first record not learned yet, so after a crash the log replays it. (It was
    lost: the snapshot claimed its entry without its learning, and the log was truncated past it.)
    ``keyed``: records named for exactly-once delivery, whose keys the snapshot holds as taken: the
    log's entry is learned all the same, not refused as a duplicate of itself."""
    records = synthetic_records(60, seed=5)
    items = [(r, "", DedupKey("p", i + 1) if keyed else None) for i, r in enumerate(records)]
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open(tmp_path)
    service.report_observations(items[:50])
    taken, go_on = threading.Event(), threading.Event()

    def stream():
        yield from items[50:]
        taken.set()  # all ten logged; the block is learned when the stream ends
        assert go_on.wait(10)

    worker = threading.Thread(target=lambda: service.report_observations(stream()))
    worker.start()
    assert taken.wait(10)
    service.state.save_snapshot()  # as the periodic snapshot could, at this moment
    go_on.set()
    worker.join(10)
    learned = service.status().observations_learned
    assert learned > 50
    again = Service(ServiceConfig(snapshot_every_s=0))  # a crash: nothing closed or saved since
    again.open(tmp_path)
    assert again.status().observations_learned == learned
    again.close()
