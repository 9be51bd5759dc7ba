"""The data-transfer term and delay scheduling: the topology file, the per-link-class online
correction, the transfer in every answer, the delay decision, and all of it over a real server."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.cli.serve import config_from_args
from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.server import create_server, stop_server
from predictor.service import Candidate, CoRunnerSource, InvalidArgument, Query, Service, ServiceConfig
from predictor.service.estimates.delay import decide
from predictor.service.live.topology import LINK_CLASSES, TopologyError, load_topology, parse_topology
from predictor.service.live.transfers import LinkCorrection, TransferBook
from predictor.service.synthetic import synthetic_records
from predictor.service.types import Deadline, InputPlace

TOPOLOGY = """\
# two racks, three hosts
[links.host]
bandwidth_gb_s = 16.0
latency_ms = 0.01

[links.remote]
bandwidth_gb_s = 1.0
latency_ms = 0.5

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

BATCH = BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})
EXPLICIT = CoRunnerSource.EXPLICIT


# --------------------------------------------------------------------------- the topology file


def test_topology_link_classes_from_toml_and_json(tmp_path):
    topology = parse_topology(TOPOLOGY)
    assert topology.devices["g2"] == ("h2", "r1") and topology.hosts["h1"] == "r0"
    assert [topology.link_class("g0", input_host=h) for h in ("h0", "h1", "h2", "elsewhere")] == [
        "host", "rack", "remote", "remote"]
    assert topology.link_class("g0", input_device="g0") == "device"
    assert topology.link_class("g0", input_device="g1") == "rack"  # the host of the device holding it
    assert topology.link_class("unplaced", input_host="h0") == "remote"
    assert topology.links["remote"].time_ms(1e9) == pytest.approx(1000.5)
    assert topology.links["rack"] == parse_topology("").links["rack"]  # default
    path = tmp_path / "t.json"
    path.write_text('{"hosts": {"h0": {"rack": "r0"}}, "devices": {"g0": {"host": "h0"}, '
                    '"g1": {"host": "h9", "rack": "r0"}}}')
    from_json = load_topology(path)
    assert from_json.link_class("g1", input_host="h0") == "rack"


@pytest.mark.parametrize(("text", "fmt", "field", "line"), [
    ('[devices.g0]\nhost = ""\n', "toml", "devices.g0.host", 2),
    ("[devices.g0]\nrack = 'r0'\n", "toml", "devices.g0.host", 1),
    ('[links.rack]\nbandwidth_gb_s = 100.0\n', "toml", "links.rack.bandwidth_gb_s", 2),
    ('[links.host]\nlatency_ms = 1.0\n', "toml", "links.rack.latency_ms", None),
    ('[links.host]\nlatency_ms = nan\n', "toml", "links.host.latency_ms", 2),
    ('[links.host]\nbandwidth_gb_s = -1\n', "toml", "links.host.bandwidth_gb_s", 2),
    ('[links.remote]\nbandwidth_gb_s = 1e-9\n', "toml", "links.remote.bandwidth_gb_s", 2),
    ('[links.wifi]\nlatency_ms = 1\n', "toml", "links.wifi", 1),
    ('[hosts.h0]\nrack = "r0"\n[devices.g0]\nhost = "h0"\nrack = "r1"\n', "toml", "devices.g0.rack", 5),
    ('[devices.g0]\nhost = "h0"\nspeed = 3\n', "toml", "devices.g0.speed", 3),
    ('{\n  "devices": {\n    "g0": {"host": 7}\n  }\n}', "json", "devices.g0.host", 3),
    ('{\n  "devices": {\n', "json", "topology", 3),
    ('[devices.g0\n', "toml", "topology", 1),
])
def test_topology_errors_name_the_field_and_line(text, fmt, field, line):
    with pytest.raises(TopologyError) as info:
        parse_topology(text, fmt)
    assert info.value.field == field
    if line is not None:
        assert info.value.line == line


