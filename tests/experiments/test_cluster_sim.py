"""The cluster simulator: device mechanics (slots, memory, loads, eviction, transfer) and a short
run of every policy against running gRPC services on the embedded dataset."""

from __future__ import annotations

import dataclasses
import math

import pytest

from experiments.datasets import load
from experiments.studies.cluster_sim import (
    POLICIES,
    Cluster,
    Config,
    Device,
    Job,
    footprint_mb,
    model_memory,
    run,
    topology_of,
)
from experiments.studies.scheduler_sim import LatencyPool
from predictor.records.record import BatchSpec, Record


def job(ident, model, batch_size=1, host=0):
    template = Record("d", BatchSpec(model, batch_size), 5.0, solo_latency_ms=5.0)
    return Job(ident, template, 0.0, 25.0, host)


def test_device_slots_memory_and_lru_eviction():
    config = Config(slots=2, memory_mb=4000.0, load_mb_per_ms=100.0)
    device = Device(0, config)
    a = job(0, "gpt2", 2)  # 3500 + 500 MB: the whole device
    assert device.can_start(a)
    assert device.load("gpt2") == pytest.approx(35.0) and device.load("gpt2") == 0.0  # loaded once
    device.running.append(a)
    assert device.pinned_mb() == pytest.approx(footprint_mb("gpt2", 2)) == pytest.approx(4000.0)
    assert not device.can_start(job(1, "mlp"))  # no memory left beside it
    device.running.remove(a)
    b = job(2, "bert", 4)
    assert device.can_start(b)
    assert device.load("bert") == pytest.approx(model_memory("bert")[0] / 100.0)
    assert list(device.loaded) == ["bert"]  # gpt2 (idle) was evicted to make room
    device.running.append(b)
    device.running.append(job(3, "bert", 1))
    assert not device.can_start(job(4, "mlp"))  # both slots taken


def test_transfer_time_follows_the_topology():
    config = Config(devices=16, devices_per_host=4, hosts_per_rack=2, input_mb=2.0, host_gbps=25.0, rack_gbps=10.0)
    cluster = Cluster(config, "blind", None, LatencyPool([]), "k", 0)
    local, same_rack, remote = cluster.devices[0], cluster.devices[4], cluster.devices[8]
    j = job(0, "mlp", host=0)
    assert cluster.transfer_ms(j, local) == 0.0
    assert cluster.transfer_ms(j, same_rack) == pytest.approx(2.0 * 8 / 25.0)
    assert cluster.transfer_ms(j, remote) == pytest.approx(2.0 * 8 / 10.0)


def test_the_services_topology_is_the_simulated_one():
    config = Config(devices=16, devices_per_host=4, hosts_per_rack=2, input_mb=2.0, host_gbps=25.0, rack_gbps=10.0)
    cluster = Cluster(config, "blind", None, LatencyPool([]), "k", 0)
    topology = topology_of(config)
    j = job(0, "mlp", host=0)
    for device in cluster.devices:
        link = topology.link_class(device.name, input_host=f"h{j.input_host}")
        assert topology.time_ms(link, config.input_mb * 1e6) == pytest.approx(cluster.transfer_ms(j, device))


def test_network_and_delay_policy_runs_against_the_service(default_dataset):
    records = load(["cpu-default"], "")["cpu-default"][:600]
    config = dataclasses.replace(Config(), devices=4, devices_per_host=1, hosts_per_rack=2, loads=(0.7,), arrivals=60,
                                 input_mb=10.0, policies=("ours+queue+memory+network+delay",))
    row = run(config, records)["loads"]["0.7"]["policies"]
    for r in row.values():
        assert r["finished"] == 60 and 0 <= r["slo_attainment"] <= 1 and r["goodput_per_s"] > 0
        assert 0 <= r["moved_share"] <= 1


def test_quick_run_places_and_finishes_every_batch(default_dataset):
    records = load(["cpu-default"], "")["cpu-default"][:600]
    config = dataclasses.replace(Config(), devices=2, devices_per_host=1, loads=(0.7,), arrivals=60,
                                 policies=("blind", "ours+queue+memory"))
    row = run(config, records)["loads"]["0.7"]["policies"]
    assert set(row) == {"blind", "ours+queue+memory"}
    for r in row.values():
        assert r["finished"] == 60 and 0 <= r["slo_attainment"] <= 1 and r["goodput_per_s"] > 0


@pytest.mark.slow
def test_every_policy_runs_against_the_service(default_dataset):
    records = load(["cpu-default"], "")["cpu-default"][:3000]
    config = dataclasses.replace(Config(), devices=4, devices_per_host=2, loads=(0.8,), arrivals=200)
    results = run(config, records)
    row = results["loads"]["0.8"]["policies"]
    assert list(row) == list(POLICIES)
    for policy, r in row.items():
        assert r["finished"] == r["arrivals"] == 200, policy
        assert 0 <= r["slo_attainment"] <= 1 and 0 < r["utilisation"] <= 1
        assert r["p99_ms"] >= r["mean_ms"] > 0
        assert math.isnan(r["rank_rpc_ms"]) == (policy in ("blind", "oracle"))  # neither asks a service
    assert row["ours+queue"]["queued_share"] > 0  # batches did wait, and were reported queued
    # what the terms buy, on this seed: the full policy beats the interference-only one
    assert row["ours+queue+memory"]["goodput_per_s"] > row["ours"]["goodput_per_s"]


def test_the_oracle_knows_each_batch_end_exactly(default_dataset):
    records = load(["cpu-default"], "")["cpu-default"][:600]
    config = dataclasses.replace(Config(), devices=3, devices_per_host=1, hosts_per_rack=2, slots=2, loads=(0.9,),
                                 arrivals=120, input_mb=10.0, memory_mb=5000.0, policies=("oracle",))
    replay = [r for r in records if r.solo_latency_ms][300:]
    cluster = Cluster(config, "oracle", None, LatencyPool(replay), "k", 7)
    arrivals = [(2.0 * i, r) for i, r in enumerate(replay[:120])]
    result = cluster.run(arrivals)
    assert result["finished"] == 120 and result["queued_share"] == 0.0
    waited = [j for j in cluster.done if j.start_ms > j.arrival_ms + 1e-9]
    assert waited  # batches did queue, some behind memory or slots, some behind a transfer
    for j in cluster.done:  # placed at its arrival: the forecast completion is the realised end
        assert j.arrival_ms + j.predicted_ms == pytest.approx(j.end_ms, rel=1e-9, abs=1e-9)


def test_every_policy_is_reported_against_the_oracle(default_dataset):
    records = load(["cpu-default"], "")["cpu-default"][:600]
    config = dataclasses.replace(Config(), devices=2, devices_per_host=1, loads=(0.7,), arrivals=60,
                                 policies=("blind", "oracle"))
    row = run(config, records)["loads"]["0.7"]["policies"]
    assert row["oracle"]["slo_vs_oracle"] == row["oracle"]["goodput_vs_oracle"] == 1.0
    blind = row["blind"]
    assert blind["slo_vs_oracle"] == pytest.approx(blind["slo_attainment"] / row["oracle"]["slo_attainment"])
    assert blind["slo_attainment"] <= row["oracle"]["slo_attainment"]
