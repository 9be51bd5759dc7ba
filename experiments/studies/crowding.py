"""Monotone in crowding, and filling what a query leaves out: before and after.

Two figures of issue 12:

1. **Monotonicity.** On a synthetic log whose slowdown rises strictly with every co-runner
   (``solo * (1 + sum_i overlap_i * c_model * (1 + 0.2 log2 batch_i))``, 0 to 3 co-runners), a
   service learns ``n_train`` records; then, for ``n_steps`` random co-runner sets (0 to
   ``max_base`` co-runners, more than training saw), one co-runner is added, and the share of
   steps where that **lowered** the prediction is counted (and the largest drop). *Before*: the
   answer as the service gave it until now (the unconstrained predictor, ``rls:non_negative=False``,
   straight); *after*: the service's answer (non-negative contention weights, the monotone
   construction for other learners).
2. **Filling at admission.** On the embedded CPU data, prequentially: before each record is
   learned, the service is asked what a scheduler knows before dispatch (its co-runners without
   overlaps, no signals, the solo latency), and the answer scored once the record is learned
   (MAPE). *Before*: overlaps taken as 1 and signals as absent (``fill_missing=False``), with the
   unconstrained predictor as the service had it; then with monotone weights only; *after*: the
   missing signals from the device's smoothed recent signals and the overlaps from the observed
   mean per (device kind, co-runner count). The observation-time MAPE (full records) is printed
   beside it.

Run: ``.venv/bin/python -m experiments.studies.crowding`` (about a minute).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from experiments.common import DEFAULT_DATASET, finish, relative, start
from predictor.predictors import create
from predictor.records.logio import iter_records
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.service import CoRunnerSource, PlannedCoRunner, Query, Service, ServiceConfig

COSTS = {"resnet": (0.30, 8.0), "bert": (0.45, 12.0), "mlp": (0.15, 4.0), "vgg": (0.60, 10.0)}


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    n_train: int = 3000
    n_steps: int = 3000
    max_base: int = 8
    noise: float = 0.05
    predictor: str = "rls"
    dataset: str = str(DEFAULT_DATASET)
    seed: int = 0


def _attrs(model: str) -> dict[str, float]:
    cost, _ = COSTS[model]
    return {"l2_util": cost, "dram_util": 1.0 - cost}


def rising_log(n: int, rng: np.random.Generator, noise: float) -> list[Record]:
    """Records whose slowdown rises strictly with every co-runner, its overlap and batch size."""
    models = sorted(COSTS)
    out = []
    for i in range(n):
        model = models[rng.integers(len(models))]
        size = int(rng.integers(1, 9))
        solo = COSTS[model][1] * (0.5 + 0.5 * size)
        runners, slowdown = [], 1.0
        for _ in range(int(rng.integers(0, 4))):
            other = models[rng.integers(len(models))]
            other_size = int(rng.integers(1, 9))
            overlap = float(rng.uniform(0.1, 1.0))
            runners.append(CoRunner(other, other_size, _attrs(other), overlap))
            slowdown += overlap * COSTS[other][0] * (1 + 0.2 * math.log2(other_size))
        latency = solo * slowdown * float(np.exp(rng.normal(0.0, noise)))
        out.append(Record(f"sim{i % 2}", BatchSpec(model, size, _attrs(model)), latency, device_kind="SimGPU",
                          solo_latency_ms=solo, co_runners=tuple(runners), start_s=i * 0.01))
    return out


def monotonicity(config: Config, rng: np.random.Generator) -> dict[str, dict[str, float]]:
    """Share of steps where adding a co-runner lowered the prediction, before and after."""
    log = rising_log(config.n_train, rng, config.noise)
    before = create(config.predictor + (":" if ":" not in config.predictor else ",") + "non_negative=False"
                    if config.predictor in ("rls", "sgd", "static", "ewma") else config.predictor)
    before.fit(log)
    service = Service(ServiceConfig(predictor=config.predictor, observation_log=False))
    service.open()
    for record in log:
        service.observe(record)
    models = sorted(COSTS)
    drops: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(config.n_steps):
        model = models[rng.integers(len(models))]
        batch = BatchSpec(model, int(rng.integers(1, 9)), _attrs(model))
        runners = [
            CoRunner(m, int(rng.integers(1, 9)), _attrs(m), float(rng.uniform(0.1, 1.0)))
            for m in (models[rng.integers(len(models))] for _ in range(int(rng.integers(0, config.max_base + 1))))
        ]
        other = models[rng.integers(len(models))]
        added = CoRunner(other, int(rng.integers(1, 9)), _attrs(other), float(rng.uniform(0.1, 1.0)))
        solo = COSTS[model][1] * (0.5 + 0.5 * batch.batch_size)
        pair = [Record("sim0", batch, None, device_kind="SimGPU", solo_latency_ms=solo, co_runners=tuple(rs))
                for rs in (runners, runners + [added])]
        less, more = before.predict_many(pair)
        drops["before"].append((less - more) / less)
        answers = [
            service.predict(Query("sim0", batch, "SimGPU", tuple(
                PlannedCoRunner(c.model, c.batch_size, c.attrs, overlap=c.overlap) for c in r.co_runners),
                CoRunnerSource.EXPLICIT, solo_latency_ms=solo)).latency_ms
            for r in pair
        ]
        drops["after"].append((answers[0] - answers[1]) / answers[0])
    return {
        name: {"steps": len(d), "lowered_share": float(np.mean(np.array(d) > 1e-9)),
               "largest_drop": float(max(0.0, max(d)))}
        for name, d in drops.items()
    }


def admission(config: Config) -> dict[str, dict[str, float]]:
    """Prequential admission-time MAPE on the CPU data: before and after filling."""
    records = list(iter_records(config.dataset))
    variants = {
        "before (overlap 1, no signals; unconstrained rls)": ("rls:non_negative=False", False, True),
        "monotone weights, no filling": (config.predictor, False, False),
        "after (filled signals and overlaps)": (config.predictor, True, False),
    }
    out = {}
    for name, (spec, fill, raw) in variants.items():
        service = Service(ServiceConfig(predictor=spec, fill_missing=fill, observation_log=False))
        service.open()
        admitted, observed = [], []
        for record in records:
            query = Query(record.device, record.batch, record.device_kind,
                          tuple(PlannedCoRunner(c.model, c.batch_size, c.attrs) for c in record.co_runners),
                          CoRunnerSource.EXPLICIT, solo_latency_ms=record.solo_latency_ms)
            if raw:  # the old answering path: the predictor on the query as given (overlap 1, no signals)
                degraded = dataclasses.replace(record, latency_ms=None, signals={}, co_runners=tuple(
                    dataclasses.replace(c, overlap=1.0) for c in record.co_runners))
                predicted = service.state.predictor.predict_one(degraded)
            else:
                predicted = service.predict(query).latency_ms
            admitted.append(abs(predicted - record.latency_ms) / record.latency_ms)
            try:
                observed.append(abs(service.observe(record) - record.latency_ms) / record.latency_ms)
            except Exception:  # an outlier the gate refused: not learned, not scored
                pass
        out[name] = {"records": len(records), "admission_mape": 100 * float(np.mean(admitted)),
                     "observation_mape": 100 * float(np.mean(observed))}
    return out


def main() -> None:
    """Run both studies, print the figures, write ``results.json``."""
    config, out = start("crowding", Config(), __doc__.splitlines()[0])
    rng = np.random.default_rng(config.seed)
    mono = monotonicity(config, rng)
    lines = [f"Monotonicity on a strictly rising synthetic log ({config.n_train} learned, {config.n_steps} steps, "
             f"0-{config.max_base} co-runners + 1):", "",
             "| answer | steps where adding a co-runner lowered it | largest drop |", "|---|---:|---:|"]
    lines += [f"| {name} | {100 * row['lowered_share']:.1f}% | {100 * row['largest_drop']:.1f}% |"
              for name, row in mono.items()]
    fill = admission(config)
    lines += ["", f"Admission-time MAPE, {relative(config.dataset)}, prequential:", "",
              "| answer | admission MAPE | observation-time MAPE |", "|---|---:|---:|"]
    lines += [f"| {name} | {row['admission_mape']:.1f}% | {row['observation_mape']:.1f}% |"
              for name, row in fill.items()]
    print("\n".join(lines))
    (out / "results.md").write_text("\n".join(lines) + "\n")
    finish(out, {"monotonicity": mono, "admission": fill})


if __name__ == "__main__":
    main()
