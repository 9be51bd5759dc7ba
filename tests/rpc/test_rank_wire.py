"""The classic RankPlacements read column-wise from its wire bytes, and the Python client's packed
default: the same columns and the same answers as the message-by-message path."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.records.record import BatchSpec
from predictor.rpc import candidate_wire, columns, convert, wire
from predictor.rpc.client import InterferenceClient
from predictor.rpc.protos import load
from predictor.rpc.server import create_server, stop_server
from predictor.service import Candidate, CoRunnerSource, PlannedCoRunner, Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

pb2, _ = load()
BATCH = BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})

names = st.sampled_from(["mlp", "bert", "resnet", "", "gpu 0", "é-kind", "a\x00b"])
numbers = st.one_of(st.floats(-1e3, 1e3), st.just(math.nan), st.just(-0.0))
runners = st.builds(
    lambda model, size, attrs, overlap, remaining: pb2.CoRunner(
        model=model, batch_size=size, attrs=attrs,
        **({"overlap": overlap} if overlap is not None else {}),
        **({"remaining_ms": remaining} if remaining is not None else {})),
    names, st.integers(-3, 2**31 - 1), st.dictionaries(names, numbers, max_size=3),
    st.none() | numbers, st.none() | numbers)
candidates = st.builds(
    lambda device, kind, rs, source, signals: pb2.PlacementCandidate(
        device=device, device_kind=kind, co_runners=rs, co_runner_source=source, signals=signals),
    names, names, st.lists(runners, max_size=3), st.integers(0, 5), st.dictionaries(names, numbers, max_size=2))


def _same(a, b) -> None:
    for field in ("devices", "device_kinds", "sources", "models", "batch_sizes"):
        assert list(getattr(a, field)) == list(getattr(b, field)), field
    assert [dict(m) for m in a.signals] == [dict(m) for m in b.signals]
    assert [dict(m) for m in a.attrs] == [dict(m) for m in b.attrs]
    for field in ("offsets", "overlaps", "remaining", "has_overlap", "has_remaining"):
        assert np.array_equal(getattr(a, field), getattr(b, field), equal_nan=field in ("overlaps", "remaining")), field


def _read(raw: bytes):
    fields = candidate_wire.read(raw)
    if fields is None:
        return None
    codes = fields.pop("source_codes")
    return columns.CandidateColumns(**fields, sources=columns._sources(codes, len(codes)), typed=True)


@settings(max_examples=150, deadline=None)
@given(st.lists(candidates, max_size=6))
def test_wire_reader_reads_what_protobuf_reads(cands):
    request = pb2.RankPlacementsRequest(batch=convert.batch_to_pb(BATCH), candidates=cands, deadline_ms=5.0)
    got = _read(request.SerializeToString())
    printable = all(c.isascii() and c.isprintable() for c in _names(request))
    finite = not any(math.isnan(v) for c in cands for m in (c.signals, *(r.attrs for r in c.co_runners))
                     for v in m.values())
    assert (got is not None) == (printable and finite)  # declined only for what the reader does not take
    if got is not None:
        _same(columns.candidate_columns_from_pb(request.candidates), got)


def test_names_alike_at_both_ends_are_told_apart():
    """Names that differ only in the middle (a fleet's usual device names) are different names."""
    devices = [f"rack-aa-{i:04d}-node-bb" for i in range(40)] * 2
    request = pb2.RankPlacementsRequest(batch=convert.batch_to_pb(BATCH), deadline_ms=5.0, candidates=[
        pb2.PlacementCandidate(device=d, device_kind="L4", co_runners=[pb2.CoRunner(
            model=f"model-xx-{i % 7}-yy-model", batch_size=1, attrs={f"attr-1234{i % 3}5678": 0.5}, overlap=0.5)])
        for i, d in enumerate(devices)])
    got = _read(request.SerializeToString())
    assert got is not None
    _same(columns.candidate_columns_from_pb(request.candidates), got)
    assert list(got.devices) == devices


def _names(request) -> list[str]:
    out = []
    for c in request.candidates:
        out += [c.device, c.device_kind, *c.signals]
        for r in c.co_runners:
            out += [r.model, *r.attrs]
    return out


def test_bytes_a_client_may_send():
    """Unknown fields skipped, a scalar given twice read as its last value, a key given twice declined."""
    candidate = pb2.PlacementCandidate(device="gpu1", co_runners=[pb2.CoRunner(model="mlp", batch_size=2, overlap=0.5)])
    unknown = b"\x78\x05" + b"\x81\x01" + bytes(8) + b"\xfa\x01\x02hi" + b"\x8d\x01" + bytes(4)
    body = candidate.SerializeToString() + unknown + b"\x0a\x04gpu2"
    raw = b"\x12" + bytes([len(body)]) + body
    parsed = pb2.RankPlacementsRequest.FromString(raw)
    assert parsed.candidates[0].device == "gpu2"
    _same(columns.candidate_columns_from_pb(parsed.candidates), _read(raw))
    entry = pb2.PlacementCandidate(signals={"t": 1.0}).SerializeToString()
    twice = b"\x12" + bytes([2 * len(entry)]) + entry + entry
    assert len(pb2.RankPlacementsRequest.FromString(twice).candidates) == 1
    assert candidate_wire.read(twice) is None


@pytest.fixture(scope="module")
def client():
    service = Service(ServiceConfig(max_candidates=8192))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    for record in synthetic_records(400, seed=4):
        service.observe(record)
    with InterferenceClient(f"127.0.0.1:{port}") as c:
        yield c
    stop_server(server, service, grace=0.5)


def _candidates(n: int, seed: int) -> list[Candidate]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        runners = tuple(
            PlannedCoRunner(str(rng.choice(["mlp", "bert", "resnet"])), int(rng.integers(1, 9)),
                            {k: float(rng.uniform(0, 1)) for k in ("l2_util", "dram_util") if rng.random() < 0.8},
                            overlap=float(rng.uniform(0, 1)) if rng.random() < 0.5 else None,
                            remaining_ms=None if rng.random() < 0.5 else float(rng.uniform(1, 30)))
            for _ in range(int(rng.integers(0, 3))))
        runners = tuple(r if r.overlap is None or r.remaining_ms is None else PlannedCoRunner(
            r.model, r.batch_size, r.attrs, overlap=r.overlap) for r in runners)
        out.append(Candidate(f"sim{i % 4}", "SimGPU", runners, CoRunnerSource.EXPLICIT))
    return out


def test_client_sends_packed_and_gets_the_classic_answer(client):
    candidates = _candidates(300, 1)
    packed = client.rank_placements(BATCH, candidates, 40.0)
    classic = client.rank_placements(BATCH, candidates, 40.0, packed=False)
    assert [p.candidate_index for p in packed.placements] == [p.candidate_index for p in classic.placements]
    for a, b in zip(packed.placements, classic.placements, strict=True):
        assert (a.device, a.rank, a.feasible) == (b.device, b.rank, b.feasible)
        assert a.slack_ms == pytest.approx(b.slack_ms, rel=1e-12, abs=1e-9)
        assert a.prediction.latency_ms == pytest.approx(b.prediction.latency_ms, rel=1e-12)
        assert a.prediction.upper_bound_ms == pytest.approx(b.prediction.upper_bound_ms, rel=1e-12)
        assert a.prediction.co_runners == b.prediction.co_runners
        assert a.prediction.estimated == b.prediction.estimated


def test_rankings_of_8192_candidates_are_answered(client):
    ranking = client.rank_placements(BATCH, _candidates(8192, 2), 40.0)
    assert len(ranking.placements) == 8192
    assert sorted(p.candidate_index for p in ranking.placements) == list(range(8192))


def test_the_server_reads_the_bytes_it_was_sent(client, monkeypatch):
    """The column-wise read takes the request's own bytes from the decoding step (no second
    serialisation), including a field a client gave twice, and answers as protobuf reads them."""
    seen = []
    read = candidate_wire.read
    monkeypatch.setattr(candidate_wire, "read", lambda raw: seen.append(raw) or read(raw))
    request = pb2.RankPlacementsRequest(batch=convert.batch_to_pb(BATCH), deadline_ms=40.0,
                                        candidates=[convert.candidate_to_pb(c) for c in _candidates(3, 5)])
    body = request.candidates[0].SerializeToString() + b"\x0a\x04sim9"  # device given twice: the last counts
    raw = request.SerializeToString() + b"\x12" + wire.varint(len(body)) + body
    call = client.channel.unary_unary("/interference.v1.InterferenceService/RankPlacements")
    answer = pb2.RankPlacementsResponse.FromString(call(raw))
    assert seen == [raw]
    assert sorted(p.device for p in answer.placements) == ["sim0", "sim1", "sim2", "sim9"]
