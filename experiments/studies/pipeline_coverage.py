"""Coverage of PlanPipeline's composed end-to-end bound, measured prequentially on recorded streams.

Method. A service learns the first ``warmup`` records of a stream. Then, repeatedly, the next
``k`` records become the stages of one pipeline, shaped by a template drawn at random (chains
of 2, 3, 4 and 6 stages, a diamond ``0 -> {1, 2} -> 3``, a fan-out ``0 -> {1, 2, 3}``): stage
``s`` is record ``s``'s batch, and its only candidate is the record's device with the record's
co-runners as a scheduler knows them at admission (``--shape admission``: co-runners without
overlaps, no signals; ``known``: overlaps and signals as recorded), with the record's solo
latency when it has one. The service answers ``PlanPipeline`` at each confidence (a loose
deadline: the bound does not depend on it when every stage has one device); the pipeline's
true end-to-end time is the longest path of the records' measured latencies. Only then are the
``k`` records learned (prequential: no answer has seen its own outcome).

Reported per stream and confidence: the share of pipelines whose true time is within the
composed bound (the target at 0.99 is >= 98.5%), the same for the naive composition (the sum
of per-stage bounds along the heaviest path), and the mean ratio of the composed bound to the
naive one (how much tighter composing distributions is than adding bounds).

Streams: ``synthetic`` (records of :func:`~predictor.service.synthetic.synthetic_records` with
log-normal noise ``noise``, four devices) and the embedded ``cpu-default`` (real CPU
co-location measurements), plus any collection named in ``datasets``.

Run: ``.venv/bin/python -m experiments.studies.pipeline_coverage`` (prints the table; ``--quick true``
for a short run).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time

import numpy as np

from experiments.common import finish, start
from experiments.datasets import load
from predictor.pipeline.graph import Dag
from predictor.records.record import Record
from predictor.service import (
    Candidate,
    CoRunnerSource,
    Deadline,
    PlannedCoRunner,
    Service,
    ServiceConfig,
    ServiceError,
)
from predictor.service.pipeline_types import PipelineStage
from predictor.service.synthetic import synthetic_records

TEMPLATES: dict[str, tuple[int, list[tuple[int, int]]]] = {
    "chain2": (2, []),
    "chain3": (3, []),
    "chain4": (4, []),
    "chain6": (6, []),
    "diamond": (4, [(0, 1), (0, 2), (1, 3), (2, 3)]),
    "fanout": (4, [(0, 1), (0, 2), (0, 3)]),
}


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's configuration."""

    seed: int = 0
    datasets: tuple[str, ...] = ("synthetic", "cpu-default")
    confidences: tuple[float, ...] = (0.9, 0.95, 0.99)
    warmup: int = 2000
    synthetic_records: int = 14000
    noise: float = 0.2
    shape: str = "admission"
    quick: bool = False


def stage_candidate(record: Record, shape: str) -> Candidate:
    """The record's device as a scheduler knows it before the batch runs."""
    known = shape == "known"
    runners = tuple(
        PlannedCoRunner(c.model, c.batch_size, dict(c.attrs), overlap=c.overlap if known else None)
        for c in record.co_runners
    )
    return Candidate(record.device, record.device_kind, runners, CoRunnerSource.EXPLICIT,
                     dict(record.signals) if known else {})


def true_end_to_end(dag: Dag, latencies: list[float]) -> float:
    """The longest path of the measured latencies."""
    return dag.paths_sum_max(latencies)


def _learn(service: Service, record: Record) -> None:
    """Learn a record as the stream would (one the outlier gate refuses is not learned)."""
    try:
        service.observe(record)
    except ServiceError:
        pass


