"""Latency without a solo latency: learners that must predict latency from a batch's own attributes.

A synthetic stream where records carry **no** solo latency and a batch's own attributes (its
sequence length, number of layers, operator count, input size) set most of its latency:

    latency = base(model, batch size, attrs) * interference(co-runners) * noise

* ``base`` is non-linear in the attributes: a per-model cost times ``batch_size ** 0.85``, times
  ``(seq / 128) ** 1.5`` for the language models (attention), ``(size / 224) ** 2`` for the vision
  ones, times ``layers / 12``, plus a launch overhead per operator, plus a cache cliff (x1.35)
  beyond a per-model working-set size;
* ``interference`` is ``1 + sensitivity(own) * (1 - exp(-pressure))``, with ``pressure`` the
  overlap-weighted sum of the co-runners' memory intensity (which grows with their sequence
  length or input size and batch size): a saturating, non-linear slowdown, up to about 2x;
* ``noise`` is log-normal (``sigma`` 0.03 by default).

Attributes take values on a grid, so a *configuration* is a (model, batch size, attributes)
tuple; the stream draws configurations at random, 0 to 3 co-runners each.

Two protocols, every predictor fed the same records:

1. **split**: the evaluation's 75/25 split (records without time order are shuffled, seed 0),
   online predictors learn the first part one record at a time and score the rest without
   learning; the reference is an **offline LightGBM** fit (default settings, on the log
   latency, the same features as ``tree``) on the same training part;
2. **leave one configuration out**: for each of ``loco_configs`` configurations drawn at random
   (seeded), each of ``loco_predictors`` and the offline fit learn all records but that
   configuration's and are scored on it.

The split protocol is also run on the third-party GPU datasets with their solo latencies removed
(``datasets``: ``gpulet``, ``igniter``; found under ``--data`` or ``$INTERFERENCE_DATA`` and
skipped when absent, see :mod:`experiments.datasets`), each predictor beside the offline LightGBM
fit on the same split, with the ratio of the two.

Run: ``.venv/bin/python -m experiments.studies.no_solo`` (about 10 minutes on 2 shared cores); writes
``experiments/results/no_solo/{config.json,results.json,results.md}``.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from experiments.datasets import load
from predictor.predictors import DEFAULT, create
from predictor.predictors.tree import TreePredictor
from predictor.prequential.evaluation import run_split, split_records, summarize
from predictor.records.record import BatchSpec, CoRunner, Record

LANGUAGE = {"bert": (0.30, 384), "gpt2": (0.45, 256), "t5": (0.38, 320)}
"""Language models: cost per item (ms) and cache-cliff sequence length."""
VISION = {"resnet": (0.9, 384), "vit": (1.3, 320)}
"""Vision models: cost per item (ms) and cache-cliff input size."""
SEQ = (32, 64, 128, 256, 384, 512)
SIZES = (160, 224, 320, 384, 448)
LAYERS = (6, 12, 24)
BATCH_SIZES = (1, 2, 4, 8)
OPS_PER_LAYER = {"bert": 14, "gpt2": 16, "t5": 20, "resnet": 9, "vit": 12}


PREVIOUS_TREE = "tree:work=False,n_estimators=150,num_leaves=15,window=4000,swap_after=100"
"""The ``tree`` learner before the work features and the larger defaults (for the before/after figures)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """What the study runs."""

    records: int = 6000
    noise: float = 0.03
    split: float = 0.75
    loco_configs: int = 6
    predictors: tuple[str, ...] = ("solo", "rls", "sgd", "tree", "tree:work=False", PREVIOUS_TREE, "ensemble", DEFAULT)
    loco_predictors: tuple[str, ...] = ("rls", "tree", DEFAULT)
    datasets: tuple[str, ...] = ("gpulet", "igniter")
    dataset_predictors: tuple[str, ...] = ("rls", "sgd", "tree", "ensemble", DEFAULT)
    data: str = ""
    seed: int = 0


def configuration(rng: np.random.Generator) -> tuple[str, int, dict[str, float]]:
    """A random (model, batch size, attributes) from the grid."""
    models = sorted(LANGUAGE) + sorted(VISION)
    model = models[int(rng.integers(len(models)))]
    layers = float(LAYERS[int(rng.integers(len(LAYERS)))])
    attrs = {"layers": layers, "ops": layers * OPS_PER_LAYER[model]}
    if model in LANGUAGE:
        attrs["seq_len"] = float(SEQ[int(rng.integers(len(SEQ)))])
    else:
        attrs["input_size"] = float(SIZES[int(rng.integers(len(SIZES)))])
    return model, int(BATCH_SIZES[int(rng.integers(len(BATCH_SIZES)))]), attrs


