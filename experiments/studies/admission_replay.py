"""Study: coverage of the answers a scheduler gets before dispatch (admission-time replay).

For each dataset (the embedded CPU data, iGniter, Ampere/GPUlet when ``$INTERFERENCE_DATA``
or ``--data`` holds them, skipped cleanly otherwise, and a synthetic log with partial
overlaps and 0 to 3 co-runners; the datasets of ``--no-solo`` again with their solo latencies
removed, as ``NAME, no solo``), the records are streamed in order through a fresh service
(the service's default learner unless ``--predictor``); before each record is learned the service is asked the
admission-time question (co-runners without overlaps, no signals; the solo latency when the
record has one) and the answer is scored after (:mod:`predictor.analysis.admission_replay`).

Printed per dataset and per co-runner count (with counts): coverage of the 0.95 and 0.99
bounds, median width (upper bound / actual latency), MAPE of the predicted latency, and the
MAPE of the solo latency alone (interference ignored) for reference, and, for a deadline of
twice the solo latency, the share of batches whose 0.95 bound admits them and the share of
those that met it (a sharper bound admits more at the same coverage). ``--scaling false``
calibrates one multiplier per cell instead (no learned spread), for comparison.

Then, per dataset, the admission-time MAPE beside two yardsticks (``--yardsticks false``: not run):
the error once the batch ran (a prequential replay of the same records by the same learner) and
the information floor (the same replay of the records as the admission-time question knows them:
every overlap full, no signals; :func:`~predictor.analysis.admission_replay.information_floor`).

``--demo-logs LOG,...``: also each log saved by ``predictor demo --save LOG``, replayed as the demo asked
its questions (:func:`~predictor.analysis.admission_replay.replay_demo`: co-runners by their time
left, the demo's service settings, warm-started from the embedded data, the first ``--demo-warmup``
seconds unscored), beside the same two yardsticks over the warm start and the log.

Run: ``.venv/bin/python -m experiments.studies.admission_replay`` (about a minute); ``--monotone false``
lets each co-runner count use its own centre and width (exact conditional coverage, no
monotonicity guarantee).
"""

from __future__ import annotations

import dataclasses
import time

from experiments.common import finish, start
from experiments.datasets import load
from predictor.analysis.admission_replay import (
    SLO,
    ReplayResult,
    admission_form,
    after_warmup,
    information_floor,
    partial_overlap_records,
    prequential_mape,
    prequential_mape_after,
    replay,
    replay_demo,
)
from predictor.cli.datasets import EMBEDDED_DATASET
from predictor.cli.demo import DEMO_SHAPE_WINDOW
from predictor.predictors import DEFAULT as DEFAULT_PREDICTOR
from predictor.records.logio import read_records
from predictor.service.config import ServiceConfig


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    datasets: tuple[str, ...] = ("cpu-default", "igniter", "gpulet")
    data: str = ""  # folder holding igniter-v100/ and gpulet-ampere/ (empty: $INTERFERENCE_DATA)
    synthetic: int = 4000  # records of the synthetic log (0: none)
    no_solo: tuple[str, ...] = ("igniter", "gpulet")  # also replayed with their solo latencies removed
    predictor: str = DEFAULT_PREDICTOR  # the service's default learner
    monotone: bool = True  # the service's monotone_bounds (False: each count its own centre and width)
    scaling: bool = True  # the service's shape_scaling (False: one multiplier per cell, for comparison)
    seed: int = 0
    block: int = 1  # records per ReportObservations message (1: each learned before the next question; see replay)
    yardsticks: bool = True  # also the error once run and the admission-information floor (two prequential replays)
    demo_logs: tuple[str, ...] = ()  # logs saved by `predictor demo --save LOG`, replayed as the demo asked
    demo_warmup: float = 15.0  # seconds of each demo log unscored (the demo's warm-up)


