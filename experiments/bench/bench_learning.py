"""In-process learning throughput: our RLS against river's peers on one feature stream.

Feeds the same stream of feature dicts (the ``interactions`` features of a
real log, target ``log(slowdown)``) to:

* ``RLS`` (ours), forgetting 1 with raw features (the configuration that
  solves the same ridge problem as the peer) and forgetting 0.998 with its
  default per-column scaling;
* river ``BayesianLinearRegression`` (alpha, beta), the closest RLS-like peer;
* river ``StandardScaler | LinearRegression`` (SGD).

Each does ``predict_one`` then ``learn_one`` per observation. Reports
observations per second, the ratio to ``BayesianLinearRegression`` measured
in the same run, and the agreement of predictions between RLS with
forgetting 1 and delta = beta / alpha and BayesianLinearRegression given the
same features plus a constant ``intercept`` feature (the two then solve the
same ridge problem). Also reports record-level throughput of every
registered predictor (features included).

Run: ``.venv/bin/python -m experiments.bench.bench_learning``
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from river import linear_model, optim, preprocessing

from experiments.common import DEFAULT_DATASET, finish, start
from predictor.features.extract import interaction_features
from predictor.predictors import available, create
from predictor.records.logio import read_records
from predictor.regressors.least_squares import RLS


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    log: str = str(DEFAULT_DATASET)
    max_records: int = 3000
    repeats: int = 3
    alpha: float = 1.0
    beta: float = 10.0
    seed: int = 0


def timed_stream(model, stream: list[tuple[dict, float]]) -> tuple[float, np.ndarray]:
    """Seconds for predict_one + learn_one over the stream, and the predictions."""
    predictions = np.empty(len(stream))
    begin = time.perf_counter()
    for i, (x, y) in enumerate(stream):
        predictions[i] = model.predict_one(x)
        model.learn_one(x, y)
    return time.perf_counter() - begin, predictions


def best_of(factory, stream, repeats: int) -> tuple[float, np.ndarray]:
    """Seconds of the fastest of ``repeats`` runs of fresh ``factory()`` models, and the first run's predictions."""
    runs = [timed_stream(factory(), stream) for _ in range(repeats)]
    return min(r[0] for r in runs), runs[0][1]


def main() -> None:
    """Time every regressor and registered predictor on the log's stream; print and write the results."""
    config, out = start("bench_learning", Config(), __doc__.splitlines()[0])
    records, _ = read_records(config.log)
    records = records[: config.max_records]
    stream = [(interaction_features(r), math.log(r.latency_ms / (r.solo_latency_ms or r.latency_ms)))
              for r in records]
    with_intercept = [({**x, "intercept": 1.0}, y) for x, y in stream]
    delta = config.beta / config.alpha
    peers = {
        "rls (forgetting 1)": (
            lambda: RLS(forgetting=1.0, delta=delta, max_trace=1e300, scale_features=False), stream),
        "rls (forgetting 0.998)": (lambda: RLS(forgetting=0.998, delta=delta), stream),
        "river BayesianLinearRegression": (
            lambda: linear_model.BayesianLinearRegression(alpha=config.alpha, beta=config.beta), with_intercept),
        "river LinearRegression (SGD)": (
            lambda: preprocessing.StandardScaler() | linear_model.LinearRegression(optimizer=optim.SGD(0.01)),
            stream),
    }
    results: dict = {"n": len(stream), "n_features": len(stream[0][0]) if stream else 0, "regressors": {}}
    predictions = {}
    for name, (factory, data) in peers.items():
        seconds, predictions[name] = best_of(factory, data, config.repeats)
        results["regressors"][name] = {"obs_per_s": len(data) / seconds, "us_per_obs": 1e6 * seconds / len(data)}
    floor = results["regressors"]["river BayesianLinearRegression"]["obs_per_s"]
    for entry in results["regressors"].values():
        entry["ratio_to_bayesian"] = entry["obs_per_s"] / floor
    ours, theirs = predictions["rls (forgetting 1)"], predictions["river BayesianLinearRegression"]
    results["agreement"] = {
        "max_abs_diff": float(np.max(np.abs(ours - theirs))),
        "max_rel_diff_after_100": float(np.max(np.abs(ours[100:] - theirs[100:]) / np.maximum(np.abs(theirs[100:]), 1e-9))),
    }
    results["predictors"] = {}
    for name in available():
        spec = f"{name}:fit_after=200" if name in ("static", "ewma") else name
        begin = time.perf_counter()
        predictor = create(spec)
        for record in records:
            predictor.predict_one(record)
            predictor.learn_one(record)
        results["predictors"][name] = {"records_per_s": len(records) / (time.perf_counter() - begin)}
    print_table(results, Path(config.log).name)
    finish(out, results)


def print_table(results: dict, log: str) -> None:
    """Print the regressor throughput table, the RLS/Bayesian agreement and the record-level table."""
    table = Table(title=f"predict_one + learn_one on {results['n']} observations of {log} "
                        f"({results['n_features']} features)")
    for column in ("regressor", "obs/s", "µs/obs", "× BayesianLinearRegression"):
        table.add_column(column, justify="right" if column != "regressor" else "left")
    for name, r in results["regressors"].items():
        table.add_row(name, f"{r['obs_per_s']:,.0f}", f"{r['us_per_obs']:.1f}", f"{r['ratio_to_bayesian']:.2f}")
    console = Console()
    console.print(table)
    agreement = results["agreement"]
    console.print(f"RLS (forgetting 1, delta=beta/alpha) vs BayesianLinearRegression: max |diff| "
                  f"{agreement['max_abs_diff']:.2e}, max relative diff after 100 obs "
                  f"{agreement['max_rel_diff_after_100']:.2e}")
    records = Table(title="record level (features + predict + learn)")
    records.add_column("predictor")
    records.add_column("records/s", justify="right")
    for name, r in results["predictors"].items():
        records.add_row(name, f"{r['records_per_s']:,.0f}")
    console.print(records)


if __name__ == "__main__":
    main()
