"""Study 5: coverage of the conformal bounds, and the deadline decisions they give.

For every dataset, records are replayed in stream order (shuffled with the
seed when they carry no time order); for each record the predictor predicts,
the calibrator gives upper bounds at 90, 95 and 99% from residuals of earlier
records only, and a deadline is drawn as ``solo x U(slack_low, slack_high)``
(so some batches can meet it and some cannot). Then the truth is revealed:
the calibrator takes the residual and the predictor learns.

Reported per dataset and confidence ``c``:

* coverage: fraction of latencies at or below the bound (target ``c``);
* false-accept rate: of the batches answered *feasible* (bound <= deadline),
  the fraction that missed the deadline (target at most ``1 - c``);
* false-reject rate: of the batches answered *infeasible*, the fraction that
  would have met it (the price of caution);
* the same two as fractions of all decisions, and the acceptance rate.

The first ``warmup`` records are only learned from (no decisions scored).

Run: ``.venv/bin/python -m experiments.studies.calibration_decisions``
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np

from experiments.common import finish, start
from experiments.datasets import collected_names, load
from predictor.calibration.conformal import ConformalCalibrator
from predictor.predictors import create
from predictor.prequential.evaluation import has_time_order
from predictor.records.record import Record


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    datasets: tuple[str, ...] = ("cpu-default", "igniter", "gpulet")
    data: str = ""  # folder holding igniter-v100/ and gpulet-ampere/ (empty: $INTERFERENCE_DATA)
    include_collected: bool = True
    predictor: str = "rls"
    confidences: tuple[float, ...] = (0.9, 0.95, 0.99)
    slack_low: float = 1.0
    slack_high: float = 2.5
    warmup: int = 200
    seed: int = 0


def replay(records: list[Record], config: Config) -> dict:
    """Coverage and decision rates of one dataset's replay, per confidence (as in the module docstring)."""
    rng = random.Random(config.seed)
    if not has_time_order(records):
        records = list(records)
        rng.shuffle(records)
    predictor = create(config.predictor, seed=config.seed)
    calibrator = ConformalCalibrator()
    rows = []
    for i, record in enumerate(records):
        predicted = predictor.predict_one(record)
        solo = predictor.solo_latency(record)
        deadline = solo * rng.uniform(config.slack_low, config.slack_high)
        if i >= config.warmup:
            bounds = [calibrator.upper_bound(predicted, record.device_kind, c).upper_ms for c in config.confidences]
            rows.append((record.latency_ms, deadline, *bounds))
        calibrator.add(record.device_kind, record.latency_ms, predicted)
        predictor.learn_one(record)
    table = np.array(rows)
    actual, deadline = table[:, 0], table[:, 1]
    met = actual <= deadline
    out = {"n": int(len(rows)), "deadline_met_rate": float(met.mean())}
    for j, confidence in enumerate(config.confidences):
        upper = table[:, 2 + j]
        accepted = upper <= deadline
        false_accept = accepted & ~met
        false_reject = ~accepted & met
        out[f"{confidence:g}"] = {
            "coverage": float((actual <= upper).mean()),
            "accept_rate": float(accepted.mean()),
            "false_accept_rate": float(false_accept.sum() / max(accepted.sum(), 1)),
            "false_reject_rate": float(false_reject.sum() / max((~accepted).sum(), 1)),
            "false_accepts_of_all": float(false_accept.mean()),
            "false_rejects_of_all": float(false_reject.mean()),
        }
    return out


def markdown(results: dict, confidences: tuple[float, ...]) -> str:
    """One table row per dataset and confidence."""
    lines = ["| dataset | confidence | coverage | accepted | false accepts (of accepted) | "
             "false rejects (of rejected) | n |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        for c in confidences:
            e = r[f"{c:g}"]
            lines.append(f"| {name} | {c:.0%} | {e['coverage']:.2%} | {e['accept_rate']:.1%} | "
                         f"{e['false_accept_rate']:.2%} | {e['false_reject_rate']:.1%} | {r['n']} |")
    return "\n".join(lines)


def main() -> None:
    """Replay every dataset; print the table, write ``results.md`` and ``results.json``."""
    config, out = start("calibration_decisions", Config(), __doc__.splitlines()[0])
    names = list(config.datasets) + (collected_names() if config.include_collected else [])
    results = {name: replay(records, config) for name, records in load(list(dict.fromkeys(names)), config.data).items()}
    text = markdown(results, config.confidences)
    print(text)
    (out / "results.md").write_text(text + "\n")
    finish(out, {"predictor": config.predictor, "datasets": results})


if __name__ == "__main__":
    main()