def table(results: dict) -> str:
    """The results as a Markdown table."""
    lines = [
        "| dataset | slice | n | cov@0.95 | cov@0.99 | width@0.95 | width@0.99 | MAPE % | solo MAPE % "
        f"| admitted @{SLO:g}x solo | met |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        for row in r["rows"]:
            lines.append(
                f"| {name} | {row['slice']} | {row['n']} | {row['cov95']:.4f} | {row['cov99']:.4f} | "
                f"{row['width95']:.3f} | {row['width99']:.3f} | {row['mape']:.1f} | {row['solo_mape']:.1f} | "
                f"{row['admitted']:.1%} | {row['met']:.1%} |"
            )
    return "\n".join(lines)


def yardstick_table(results: dict) -> str:
    """Each dataset's admission-time MAPE beside the error once the batch ran and the information floor."""
    lines = [
        "| dataset | before dispatch | once run (prequential) | ratio | information floor | ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        if "observed_mape" not in r:
            continue
        admission = r["rows"][0]["mape"]
        lines.append(f"| {name} | {admission:.2f}% | {r['observed_mape']:.2f}% | {admission / r['observed_mape']:.2f} | "
                     f"{r['floor_mape']:.2f}% | {admission / r['floor_mape']:.2f} |")
    return "\n".join(lines)


def summary(r: ReplayResult, seconds: float) -> dict:
    """What the results keep of one replay: counts, time, and the scores of each slice."""
    return {
        "records": r.records,
        "answered": r.answered,
        "refused": r.refused,
        "fallback": r.fallback,
        "seconds": seconds,
        "rows": [
            {"slice": label, "n": s.n, "cov95": s.coverage(0.95), "cov99": s.coverage(0.99),
             "width95": s.width(0.95), "width99": s.width(0.99), "mape": s.mape, "solo_mape": s.solo_mape,
             "admitted": s.admission_rate, "met": s.met_rate}
            for label, s in r.rows()
        ],
    }


def main() -> None:
    """Run the study and print its table."""
    config, out = start("admission_replay", Config(), __doc__.splitlines()[0])
    datasets = load(config.datasets, config.data or None)
    for name in config.no_solo:
        if name in datasets:
            datasets[f"{name}, no solo"] = [dataclasses.replace(r, solo_latency_ms=None) for r in datasets[name]]
    if config.synthetic:
        datasets["synthetic-partial"] = partial_overlap_records(config.synthetic, seed=config.seed)
    service_config = ServiceConfig(predictor=config.predictor, snapshot_every_s=0, observation_log=False,
                                   outlier_gate=False, monotone_bounds=config.monotone,
                                   shape_scaling=config.scaling)
    results: dict = {}
    for name, records in datasets.items():
        began = time.perf_counter()
        r = replay(records, name, service_config, block=config.block)
        results[name] = summary(r, time.perf_counter() - began)
        if config.yardsticks:
            results[name]["observed_mape"] = prequential_mape(records, config.predictor)
            results[name]["floor_mape"] = information_floor(records, config.predictor)
        print(f"{name}: {r.records} records, {r.answered} answered, {r.refused} refused (nothing learned yet), "
              f"{r.fallback} from the fallback, {results[name]['seconds']:.1f} s")
    warm = read_records(EMBEDDED_DATASET)[0] if config.demo_logs else []
    demo_config = ServiceConfig(predictor=config.predictor, default_confidence=0.95, coverage_confidence=0.95,
                                shape_window=DEMO_SHAPE_WINDOW, snapshot_every_s=0, observation_log=False)
    for path in config.demo_logs:
        began = time.perf_counter()
        records = read_records(path)[0]
        r = replay_demo(records, demo_config, str(EMBEDDED_DATASET), config.demo_warmup)
        name = f"demo {path}"
        results[name] = summary(r, time.perf_counter() - began)
        if config.yardsticks:
            scored = after_warmup(records, config.demo_warmup)
            results[name]["observed_mape"] = prequential_mape_after(warm, records, config.predictor, scored)
            results[name]["floor_mape"] = prequential_mape_after([admission_form(w) for w in warm],
                                                                 [admission_form(x) for x in records],
                                                                 config.predictor, scored)
        print(f"{name}: {r.answered} scored of {r.records} questions, {results[name]['seconds']:.1f} s")
    print(table(results))
    if config.yardsticks:
        print(yardstick_table(results))
    finish(out, {"config": dataclasses.asdict(config), "datasets": results})


if __name__ == "__main__":
    main()
