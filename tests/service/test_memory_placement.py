"""Memory-aware placement: device memory from the collectors (NVML against the fake, /proc on the
CPU), footprints and load times learned from batch reports, and RankPlacements over a real server."""

from __future__ import annotations

import pytest
from fake_nvml import FakeNvml
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.memory import cpu_memory, gpu_memory, process_memory
from collectors.nvml import Nvml
from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.rpc.server import create_server, stop_server
from predictor.service import CoRunnerSource, InvalidArgument, Query, Service, ServiceConfig
from predictor.service.live.memory import MemoryBook
from predictor.service.synthetic import synthetic_records

BATCH = BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})


# --------------------------------------------------------------------------- collectors


def test_gpu_memory_from_nvml_fake():
    nvml = Nvml(FakeNvml("basic"))
    reading = gpu_memory(nvml, 0)
    assert (reading.total_mb, reading.used_mb, reading.free_mb) == (80_000.0, 8_000.0, 72_000.0)
    assert gpu_memory(nvml, 7) is None  # no such GPU
    assert gpu_memory(Nvml(FakeNvml("no_driver")), 0) is None


def test_cpu_and_process_memory_from_proc(tmp_path):
    reading = cpu_memory()
    assert reading is not None and 0 < reading.used_mb <= reading.total_mb
    rss, peak = process_memory()
    assert 0 < rss <= peak
    (tmp_path / "meminfo").write_text("MemTotal:       1000000 kB\nMemFree: 1 kB\nMemAvailable:    250000 kB\n")
    fake = cpu_memory(tmp_path)
    assert fake.total_mb == pytest.approx(1000000 * 1024 / 1e6) and fake.free_mb == pytest.approx(250000 * 1024 / 1e6)
    assert cpu_memory(tmp_path / "missing") is None and process_memory(proc=tmp_path) is None


# --------------------------------------------------------------------------- the book


@given(sizes=st.dictionaries(st.integers(1, 64), st.floats(1.0, 1e4), min_size=1, max_size=6),
       ask=st.integers(1, 128))
@settings(max_examples=100, deadline=None)
def test_footprint_errs_large_and_resident_needs_less(sizes, ask):
    book = MemoryBook(clock=lambda: 0.0)
    for bs, peak in sizes.items():
        book.footprint("m", bs, peak)
    cold = book.need("d", "", "m", ask)
    larger = [peak for bs, peak in sizes.items() if bs >= ask]
    if ask in sizes:
        assert cold.needed_mb == sizes[ask]
    elif larger:
        assert cold.needed_mb in larger
    else:
        assert cold.needed_mb >= sizes[max(sizes)]  # scaled up linearly from the largest size seen
    book.mark_resident("d", "m")
    warm = book.need("d", "", "m", ask)
    assert 0 <= warm.needed_mb <= cold.needed_mb
    assert cold.fits and cold.free_mb is None  # device memory unknown: assumed to fit


def test_residency_expires_and_load_time_is_per_kind():
    now = [0.0]
    book = MemoryBook(clock=lambda: now[0], resident_ttl_s=10.0)
    book.load_time("bert", "L4", 300.0)
    book.load_time("bert", "L4", 500.0)
    book.load_time("bert", "A100", 100.0)
    assert book.need("d", "L4", "bert", 1).load_ms == 400.0
    assert book.need("d", "H100", "bert", 1).load_ms == 300.0  # any kind: (300 + 500 + 100) / 3
    book.mark_resident("d", "bert")
    assert book.need("d", "L4", "bert", 1).load_ms == 0.0
    now[0] = 11.0
    assert not book.is_resident("d", "bert") and book.need("d", "L4", "bert", 1).load_ms == 400.0


# --------------------------------------------------------------------------- over gRPC


@pytest.fixture(scope="module")
def client():
    service = Service(ServiceConfig(snapshot_every_s=0))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    for record in synthetic_records(300, seed=4):
        service.observe(record)
    with InterferenceClient(f"127.0.0.1:{port}") as c:
        c.wait_ready(10)
        yield c
    stop_server(server, service, grace=0.5)