def test_serve_topology_flag_loads_or_exits_naming_the_field(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text(TOPOLOGY)
    config = config_from_args(_serve_args(str(good)))
    assert config.topology is not None and config.topology.devices["g0"] == ("h0", "r0")
    bad = tmp_path / "bad.toml"
    bad.write_text('[devices.g0]\nhost = "h0"\n[devices.g1]\nhost = 3\n')
    with pytest.raises(SystemExit) as info:
        config_from_args(_serve_args(str(bad)))
    assert "line 4" in str(info.value) and "devices.g1.host" in str(info.value)


def _serve_args(topology: str) -> argparse.Namespace:
    from predictor.cli.main import build_parser
    return build_parser().parse_args(["serve", "--topology", topology])


# --------------------------------------------------------------------------- the online correction


def test_link_correction_learns_the_ratio_and_bounds_at_the_confidence():
    correction = LinkCorrection(alpha=0.2, min_samples=20, fallback_factor=1.5)
    assert correction.factor == 1.0 and correction.bound_factor(0.9) == 1.5
    rng = np.random.default_rng(0)
    for ratio in rng.uniform(1.8, 2.2, size=400):
        correction.learn(10.0, 10.0 * ratio)
    assert correction.factor == pytest.approx(2.0, rel=0.1)
    factor = correction.bound_factor(0.9)
    assert 1.0 <= factor <= 1.25  # about the 0.9 quantile of ratio / mean, within the spread
    correction.learn(0.0, 5.0)  # nothing to learn from a nominal time of 0
    assert correction.n == 400


def test_transfer_book_learns_one_link_class_without_touching_the_others():
    book = TransferBook(parse_topology(TOPOLOGY))
    where = InputPlace(host="h0", n_bytes=50e6)
    nominal_rack = book.estimate("g1", where, 0.99).mean_ms
    nominal_host = book.estimate("g0", where, 0.99).mean_ms
    for _ in range(40):
        assert book.observe("g1", where, 3 * nominal_rack) == "rack"
    assert book.estimate("g1", where, 0.99).mean_ms == pytest.approx(3 * nominal_rack, rel=1e-6)
    assert book.estimate("g0", where, 0.99).mean_ms == nominal_host
    # the remote link is never quicker than the (now slow) rack link
    assert book.estimate("g2", where, 0.99).mean_ms >= book.estimate("g1", where, 0.99).mean_ms
    assert book.estimate("g0", InputPlace(host="h0"), 0.99).link == ""  # no size: no transfer


# --------------------------------------------------------------------------- monotone: bytes and distance

PLACES = {  # the input, nearest first, for a batch on g0
    "device": {"device": "g0"},
    "host": {"host": "h0"},
    "rack": {"host": "h1"},
    "remote": {"host": "h2"},
}


def _service() -> Service:
    service = Service(ServiceConfig(snapshot_every_s=0, topology=parse_topology(TOPOLOGY)))
    service.open()
    for record in synthetic_records(300, seed=4):
        service.observe(record)
    return service


@pytest.fixture(scope="module")
def service():
    return _service()


@given(
    small=st.floats(0.0, 1e12), extra=st.floats(0.0, 1e12),
    observed=st.lists(st.tuples(st.sampled_from(LINK_CLASSES), st.floats(0.0, 1e9), st.floats(1e-3, 1e5)),
                      max_size=30),
    confidence=st.sampled_from([0.5, 0.9, 0.99]),
)
@settings(max_examples=60, deadline=None)
def test_more_bytes_or_a_farther_link_never_predicts_less(service, small, extra, observed, confidence):
    """Whatever transfers were observed (corrections of any size, per link class), the completion
    and its bound never shrink with more bytes or a farther link."""
    for link, n_bytes, ms in observed:
        service.batch_start("g0", "SimGPU", f"obs{len(observed)}", BATCH,
                            where=InputPlace(n_bytes=n_bytes, **PLACES[link]),
                            transfer_ms=ms)
        service.batch_end("g0", f"obs{len(observed)}")
    last = (0.0, 0.0)
    for link, place in PLACES.items():
        answers = []
        for n_bytes in (small, small + extra):
            query = Query("g0", BATCH, co_runner_source=EXPLICIT, input=InputPlace(n_bytes=n_bytes, **place))
            prediction = service.predict(query, confidence)
            assert prediction.transfer_link == link
            assert math.isfinite(prediction.transfer_bound_ms)
            answers.append((prediction.completion_ms, prediction.completion_bound_ms))
        assert answers[1][0] >= answers[0][0] and answers[1][1] >= answers[0][1]  # more bytes
        assert answers[0][0] >= last[0] and answers[0][1] >= last[1]  # farther
        last = answers[0]


def test_transfer_adds_to_the_deadline_answer():
    service = _service()
    where = InputPlace(host="h2", n_bytes=20e6)
    plain = service.check_deadline(Query("g0", BATCH, co_runner_source=EXPLICIT), Deadline(ms=500.0))
    moved = service.check_deadline(Query("g0", BATCH, co_runner_source=EXPLICIT, input=where), Deadline(ms=500.0))
    p = moved.prediction
    assert p.transfer_link == "remote" and p.transfer_ms > 0 and p.transfer_bound_ms >= p.transfer_ms
    assert moved.slack_ms == pytest.approx(plain.slack_ms - p.transfer_bound_ms)
    assert moved.probability <= plain.probability


# --------------------------------------------------------------------------- delay scheduling (the rule)


def _waits(value: float | None, n: int = 50):
    return lambda devices, q: (value, n if value is not None else 0)


def test_delay_rule_waits_within_the_learned_limit_else_goes_remote():
    devices = ["local", "remote"]
    local = np.array([True, False])
    fits = np.array([True, True])
    transfer = np.array([0.0, 80.0])
    slack = np.array([100.0, 100.0])
    # local: 30 ms wait + 16 ms run; remote: 80 ms transfer + 16 ms run; break-even 80 ms
    wait = np.array([30.0, 0.0])
    completion = np.array([46.0, 96.0])
    waited = decide(devices, local, fits, wait, transfer, completion, slack, _waits(50.0))
    assert waited.choice == "wait_local" and waited.delay_limit_ms == 50.0 and waited.waits_observed == 50
    assert waited.local_device == "local" and waited.remote_device == "remote"
    capped = decide(devices, local, fits, wait, transfer, completion, slack, _waits(500.0))
    assert capped.choice == "wait_local" and capped.delay_limit_ms == pytest.approx(80.0)  # break-even
    assert "break-even" in capped.reason
    unusual = decide(devices, local, fits, wait, transfer, completion, slack, _waits(10.0))
    assert unusual.choice == "remote_now" and "beyond T = 10.0 ms" in unusual.reason
    cheap = decide(devices, local, fits, wait, np.array([0.0, 1.0]), np.array([46.0, 17.0]), slack, _waits(None))
    assert cheap.choice == "remote_now" and cheap.delay_limit_ms == pytest.approx(1.0)
    late = decide(devices, local, fits, wait, transfer, completion, np.array([-5.0, 3.0]), _waits(50.0))
    assert late.choice == "remote_now" and "misses the deadline" in late.reason
    saturated = decide(devices, local, fits, np.array([math.inf, 0.0]), transfer, np.array([math.inf, 96.0]),
                       slack, _waits(50.0))
    assert saturated.choice == "remote_now" and saturated.local_wait_ms == math.inf
    free = decide(devices, local, fits, np.array([0.0, 0.0]), transfer, np.array([16.0, 96.0]), slack, _waits(5.0))
    assert free.choice == "local_now"
    no_room = decide(devices, local, np.array([False, True]), wait, transfer, completion, slack, _waits(50.0))
    assert no_room.choice == "remote_now" and no_room.local_device == ""
    assert decide(devices, local, np.array([False, False]), wait, transfer, completion, slack, _waits(1.0)) is None


# --------------------------------------------------------------------------- over gRPC


@pytest.fixture(scope="module")
def served():
    now = [1000.0]
    service = Service(ServiceConfig(snapshot_every_s=0, topology=parse_topology(TOPOLOGY)), clock=lambda: now[0])
    metrics = ServerMetrics(service)
    server, port = create_server("127.0.0.1:0", service, metrics=metrics)
    server.start()
    service.open()
    for record in synthetic_records(300, seed=4):
        service.observe(record)
    with InterferenceClient(f"127.0.0.1:{port}") as client:
        client.wait_ready(10)
        client.metrics, client.port = metrics, port
        yield client, now
    metrics.stop()
    stop_server(server, service, grace=0.5)


def test_reflection_and_metrics_cover_the_transfer_fields(served):
    import urllib.request

    import grpc
    from google.protobuf import descriptor_pool
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    client, _ = served
    channel = grpc.insecure_channel(f"127.0.0.1:{client.port}")
    try:
        pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
        assert "transfer_ms" in pool.FindMessageTypeByName("interference.v1.Prediction").fields_by_name
        assert "input_bytes" in pool.FindMessageTypeByName("interference.v1.BatchQuery").fields_by_name
        assert "delay" in pool.FindMessageTypeByName("interference.v1.RankPlacementsResponse").fields_by_name
    finally:
        channel.close()
    http = client.metrics.serve(0, "127.0.0.1")
    text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5).read().decode()
    assert 'interference_transfer_correction_ratio{link="rack"}' in text
    assert 'interference_transfers_observed_total{link="remote"}' in text


