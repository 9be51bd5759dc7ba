"""The gzip reader that inflates ahead on a thread (:mod:`predictor.records.inflate_ahead`) reads what
:func:`gzip.open` reads, and fails where it fails."""

from __future__ import annotations

import gzip
import os
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.records import inflate_ahead
from predictor.records.inflate_ahead import InflatingReader, open_inflating


def _gzip_text(path) -> str:
    with gzip.open(path, "rt", encoding="utf-8") as stream:
        return stream.read()


def _ours(path) -> str:
    with open_inflating(path) as stream:
        return stream.read()


@settings(max_examples=40, deadline=None)
@given(members=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300), max_size=4),
       padding=st.integers(0, 3), piece=st.sampled_from([1, 7, 1 << 22]))
def test_the_same_text_as_gzip_open(tmp_path_factory, members, padding, piece):
    """Any members one after another (zero bytes between them), cut into pieces of any size."""
    path = tmp_path_factory.mktemp("logs") / "log.jsonl.gz"
    path.write_bytes((b"\0" * padding).join(gzip.compress(m.encode()) for m in members))
    original = inflate_ahead.PIECE
    inflate_ahead.PIECE = piece
    try:
        assert _ours(path) == _gzip_text(path)
    finally:
        inflate_ahead.PIECE = original


def test_a_file_of_many_chunks_and_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(inflate_ahead, "CHUNK", 1000)
    monkeypatch.setattr(inflate_ahead, "PIECE", 4096)
    path = tmp_path / "log.jsonl.gz"
    lines = [f'{{"n": {i}, "pad": "{os.urandom(16).hex()}"}}' for i in range(20_000)]
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    with open_inflating(path) as stream:
        assert [line.rstrip("\n") for line in stream] == lines


def test_a_file_cut_short_gives_what_it_has_then_eof_error(tmp_path):
    path = tmp_path / "log.jsonl.gz"
    text = "".join(f"line {i}\n" for i in range(50_000))
    data = gzip.compress(text.encode())
    path.write_bytes(data[: len(data) // 2])
    with open_inflating(path) as stream:
        read = []
        with pytest.raises(EOFError, match="ended before the end-of-stream"):
            for line in stream:
                read.append(line)
    assert read and text.startswith("".join(read))


@pytest.mark.parametrize("damage", ["check sum", "garbage after a member", "not gzip"])
def test_a_damaged_file_raises_bad_gzip_file(tmp_path, damage):
    path = tmp_path / "log.jsonl.gz"
    data = bytearray(gzip.compress(b"one\ntwo\n"))
    if damage == "check sum":
        data[-6] ^= 0xFF
    elif damage == "garbage after a member":
        data += b"garbage"
    else:
        data = bytearray(b"plain text\n")
    path.write_bytes(bytes(data))
    with pytest.raises(gzip.BadGzipFile):
        _gzip_text(path)
    with pytest.raises(gzip.BadGzipFile):
        _ours(path)


def test_closing_early_stops_the_thread(tmp_path, monkeypatch):
    """A reader that stops at the first line (the thread blocked with its pieces ready) ends it."""
    monkeypatch.setattr(inflate_ahead, "CHUNK", 1000)
    monkeypatch.setattr(inflate_ahead, "PIECE", 1000)
    path = tmp_path / "log.jsonl.gz"
    with gzip.open(path, "wt") as out:
        out.write("".join(f"{os.urandom(8).hex()}\n" for _ in range(100_000)))
    raw = InflatingReader(path)
    assert raw.read(10)
    thread = raw._thread
    assert thread.is_alive() and thread.name == "inflate"
    raw.close()
    assert not thread.is_alive() and raw.closed
    raw.close()  # twice: nothing more


def test_zlib_errors_are_not_what_the_reader_sees(tmp_path):
    """A damaged deflate stream inside a member (zlib's own error) reaches the reader as gzip's."""
    path = tmp_path / "log.jsonl.gz"
    data = bytearray(gzip.compress(os.urandom(4000)))
    data[20:40] = b"\xff" * 20
    path.write_bytes(bytes(data))
    with pytest.raises(gzip.BadGzipFile) as caught:
        _ours(path)
    assert not isinstance(caught.value, zlib.error)


@pytest.mark.parametrize("ahead", [True, False])
def test_a_log_damaged_inside_a_member_is_a_file_error_with_its_line(tmp_path, ahead):
    """``read_records`` of a ``.gz`` whose deflate stream is damaged partway: the lines before the
    damage, then the file error (strict: raised; tolerant: counted), not zlib's traceback."""
    from predictor.records.logio import ReadReport, iter_records, read_records
    from predictor.records.record import RecordError

    good = '{"schema": "coloc/v1", "device": "g", "batch": {"model": "a", "batch_size": 1}, "latency_ms": 1}\n'
    body = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    data = bytearray(body.compress((good * 100_000).encode()) + body.flush())
    data[len(data) // 2: len(data) // 2 + 64] = b"\x00" * 64
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(RecordError) as caught:
        read_records(path, inflate_ahead=ahead)
    assert caught.value.field == "file" and "unreadable" in str(caught.value)
    report = ReadReport()
    kept = list(iter_records(path, tolerant=True, report=report, inflate_ahead=ahead))
    assert 0 < len(kept) < 100_000 and report.skipped == 1 and report.errors[0].field == "file"


def test_a_log_reads_the_same_inflated_ahead_or_not(tmp_path):
    """``iter_rows``/``iter_records`` with and without the thread: the same rows, the same errors
    (strict and tolerant), a log of many pieces with bad lines among them."""
    from predictor.records.logio import ReadReport, iter_records, iter_rows
    from predictor.records.record import RecordError

    good = '{"schema": "coloc/v1", "device": "g", "batch": {"model": "a", "batch_size": %d}, "latency_ms": 1}'
    lines = [good % (i % 7 + 1) for i in range(30_000)]
    lines[12_345] = "{not json"
    lines[23_456] = (good % 1).replace('"latency_ms": 1', '"latency_ms": -1')
    path = tmp_path / "log.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write("\r\n".join(lines) + "\n")
    for read in (iter_rows, iter_records):
        reads = []
        for ahead in (True, False):
            report = ReadReport()
            rows = list(read(path, tolerant=True, report=report, inflate_ahead=ahead))
            reads.append((rows, report.accepted, [(e.line, e.field, str(e)) for e in report.errors]))
            with pytest.raises(RecordError) as caught:
                list(read(path, inflate_ahead=ahead))
            assert (caught.value.line, caught.value.field) == (12_346, "json")
        assert reads[0] == reads[1]
        assert reads[0][1] == 29_998 and [e[0] for e in reads[0][2]] == [12_346, 23_457]
