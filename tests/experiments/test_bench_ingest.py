"""``bench_ingest --stages``: a real service's ingest timed by stage."""

from __future__ import annotations

from experiments.bench.bench_ingest import STAGES, Config, stage_costs
from predictor.service.config import ServiceConfig
from predictor.service.synthetic import synthetic_records


def test_each_stage_of_an_ingest_is_timed_and_scoring_sits_within_learning():
    records = synthetic_records(96, seed=3)
    costs = stage_costs(records, Config(message=32), ServiceConfig(observation_log=False, snapshot_every_s=0))
    assert list(costs) == [name for _, name in STAGES]
    assert all(value > 0 for value in costs.values()), costs
    assert costs["_score"] < costs["_learn_records"]  # inclusive: each record is scored as it is learned