def test_predict_over_grpc_says_the_transfer_separately(served):
    client, _ = served
    for host, link in (("h0", "host"), ("h1", "rack"), ("h2", "remote")):
        query = Query("g0", BATCH, co_runner_source=EXPLICIT, input=InputPlace(host=host, n_bytes=10e6))
        p = client.predict(query)
        assert p.transfer_link == link and p.transfer_ms > 0
        assert p.completion_ms == pytest.approx(p.queue_wait_ms + p.load_ms + p.transfer_ms + p.latency_ms)
    plain = client.predict(Query("g0", BATCH, co_runner_source=EXPLICIT))
    assert plain.transfer_link == "" and plain.transfer_ms == 0.0


def test_observed_transfers_over_grpc_correct_their_link_class(served):
    client, now = served
    where = InputPlace(host="h2", n_bytes=10e6)  # remote to g1
    query = Query("g1", BATCH, co_runner_source=EXPLICIT, input=where)
    nominal = client.predict(query).transfer_ms
    for i in range(30):
        client.batch_start("g1", f"t{i}", BATCH, device_kind="SimGPU", where=where, transfer_ms=2.5 * nominal)
        client.batch_end("g1", f"t{i}")
    learned = client.predict(query)
    assert learned.transfer_ms == pytest.approx(2.5 * nominal, rel=1e-6)
    assert learned.transfer_bound_ms >= learned.transfer_ms


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"n_bytes": float("nan")}, "query.input_bytes"),
    ({"n_bytes": -1.0}, "query.input_bytes"),
    ({"n_bytes": float("inf")}, "query.input_bytes"),
    ({"n_bytes": 1e16}, "query.input_bytes"),
    ({"host": "h" * 300, "n_bytes": 1.0}, "query.input_host"),
    ({"device": "d" * 300}, "query.input_device"),
])
def test_input_validation_names_the_field(served, kwargs, field):
    client, _ = served
    query = Query("g0", BATCH, co_runner_source=EXPLICIT, input=InputPlace(**kwargs))
    with pytest.raises(InvalidArgument) as info:
        client.predict(query)
    assert info.value.field == field
    with pytest.raises(InvalidArgument) as info:
        client.check_deadline(query, deadline_ms=100.0)
    assert info.value.field == field
    with pytest.raises(InvalidArgument) as info:
        client.rank_placements(BATCH, [Candidate("g0", co_runner_source=EXPLICIT)], deadline_ms=100.0,
                               where=InputPlace(**kwargs))
    assert info.value.field == field.removeprefix("query.")


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"where": InputPlace(host="h0", n_bytes=1e6), "transfer_ms": -1.0}, "transfer_ms"),
    ({"where": InputPlace(host="h0", n_bytes=1e6), "transfer_ms": float("nan")}, "transfer_ms"),
    ({"where": InputPlace(host="h0"), "transfer_ms": 3.0}, "input_bytes"),
    ({"where": InputPlace(host="h0", n_bytes=-2.0)}, "input_bytes"),
])
def test_batch_start_transfer_validation_names_the_field(served, kwargs, field):
    client, _ = served
    with pytest.raises(InvalidArgument) as info:
        client.batch_start("g0", "bad", BATCH, **kwargs)
    assert info.value.field == field


