"""The /proc CPU sampler and the sampler thread, for real."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time

import pytest

from collectors.cpu_sampler import CpuSampler
from collectors.sampler import Sampler


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_samples_on_a_drift_free_grid_with_finite_signals() -> None:
    sampler = CpuSampler(hz=50).start()
    time.sleep(1.0)
    sampler.stop()
    samples = sampler.buffer.samples()
    assert 40 <= len(samples) <= 52
    ends = [end for _, end, _ in samples]
    period = 1.0 / 50
    # drift-free: tick k lies near first + k * period, whatever the sleep jitter
    grid = [round((t - ends[0]) / period) for t in ends]
    assert max(abs((t - ends[0]) - k * period) for t, k in zip(ends, grid, strict=True)) < 0.015
    assert len(set(grid)) == len(grid)
    for _, _, signals in samples:
        assert all(isinstance(v, float) and math.isfinite(v) for v in signals.values())
        assert 0.0 <= signals["cpu_util"] <= 1.0
        assert signals["run_queue"] >= 0.0
    assert sampler.errors == 0
    assert {"cpu_util", "cpu0_util", "run_queue", "ctxt_kps"} <= set(samples[-1][2])


def test_busy_core_raises_utilisation_in_its_window() -> None:
    sampler = CpuSampler(hz=50).start()
    time.sleep(0.3)
    quiet0 = time.monotonic()
    time.sleep(0.4)
    quiet1 = busy0 = time.monotonic()
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_spin, args=(0.6,)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    busy1 = time.monotonic()
    time.sleep(0.1)
    sampler.stop()
    quiet = sampler.window("cpu0", quiet0, quiet1)
    busy = sampler.window("cpu0", busy0, busy1)
    assert busy["cpu_util"] > 0.6
    # The busy window reads 0.2 above the quiet one measured just before, or saturated when other
    # work on a shared machine left the quiet window less than that headroom.
    assert busy["cpu_util"] > min(quiet["cpu_util"] + 0.2, 0.95)
    assert busy["run_queue"] >= 1.0


def test_ring_buffer_keeps_the_last_seconds_only() -> None:
    sampler = CpuSampler(hz=200, seconds=0.1)
    assert sampler.buffer.capacity == 20
    for _ in range(50):
        sampler.sample_once()
    assert len(sampler.buffer) == 20


def test_missing_proc_files_leave_signals_out(tmp_path) -> None:
    (tmp_path / "stat").write_text(
        "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 10 0 10 80 0 0 0 0 0 0\nprocs_running 3\n"
    )
    sampler = CpuSampler(proc=tmp_path)
    first = sampler.read()
    assert first == {"run_queue": 2.0, "procs_blocked": 0.0}
    (tmp_path / "stat").write_text(
        "cpu  20 0 20 160 0 0 0 0 0 0\ncpu0 20 0 20 160 0 0 0 0 0 0\nprocs_running 1\n"
    )
    sampler.close()  # reopen: the test rewrote the file
    time.sleep(0.01)
    second = sampler.read()
    assert second["cpu_util"] == pytest.approx(0.2) and second["cpu0_util"] == pytest.approx(0.2)
    assert "pgfault_kps" not in second and "cpu_pressure" not in second


class _Failing(Sampler):
    def read(self) -> dict[str, float]:
        raise OSError("device gone")


def test_a_failing_read_never_kills_the_thread() -> None:
    sampler = _Failing(hz=100).start()
    time.sleep(0.1)
    assert sampler._thread is not None and sampler._thread.is_alive()
    sampler.stop()
    assert sampler.errors >= 5 and len(sampler.buffer) == 0


def test_invalid_rates_are_rejected() -> None:
    with pytest.raises(ValueError):
        CpuSampler(hz=0)
    with pytest.raises(ValueError):
        CpuSampler(hz=math.nan)


def _write_proc(root, busy: int, total: int, own: dict[int, int]) -> None:
    idle = total - busy
    per = f"{busy // 2} 0 0 {idle // 2} 0 0 0 0 0 0"
    (root / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 {per}\ncpu1 {per}\nprocs_running 1\n")
    for pid, jiffies in own.items():
        (root / str(pid)).mkdir(exist_ok=True)
        # utime and stime are the 14th and 15th fields; a name with spaces and parentheses must not shift them
        (root / str(pid) / "stat").write_text(
            f"{pid} (a (b) c) S 1 1 1 0 -1 0 0 0 0 0 {jiffies - 3} 3 0 0 20 0 1 0 0 0 0\n")


def _read_fresh(sampler: CpuSampler) -> dict[str, float]:
    sampler.close()  # reopen: the test rewrote the files
    time.sleep(0.002)
    return sampler.read()


def test_other_cpu_is_busy_time_not_owned_by_the_workload(tmp_path) -> None:
    pids = [11, 12]
    sampler = CpuSampler(proc=tmp_path, own_pids=lambda: pids, foreign_span_s=0.0)
    _write_proc(tmp_path, busy=100, total=400, own={11: 50, 12: 10})
    assert "other_cpu" not in sampler.read()
    _write_proc(tmp_path, busy=200, total=600, own={11: 90, 12: 30})
    assert "other_cpu" not in _read_fresh(sampler)  # the span needs two reads with rates
    # 200 jiffies of 2 cores: 100 busy, of which the workload's 60: 40 foreign = 0.4 of a core
    _write_proc(tmp_path, busy=300, total=800, own={11: 130, 12: 50})
    assert _read_fresh(sampler)["other_cpu"] == pytest.approx(0.4)
    # worker 12 exits: only the process present at both ends counts, nothing jumps
    pids.remove(12)
    _write_proc(tmp_path, busy=400, total=1000, own={11: 230})
    assert _read_fresh(sampler)["other_cpu"] == pytest.approx(0.0)
    # all busy time foreign: one full core of two
    _write_proc(tmp_path, busy=500, total=1200, own={11: 230})
    assert _read_fresh(sampler)["other_cpu"] == pytest.approx(1.0)


def test_without_own_pids_no_foreign_load_is_guessed(tmp_path) -> None:
    sampler = CpuSampler(proc=tmp_path)
    for busy, total in ((100, 400), (200, 600), (300, 800)):
        _write_proc(tmp_path, busy, total, {})
        assert "other_cpu" not in _read_fresh(sampler)
    with pytest.raises(ValueError, match="foreign_span_s"):
        CpuSampler(foreign_span_s=-1.0)


def test_a_spinning_own_process_is_not_foreign_load() -> None:
    # Two samplers read the same machine at once; one owns a spinning child, the other owns nothing:
    # what other work the shared machine does shows in both, the child only in the second.
    ctx = mp.get_context("fork")
    child = ctx.Process(target=_spin, args=(2.5,))
    child.start()
    try:
        owner = CpuSampler(hz=50, own_pids=lambda: [child.pid]).start()
        stranger = CpuSampler(hz=50, own_pids=lambda: []).start()
        time.sleep(0.3)
        t0, child0 = time.monotonic(), _jiffies(child.pid)
        time.sleep(1.8)
        t1, child1 = time.monotonic(), _jiffies(child.pid)
        owner.stop()
        stranger.stop()
    finally:
        child.join()
    seen_by_owner = owner.window("cpu0", t0, t1)["other_cpu"]
    seen_by_stranger = stranger.window("cpu0", t0, t1)["other_cpu"]
    # the difference is the child's share of a core: all of one on an idle machine, what the
    # scheduler gave it on a shared one (a few hundredths of a core at a load average of 12)
    child_cores = (child1 - child0) / os.sysconf("SC_CLK_TCK") / (t1 - t0)
    assert child_cores > 0.0
    assert seen_by_stranger - seen_by_owner == pytest.approx(child_cores, abs=0.3)
    assert seen_by_owner >= 0.0


def _jiffies(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])
