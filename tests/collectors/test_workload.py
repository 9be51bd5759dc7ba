"""The workload's parts: schedules, arrivals, batching, models, profiling, device names."""

from __future__ import annotations

import dataclasses
import json
import statistics
import time

import pytest

from collectors.batching import DynamicBatcher, PoissonArrivals
from collectors.catalog import MODEL_NAMES
from collectors.devices import cpu_model_name, record_device
from collectors.schedule import Phase, constant_schedule, parse_schedule, phase_at, schedule_models
from collectors.workload import CollectionConfig, InFlight, PlannedBatch, run_collection

# ------------------------------------------------------------------ schedules


def test_schedule_text_syntax() -> None:
    phases = parse_schedule("0:resnet,bert@40;60:vgg,gpt2@80", known=MODEL_NAMES)
    assert phases == [Phase(0.0, ("resnet", "bert"), 40.0), Phase(60.0, ("vgg", "gpt2"), 80.0)]
    assert phase_at(phases, 59.9).models == ("resnet", "bert") and phase_at(phases, 60.0).rate == 80.0
    assert schedule_models(phases) == ("resnet", "bert", "vgg", "gpt2")


def test_schedule_defaults_and_kept_values() -> None:
    phases = parse_schedule("0:*;30:@120;45:mlp", default_models=("resnet", "vgg"), default_rate=40.0)
    assert [(p.models, p.rate) for p in phases] == [
        (("resnet", "vgg"), 40.0),
        (("resnet", "vgg"), 120.0),
        (("mlp",), 120.0),
    ]


def test_schedule_json_file(tmp_path) -> None:
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps([{"at": 0, "models": ["resnet"], "rate": 10}, {"at": 5, "rate": 20}]))
    assert parse_schedule(str(path)) == [Phase(0.0, ("resnet",), 10.0), Phase(5.0, ("resnet",), 20.0)]


@pytest.mark.parametrize(
    "text, message",
    [
        ("5:resnet@10", "first phase must start at 0"),
        ("0:resnet@10;0:vgg@5", "must increase"),
        ("0:resnet", "needs a rate"),
        ("0:resnet@-1", ">= 0"),
        ("0:resnet@fast", "numbers expected"),
        ("resnet@10", "START:MODELS@RATE"),
        ("0:resnt@10", "unknown model"),
    ],
)
def test_schedule_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_schedule(text, known=MODEL_NAMES)


# ------------------------------------------------------------ arrivals, batches


def test_poisson_arrivals_have_the_scheduled_rates() -> None:
    phases = [Phase(0.0, ("a", "b"), 200.0), Phase(50.0, ("c",), 50.0)]
    arrivals = PoissonArrivals(phases, seed=1)
    events = arrivals.until(100.0)
    assert [t for t, _ in events] == sorted(t for t, _ in events)
    first = [m for t, m in events if t < 50.0]
    second = [m for t, m in events if t >= 50.0]
    # 100 per second for each of a and b over 50 s: 5000 +- 4 sigma
    for model in ("a", "b"):
        assert abs(first.count(model) - 5000) < 4 * 5000**0.5
    assert set(second) == {"c"} and abs(len(second) - 2500) < 4 * 2500**0.5
    gaps = [b - a for (a, m1), (b, m2) in zip(events, events[1:], strict=False) if a >= 50.0]
    assert statistics.mean(gaps) == pytest.approx(1 / 50.0, rel=0.1)  # exponential gaps, mean 1/rate


def test_arrivals_are_deterministic_per_seed() -> None:
    schedule = constant_schedule(["a", "b"], 30.0)
    assert PoissonArrivals(schedule, seed=3).until(10.0) == PoissonArrivals(schedule, seed=3).until(10.0)
    assert PoissonArrivals(schedule, seed=3).until(10.0) != PoissonArrivals(schedule, seed=4).until(10.0)


def test_batcher_closes_on_size_and_on_timeout() -> None:
    batcher = DynamicBatcher(max_batch=3, timeout_s=0.02)
    for t in (0.0, 0.001, 0.002, 0.003):
        batcher.add("a", t)
    batcher.add("b", 0.005)
    (full,) = batcher.ready(0.003)
    assert (full.model, full.batch_size, full.first_arrival) == ("a", 3, 0.0)
    assert batcher.next_deadline() == pytest.approx(0.023)
    assert batcher.ready(0.01) == []
    late = batcher.ready(0.03)
    assert [(b.model, b.batch_size) for b in late] == [("a", 1), ("b", 1)]
    assert batcher.queued() == 0 and batcher.next_deadline() == float("inf")


def test_batcher_bounds_its_queues() -> None:
    batcher = DynamicBatcher(max_batch=2, timeout_s=1.0, max_queue=4)
    for i in range(10):
        batcher.add("a", i * 1e-3)
    assert batcher.queued() == 4 and batcher.dropped == 6
    assert batcher.clear() == 4


# --------------------------------------------------------------------- models