def test_rank_placements_over_grpc_waits_for_the_local_device_or_goes_remote(served):
    client, now = served
    # queue dynamics of g0: batches wait 100 ms in its queue before they start
    for i in range(25):
        client.batch_queued("g0", f"w{i}", BATCH, device_kind="SimGPU")
        now[0] += 0.1
        client.batch_start("g0", f"w{i}", BATCH, device_kind="SimGPU")
        now[0] += 0.02
        client.batch_end("g0", f"w{i}")
    candidates = [Candidate("g0"), Candidate("g2", co_runner_source=EXPLICIT)]
    free = client.rank_placements(BATCH, candidates, deadline_ms=1_000.0, where=InputPlace(host="h0", n_bytes=300e6))
    assert free.delay is not None and free.delay.choice == "local_now"
    # now g0 is busy: one batch running, one queued ahead
    client.batch_start("g0", "running", BATCH, device_kind="SimGPU")
    client.batch_queued("g0", "ahead", BATCH, device_kind="SimGPU")
    big = client.rank_placements(BATCH, candidates, deadline_ms=1_000.0, where=InputPlace(host="h0", n_bytes=300e6))
    delay = big.delay
    by_device = {p.device: p for p in big.placements}
    wait = by_device["g0"].prediction.queue_wait_ms
    assert 0 < wait <= 100.0 < by_device["g2"].prediction.transfer_ms
    assert delay.choice == "wait_local" and delay.local_device == "g0" and delay.remote_device == "g2"
    assert delay.delay_limit_ms == pytest.approx(100.0, rel=0.05) and delay.waits_observed >= 20
    assert delay.local_wait_ms == pytest.approx(wait)
    assert by_device["g2"].prediction.transfer_link == "remote" and by_device["g0"].prediction.transfer_link == "host"
    small = client.rank_placements(BATCH, candidates, deadline_ms=1_000.0, where=InputPlace(host="h0", n_bytes=1e3))
    assert small.delay.choice == "remote_now" and small.delay.remote_device == "g2"
    assert small.delay.delay_limit_ms < small.delay.local_wait_ms
    assert "g0 is busy" in small.delay.reason
    client.batch_end("g0", "ahead")
    client.batch_end("g0", "running")


