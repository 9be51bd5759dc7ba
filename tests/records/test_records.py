"""coloc/v1 records: validation names the field and the line; logs round-trip."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import records

from predictor.records import rules
from predictor.records.logio import ReadReport, iter_records, read_records, write_records
from predictor.records.record import RecordError, parse_record, record_to_dict

VALID = {
    "schema": "coloc/v1",
    "device": "gpu0",
    "device_kind": "NVIDIA L4",
    "batch": {"model": "resnet50", "batch_size": 8, "attrs": {"l2_util": 0.31, "dram_util": 0.22}},
    "start_s": 1234.5678,
    "latency_ms": 22.2,
    "solo_latency_ms": 18.0,
    "co_runners": [{"model": "bert", "batch_size": 4, "attrs": {"seq_len": 64}, "overlap": 0.85}],
    "signals": {"sm_util": 0.81, "mem_util": 0.44},
    "source": "cpu",
}


def with_change(path: str, value: object) -> dict:
    obj = json.loads(json.dumps(VALID))
    target = obj
    parts = path.split(".")
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is KeyError:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value
    return obj


def test_design_example_parses_and_round_trips():
    record = parse_record(VALID)
    assert record.slowdown == pytest.approx(22.2 / 18.0)
    assert record_to_dict(record) == VALID


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("schema", "coloc/v0", "schema"),
        ("device", "", "device"),
        ("batch.model", KeyError, "batch.model"),
        ("batch.batch_size", 0, "batch.batch_size"),
        ("batch.batch_size", 2.5, "batch.batch_size"),
        ("batch.batch_size", True, "batch.batch_size"),
        ("latency_ms", KeyError, "latency_ms"),
        ("latency_ms", -1.0, "latency_ms"),
        ("latency_ms", float("nan"), "latency_ms"),
        ("latency_ms", "12", "latency_ms"),
        ("solo_latency_ms", 0, "solo_latency_ms"),
        ("batch.attrs.l2_util", float("inf"), "batch.attrs.l2_util"),
        ("signals.sm_util", None, "signals.sm_util"),
        ("co_runners.0.overlap", 1.5, "co_runners[0].overlap"),
        ("co_runners.0.batch_size", -3, "co_runners[0].batch_size"),
        ("co_runners", {"model": "x"}, "co_runners"),
    ],
)
def test_bad_field_is_named(path, value, field):
    with pytest.raises(RecordError) as caught:
        parse_record(with_change(path, value))
    assert caught.value.field == field
    assert field in str(caught.value)


def test_query_without_latency_is_allowed_only_when_asked():
    obj = with_change("latency_ms", KeyError)
    assert parse_record(obj, require_latency=False).latency_ms is None
    with pytest.raises(RecordError, match="latency_ms"):
        parse_record(obj)


@settings(max_examples=60, deadline=None)
@given(records)
def test_record_round_trip(record):
    assert parse_record(json.loads(json.dumps(record_to_dict(record)))) == record


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
@settings(max_examples=10, deadline=None)
@given(batch=st.lists(records, max_size=8))
def test_log_round_trip(tmp_path_factory, suffix, batch):
    path = tmp_path_factory.mktemp("logs") / f"run{suffix}"
    assert write_records(path, batch) == len(batch)
    assert read_records(path)[0] == batch


def _log(tmp_path, lines):
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_strict_read_names_line_and_field(tmp_path):
    good = json.dumps(VALID)
    path = _log(tmp_path, [good, good, json.dumps(with_change("latency_ms", -2)), good])
    with pytest.raises(RecordError) as caught:
        read_records(path)
    assert (caught.value.line, caught.value.field) == (3, "latency_ms")
    assert str(caught.value).startswith("line 3: latency_ms")


def test_tolerant_read_skips_and_counts(tmp_path):
    good = json.dumps(VALID)
    path = _log(tmp_path, [good, "{not json", good, json.dumps(with_change("device", 7)), "", good])
    report = ReadReport()
    kept = list(iter_records(path, tolerant=True, report=report))
    assert len(kept) == 3 and report.accepted == 3 and report.skipped == 2
    assert [(e.line, e.field) for e in report.errors] == [(2, "json"), (4, "device")]


def test_truncated_gzip_is_reported_with_line(tmp_path):
    path = tmp_path / "run.jsonl.gz"
    write_records(path, [parse_record(VALID)] * 200)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(RecordError, match="file"):
        read_records(path)
    kept, report = read_records(path, tolerant=True)
    assert report.skipped == 1 and len(kept) == report.accepted
    with gzip.open(path, "rt") as stream:  # sanity: the file really is truncated
        with pytest.raises(EOFError):
            stream.read()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.just(""), st.text(max_size=8),
                         st.integers(rules.MAX_NAME_LENGTH - 1, rules.MAX_NAME_LENGTH + 1).map("n".__mul__)),
                max_size=30), st.booleans(),
       st.sampled_from([list, tuple, set, iter]))
def test_names_ok_is_name_ok_of_every_name(names, required, kind):
    expected = all(rules.name_ok(name, required=required) for name in names)
    assert rules.names_ok(kind(names), required=required) is expected
