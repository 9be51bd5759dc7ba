"""``predictor demo --short``: the service, the real CPU workload and the sample scheduler, end to end."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from predictor.records.logio import write_records
from predictor.service.synthetic import synthetic_records

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("collectors.workload") is None,
    reason="the CPU workload needs torch and collectors.workload",
)


def test_short_demo_runs_end_to_end(tmp_path):
    log = tmp_path / "warm.jsonl"
    write_records(log, synthetic_records(200, seed=4))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "predictor.cli",
            "demo",
            "--short",
            "--duration",
            "3",
            "--no-live",
            "--warm-start",
            str(log),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "200"},
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "warm start from" in out and "200 records read" in out
    assert "health SERVING" in out and "demo summary" in out and "service stopped" in out
    decided = int(re.search(r"batches decided before dispatch\s*│\s*(\d+)", out).group(1))
    assert decided > 20
    # Issue 12: a share of the refused batches is explored (admitted anyway), reported apart.
    dispatched, explored, refused = map(
        int, re.search(r"dispatched / explored / refused\s*│\s*(\d+) / (\d+) / (\d+)", out).groups()
    )
    assert dispatched + explored + refused == decided
    ran = int(re.search(r"admitted batches that ran\s*│\s*(\d+)", out).group(1))
    accepted = re.search(r"observations accepted / rejected\s*│\s*(\d+) / (\d+)", out)
    assert int(accepted.group(2)) == 0 and ran <= int(accepted.group(1)) <= dispatched + explored
    assert "deadlines met among dispatched" in out
    assert "admission rate" in out and "exploration share" in out and "admission-time coverage" in out
