"""A snapshot of an older format version is refused whole, and the refusal says how to rebuild the state."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from predictor import snapshot as snap
from predictor.records.logio import write_records
from predictor.service import Service, ServiceConfig, SnapshotError
from predictor.service.state import SNAPSHOT_FILE
from predictor.service.synthetic import synthetic_records


def _snapshot_of_version(version: int, payload: bytes) -> bytes:
    header = {
        "format": snap.FORMAT,
        "version": version,
        "created": 0.0,
        "predictor": "rls",
        "observations": 0,
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
        "log_sequence": 0,
    }
    return snap.MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload


def test_the_format_version_is_2():
    assert snap.VERSION == 2


def test_a_version_1_snapshot_is_refused_with_how_to_rebuild_the_state(tmp_path):
    records = synthetic_records(200, seed=3)
    trained = Service(ServiceConfig(snapshot_every_s=0))
    trained.open()
    for record in records:
        trained.observe(record)
    state = tmp_path / "state"
    state.mkdir()
    path = state / SNAPSHOT_FILE
    path.write_bytes(_snapshot_of_version(1, trained.state_payload()))  # an intact payload, an old header

    with pytest.raises(SnapshotError) as info:
        snap.read_snapshot(path)
    message = str(info.value)
    assert message.startswith(f"{path}: snapshot format version 1 is not supported (this code reads version 2)")
    for words in ("older version of the code", "move the state folder aside",
                  "observation log holds only the records after this snapshot",
                  "predictor serve --state DIR --warm-start LOG", "new or empty folder", "coloc/v1 log"):
        assert words in message, words
    with pytest.raises(SnapshotError, match="reads version 2"):
        snap.read_header(path)
    with pytest.raises(SnapshotError, match="not supported"):
        snap.loads(path.read_bytes())

    fresh = Service(ServiceConfig(snapshot_every_s=0))
    with pytest.raises(SnapshotError, match="--warm-start LOG"):
        fresh.open(state)
    assert not fresh.ready

    # what the message says: the state folder moved aside, a new one warm-started from the log
    log = tmp_path / "observations.jsonl"
    assert write_records(log, records) == len(records)
    shutil.move(state, tmp_path / "state.old")
    rebuilt = Service(ServiceConfig(snapshot_every_s=0))
    said = rebuilt.open(state, warm_start=log)
    assert said.startswith("warm start from") and rebuilt.ready and rebuilt.status().observations_learned > 0
    header, _ = snap.read_header(path)
    assert header["version"] == 2 and header["observations"] == rebuilt.status().observations_learned
    rebuilt.close()


def test_a_newer_snapshot_is_refused_without_the_rebuild_advice(tmp_path):
    path = tmp_path / SNAPSHOT_FILE
    path.write_bytes(_snapshot_of_version(3, b"payload"))
    with pytest.raises(SnapshotError, match="version 3 is not supported") as info:
        snap.read_snapshot(path)
    assert "--warm-start" not in str(info.value)
