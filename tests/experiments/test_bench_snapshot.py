"""``bench_snapshot`` measures a real fleet's state: its snapshot is taken, written and restarted from."""

from __future__ import annotations

from experiments.bench.bench_snapshot import Config, measure


def test_a_small_fleets_snapshot_is_timed_and_its_size_grows_with_the_models(tmp_path):
    config = Config(records=600, repeats=2)
    small, large = measure(config, 6, tmp_path), measure(config, 30, tmp_path)
    for found in (small, large):
        assert set(found["runs"]) == {"payload", "written", "restart"}
        assert all(len(times) == 2 and all(t > 0 for t in times) for times in found["runs"].values())
    assert (small["kinds"], large["kinds"]) == (1, 3)
    assert large["bytes"] > small["bytes"] > 0  # more models and kinds: more state


def test_with_records_per_model_each_fleet_learns_in_proportion(tmp_path):
    config = Config(records_per_model=50, repeats=1)
    small, large = measure(config, 6, tmp_path), measure(config, 12, tmp_path)
    assert (small["records"], large["records"]) == (300, 600)
    assert measure(Config(records=200, repeats=1), 12, tmp_path)["records"] == 200
