"""Study: how an admission scheduler fares on a device kind the service has never seen.

For each dataset present (the embedded CPU data; iGniter and Ampere/GPUlet when
``$INTERFERENCE_DATA`` or ``--data`` holds them, skipped cleanly otherwise), a service
warm-starts on the first ``warm_fraction`` of its log (in stream order). The rest is
the *arrival stream*: before each batch runs, a sample scheduler asks ``CheckDeadline`` for it
(its co-runners without overlaps, no signals, its solo latency, a batch id; the deadline
``slo x solo``) and dispatches it when the answer is feasible at ``confidence``, or, for a share
``explore`` of the refusals, anyway. Only the dispatched batches are observed (with their batch
ids, so that the answers given are calibrated on their outcomes): what a scheduler refuses, the
service never learns, as in a real fleet.

Two arms see the same arrivals: ``known``, whose batches run on the warm start's device kind,
and ``new``, the same records relabelled to a device kind the warm start never named (a fleet
adding a machine type). Reported per arm, by phase of the arrival stream: the share admitted,
the share that answered from the unseen-kind fallback, the share of admitted batches that met
their deadline and that the bound covered, and of the refused ones the share that would have
met it (the price of caution); and over the last half, per co-runner count, the median bound
factor (upper bound / prediction) and the share admitted.

Run: ``.venv/bin/python -m experiments.studies.new_device_kind`` (about a minute); writes
``experiments/results/new_device_kind/{config.json,results.json}``.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence

import numpy as np

from experiments.common import finish, start
from experiments.datasets import load
from predictor.analysis.admission_replay import admission_query
from predictor.records.record import Record
from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.types import Deadline

NEW_KIND = "a-kind-never-seen"


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    datasets: tuple[str, ...] = ("cpu-default", "igniter", "gpulet")
    data: str = ""  # folder holding igniter-v100/ and gpulet-ampere/ (empty: $INTERFERENCE_DATA)
    warm_fraction: float = 0.5
    slo: float = 2.5  # deadline = slo x solo latency
    confidence: float = 0.95
    explore: float = 0.05
    phases: tuple[int, ...] = (100, 500, 1500)  # phase ends, in decisions (the last runs to the end)
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Decision:
    """One admission decision and how the batch turned out (or would have)."""

    co_runners: int
    admitted: bool
    fallback: bool
    factor: float  # upper bound / prediction
    covered: bool
    met: bool


def gated_replay(warm: Sequence[Record], arrivals: Sequence[Record], config: Config,
                 kind: str | None = None) -> list[Decision]:
    """The sample scheduler's decisions over ``arrivals`` (relabelled to device kind ``kind``
    when given), the service warm-started on ``warm`` and learning only what it dispatched."""
    service = Service(ServiceConfig(snapshot_every_s=0, observation_log=False))
    service.open()
    try:
        service.report_observations([(record, "") for record in warm])
        rng = random.Random(config.seed)
        decisions = []
        for i, record in enumerate(arrivals):
            if not record.solo_latency_ms:
                continue  # no deadline without a solo latency
            if kind is not None:
                record = dataclasses.replace(record, device_kind=kind)
            batch_id = f"arrival-{i}"
            query = dataclasses.replace(admission_query(record), batch_id=batch_id)  # what it knows before dispatch
            deadline = config.slo * record.solo_latency_ms
            answer = service.check_deadline(query, Deadline(ms=deadline), config.confidence)
            prediction = answer.prediction
            actual = record.latency_ms
            assert actual is not None
            decisions.append(Decision(len(record.co_runners), answer.feasible, prediction.fallback,
                                      prediction.upper_bound_ms / prediction.latency_ms,
                                      actual <= prediction.upper_bound_ms, actual <= deadline))
            if answer.feasible or rng.random() < config.explore:
                service.observe(record, batch_id)
        return decisions
    finally:
        service.close()


def _share(flags: Sequence[bool]) -> float:
    return float(np.mean(flags)) if len(flags) else math.nan


def summary(decisions: list[Decision], phases: Sequence[int]) -> dict:
    """Per phase and, over the last half, per co-runner count (see the module)."""
    ends = [end for end in phases if end < len(decisions)] + [len(decisions)]
    by_phase = {}
    begin = 0
    for end in ends:
        part = decisions[begin:end]
        admitted = [d for d in part if d.admitted]
        refused = [d for d in part if not d.admitted]
        by_phase[f"{begin}-{end}"] = {
            "decisions": len(part), "admitted": _share([d.admitted for d in part]),
            "fallback": _share([d.fallback for d in part]),
            "met_admitted": _share([d.met for d in admitted]), "covered_admitted": _share([d.covered for d in admitted]),
            "would_meet_refused": _share([d.met for d in refused]),
        }
        begin = end
    late = decisions[len(decisions) // 2:]
    by_count = {}
    for count in sorted({d.co_runners for d in late}):
        part = [d for d in late if d.co_runners == count]
        by_count[str(count)] = {"decisions": len(part), "admitted": _share([d.admitted for d in part]),
                                "median_factor": float(np.median([d.factor for d in part]))}
    return {"by_phase": by_phase, "late_by_count": by_count}


def _print(arm: str, result: dict) -> None:
    print(f"\n{arm}: phase (decisions) | admitted | fallback | met (admitted) | covered (admitted) | "
          "would meet (refused)")
    for phase, row in result["by_phase"].items():
        print(f"  {phase:>11} | {row['admitted']:.3f} | {row['fallback']:.3f} | {row['met_admitted']:.3f} | "
              f"{row['covered_admitted']:.3f} | {row['would_meet_refused']:.3f}")
    print(f"{arm}, last half: co-runners | decisions | admitted | median bound / prediction")
    for count, row in result["late_by_count"].items():
        print(f"  {count:>10} | {row['decisions']:>9} | {row['admitted']:.3f} | {row['median_factor']:.2f}")


def run(config: Config, records: Sequence[Record]) -> dict:
    """Both arms over ``records`` (see the module)."""
    cut = int(len(records) * config.warm_fraction)
    warm, arrivals = records[:cut], records[cut:]
    results = {"warm_records": len(warm), "arrivals": len(arrivals), "arms": {}}
    for arm, kind in (("known", None), ("new", NEW_KIND)):
        results["arms"][arm] = summary(gated_replay(warm, arrivals, config, kind), config.phases)
    return results


def main() -> None:
    """Run the study on every dataset present; print the tables and write the results."""
    config, out = start("new_device_kind", Config(), __doc__.splitlines()[0])
    results = {}
    for name, records in load(config.datasets, config.data or None).items():
        print(f"\n== {name}: {len(records)} records")
        results[name] = run(config, records)
        for arm, result in results[name]["arms"].items():
            _print(arm, result)
    finish(out, results)


if __name__ == "__main__":
    main()
