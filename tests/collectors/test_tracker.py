"""The co-location tracker: overlap against a brute-force reference, emission, bounded memory."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.tracker import Tracker, overlap_fraction
from predictor.records.record import Record, parse_record, record_to_dict

# A batch: (device, start, duration) on an integer time grid.
batches_strategy = st.lists(
    st.tuples(st.sampled_from(["d0", "d1"]), st.integers(0, 40), st.integers(1, 15)),
    min_size=1,
    max_size=12,
)


def brute_force(batches: list[tuple[str, int, int]]) -> dict[str, dict[str, float]]:
    """Overlaps by counting unit time cells both batches occupy."""
    out: dict[str, dict[str, float]] = {}
    for i, (dev, start, dur) in enumerate(batches):
        mine = set(range(start, start + dur))
        found: dict[str, float] = {}
        for j, (dev2, start2, dur2) in enumerate(batches):
            if i == j or dev2 != dev:
                continue
            shared = len(mine & set(range(start2, start2 + dur2)))
            if shared:
                found[f"m{j}"] = shared / dur
        out[f"m{i}"] = found
    return out


def observed(records: list[Record]) -> dict[str, dict[str, float]]:
    return {r.batch.model: {c.model: c.overlap for c in r.co_runners} for r in records}


def assert_same(got: dict[str, dict[str, float]], want: dict[str, dict[str, float]]) -> None:
    assert set(got) == set(want)
    for model, runners in want.items():
        assert set(got[model]) == set(runners), model
        for name, share in runners.items():
            assert got[model][name] == pytest.approx(share, abs=1e-9), (model, name)


@settings(max_examples=200, deadline=None)
@given(batches=batches_strategy, order=st.randoms(use_true_random=False))
def test_overlap_matches_brute_force_for_any_delivery_order(batches, order) -> None:
    """Reports arriving in any order (each begin before its end) give the reference overlaps."""
    events = [("begin", i) for i in range(len(batches))] + [("end", i) for i in range(len(batches))]
    order.shuffle(events)
    seen: set[int] = set()
    fixed = []
    for _kind, i in events:  # an end delivered before its begin swaps roles with it
        fixed.append(("begin" if i not in seen else "end", i))
        seen.add(i)
    records: list[Record] = []
    tracker = Tracker(records.append, lag_s=0.0, history_s=1e9)
    for kind, i in fixed:
        dev, start, dur = batches[i]
        if kind == "begin":
            tracker.begin(i, dev, f"m{i}", 1, float(start))
        else:
            tracker.end(i, float(start + dur))
    tracker.flush()
    assert len(records) == len(batches)
    assert_same(observed(records), brute_force(batches))


@settings(max_examples=200, deadline=None)
@given(batches=batches_strategy, ties=st.randoms(use_true_random=False))
def test_overlap_matches_brute_force_when_streaming_with_pruning(batches, ties) -> None:
    """Time-ordered reports, emission at each batch's end (co-runners still running), aggressive pruning."""
    events = []
    for i, (_, start, dur) in enumerate(batches):
        events.append((start, ties.random(), "begin", i))
        events.append((start + dur, ties.random(), "end", i))
    events.sort()
    records: list[Record] = []
    tracker = Tracker(records.append, lag_s=0.0, history_s=0.0)
    for t, _, kind, i in events:
        dev, start, _dur = batches[i]
        if kind == "begin":
            tracker.begin(i, dev, f"m{i}", 1, float(start))
        else:
            tracker.end(i, float(t))
        tracker.poll(now=float(t))
    tracker.flush()
    assert_same(observed(records), brute_force(batches))


@given(
    a=st.floats(-1e6, 1e6),
    w=st.floats(1e-6, 1e6),
    b=st.floats(-1e6, 1e6),
    v=st.floats(0, 1e6),
)
def test_overlap_fraction_is_a_fraction(a, w, b, v) -> None:
    assert 0.0 <= overlap_fraction(a, a + w, b, b + v) <= 1.0


def test_records_are_valid_coloc_v1_with_signals_and_solo() -> None:
    windows = []

    def signals(device: str, t0: float, t1: float) -> dict[str, float]:
        windows.append((device, t0, t1))
        return {"cpu_util": 0.5, "bad": math.nan}

    out: list[Record] = []
    tracker = Tracker(out.append, signals=signals, source="cpu", lag_s=0.0)
    tracker.begin(
        "a", "cpu0", "resnet", 4, 1.0, attrs={"gflops": 0.4}, solo_latency_ms=5.0, device_kind="Xeon"
    )
    tracker.begin("b", "cpu0", "mlp", 2, 1.004, attrs={"mbytes": 126.0})
    tracker.end("a", 1.010, start_s=1.002, latency_ms=8.0)
    assert tracker.poll(now=1.010) == 1
    record = out[0]
    assert parse_record(record_to_dict(record)) == record
    assert record.latency_ms == 8.0 and record.slowdown == pytest.approx(1.6)
    assert record.start_s == 1.002 and record.device_kind == "Xeon" and record.source == "cpu"
    assert record.signals == {"cpu_util": 0.5}
    assert windows == [("cpu0", 1.002, 1.010)]
    (runner,) = record.co_runners
    assert (runner.model, runner.batch_size, dict(runner.attrs)) == ("mlp", 2, {"mbytes": 126.0})
    assert runner.overlap == pytest.approx(0.75)


def test_emission_waits_for_the_lag() -> None:
    out: list[Record] = []
    tracker = Tracker(out.append, lag_s=0.1)
    tracker.begin(1, "cpu0", "vgg", 1, 0.0)
    tracker.end(1, 0.01)
    assert tracker.poll(now=0.05) == 0 and tracker.pending == 1
    assert tracker.poll(now=0.11) == 1 and tracker.pending == 0


def test_other_devices_do_not_co_run() -> None:
    out: list[Record] = []
    tracker = Tracker(out.append, lag_s=0.0)
    tracker.begin(1, "gpu0", "vgg", 1, 0.0)
    tracker.begin(2, "gpu1", "bert", 1, 0.0)
    tracker.end(1, 1.0)
    tracker.end(2, 1.0)
    tracker.flush()
    assert [r.co_runners for r in out] == [(), ()]


def test_unknown_ends_zero_length_and_stale_batches_are_counted() -> None:
    out: list[Record] = []
    tracker = Tracker(out.append, lag_s=0.0, stale_s=10.0)
    tracker.end("ghost", 1.0)
    assert tracker.unknown_ends == 1
    tracker.begin("z", "cpu0", "mlp", 1, 2.0)
    tracker.end("z", 2.0)  # zero duration, no timer latency: not a valid record
    tracker.begin("lost", "cpu0", "mlp", 1, 2.0)
    tracker.poll(now=100.0)
    assert tracker.invalid == 1 and tracker.stale_dropped == 1 and tracker.running == 0 and out == []


def test_memory_stays_bounded_over_a_long_stream() -> None:
    out: list[Record] = []
    tracker = Tracker(out.append, lag_s=0.05, history_s=0.5)
    t = 0.0
    for i in range(20_000):
        tracker.begin(i, "cpu0", "resnet", 1, t)
        tracker.begin(-i - 1, "cpu0", "bert", 1, t + 0.001)
        tracker.end(i, t + 0.004)
        tracker.end(-i - 1, t + 0.006)
        t += 0.01
        tracker.poll(now=t)
        assert tracker.history_size() < 200 and tracker.pending < 20
    tracker.flush()
    assert len(out) == 40_000
    assert all(r.co_runners for r in out)
