"""The vectorised ranking (packed request, all candidates as one matrix) answers what the
per-candidate path answers: ``check_deadline`` of each candidate on its own (its one-row
fixed point, per-record features and prediction), over random candidate sets.

Candidate sets mix devices and device kinds (one unseen), co-runners given by overlap, by
remaining time or by neither (filled in), empty co-runner sets, devices short of memory,
and an input whose transfer term depends on the device's place in the topology.
"""

from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.features.extract import feature_form, feature_matrix
from predictor.records.colocations import CoLocations
from predictor.records.record import BatchSpec
from predictor.rpc import columns, convert
from predictor.rpc.protos import pb2
from predictor.service import (
    Candidate,
    CoRunnerSource,
    Deadline,
    PlannedCoRunner,
    Query,
    Service,
    ServiceConfig,
    answering,
)
from predictor.service.live.topology import parse_topology
from predictor.service.synthetic import MODELS, synthetic_records
from predictor.service.types import DeviceMemory, InputPlace

TOPOLOGY = """\
[hosts.h0]
rack = "r0"
[hosts.h1]
rack = "r0"
[devices.g0]
host = "h0"
[devices.g1]
host = "h1"
[devices.g2]
host = "h2"
rack = "r1"
"""
DEVICES = ("g0", "g1", "g2", "g3")
KINDS = ("SimGPU", "", "NeverSeen")
BATCH = BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})


@pytest.fixture(scope="module", params=["rls", "sgd", "ensemble:experts='rls,sgd'"])
def service(request):
    svc = Service(ServiceConfig(predictor=request.param, snapshot_every_s=0, max_candidates=256,
                                topology=parse_topology(TOPOLOGY)), clock=lambda: 100.0)
    svc.open()
    for record in synthetic_records(400, seed=5):
        svc.observe(record)
    # bert's footprint learned; g1 has 500 MB free (short of memory), g0 plenty, g2/g3 unknown (assumed to fit)
    svc.batch_start("g3", "SimGPU", "learn", BATCH)
    svc.batch_end("g3", "learn", memory=DeviceMemory(peak_mb=1_200.0))
    for device, used in (("g0", 2_000.0), ("g1", 15_500.0)):
        svc.batch_start(device, "SimGPU", f"m{device}", BatchSpec("mlp", 2),
                        memory=DeviceMemory(total_mb=16_000.0, used_mb=used))
        svc.batch_end(device, f"m{device}", memory=DeviceMemory(used_mb=used))
    return svc


MODEL_NAMES = sorted(MODELS)
runner = st.tuples(
    st.sampled_from(MODEL_NAMES), st.integers(1, 16), st.sampled_from(["overlap", "remaining", "neither"]),
    st.floats(0.0, 1.0), st.floats(0.0, 40.0), st.booleans(),
)
candidate = st.tuples(st.sampled_from(DEVICES), st.sampled_from(KINDS), st.lists(runner, max_size=4),
                      st.booleans())


def _candidate(spec) -> Candidate:
    device, kind, runners, signal = spec
    planned = []
    for model, size, how, overlap, remaining, attrs in runners:
        l2, dram, _ = MODELS[model]
        planned.append(PlannedCoRunner(
            model, size, {"l2_util": l2, "dram_util": dram} if attrs else {"seq_len": 64.0},
            overlap=overlap if how == "overlap" else None, remaining_ms=remaining if how == "remaining" else None))
    return Candidate(device, kind, tuple(planned), CoRunnerSource.EXPLICIT, {"sm_util": 0.5} if signal else {})


@settings(max_examples=40, deadline=None)
@given(specs=st.lists(candidate, min_size=1, max_size=40), deadline=st.floats(5.0, 200.0),
       moved=st.sampled_from([None, ("h0", 50e6), ("h2", 5e6)]), solo=st.sampled_from([None, 9.0]),
       one_quadratic=st.booleans())
def test_packed_ranking_equals_each_candidate_checked_alone(service, specs, deadline, moved, solo, one_quadratic):
    candidates = [_candidate(s) for s in specs]
    where = InputPlace(host=moved[0], n_bytes=moved[1]) if moved else None
    request = pb2().RankPlacementsRequest(batch=convert.batch_to_pb(BATCH),
                                          candidates=[convert.candidate_to_pb(c) for c in candidates])
    packed = columns.packed_columns_from_pb(columns.pack_rank_request(request, omit_detail=True).packed_candidates)
    # a small ranking's rows all from one quadratic, or (as a large one's) the still rows by the form
    with mock.patch.object(answering, "ONE_QUADRATIC_ROWS", answering.ONE_QUADRATIC_ROWS if one_quadratic else 0):
        ranking = service.rank_columns(BATCH, packed, Deadline(ms=deadline), 0.9, solo, where=where)
    assert sorted(ranking.order.tolist()) == list(range(len(candidates)))
    for i, c in enumerate(candidates):
        query = dataclasses.replace(Query.for_candidate(BATCH, c, solo), input=where)
        single = service.check_deadline(query, Deadline(ms=deadline), 0.9)
        assert ranking.latency_ms[i] == pytest.approx(single.prediction.latency_ms, rel=1e-12)
        assert ranking.upper_bound_ms[i] == pytest.approx(single.prediction.upper_bound_ms, rel=1e-12)
        assert ranking.slack_ms[i] == pytest.approx(single.slack_ms, rel=1e-9, abs=1e-9)
        assert ranking.probability[i] == pytest.approx(single.probability, rel=1e-12, abs=1e-12)
        assert ranking.feasible(i) == single.feasible
        answer = ranking.prediction(i)
        assert answer.transfer_ms == pytest.approx(single.prediction.transfer_ms, rel=1e-12)
        assert answer.load_ms == single.prediction.load_ms
        assert answer.estimated == single.prediction.estimated
        assert answer.bound_source == single.prediction.bound_source
        if c.device == "g1":  # 500 MB free, bert needs 1,200: infeasible whatever its slack
            assert not ranking.feasible(i) and "memory" in ranking.placement_fields(i)["infeasible_reason"]


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.lists(runner, max_size=5), min_size=1, max_size=30), seed=st.integers(0, 2**32 - 1),
       features=st.sampled_from(["fine", "interactions"]), signals=st.booleans(),
       other_first=st.sampled_from([None, "fine", "interactions"]))
def test_feature_form_equals_the_feature_matrix(rows, seed, features, signals, other_first):
    """The overlap form gives the matrix ``feature_matrix`` builds, for any overlaps and any subset of rows,
    whichever form of the same rows was asked before (``other_first``: the two share their parts)."""
    rng = np.random.default_rng(seed)
    co_runners = [[(model, size, {"l2_util": MODELS[model][0]} if attrs else {"seq_len": 64.0}, overlap)
                   for model, size, _, overlap, _, attrs in row] for row in rows]
    built = CoLocations.build(BATCH, [f"d{i}" for i in range(len(rows))], co_runners,
                              signals=[{"sm_util": 0.5} if signals and i % 2 else {} for i in range(len(rows))])
    subset = np.flatnonzero(rng.random(len(rows)) < 0.6)
    if other_first is not None:
        feature_form(built, other_first, subset)
    form = feature_form(built, features, subset)
    if not built.overlaps.size:
        assert form is None
        return
    for _ in range(3):
        overlaps = rng.random(built.overlaps.size) * (rng.random(built.overlaps.size) < 0.8)
        want = feature_matrix(built.with_overlaps(overlaps), features)
        assert form.names == want.names
        np.testing.assert_allclose(form.values(overlaps), want.values[subset], rtol=1e-15, atol=0)