def test_packed_ranking_carries_the_delay_decision(served):
    client, _ = served
    pb2 = client._pb2
    request = pb2.RankPlacementsRequest(batch=pb2.Batch(model=BATCH.model, batch_size=BATCH.batch_size,
                                                        attrs=dict(BATCH.attrs)),
                                        deadline_ms=500.0, omit_detail=True, input_host="h0", input_bytes=1e6)
    request.candidates.add(device="g0", co_runner_source=1)
    request.candidates.add(device="g2", co_runner_source=1)
    response = client.stub.RankPlacements(request)
    assert response.delay.choice in ("local_now", "wait_local", "remote_now")
    assert response.delay.local_device == "g0" and len(response.packed.candidate_index) == 2
    plain = client.stub.RankPlacements(pb2.RankPlacementsRequest(
        batch=request.batch, deadline_ms=500.0, candidates=request.candidates))
    assert not plain.HasField("delay")


def test_serve_with_a_topology_and_query_with_an_input(tmp_path, capsys):
    from serve_process import start_server

    from predictor.cli import main
    from predictor.records.logio import write_records

    log = tmp_path / "warm.jsonl"
    write_records(log, synthetic_records(300, seed=2, devices=("g0", "g2")))
    topology = tmp_path / "topology.toml"
    topology.write_text(TOPOLOGY)
    served = start_server(tmp_path, "--topology", str(topology), "--warm-start", str(log))
    try:
        with InterferenceClient(served.target) as client:
            client.wait_ready(30)
        target = ["--target", served.target]
        batch = ["--model", "bert", "--batch-size", "4", "--input-host", "h2", "--input-bytes", "5e6"]
        assert main(["query", *target, "predict", "--device", "g0", "--idle", *batch]) == 0
        assert "over the remote link" in capsys.readouterr().out
        assert main(["query", *target, "rank", "--devices", "g0,g2", "--deadline-ms", "500", *batch]) == 0
        out = capsys.readouterr().out
        assert "delay scheduling: local_now" in out and "g2" in out
        assert main(["query", *target, "predict", "--device", "g0", "--idle", "--model", "bert",
                     "--batch-size", "4", "--input-bytes", "-1"]) == 1
        assert "InvalidArgument: --input-bytes:" in capsys.readouterr().out  # the flag, not query.input_bytes
    finally:
        served.kill()
