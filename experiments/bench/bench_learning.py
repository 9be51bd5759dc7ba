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

Then (``prequential``) the prequential learning throughput of the ``tree`` and ``ensemble`` learners
against ``rls`` on the same records of the log, ``rounds`` rounds, each learner afresh in each round
and the learners interleaved within a round: ``rls`` blockwise (:func:`~predictor.prequential.blocks.prequential_blocks`,
on this thread) and record by record (:func:`~predictor.prequential.evaluation.run_prequential`),
``tree`` and ``ensemble`` by :func:`~predictor.prequential.tree_blocks.prequential_tree_blocks` and
record by record; records/s, each as a ratio to the two ``rls`` floors of its round (median and
spread over the rounds), with the largest relative difference between each fast path's predictions
and its reference's, and the seconds the learner spent waiting for refits at its swaps.

Then (``end_to_end``) the same from the log file, reading included: ``rls`` by
:func:`~predictor.prequential.blocks.fast_prequential` (what ``predictor replay LOG --prequential`` runs
for it), ``ensemble`` and ``tree`` by ``read_records`` then ``prequential_tree_blocks``; records/s and
the ratio to ``rls`` of the same round.

Run: ``.venv/bin/python -m experiments.bench.bench_learning`` (``--parts prequential,end_to_end``: the
last parts alone)
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
from predictor.prequential.blocks import fast_prequential, prequential_blocks
from predictor.prequential.evaluation import run_prequential
from predictor.prequential.tree_blocks import prequential_tree_blocks
from predictor.prequential.tree_blocks import supports as tree_supports
from predictor.records.logio import read_records
from predictor.regressors import boosted
from predictor.regressors.least_squares import RLS
from predictor.regressors.trees import load_lightgbm


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    log: str = str(DEFAULT_DATASET)
    max_records: int = 3000
    repeats: int = 3
    alpha: float = 1.0
    beta: float = 10.0
    seed: int = 0
    parts: str = "regressors,prequential,end_to_end"
    rounds: int = 3
    prequential_records: int = 0
    """Records of the log the prequential part replays (0: all)."""


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
    parts = {p.strip() for p in config.parts.split(",")}
    results: dict = {}
    if "prequential" in parts:
        results["prequential"] = prequential_throughput(config, records[: config.prequential_records or None])
        print_prequential(results["prequential"], Path(config.log).name)
    if "end_to_end" in parts:
        results["end_to_end"] = end_to_end(config)
        print_end_to_end(results["end_to_end"], Path(config.log).name)
    if "regressors" in parts:
        results.update(regressors(config, records[: config.max_records]))
    finish(out, results)


def regressors(config: Config, records: list) -> dict:
    """The regressors' and registered predictors' record-level throughput (the first parts)."""
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
    results = {"n": len(stream), "n_features": len(stream[0][0]) if stream else 0, "regressors": {}}
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
    return results


LEARNERS = ("rls blockwise", "rls record by record", "tree", "tree record by record", "ensemble",
            "ensemble record by record")


def _swap_waits() -> list[float]:
    """A list that fills with the seconds each refit's result was waited for (while the bench runs)."""
    waits: list[float] = []
    result = boosted._Refit.result

    def timed(refit, params):
        begin = time.perf_counter()
        try:
            return result(refit, params)
        finally:
            waits.append(time.perf_counter() - begin)

    boosted._Refit.result = timed  # type: ignore[method-assign]
    return waits