def base_latency(model: str, batch_size: int, attrs: dict[str, float]) -> float:
    """Latency (ms) of the batch alone: non-linear in its attributes."""
    if model in LANGUAGE:
        cost, cliff = LANGUAGE[model]
        size = attrs["seq_len"]
        shape = (size / 128.0) ** 1.5
    else:
        cost, cliff = VISION[model]
        size = attrs["input_size"]
        shape = (size / 224.0) ** 2
    compute = cost * batch_size ** 0.85 * shape * attrs["layers"] / 12.0
    launch = 0.004 * attrs["ops"]
    return (compute + launch) * (1.35 if size * batch_size ** 0.5 > cliff * 2 else 1.0)


def intensity(model: str, batch_size: int, attrs: dict[str, float]) -> float:
    """How much memory pressure a co-runner puts on the device."""
    size = attrs.get("seq_len", 0.0) / 256.0 + attrs.get("input_size", 0.0) / 300.0
    return 0.35 * size * math.sqrt(batch_size) * (1.2 if model in VISION else 1.0)


def sensitivity(model: str, batch_size: int, attrs: dict[str, float]) -> float:
    """How much the batch suffers from pressure (memory-bound batches suffer more)."""
    if model in LANGUAGE:
        return 0.4 + 0.5 * min(attrs["seq_len"] / 512.0, 1.0)
    return 0.7 + 0.3 * (attrs["input_size"] >= 320)


def no_solo_records(n: int, *, seed: int = 0, noise: float = 0.03) -> list[Record]:
    """``n`` records with no solo latency, over four devices of one kind."""
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n!r}")
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        model, batch_size, attrs = configuration(rng)
        runners = []
        pressure = 0.0
        for _ in range(int(rng.choice(4, p=(0.3, 0.35, 0.2, 0.15)))):
            co_model, co_batch, co_attrs = configuration(rng)
            overlap = float(rng.choice((1.0, float(rng.uniform(0.05, 1.0)))))
            runners.append(CoRunner(co_model, co_batch, co_attrs, overlap=round(overlap, 4)))
            pressure += overlap * intensity(co_model, co_batch, co_attrs)
        factor = 1.0 + sensitivity(model, batch_size, attrs) * (1.0 - math.exp(-pressure))
        latency = base_latency(model, batch_size, attrs) * factor * math.exp(noise * rng.normal())
        out.append(Record(device=f"sim{i % 4}", batch=BatchSpec(model, batch_size, attrs), latency_ms=latency,
                          device_kind="SimAccel", co_runners=tuple(runners)))
    return out


def config_key(record: Record) -> tuple:
    """A record's configuration: model, batch size and attributes."""
    return (record.batch.model, record.batch.batch_size, tuple(sorted(record.batch.attrs.items())))


# ---------------------------------------------------------------------------------- offline reference
def _matrix(records: list[Record], names: list[str] | None = None,
            codes: dict[str, list[str]] | None = None) -> tuple[np.ndarray, list[str], dict[str, list[str]]]:
    """The ``tree`` predictor's features as a matrix, its column names and the category codes (the
    model and the device kind as their index among the training part's values in sorted order; -1
    for a value not seen there)."""
    if codes is None:
        codes = {"model": sorted({r.batch.model for r in records}), "kind": sorted({r.device_kind for r in records})}
    rows = []
    for r in records:
        x = TreePredictor.features(r)
        for key, value in (("model", r.batch.model), ("kind", r.device_kind)):
            x[key] = float(codes[key].index(value)) if value in codes[key] else -1.0
        rows.append(x)
    if names is None:
        names = sorted({k for row in rows for k in row})
    values = np.array([[float(row.get(k, 0.0)) for k in names] for row in rows])  # type: ignore[arg-type]
    return values, names, codes


def offline_lightgbm(train: list[Record], test: list[Record], seed: int = 0) -> list[float]:
    """LightGBM with default settings fitted offline on the training part's log latency."""
    import lightgbm

    X, names, codes = _matrix(train)
    model = lightgbm.LGBMRegressor(random_state=seed, verbose=-1, n_jobs=1)
    model.fit(X, np.log([r.latency_ms for r in train]))
    return np.exp(model.predict(_matrix(test, names, codes)[0])).tolist()


def without_solo(records: list[Record]) -> list[Record]:
    """``records`` with their solo latencies removed."""
    return [dataclasses.replace(r, solo_latency_ms=None) for r in records]


def mape(predicted: list[float], records: list[Record]) -> float:
    """Mean absolute percentage error (a fraction)."""
    actual = np.array([r.latency_ms for r in records])
    return float(np.mean(np.abs(np.asarray(predicted) - actual) / actual))


