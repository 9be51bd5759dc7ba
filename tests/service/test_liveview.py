"""The live view: remaining times, overruns, expiry, limits."""

from __future__ import annotations

import pytest
from manual_clock import ManualClock

from predictor.records.record import BatchSpec
from predictor.service import InvalidArgument, NotFound, ResourceExhausted
from predictor.service.live.liveview import LiveView


@pytest.fixture
def clock():
    return ManualClock()


def test_remaining_time_counts_down_to_an_overrun_floor(clock):
    view = LiveView(clock, overrun_fraction=0.1)
    view.start("gpu0", "L4", "a", BatchSpec("bert", 2), predicted_ms=40.0)
    clock.now = 0.010
    ((batch, remaining),) = view.running("gpu0")
    assert batch.batch_id == "a" and remaining == pytest.approx(30.0)
    clock.now = 0.100  # past its prediction
    assert view.running("gpu0")[0][1] == pytest.approx(4.0)


def test_elapsed_at_start_is_honoured(clock):
    view = LiveView(clock)
    view.start("gpu0", "", "a", BatchSpec("bert", 2), predicted_ms=40.0, elapsed_ms=15.0)
    assert view.running("gpu0")[0][1] == pytest.approx(25.0)


def test_kinds_and_known_devices(clock):
    view = LiveView(clock)
    assert not view.knows("gpu0") and view.kind_of("gpu0") == ""
    view.touch("gpu0", "L4")
    view.touch("gpu0")  # no kind: keeps the known one
    assert view.knows("gpu0") and view.kind_of("gpu0") == "L4"
    assert view.devices() == {"gpu0": "L4"}


def test_stale_batches_expire(clock):
    view = LiveView(clock, stale_after_s=5.0)
    view.start("gpu0", "", "a", BatchSpec("m", 1), predicted_ms=1.0)
    clock.now = 4.0
    view.start("gpu0", "", "b", BatchSpec("m", 1), predicted_ms=1.0)
    clock.now = 6.0
    assert [b.batch_id for b, _ in view.running("gpu0")] == ["b"]
    assert view.n_expired == 1 and view.running_count() == 1


def test_end(clock):
    view = LiveView(clock)
    view.start("gpu0", "", "a", BatchSpec("m", 1), predicted_ms=1.0)
    view.start("gpu0", "", "b", BatchSpec("m", 1), predicted_ms=1.0)
    assert view.end("gpu0", "a") == (True, 1)
    assert view.end("gpu0", "zzz") == (False, 1)
    with pytest.raises(NotFound):
        view.end("gpu9", "a")
    assert view.end("gpu9", "a", required=False) == (False, 0)


def test_limits(clock):
    view = LiveView(clock, max_devices=2, max_running_per_device=2)
    view.start("d1", "", "a", BatchSpec("m", 1), 1.0)
    view.start("d1", "", "b", BatchSpec("m", 1), 1.0)
    view.start("d1", "", "b", BatchSpec("m", 1), 1.0)  # a restart of the same id is fine
    with pytest.raises(ResourceExhausted):
        view.start("d1", "", "c", BatchSpec("m", 1), 1.0)
    view.touch("d2")
    with pytest.raises(ResourceExhausted):
        view.touch("d3")
    with pytest.raises(InvalidArgument):
        view.start("d1", "", "", BatchSpec("m", 1), 1.0)
