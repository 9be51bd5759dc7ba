"""Batch timers, for real: the CPU clock here, CUDA events where a GPU exists."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from collectors.timers import CpuTimer, make_timer


def test_cpu_timer_measures_a_known_wait() -> None:
    timer = CpuTimer()
    span = timer.begin()
    assert not span.ready()
    time.sleep(0.02)
    timer.end(span)
    assert span.ready()
    assert 19.0 <= span.elapsed_ms() < 200.0
    assert span.end_s() == pytest.approx(span.start_s + span.elapsed_ms() / 1e3)


def test_unended_span_refuses_to_answer() -> None:
    with pytest.raises(RuntimeError):
        CpuTimer().begin().elapsed_ms()


def test_timer_choice_falls_back_to_the_cpu_clock() -> None:
    assert make_timer("cpu").kind == "cpu"
    torch = pytest.importorskip("torch")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert make_timer("cuda").kind == expected


def test_span_timestamps_are_comparable_across_processes() -> None:
    """Workers are separate processes: their ``time.monotonic`` must be the parent's clock."""
    before = time.monotonic()
    child = subprocess.run(
        [sys.executable, "-c", "import time; print(repr(time.monotonic()))"],
        capture_output=True,
        text=True,
        check=True,
    )
    after = time.monotonic()
    assert before <= float(child.stdout) <= after


@pytest.mark.gpu
def test_cuda_event_timer_resolves_off_the_hot_path() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    timer = make_timer("cuda")
    assert timer.kind == "cuda"
    x = torch.randn(4096, 4096, device="cuda")
    span = timer.begin()
    for _ in range(20):
        x = x @ x / 4096.0
    timer.end(span)  # no synchronisation here
    ms = span.elapsed_ms()  # synchronises on the end event only
    assert span.ready() and ms > 0.0
    assert span.end_s() >= span.start_s
