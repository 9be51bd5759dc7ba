"""RankPlacements in the packed form (and with omit_detail) answers what the classic form answers,
on a real server."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from predictor.records.record import BatchSpec
from predictor.rpc import columns, convert
from predictor.rpc.errors import FIELD_KEY
from predictor.rpc.protos import load
from predictor.rpc.server import create_server, stop_server
from predictor.service import Candidate, CoRunnerSource, PlannedCoRunner, Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

pb2, pb2_grpc = load()
BATCH = BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})


@pytest.fixture(scope="module")
def stub():
    service = Service(ServiceConfig(max_candidates=1024))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    for record in synthetic_records(400, seed=2):
        service.observe(record)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield pb2_grpc.InterferenceServiceStub(channel)
    channel.close()
    stop_server(server, service, grace=0.5)


def _candidates(n: int, seed: int) -> list[Candidate]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        runners = []
        for _ in range(int(rng.integers(0, 4))):
            attrs = {k: float(rng.uniform(0, 1)) for k in ("l2_util", "dram_util", "sm") if rng.random() < 0.7}
            how = rng.integers(3)
            runners.append(PlannedCoRunner(
                str(rng.choice(["mlp", "bert", "resnet"])), int(rng.integers(1, 9)), attrs,
                overlap=float(rng.uniform(0, 1)) if how == 0 else None,
                remaining_ms=float(rng.uniform(0, 30)) if how == 1 else None))
        signals = {"temp": float(rng.uniform(30, 80))} if rng.random() < 0.3 else {}
        out.append(Candidate(f"sim{i % 2}", "SimGPU" if rng.random() < 0.8 else "", tuple(runners),
                             CoRunnerSource.EXPLICIT if runners or rng.random() < 0.5 else CoRunnerSource.AUTO,
                             signals=signals))
    return out


def _request(candidates, **extra):
    return pb2.RankPlacementsRequest(batch=convert.batch_to_pb(BATCH),
                                     candidates=[convert.candidate_to_pb(c) for c in candidates],
                                     deadline_ms=40.0, confidence=0.95, **extra)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_packed_request_answers_the_same_ranking(stub, seed):
    classic = _request(_candidates(200, seed))
    packed = columns.pack_rank_request(classic)
    assert not packed.candidates and len(packed.packed_candidates.device) == 200
    want, got = stub.RankPlacements(classic), stub.RankPlacements(packed)
    assert [p.candidate_index for p in got.placements] == [p.candidate_index for p in want.placements]
    for a, b in zip(got.placements, want.placements, strict=True):
        assert (a.device, a.rank, a.feasible) == (b.device, b.rank, b.feasible)
        # The two forms add the same terms on different code paths, and their feature matrices
        # differ in memory layout, so BLAS may sum in another order: equal up to the last bits.
        assert a.slack_ms == pytest.approx(b.slack_ms, rel=1e-12, abs=1e-9)
        assert a.probability == pytest.approx(b.probability, rel=1e-12, abs=1e-12)
        assert a.prediction.latency_ms == pytest.approx(b.prediction.latency_ms, rel=1e-12)
        assert a.prediction.upper_bound_ms == pytest.approx(b.prediction.upper_bound_ms, rel=1e-12)
        assert a.prediction.device_kind == b.prediction.device_kind
        assert [(r.model, r.batch_size, dict(r.attrs), r.overlap) for r in a.prediction.co_runners] == [
            (r.model, r.batch_size, dict(r.attrs), r.overlap) for r in b.prediction.co_runners]


def test_omit_detail_gives_the_ranking_as_columns(stub):
    classic = _request(_candidates(300, 7))
    want = stub.RankPlacements(classic)
    for request in (_request(_candidates(300, 7), omit_detail=True), columns.pack_rank_request(classic,
                                                                                                omit_detail=True)):
        got = stub.RankPlacements(request)
        assert not got.placements and got.deadline_ms == want.deadline_ms
        packed = got.packed
        assert list(packed.candidate_index) == [p.candidate_index for p in want.placements]
        assert list(packed.latency_ms) == pytest.approx([p.prediction.latency_ms for p in want.placements], rel=1e-12)
        assert list(packed.upper_bound_ms) == pytest.approx([p.prediction.upper_bound_ms for p in want.placements],
                                                            rel=1e-12)
        assert list(packed.slack_ms) == pytest.approx([p.slack_ms for p in want.placements], rel=1e-12, abs=1e-9)
        assert list(packed.probability) == pytest.approx([p.probability for p in want.placements], rel=1e-12,
                                                         abs=1e-12)
        assert list(packed.solo_latency_ms) == [want.placements[0].prediction.solo_latency_ms]
        assert packed.confidence == 0.95 and packed.predictor == want.placements[0].prediction.predictor


def _field(error: grpc.RpcError) -> str:
    return dict(error.trailing_metadata() or ()).get(FIELD_KEY, "")


def test_packed_form_errors_name_the_field(stub):
    packed = columns.pack_rank_request(_request(_candidates(20, 3)))
    broken = pb2.RankPlacementsRequest()
    broken.CopyFrom(packed)
    del broken.packed_candidates.co_runner_model[-1]
    with pytest.raises(grpc.RpcError) as caught:
        stub.RankPlacements(broken)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert _field(caught.value) == "packed_candidates.co_runner_model"
    both = pb2.RankPlacementsRequest()
    both.CopyFrom(packed)
    both.candidates.add(device="x")
    with pytest.raises(grpc.RpcError) as caught:
        stub.RankPlacements(both)
    assert _field(caught.value) == "packed_candidates"
    bad = pb2.RankPlacementsRequest()
    bad.CopyFrom(packed)
    bad.packed_candidates.co_runner_overlap[:] = [2.0] * len(bad.packed_candidates.co_runner_overlap)
    with pytest.raises(grpc.RpcError) as caught:
        stub.RankPlacements(bad)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "overlap" in _field(caught.value)
