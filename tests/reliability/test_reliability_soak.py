"""A short soak (10 s, ten clients, mixed traffic, a real server process): no errors, memory holds.

The full minute is ``python -m experiments.studies.soak`` (results under ``experiments/results/soak/``).
"""

from __future__ import annotations

import pytest

from experiments.studies.soak import SoakConfig, run_soak


@pytest.mark.slow
def test_ten_clients_for_ten_seconds(tmp_path):
    results = run_soak(SoakConfig(duration_s=10.0, clients=10, snapshot_every_s=2.0), tmp_path)
    assert results["errors"] == 0, results["error_samples"]  # shed calls (overloaded) are retried, not errors
    assert results["clients"] == 10 and results["calls"] > 200
    assert set(results["latency_by_rpc"]) == {"predict", "deadline", "rank", "observe", "start_end"}
    assert results["latency_all"]["p99_ms"] < 2000
    memory = results["rss_mb"]
    assert memory["end"] - memory["start"] < 40, memory  # no leak worth the name in 10 s
    server = results["server"]
    assert server["observations_learned"] == results["observations_acknowledged"] + 500  # + the warm-up
    assert server["log_snapshot_sequence"] > 0 and server["exit_code"] == 0
