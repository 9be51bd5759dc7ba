"""The typed decoder (msgspec) is never looser than the rules: same record, or the reference decides."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.features.extract import fine_features
from predictor.records.logio import (
    ReadReport,
    iter_records,
    iter_rows,
    parse_line,
    parse_row,
    read_records,
)
from predictor.records.record import Record, parse_record
from predictor.records.rules import RecordError
from predictor.records.typed_decoding import ColocRow, decode_record, decode_row, record_of

_MISSING = object()
names = st.one_of(st.text(min_size=1, max_size=5), st.just(""), st.just("x" * 257), st.integers(), st.none())
numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**20), st.booleans(),
                    st.text(max_size=2), st.none())
maps = st.one_of(st.none(), st.dictionaries(st.one_of(st.text(max_size=3), st.just("y" * 300)), numbers,
                                            max_size=3),
                 st.dictionaries(st.text(min_size=1, max_size=4), st.floats(-5, 5), min_size=60, max_size=70),
                 st.lists(st.integers(), max_size=2))
sizes = st.one_of(st.integers(-2, 9), st.floats(0, 9), st.booleans(), st.none(), st.text(max_size=1))
overlaps = st.one_of(st.floats(-0.5, 1.5), st.none(), st.booleans(), st.integers(0, 2))
runner = st.fixed_dictionaries({}, optional={"model": names, "batch_size": sizes, "attrs": maps,
                                             "overlap": overlaps, "extra": numbers})
record = st.fixed_dictionaries(
    {},
    optional={
        "schema": st.sampled_from(["coloc/v1", "coloc/v2", None, 1]),
        "device": names,
        "device_kind": names,
        "batch": st.one_of(st.fixed_dictionaries({}, optional={"model": names, "batch_size": sizes,
                                                                  "attrs": maps}), st.none(), st.integers()),
        "latency_ms": numbers,
        "solo_latency_ms": numbers,
        "start_s": numbers,
        "co_runners": st.one_of(st.lists(st.one_of(runner, st.integers()), max_size=3), st.none(),
                                st.just({}), st.lists(st.just({"model": "m", "batch_size": 1}), min_size=65,
                                                      max_size=66)),
        "signals": maps,
        "source": names,
    },
)
valid = st.fixed_dictionaries(
    {"schema": st.just("coloc/v1"), "device": st.text(min_size=1, max_size=4),
     "batch": st.fixed_dictionaries({"model": st.text(min_size=1, max_size=4), "batch_size": st.integers(1, 64)},
                                    optional={"attrs": st.dictionaries(st.text(min_size=1, max_size=3),
                                                                       st.floats(-1e6, 1e6), max_size=3)}),
     "latency_ms": st.floats(1e-3, 1e4)},
    optional={"co_runners": st.lists(st.fixed_dictionaries(
        {"model": st.text(min_size=1, max_size=3), "batch_size": st.integers(1, 8)},
        optional={"overlap": st.floats(0, 1), "attrs": st.dictionaries(st.text(min_size=1, max_size=3),
                                                                        st.integers(-5, 5), max_size=2)}),
        max_size=4),
        "signals": st.dictionaries(st.text(min_size=1, max_size=3), st.floats(-1, 1), max_size=2),
        "solo_latency_ms": st.floats(1e-3, 1e4), "start_s": st.floats(0, 1e6),
        "device_kind": st.text(max_size=3), "source": st.text(max_size=3)},
)


def _reference(text: str):
    try:
        return parse_record(json.loads(text))
    except RecordError as exc:
        return ("error", str(exc))
    except (ValueError, TypeError, OverflowError) as exc:
        return ("raised", type(exc).__name__)


@settings(max_examples=400, deadline=None)
@given(obj=st.one_of(record, valid))
def test_typed_decoding_accepts_only_what_the_rules_accept_and_builds_the_same_record(obj):
    text = json.dumps(obj)
    typed = decode_record(text)
    expected = _reference(text)
    if typed is not None:
        assert typed == expected
        assert parse_line(text, 1) == expected


@settings(max_examples=100, deadline=None)
@given(obj=valid)
def test_valid_records_take_the_typed_path(obj):
    text = json.dumps(obj)
    assert decode_record(text) == parse_record(json.loads(text))


@settings(max_examples=400, deadline=None)
@given(obj=st.one_of(record, valid))
def test_a_row_is_decoded_only_where_the_rules_accept_and_reads_as_the_record(obj):
    """A :class:`ColocRow` is the reference's record field by field (its defaults where a field is
    absent), its fine features are the record's; a line that is no row goes the record path."""
    text = json.dumps(obj)
    row = decode_row(text)
    expected = _reference(text)
    if row is None:
        return
    assert isinstance(expected, Record)
    assert record_of(row) == expected
    for name in ("device", "device_kind", "latency_ms", "start_s", "solo_latency_ms", "signals", "source"):
        assert getattr(row, name) == getattr(expected, name)
    assert (row.batch.model, row.batch.batch_size, row.batch.attrs) == (
        expected.batch.model, expected.batch.batch_size, expected.batch.attrs)
    assert [(r.model, r.batch_size, r.attrs, r.overlap) for r in row.co_runners] == [
        (r.model, r.batch_size, r.attrs, r.overlap) for r in expected.co_runners]
    assert list(fine_features(row).items()) == list(fine_features(expected).items())
    assert parse_row(text, 1) is not None