def prequential_throughput(config: Config, records: list) -> dict:
    """Records/s of each of :data:`LEARNERS` per round, their ratios to the round's ``rls`` floors, the
    fast paths' largest relative difference from their references, and the refit waits."""
    load_lightgbm()  # in this process too (a refit may run in a thread): not in the first round's figures
    warm = records[:600]
    for spec in ("rls", "sgd", "tree", "ensemble"):  # compile the kernels, start the refit worker
        predictor = create(spec, seed=config.seed)
        (prequential_tree_blocks if tree_supports(predictor) else prequential_blocks)(predictor, warm)
    waits = _swap_waits()
    rounds: list[dict] = []
    for _ in range(config.rounds):
        seconds, predicted, waited = {}, {}, {}
        for learner in LEARNERS:
            spec = learner.split()[0]
            predictor = create(spec, seed=config.seed)
            if learner.endswith("record by record"):
                path = run_prequential
            else:
                path = prequential_blocks if spec == "rls" else prequential_tree_blocks
            waits.clear()
            begin = time.perf_counter()
            predicted[learner] = np.asarray(path(predictor, records).predicted)
            seconds[learner] = time.perf_counter() - begin
            waited[learner] = sum(waits)
        round_ = {"records_per_s": {k: len(records) / v for k, v in seconds.items()}, "swap_wait_s": waited,
                  "us_per_record_outside_waits": {k: 1e6 * (v - waited[k]) / len(records) for k, v in seconds.items()}}
        for floor in ("rls blockwise", "rls record by record"):
            round_[f"ratio_to_{floor}"] = {k: seconds[floor] / v for k, v in seconds.items()}
        round_["max_rel_diff"] = {
            "rls": _rel(predicted["rls blockwise"], predicted["rls record by record"]),
            "tree": _rel(predicted["tree"], predicted["tree record by record"]),
            "ensemble": _rel(predicted["ensemble"], predicted["ensemble record by record"]),
        }
        rounds.append(round_)
    summary = {}
    for key in ("records_per_s", "ratio_to_rls blockwise", "ratio_to_rls record by record", "swap_wait_s",
                "us_per_record_outside_waits"):
        summary[key] = {learner: _spread([r[key][learner] for r in rounds]) for learner in LEARNERS}
    return {"n": len(records), "rounds": rounds, "summary": summary,
            "max_rel_diff": {k: max(r["max_rel_diff"][k] for r in rounds) for k in ("rls", "tree", "ensemble")}}


END_TO_END = ("rls", "ensemble", "tree")


def end_to_end(config: Config) -> dict:
    """Records/s of each of :data:`END_TO_END` from the log file (reading included), per round, and the
    ratio to ``rls`` of the same round."""
    rounds: list[dict[str, float]] = []
    n = 0
    for _ in range(config.rounds):
        seconds = {}
        for spec in END_TO_END:
            begin = time.perf_counter()
            if spec == "rls":
                n = len(fast_prequential(config.log, spec, seed=config.seed).predicted)
            else:
                records, _ = read_records(config.log)
                prequential_tree_blocks(create(spec, seed=config.seed), records)
            seconds[spec] = time.perf_counter() - begin
        rounds.append(seconds)
    return {"n": n, "rounds": rounds,
            "records_per_s": {spec: _spread([n / r[spec] for r in rounds]) for spec in END_TO_END},
            "ratio_to_rls": {spec: _spread([r["rls"] / r[spec] for r in rounds]) for spec in END_TO_END}}


def print_end_to_end(results: dict, log: str) -> None:
    """Print the end-to-end table (median [min, max] over the rounds)."""
    table = Table(title=f"prequential from {log} ({results['n']} records), reading included: median [min, max]")
    for column in ("learner", "records/s", "x rls"):
        table.add_column(column, justify="right" if column != "learner" else "left")
    for spec in END_TO_END:
        rate, ratio = results["records_per_s"][spec], results["ratio_to_rls"][spec]
        table.add_row(spec, f"{rate['median']:,.0f} [{rate['min']:,.0f}, {rate['max']:,.0f}]",
                      f"{ratio['median']:.3f} [{ratio['min']:.3f}, {ratio['max']:.3f}]")
    Console().print(table)


def _rel(fast: np.ndarray, reference: np.ndarray) -> float:
    return float(np.max(np.abs(fast - reference) / reference))


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": float(np.median(values)), "min": float(np.min(values)), "max": float(np.max(values))}


def print_prequential(results: dict, log: str) -> None:
    """Print the prequential throughput table (median [min, max] over the rounds)."""
    table = Table(title=f"prequential learning on {results['n']} records of {log}, "
                        f"{len(results['rounds'])} rounds: median [min, max]")
    for column in ("learner", "records/s", "x rls blockwise", "x rls record by record", "refit waits (s)",
                   "µs/record outside waits"):
        table.add_column(column, justify="right" if column != "learner" else "left")
    summary = results["summary"]

    def cell(entry: dict, form: str) -> str:
        return f"{entry['median']:{form}} [{entry['min']:{form}}, {entry['max']:{form}}]"

    for learner in LEARNERS:
        table.add_row(learner, cell(summary["records_per_s"][learner], ",.0f"),
                      cell(summary["ratio_to_rls blockwise"][learner], ".3f"),
                      cell(summary["ratio_to_rls record by record"][learner], ".3f"),
                      cell(summary["swap_wait_s"][learner], ".2f"),
                      cell(summary["us_per_record_outside_waits"][learner], ".0f"))
    console = Console()
    console.print(table)
    console.print("largest relative difference from the reference: "
                  + ", ".join(f"{k} {v:.1e}" for k, v in results["max_rel_diff"].items()))


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