# ---------------------------------------------------------------------------------- protocols
def evaluate_split(records: list[Record], config: Config,
                   predictors: tuple[str, ...] | None = None) -> dict[str, dict[str, float]]:
    """Every predictor (``config.predictors`` unless given) and the offline reference under the 75/25 split."""
    train, test = split_records(records, config.split, config.seed)
    out: dict[str, dict[str, float]] = {}
    for spec in config.predictors if predictors is None else predictors:
        started = time.perf_counter()
        scored = run_split(create(spec, seed=config.seed), records, split=config.split, seed=config.seed)
        out[spec] = {**summarize(scored), "seconds": time.perf_counter() - started}
    started = time.perf_counter()
    predicted = offline_lightgbm(train, test, config.seed)
    errors = np.abs(np.asarray(predicted) - [r.latency_ms for r in test]) / [r.latency_ms for r in test]
    out["offline-lightgbm"] = {"mape": float(errors.mean()), "p50": float(np.median(errors)),
                               "p95": float(np.percentile(errors, 95)), "n": len(test),
                               "seconds": time.perf_counter() - started}
    return out


def evaluate_loco(records: list[Record], config: Config) -> dict[str, object]:
    """Leave one configuration out, for ``loco_configs`` configurations with enough records."""
    by_config: dict[tuple, list[int]] = {}
    for i, r in enumerate(records):
        by_config.setdefault(config_key(r), []).append(i)
    eligible = sorted((k for k, v in by_config.items() if len(v) >= 5), key=repr)
    rng = np.random.default_rng(config.seed)
    chosen = [eligible[i] for i in rng.choice(len(eligible), size=min(config.loco_configs, len(eligible)),
                                              replace=False)]
    per_config = []
    for key in chosen:
        held = set(by_config[key])
        train = [r for i, r in enumerate(records) if i not in held]
        test = [records[i] for i in sorted(held)]
        row: dict[str, object] = {"configuration": repr(key), "n": len(test)}
        for spec in config.loco_predictors:
            predictor = create(spec, seed=config.seed).fit(train)
            row[spec] = mape(predictor.predict_many(test), test)
        row["offline-lightgbm"] = mape(offline_lightgbm(train, test, config.seed), test)
        per_config.append(row)
    names = [*config.loco_predictors, "offline-lightgbm"]
    mean = {name: float(np.mean([row[name] for row in per_config])) for name in names}
    return {"configurations": per_config, "mean_mape": mean}


def split_table(title: str, split: dict[str, dict[str, float]]) -> list[str]:
    """One split's table: each predictor's errors and its MAPE over the offline LightGBM fit's."""
    ref = split["offline-lightgbm"]["mape"]
    lines = [title, "", "| predictor | MAPE | p50 | p95 | x offline LightGBM | seconds |", "|---|---:|---:|---:|---:|---:|"]
    for name, s in split.items():
        lines.append(f"| {name} | {100 * s['mape']:.2f}% | {100 * s['p50']:.2f}% | {100 * s['p95']:.2f}% "
                     f"| {s['mape'] / ref:.2f} | {s['seconds']:.1f} |")
    return lines


def markdown(results: dict) -> str:
    """The result tables."""
    lines = split_table("**75/25 split** (synthetic, no solo latency in any record)", results["split"])
    for name, split in results.get("datasets", {}).items():
        lines += ["", *split_table(f"**75/25 split, {name} with its solo latencies removed** "
                                   f"({split['offline-lightgbm']['n']} records scored)", split)]
    loco = results["loco"]["mean_mape"]
    lines += ["", f"**Leave one configuration out** (mean MAPE over {len(results['loco']['configurations'])} "
              "held-out configurations)", "", "| predictor | MAPE |", "|---|---:|"]
    lines += [f"| {name} | {100 * v:.2f}% |" for name, v in loco.items()]
    return "\n".join(lines) + "\n"


def run(config: Config) -> dict:
    """Generate the stream and run both protocols."""
    records = no_solo_records(config.records, seed=config.seed, noise=config.noise)
    results = {"records": len(records), "configurations": len({config_key(r) for r in records}),
               "split": evaluate_split(records, config), "loco": evaluate_loco(records, config)}
    split = results["split"]
    results["tree_over_offline"] = split["tree"]["mape"] / split["offline-lightgbm"]["mape"]
    if DEFAULT in split:
        results["default_over_offline"] = split[DEFAULT]["mape"] / split["offline-lightgbm"]["mape"]
    if "rls" in split:
        results["rls_over_tree"] = split["rls"]["mape"] / split["tree"]["mape"]
    results["datasets"] = {}
    if config.datasets:
        for name, loaded in load(list(config.datasets), config.data or None).items():
            split = evaluate_split(without_solo(loaded), config, config.dataset_predictors)
            results["datasets"][name] = split
            ref = split["offline-lightgbm"]["mape"]
            print(f"{name} (no solo): " + ", ".join(f"{k} {100 * v['mape']:.2f}% ({v['mape'] / ref:.2f}x)"
                                                 for k, v in split.items()), flush=True)
    return results


def main() -> None:
    """Run the study from the command line."""
    from experiments.common import finish, start

    config, out = start("no_solo", Config(), __doc__.splitlines()[0])
    results = run(config)
    (out / "results.md").write_text(markdown(results))
    print(markdown(results))
    finish(out, results)


if __name__ == "__main__":
    main()