def test_every_model_runs_in_milliseconds_on_one_thread() -> None:
    torch = pytest.importorskip("torch")
    from collectors.models import build, example_input, model_names  # needs torch: after importorskip

    assert model_names() == MODEL_NAMES
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            for name in model_names():
                model, x = build(name, 1)
                x8 = example_input(name, 8)
                assert model(x).shape[0] == 1 and model(x8).shape[0] == 8
                times = []
                for _ in range(3):
                    # the CPU time of this (the only torch) thread: the model's size in work, whatever
                    # else the machine runs (wall-clock time stretches with the load of other processes)
                    t0 = time.thread_time()
                    model(x8)
                    times.append((time.thread_time() - t0) * 1e3)
                assert 0.2 < min(times) < 100.0, (name, times)  # ~1-30 ms of CPU
    finally:
        torch.set_num_threads(threads)


def test_models_are_deterministic_and_unknown_names_rejected() -> None:
    torch = pytest.importorskip("torch")
    from collectors.models import build  # needs torch: after importorskip

    (m1, x1), (m2, x2) = build("bert", 2), build("bert", 2)
    with torch.inference_mode():
        assert torch.equal(m1(x1), m2(x2))
    with pytest.raises(ValueError, match="unknown model"):
        build("alexnet")


def test_profile_counts_work_and_bytes() -> None:
    torch = pytest.importorskip("torch")
    from collectors.models import build  # needs torch: after importorskip
    from collectors.profiling import count_gflops, count_mbytes  # needs torch: after importorskip

    model, x = build("mlp", 4)
    linear_macs = sum(
        m.in_features * m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear)
    )
    assert count_gflops(model, x) == pytest.approx(2 * 4 * linear_macs / 1e9, rel=1e-6)
    param_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 1e6
    assert param_mb < count_mbytes(model, x) < 1.2 * param_mb  # weights dominate a small MLP batch


def test_warm_up_runs_every_shape_a_worker_may_be_asked_for() -> None:
    pytest.importorskip("torch")
    from collectors.models import build, example_input  # needs torch: after importorskip
    from collectors.profiling import warm_up  # needs torch: after importorskip

    models = {name: build(name, 1)[0] for name in ("mlp", "mobilenet")}
    inputs = {(name, bs): example_input(name, bs) for name in models for bs in range(1, 4)}
    ran: list[tuple[str, int]] = []
    for name, model in models.items():
        model.register_forward_hook(lambda module, args, out, name=name: ran.append((name, args[0].shape[0])))
    warm_up(models, inputs, runs=2)
    assert sorted(ran) == sorted(key for key in inputs for _ in range(2))


# -------------------------------------------------------------------- devices


def test_device_names(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Intel(R)  Xeon(R) Gold 6330\n")
    assert cpu_model_name(info) == "Intel(R) Xeon(R) Gold 6330"
    assert cpu_model_name(tmp_path / "missing")
    assert record_device("cpu", 1) == "cpu0" and record_device("cuda:2", 0) == "gpu2"


# ------------------------------------------------------------------ what an admission callback sees


def test_a_batch_runs_beside_the_last_workers_minus_one_in_flight() -> None:
    running = [InFlight("mlp", 1, {}, 3.0), InFlight("vgg", 2, {}, 0.0), InFlight("bert", 4, {})]
    planned = PlannedBatch("mlp", 2, {}, 5.0, "cpu0", "cpu", tuple(running), workers=2)
    assert planned.beside == (running[-1],)  # queued behind the others: beside the last one dispatched
    assert dataclasses.replace(planned, workers=3).beside == tuple(running[1:])
    assert dataclasses.replace(planned, workers=5).beside == tuple(running)  # fewer in flight than workers
    assert dataclasses.replace(planned, workers=1).beside == ()
    assert dataclasses.replace(planned, in_flight=()).beside == ()


def test_the_admission_callback_sees_the_jobs_in_flight_with_their_time_left() -> None:
    seen: list[PlannedBatch] = []

    def admit(planned: PlannedBatch) -> bool:
        seen.append(planned)
        return True

    config = CollectionConfig(duration_s=3.0, phases=constant_schedule(("mlp", "mobilenet"), 200.0), max_batch=2,
                              profile_repeats=2, device="cpu", workers=2)
    result = run_collection(config, lambda record: None, admit=admit)
    assert len(seen) == result.batches > 20
    flights = [job for planned in seen for job in planned.in_flight]
    assert flights and all(p.workers == 2 and len(p.in_flight) < 4 for p in seen)  # at most 2 per worker
    assert {job.model for job in flights} <= {"mlp", "mobilenet"}
    times = [job.remaining_ms for job in flights if job.remaining_ms is not None]
    assert times, "some jobs were running when a batch was planned"
    solo = max(figures["solo_ms"] for figures in result.profile.values())
    assert all(0.0 <= ms <= solo for ms in times)  # the solo latency less the time run, at least 0