def test_rank_placements_marks_the_device_short_of_memory_infeasible(client):
    # the footprint of bert at 4 is learned from an end report on another device
    client.batch_start("learn", "f1", BATCH, device_kind="SimGPU")
    client.batch_end("learn", "f1", peak_memory_mb=1_200.0)
    # full: 500 MB free; roomy: 14 000 MB free, but busier (a co-runner), so less slack by interference
    client.batch_start("full", "o1", BatchSpec("mlp", 2), device_kind="SimGPU",
                       memory_total_mb=16_000.0, memory_used_mb=15_500.0)
    client.batch_end("full", "o1", memory_used_mb=15_500.0)
    client.batch_start("roomy", "o2", BatchSpec("resnet", 8), device_kind="SimGPU",
                       memory_total_mb=16_000.0, memory_used_mb=2_000.0)
    ranking = client.rank_placements(BATCH, ["full", "roomy"], deadline_ms=1_000.0)
    first, second = ranking.placements
    assert first.device == "roomy" and first.feasible and first.infeasible_reason == ""
    assert second.device == "full" and not second.feasible and second.deciding_term == "memory"
    assert "memory" in second.infeasible_reason and second.memory_needed_mb == 1_200.0
    assert second.memory_free_mb == 500.0 and second.probability == 0.0
    assert second.slack_ms > 0  # it had the time, not the memory
    check = client.check_deadline(Query("full", BATCH, co_runner_source=CoRunnerSource.LIVE_VIEW), deadline_ms=1e3)
    assert not check.feasible


def test_load_time_added_when_the_model_is_not_resident(client):
    client.batch_start("warm", "w1", BATCH, device_kind="SimGPU", load_ms=900.0)
    client.batch_end("warm", "w1")
    client.batch_start("cold", "c1", BatchSpec("mlp", 1), device_kind="SimGPU")
    client.batch_end("cold", "c1")
    ranking = client.rank_placements(BATCH, ["cold", "warm"], deadline_ms=2_000.0)
    by_device = {p.device: p for p in ranking.placements}
    assert by_device["warm"].prediction.load_ms == 0.0
    assert by_device["cold"].prediction.load_ms == 900.0 and by_device["cold"].deciding_term == "load"
    assert ranking.placements[0].device == "warm"
    assert by_device["cold"].slack_ms == pytest.approx(
        2_000.0 - by_device["cold"].prediction.upper_bound_ms - 900.0)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"memory_total_mb": -1.0}, "memory_total_mb"),
    ({"memory_used_mb": float("nan")}, "memory_used_mb"),
    ({"load_ms": float("inf")}, "load_ms"),
    ({"memory_total_mb": 1e12}, "memory_total_mb"),
])
def test_batch_start_memory_validation_names_the_field(client, kwargs, field):
    with pytest.raises(InvalidArgument) as info:
        client.batch_start("bad", "b", BATCH, **kwargs)
    assert info.value.field == field


def test_batch_end_memory_validation_names_the_field(client):
    client.batch_start("bad2", "b", BATCH)
    with pytest.raises(InvalidArgument) as info:
        client.batch_end("bad2", "b", peak_memory_mb=-5.0)
    assert info.value.field == "peak_memory_mb"
    assert client.batch_end("bad2", "b") == (True, 0)  # the rejected report changed nothing


def test_resident_models_reported_replace_what_the_service_knows(client):
    client.batch_start("evict", "e1", BATCH, device_kind="SimGPU", load_ms=700.0)
    client.batch_end("evict", "e1", resident_models=["bert"])
    query = Query("evict", BATCH, co_runner_source=CoRunnerSource.LIVE_VIEW)
    assert client.predict(query).load_ms == 0.0
    client.batch_start("evict", "e2", BatchSpec("mlp", 1), device_kind="SimGPU", resident_models=["mlp"])
    assert client.predict(query).load_ms > 0  # bert was evicted: it must be loaded again
    with pytest.raises(InvalidArgument) as info:
        client.batch_end("evict", "e2", resident_models=["mlp", ""])
    assert info.value.field == "resident_models[1]"
