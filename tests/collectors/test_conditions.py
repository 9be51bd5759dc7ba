"""Recording conditions: real /proc figures, and the share of CPU used by this process vs others."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from collectors.conditions import ConditionsMonitor, busy_cpu_seconds
from predictor.cli.collect import metadata_path


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_own_cpu_use_is_counted_as_own_not_other() -> None:
    monitor = ConditionsMonitor(interval_s=0.05).start()
    _spin(0.6)
    conditions = monitor.stop()
    assert conditions.wall_s >= 0.6
    assert 0.05 <= conditions.own_cores <= 1.1  # one spinning thread (its share shrinks on a busy machine)
    assert conditions.busy_cores >= conditions.own_cores - 0.15  # the machine saw at least that
    assert conditions.other_cores == max(conditions.busy_cores - conditions.own_cores, 0.0)
    during = conditions.loadavg_during
    assert during["min"] <= during["mean"] <= during["max"]
    assert set(conditions.as_dict()) >= {"loadavg_before", "other_cores", "busy_cores"}


def test_busy_cpu_seconds_reads_proc_stat(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("cpu  100 0 50 1000 10 0 0 0 0 0\ncpu0 1 2 3 4\n")
    assert busy_cpu_seconds(tmp_path) == pytest.approx(150 / os.sysconf("SC_CLK_TCK"))
    assert busy_cpu_seconds() > 0


def test_metadata_path_sits_beside_the_log() -> None:
    assert metadata_path("data/run.jsonl.gz") == Path("data/run.meta.json")
    assert metadata_path("run.jsonl") == Path("run.meta.json")