@settings(max_examples=100, deadline=None)
@given(obj=valid)
def test_valid_lines_are_rows(obj):
    text = json.dumps(obj)
    assert isinstance(decode_row(text), ColocRow)
    assert record_of(decode_row(text)) == parse_record(json.loads(text))


def test_an_explicit_null_is_no_row_and_the_record_path_takes_it():
    text = ('{"schema": "coloc/v1", "device": "g", "batch": {"model": "a", "batch_size": 1, "attrs": null},'
            ' "latency_ms": 1, "signals": null, "co_runners": [{"model": "b", "batch_size": 1, "overlap": null}]}')
    assert decode_row(text) is None
    parsed = parse_row(text, 1)
    assert isinstance(parsed, Record) and parsed == parse_record(json.loads(text))
    assert parsed.co_runners[0].overlap == 1.0 and parsed.signals == {}


@pytest.mark.parametrize(("line", "field"), [
    ('{"schema": "coloc/v1", "device": "g", "batch": {"model": "a", "batch_size": 0}, "latency_ms": 1}',
     "batch.batch_size"),
    ('{"schema": "coloc/v1", "device": "g", "batch": {"model": "a", "batch_size": 1}, "latency_ms": NaN}',
     "latency_ms"),
    ('{"schema": "coloc/v1", "device": "g", "batch": {"model": "a", "batch_size": 1}, "latency_ms": 1,'
     ' "co_runners": [{"model": "b", "batch_size": 1, "overlap": 2}]}', "co_runners[0].overlap"),
    ('{"schema": "coloc/v1", "device": "", "batch": {"model": "a", "batch_size": 1}, "latency_ms": 1}', "device"),
    ("{not json", "json"),
])
def test_a_bad_line_in_a_file_is_reported_with_its_line_and_field(tmp_path, line, field):
    good = '{"schema": "coloc/v1", "device": "g", "batch": {"model": "a", "batch_size": 1}, "latency_ms": 1}'
    path = tmp_path / "log.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as stream:
        stream.write(good + "\n" + good + "\n" + line + "\n")
    with pytest.raises(RecordError) as caught:
        read_records(path)
    assert (caught.value.line, caught.value.field) == (3, field)
    records, report = read_records(path, tolerant=True)
    assert len(records) == 2 and report.skipped == 1 and report.errors[0].field == field


def test_iter_rows_reads_the_lines_and_errors_of_iter_records(tmp_path):
    """The replay's reader: rows where the lines are rows, records elsewhere, the same accepted lines
    and the same line-numbered errors, strict and tolerant."""
    good = '{"schema": "coloc/v1", "device": "g", "batch": {"model": "a", "batch_size": 1}, "latency_ms": 1}'
    null = good.replace('"latency_ms": 1', '"latency_ms": 2, "signals": null')
    bad = good.replace('"batch_size": 1', '"batch_size": 0')
    path = tmp_path / "log.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as stream:
        stream.write("\n".join([good, "", null, bad, "{not json", good]) + "\n")
    rows_report, records_report = ReadReport(), ReadReport()
    rows = list(iter_rows(path, tolerant=True, report=rows_report))
    records = list(iter_records(path, tolerant=True, report=records_report))
    assert [type(r) for r in rows] == [ColocRow, Record, ColocRow]
    assert [record_of(r) if isinstance(r, ColocRow) else r for r in rows] == records
    assert (rows_report.accepted, rows_report.skipped) == (records_report.accepted, records_report.skipped) == (3, 2)
    assert [(e.line, e.field, str(e)) for e in rows_report.errors] == [
        (e.line, e.field, str(e)) for e in records_report.errors] == [
        (4, "batch.batch_size", str(records_report.errors[0])), (5, "json", str(records_report.errors[1]))]
    for read in (iter_rows, iter_records):
        with pytest.raises(RecordError) as caught:
            list(read(path))
        assert (caught.value.line, caught.value.field) == (4, "batch.batch_size")
