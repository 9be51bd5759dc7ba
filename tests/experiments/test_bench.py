"""``python -m experiments.bench.bench --quick`` (the data-path benchmark's small run) measures every row
against its floor, every figure finite and positive, and the overload refusals come back as refusals."""

from __future__ import annotations

import json
import math
import os

import pytest

from experiments.bench import bench


@pytest.mark.slow
def test_the_quick_run_measures_every_figure_beside_its_floor(tmp_path):
    out = tmp_path / "rows.json"
    rows = bench.main(["--quick", "--json", str(out)])
    names = [row.name for row in rows]
    for expected in ("replay rls, compiled blocks", "RLS predict+learn, 12 features, compiled block",
                     "PredictLatency p50, 1 sequential client", "through the service's RPC layer",
                     "RankPlacements 1024 candidates (packed form)", "ingest, 256-record messages",
                     "PredictLatency p99 while 1 client ingests", "PredictLatency p99 at a steady",
                     "overload: offered", *(["--handler-cpus"] if len(os.sched_getaffinity(0)) > 1 else [])):
        assert any(expected in name for name in names), (expected, names)
    for row in rows:
        assert math.isfinite(row.value) and row.value > 0, row
        assert math.isfinite(row.floor) and row.floor > 0, row
    overload = next(row for row in rows if row.name.startswith("overload:"))  # the refusals' row
    assert "other errors 0" in overload.target and "refused 0," not in overload.target
    written = json.loads(out.read_text())
    assert [r["name"] for r in written] == names and all(r["ratio"] > 0 for r in written)
