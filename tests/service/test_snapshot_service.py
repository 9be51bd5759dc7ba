"""Service snapshots: identical predictions after restore; bad snapshots refused whole."""

from __future__ import annotations

import json
import time

import pytest

from predictor import snapshot as snap
from predictor.predictors import DEFAULT
from predictor.records.record import BatchSpec
from predictor.service import (
    CoRunnerSource,
    Deadline,
    PlannedCoRunner,
    Query,
    Service,
    ServiceConfig,
    SnapshotError,
)
from predictor.service.state import SNAPSHOT_FILE
from predictor.service.synthetic import synthetic_records

QUERIES = [
    Query("sim0", BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})),
    Query(
        "sim1",
        BatchSpec("mlp", 2, {"l2_util": 0.1, "dram_util": 0.6}),
        co_runners=(PlannedCoRunner("resnet", 8, {"l2_util": 0.3, "dram_util": 0.2}, overlap=0.7),),
        co_runner_source=CoRunnerSource.EXPLICIT,
    ),
]


@pytest.fixture(scope="module")
def records():
    return synthetic_records(600, seed=11)


def answers(service: Service) -> list[tuple]:
    out = []
    for query in QUERIES:
        for confidence in (0.5, 0.9, 0.99):
            a = service.check_deadline(query, Deadline(ms=30.0), confidence)
            out.append((a.prediction.latency_ms, a.prediction.upper_bound_ms, a.probability, a.feasible))
    return out


@pytest.fixture
def trained(records, tmp_path):
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open(tmp_path / "state")
    for record in records[:400]:
        service.observe(record)
    return service


def test_restore_gives_identical_predictions(trained, records, tmp_path):
    path = trained.save_snapshot()
    assert path == tmp_path / "state" / SNAPSHOT_FILE
    # no temporary left (wal/ is the observation log, live/ the live view's side log)
    assert not [p for p in path.parent.iterdir() if p.name not in (SNAPSHOT_FILE, "wal", "live")]
    restored = Service(ServiceConfig(snapshot_every_s=0))
    said = restored.open(tmp_path / "state", warm_start="/nonexistent/ignored.jsonl")
    assert "restored 400 observations" in said
    assert answers(restored) == answers(trained)
    assert restored.status().observations_learned == 400
    assert restored.live.knows("sim0") and restored.live.kind_of("sim0") == "SimGPU"
    # both keep learning identically
    for record in records[400:450]:
        trained.observe(record)
        restored.observe(record)
    assert answers(restored) == answers(trained)


def test_close_writes_a_final_snapshot(trained, tmp_path):
    trained.close()
    header, _ = snap.read_header(tmp_path / "state" / SNAPSHOT_FILE)
    assert header["observations"] == 400 and header["predictor"] == DEFAULT
    assert not trained.ready


def test_periodic_snapshots(records, tmp_path):
    service = Service(ServiceConfig(snapshot_every_s=0.05))
    service.open(tmp_path)
    for record in records[:20]:
        service.observe(record)
    deadline = time.monotonic() + 5
    while not (tmp_path / SNAPSHOT_FILE).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    service.close()
    assert snap.read_header(tmp_path / SNAPSHOT_FILE)[0]["observations"] == 20
    assert service.status().last_snapshot_time is not None


def _corrupt(path, how):
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[-10] ^= 0xFF
    elif how == "truncate":
        data = data[: len(data) - 100]
    elif how == "magic":
        data[:5] = b"XXXXX"
    elif how == "header":
        start = len(snap.MAGIC)
        data[start : start + 1] = b"#"
    elif how == "version":
        end = data.index(b"\n", len(snap.MAGIC))
        header = json.loads(data[len(snap.MAGIC) : end])
        header["version"] = 99
        data[len(snap.MAGIC) : end] = json.dumps(header).encode()
    elif how == "empty":
        data = bytearray()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "how, message",
    [
        ("flip", "checksum mismatch"),
        ("truncate", "truncated"),
        ("magic", "not a predictor snapshot"),
        ("header", "not JSON"),
        ("version", "version 99 is not supported"),
        ("empty", "not a predictor snapshot"),
    ],
)
def test_corrupt_snapshot_is_refused_and_nothing_is_loaded(trained, records, tmp_path, how, message):
    path = trained.save_snapshot()
    before = answers(trained)
    _corrupt(path, how)
    with pytest.raises(SnapshotError, match=message) as info:
        trained.restore_snapshot(path)
    assert str(path) in str(info.value)
    assert answers(trained) == before  # untouched
    fresh = Service(ServiceConfig(snapshot_every_s=0))
    with pytest.raises(SnapshotError):
        fresh.open(path.parent)
    assert not fresh.ready


def test_snapshot_of_another_predictor_is_incompatible(trained, tmp_path):
    trained.save_snapshot()
    other = Service(ServiceConfig(predictor="rls:forgetting=0.9", snapshot_every_s=0))
    with pytest.raises(SnapshotError, match="configured for"):
        other.open(tmp_path / "state")
    sgd = Service(ServiceConfig(predictor="sgd", snapshot_every_s=0))
    with pytest.raises(SnapshotError, match="configured for"):
        sgd.open(tmp_path / "state")


def test_payload_that_is_not_a_service_state(tmp_path):
    snap.write_snapshot(tmp_path / SNAPSHOT_FILE, {"predictor": 1}, predictor="rls", observations=0)
    with pytest.raises(SnapshotError, match="not a service state"):
        Service().open(tmp_path)