def run_stream(name: str, records: list[Record], config: Config, rng: random.Random) -> list[dict]:
    """Plan and score pipelines over one stream; one row per confidence."""
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open()
    warmup = min(config.warmup, len(records) // 4)
    for record in records[:warmup]:
        _learn(service, record)
    covered = {c: 0 for c in config.confidences}
    naive_covered = {c: 0 for c in config.confidences}
    ratios: dict[float, list[float]] = {c: [] for c in config.confidences}
    by_template: dict[str, list[int]] = {}
    count, i = 0, warmup
    names = sorted(TEMPLATES)
    started = time.perf_counter()
    while True:
        template = names[rng.randrange(len(names))]
        k, edges = TEMPLATES[template]
        if i + k > len(records):
            break
        batch = records[i:i + k]
        i += k
        stages = [PipelineStage(r.batch, f"s{s}", r.solo_latency_ms, (s,)) for s, r in enumerate(batch)]
        candidates = [stage_candidate(r, config.shape) for r in batch]
        dag = Dag.of(k, edges)
        truth = true_end_to_end(dag, [r.latency_ms for r in batch])
        for confidence in config.confidences:
            plan = service.plan_pipeline(stages, edges, candidates, Deadline(ms=1e6), confidence)
            hit = truth <= plan.composed_bound_ms
            covered[confidence] += hit
            naive_covered[confidence] += truth <= plan.sum_of_stage_bounds_ms
            ratios[confidence].append(plan.composed_bound_ms / plan.sum_of_stage_bounds_ms)
            if confidence == max(config.confidences):
                by_template.setdefault(template, []).append(int(hit))
        for record in batch:
            _learn(service, record)
        count += 1
    elapsed = time.perf_counter() - started
    rows = []
    for confidence in config.confidences:
        rows.append({
            "stream": name,
            "confidence": confidence,
            "pipelines": count,
            "coverage": covered[confidence] / count,
            "naive_coverage": naive_covered[confidence] / count,
            "bound_over_naive": float(np.mean(ratios[confidence])),
            "by_template": {t: float(np.mean(h)) for t, h in sorted(by_template.items())}
            if confidence == max(config.confidences) else {},
            "seconds": elapsed,
        })
    return rows


def table(rows: list[dict]) -> str:
    """The results as a markdown table."""
    lines = ["| stream | confidence | pipelines | composed bound coverage | sum-of-bounds coverage "
             "| composed / sum of bounds |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['stream']} | {r['confidence']:g} | {r['pipelines']} | {100 * r['coverage']:.2f}% "
                     f"| {100 * r['naive_coverage']:.2f}% | {r['bound_over_naive']:.3f} |")
    for r in rows:
        if r["by_template"]:
            parts = ", ".join(f"{t} {100 * v:.1f}%" for t, v in r["by_template"].items())
            lines.append(f"\n{r['stream']} at {r['confidence']:g}, per template: {parts}")
    return "\n".join(lines)


def main() -> None:
    """Entry point."""
    config, out = start("pipeline_coverage", Config(), __doc__.splitlines()[0])
    rng = random.Random(config.seed)
    streams: dict[str, list[Record]] = {}
    n_synthetic = 3000 if config.quick else config.synthetic_records
    for name in config.datasets:
        if name == "synthetic":
            streams[name] = synthetic_records(n_synthetic, seed=config.seed, devices=("sim0", "sim1", "sim2", "sim3"),
                                              noise=config.noise)
        else:
            streams.update(load([name]))
    rows = []
    for name, records in streams.items():
        if config.quick:
            records = records[:3000]
        rows += run_stream(name, records, config, rng)
    text = table(rows)
    (out / "results.md").write_text(
        f"# PlanPipeline: coverage of the composed bound (query shape: {config.shape})\n\n{text}\n")
    finish(out, {"rows": rows})
    print(text)
    target = [r for r in rows if math.isclose(r["confidence"], 0.99)]
    for r in target:
        print(f"{r['stream']}: composed bound covers {100 * r['coverage']:.2f}% at 0.99 "
              f"(target >= 98.5%) over {r['pipelines']} pipelines")


if __name__ == "__main__":
    main()
