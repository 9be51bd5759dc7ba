"""The sampler ring buffer: time-weighted window averages against a brute-force reference."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.buffer import SignalBuffer

# Contiguous unit intervals [k, k+1) on an integer grid; values per interval; an optional missing key.
samples_strategy = st.lists(
    st.tuples(st.floats(0.0, 100.0), st.booleans()),
    min_size=1,
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(samples=samples_strategy, a=st.integers(0, 300), b=st.integers(1, 300))
def test_window_average_matches_brute_force(samples, a, b) -> None:
    """Average over [t0, t1] equals the mean over exact sub-cells of the piecewise-constant signal."""
    buf = SignalBuffer(capacity=100)
    for k, (value, has_power) in enumerate(samples):
        signals = {"util": value}
        if has_power:
            signals["power"] = 2 * value
        buf.add(float(k), float(k + 1), signals)
    t0, t1 = a / 10.0, (a + b) / 10.0
    util, power = [], []
    for cell in range(a, a + b):  # the window in exact 0.1-wide cells, each inside one sample
        k = cell // 10
        if k < len(samples):
            util.append(samples[k][0])
            if samples[k][1]:
                power.append(2 * samples[k][0])
    got = buf.average(t0, t1)
    if not util:
        assert got == {}
        return
    assert got["util"] == pytest.approx(sum(util) / len(util), rel=1e-9, abs=1e-9)
    if power:
        assert got["power"] == pytest.approx(sum(power) / len(power), rel=1e-9, abs=1e-9)
    else:
        assert "power" not in got  # missing, never 0


def test_point_window_takes_the_containing_sample() -> None:
    buf = SignalBuffer()
    buf.add(0.0, 1.0, {"x": 1.0})
    buf.add(1.0, 2.0, {"x": 3.0})
    assert buf.average(1.5, 1.5) == {"x": 3.0}
    assert buf.average(5.0, 5.0) == {}


def test_capacity_bounds_memory_and_non_finite_values_are_dropped() -> None:
    buf = SignalBuffer(capacity=5)
    for k in range(50):
        buf.add(float(k), float(k + 1), {"x": float(k), "y": math.inf})
    assert len(buf) == 5
    assert buf.samples()[0][0] == 45.0
    assert buf.average(0.0, 100.0) == {"x": 47.0}
    assert buf.latest_time() == 50.0


def test_bad_windows_are_rejected() -> None:
    buf = SignalBuffer()
    with pytest.raises(ValueError):
        buf.add(2.0, 1.0, {})
    with pytest.raises(ValueError):
        buf.average(2.0, 1.0)
    with pytest.raises(ValueError):
        SignalBuffer(capacity=0)
