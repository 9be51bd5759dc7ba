"""The ``tree`` learner's hot path and what a background refit costs the answers.

1. **One-row prediction** (what ``PredictLatency`` asks of the predictor), p50 over a pool of
   records of the embedded CPU dataset, after learning ``train`` records: ``tree`` (features,
   trees, corrector) beside ``rls``; and the trees alone evaluated by the numba walk
   (:mod:`predictor.regressors.trees`) against LightGBM's own single-row ``Booster.predict``
   on the same trees (same window, same settings: equal answers, checked).
2. **PredictLatency during a refit**: the real service (``tree``) behind a real gRPC server on
   a free port, warmed up on ``train`` records; one client sends ``calls`` sequential
   ``PredictLatency`` requests per block, alternating blocks with no refit and blocks while a
   refit runs in the background (a new one started whenever the last has finished), ``rounds``
   times; p50 and p99 of each kind, and their ratio.

Run: ``.venv/bin/python -m experiments.bench_tree`` (about a minute); writes
``experiments/results/bench_tree/``.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from experiments.common import DEFAULT_DATASET, finish, start
from predictor.logio import read_records
from predictor.predictors import create
from predictor.regressors.trees import fit_trees


@dataclasses.dataclass(frozen=True)
class Config:
    """What the benchmark runs."""

    train: int = 4000
    pool: int = 300
    repeats: int = 10
    calls: int = 300
    rounds: int = 5
    seed: int = 0


def p50_us(function, items, repeats: int) -> float:
    """Median wall time of ``function(item)`` in µs over ``repeats`` passes over ``items``."""
    times = []
    for _ in range(repeats):
        for item in items:
            t = time.perf_counter_ns()
            function(item)
            times.append(time.perf_counter_ns() - t)
    return float(np.median(times)) / 1e3


def hot_path(config: Config, records) -> dict[str, float]:
    """One-row prediction costs."""
    train, pool = records[: config.train], records[config.train : config.train + config.pool]
    tree = create("tree", seed=config.seed)
    for r in train:
        tree.learn_one(r)
    regressor = tree.regressor
    while regressor.refit_pending:  # let the last refit land, so the trees are the latest
        tree.learn_one(train[-1])
    rls = create("rls", seed=config.seed).fit(train)
    for r in pool[:20]:  # warm caches, compile the walk
        tree.predict_one(r), rls.predict_one(r)
    out = {"tree_predict_one_us": p50_us(tree.predict_one, pool, config.repeats),
           "rls_predict_one_us": p50_us(rls.predict_one, pool, config.repeats),
           "tree_features_us": p50_us(tree.features, pool, config.repeats)}
    names, X, y = regressor.window_rows()
    trees, booster = fit_trees(X, y, names=names, monotone=None, n_estimators=tree.n_estimators,
                               num_leaves=tree.num_leaves, learning_rate=tree.learning_rate,
                               min_child_samples=tree.min_child_samples, seed=config.seed, return_booster=True)
    rows = [X[i].copy() for i in range(0, len(X), max(1, len(X) // config.pool))][: config.pool]
    assert all(trees.predict_vector(x) == booster.predict(x[None, :])[0] for x in rows[:50])
    out["walk_numba_us"] = p50_us(trees.predict_vector, rows, config.repeats)
    out["lightgbm_predict_us"] = p50_us(lambda x: booster.predict(x[None, :], num_threads=1), rows,
                                        max(1, config.repeats // 5))
    out["n_trees"] = trees.n_trees
    out["n_columns"] = len(names)
    return out


def refit_impact(config: Config, records) -> dict[str, float]:
    """PredictLatency p50/p99 with and without a refit running, over real gRPC."""
    from predictor.rpc.client import InterferenceClient
    from predictor.rpc.server import create_server, stop_server
    from predictor.service import Service, ServiceConfig
    from predictor.service.errors import OutlierRejected
    from predictor.service.types import CoRunnerSource, PlannedCoRunner, Query

    service = Service(ServiceConfig(predictor="tree", snapshot_every_s=0))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    for r in records[: config.train]:
        try:
            service.observe(r)
        except OutlierRejected:
            pass
    regressor = service.state.predictor.regressor
    queries = [Query(r.device, r.batch, co_runners=tuple(PlannedCoRunner(c.model, c.batch_size, dict(c.attrs),
                                                                          overlap=c.overlap)
                                                         for c in r.co_runners),
                     co_runner_source=CoRunnerSource.EXPLICIT, signals=dict(r.signals),
                     solo_latency_ms=r.solo_latency_ms)
               for r in records[config.train : config.train + 200]]
    idle: list[float] = []
    busy: list[float] = []
    refit_seconds: list[float] = []
    with InterferenceClient(f"127.0.0.1:{port}") as client:
        client.wait_ready(10)
        for q in queries[:50]:
            client.predict(q)
        for _ in range(config.rounds):
            while regressor.refit_running:
                time.sleep(0.01)
            for i in range(config.calls):
                t = time.perf_counter()
                client.predict(queries[i % len(queries)])
                idle.append(time.perf_counter() - t)
            started = None
            done = 0
            while done < config.calls:
                if not regressor.refit_running:
                    if started is not None:
                        refit_seconds.append(time.perf_counter() - started)
                    with service.state.lock:
                        regressor._pending = None  # a benchmark: discard the last refit's trees, start another
                        regressor.start_refit()
                    started = time.perf_counter()
                t = time.perf_counter()
                client.predict(queries[done % len(queries)])
                elapsed = time.perf_counter() - t
                if regressor.refit_running:
                    busy.append(elapsed)
                done += 1
    stop_server(server, service, grace=0.5)
    ms = 1e3
    out = {"idle_p50_ms": float(np.median(idle)) * ms, "idle_p99_ms": float(np.percentile(idle, 99)) * ms,
           "refit_p50_ms": float(np.median(busy)) * ms, "refit_p99_ms": float(np.percentile(busy, 99)) * ms,
           "calls_idle": len(idle), "calls_during_refit": len(busy),
           "refit_seconds_median": float(np.median(refit_seconds)) if refit_seconds else float("nan")}
    out["p99_ratio"] = out["refit_p99_ms"] / out["idle_p99_ms"]
    out["p50_ratio"] = out["refit_p50_ms"] / out["idle_p50_ms"]
    return out


def main() -> None:
    """Run both parts and print them."""
    config, out = start("bench_tree", Config(), __doc__.splitlines()[0])
    records, _ = read_records(DEFAULT_DATASET)
    results = {"hot_path": hot_path(config, records), "refit": refit_impact(config, records)}
    for part, values in results.items():
        print(part)
        for key, value in values.items():
            print(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")
    finish(out, results)


if __name__ == "__main__":
    main()
