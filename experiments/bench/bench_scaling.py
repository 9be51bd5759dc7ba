"""Cost as the fleet grows: replay and ingest over models, device kinds and co-runners, beside a floor.

For each point of three sweeps (the number of models, with a device kind per ten models; the
number of device kinds at 6 models; the most co-runners a batch has at 6 models), writes a log of
``records`` records of :func:`~predictor.service.synthetic.fleet_records` (slowdown linear in the
overlap-weighted co-runner pressure, 3% noise) and measures, ``repeats`` times, in this process:

* the floor: gunzip and ``json.loads`` every line of the same file;
* ``predictor replay LOG --prequential`` (:func:`~predictor.prequential.tree_blocks.replay_log`,
  the learner ``predictor``) and ``predictor replay LOG`` (its 75/25 split, the CLI's own
  :func:`~predictor.cli.evaluate.score`);
* ingest: a :class:`~predictor.service.core.Service` (no log, no snapshots) learning the records
  in ``ReportObservations`` messages of 256 (in process, no gRPC: the service's own work);
* the learned state: its snapshot's size, the time to write it and to restart a service from it.

Each figure is records/s and microseconds of CPU (all threads) per record, with its ratio to the
floor of the same repeat; medians and spreads over the repeats. Writes ``results.json`` and PNG
plots (``scaling-*.png``) under ``experiments/results/scaling/``.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m experiments.bench.bench_scaling`` (``--quick true``: a
test-sized run).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from experiments.common import finish, start  # noqa: E402
from predictor.cli.evaluate import score  # noqa: E402
from predictor.prequential.tree_blocks import replay_log  # noqa: E402
from predictor.records.logio import RecordWriter, iter_rows  # noqa: E402
from predictor.service.config import ServiceConfig  # noqa: E402
from predictor.service.core import Service  # noqa: E402
from predictor.service.synthetic import fleet_records  # noqa: E402

MESSAGE = 256


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    records: int = 20_000
    repeats: int = 3
    predictor: str = "rls"
    models: tuple[int, ...] = (6, 12, 30, 60, 120, 240)
    kinds: tuple[int, ...] = (1, 2, 4, 8, 16)
    co_runners: tuple[int, ...] = (0, 1, 2, 4, 8)
    seed: int = 0
    quick: bool = False


QUICK = dict(records=1_500, repeats=1, models=(6, 30), kinds=(1, 4), co_runners=(0, 3))


def _timed(work) -> tuple[float, float, object]:
    """Wall and CPU seconds of ``work()``, and its result."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = work()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def _floor(log: Path) -> int:
    with gzip.open(log, "rt", encoding="utf-8") as stream:
        return sum(1 for line in stream if json.loads(line))


def _split(log: Path, predictor: str) -> int:
    args = argparse.Namespace(prequential=False, split=0.75, seed=0, keep_learning=False, serial=False)
    rows = list(iter_rows(log))
    score(predictor, rows, args, lambda _n: None)
    return len(rows)


def _ingest_and_state(records, predictor: str, folder: Path) -> dict:
    """Ingest ``records`` into a fresh service; then snapshot it and restart another from the snapshot."""
    service = Service(ServiceConfig(predictor=predictor, observation_log=False, snapshot_every_s=0))
    service.open()
    try:
        def ingest():
            for at in range(0, len(records), MESSAGE):
                service.report_observations([(r, "") for r in records[at:at + MESSAGE]])
        wall, cpu, _ = _timed(ingest)
        path = folder / "service.snapshot"
        save_wall, _, _ = _timed(lambda: service.save_snapshot(path))
    finally:
        service.close()
    fresh = Service(ServiceConfig(predictor=predictor, observation_log=False, snapshot_every_s=0))

    def restart():
        fresh.open()
        fresh.restore_snapshot(path)
    restore_wall, _, _ = _timed(restart)
    fresh.close()
    return {"ingest_wall_s": wall, "ingest_cpu_s": cpu, "snapshot_bytes": path.stat().st_size,
            "snapshot_s": save_wall, "restart_s": restore_wall}


def measure(config: Config, models: int, kinds: int, co_runners: int, folder: Path) -> dict:
    """Every figure of one point, ``config.repeats`` times; medians, spreads and the raw repeats."""
    records = fleet_records(config.records, models=models, device_kinds=kinds, max_co_runners=co_runners,
                            seed=config.seed)
    log = folder / "fleet.jsonl.gz"
    with RecordWriter(log) as writer:
        for record in records:
            writer.write(record)
    replay_log(log, config.predictor)  # compiled kernels loaded
    runs = []
    for _ in range(config.repeats):
        run: dict = {}
        for name, work in (("floor", lambda: _floor(log)),
                           ("prequential", lambda: len(replay_log(log, config.predictor).measured)),
                           ("split", lambda: _split(log, config.predictor))):
            wall, cpu, n = _timed(work)
            run[name] = {"records_per_s": n / wall, "cpu_us_per_record": 1e6 * cpu / n}
        state = _ingest_and_state(records, config.predictor, folder)
        n = len(records)
        run["ingest"] = {"records_per_s": n / state["ingest_wall_s"], "cpu_us_per_record": 1e6 * state["ingest_cpu_s"] / n}
        run["state"] = {k: state[k] for k in ("snapshot_bytes", "snapshot_s", "restart_s")}
        for name in ("prequential", "split", "ingest"):
            run[name]["ratio_to_floor"] = run[name]["records_per_s"] / run["floor"]["records_per_s"]
        runs.append(run)
    summary: dict = {"models": models, "kinds": kinds, "co_runners": co_runners, "runs": runs}
    for name in ("floor", "prequential", "split", "ingest", "state"):
        for key in runs[0][name]:
            values = [r[name][key] for r in runs]
            summary[f"{name}.{key}"] = statistics.median(values)
            summary[f"{name}.{key}.spread"] = (min(values), max(values))
    print(f"models {models:4d} kinds {kinds:3d} co-runners {co_runners}: floor "
          f"{summary['floor.records_per_s']:9,.0f}/s | prequential {summary['prequential.records_per_s']:8,.0f}/s "
          f"({summary['prequential.ratio_to_floor']:.2f}x, {summary['prequential.cpu_us_per_record']:.0f} us) | "
          f"split {summary['split.records_per_s']:8,.0f}/s ({summary['split.ratio_to_floor']:.2f}x) | ingest "
          f"{summary['ingest.records_per_s']:7,.0f}/s ({summary['ingest.cpu_us_per_record']:.0f} us) | state "
          f"{summary['state.snapshot_bytes'] / 1e6:.2f} MB, restart {1e3 * summary['state.restart_s']:.0f} ms",
          flush=True)
    return summary


def plot(points: list[dict], axis: str, label: str, path: Path) -> None:
    """Records/s (against the floor) and CPU per record of each path over ``axis``."""
    xs = [p[axis] for p in points]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name in ("floor", "prequential", "split", "ingest"):
        left.plot(xs, [p[f"{name}.records_per_s"] for p in points], marker="o", label=name)
        right.plot(xs, [p[f"{name}.cpu_us_per_record"] for p in points], marker="o", label=name)
    for ax, ylabel in ((left, "records/s"), (right, "us of CPU per record")):
        ax.set_xlabel(label)
        ax.set_ylabel(ylabel)
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    left.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    """Run the three sweeps; print, plot and write the results."""
    config, out = start("scaling", Config(), __doc__.splitlines()[0])
    if config.quick:
        config = dataclasses.replace(config, **QUICK)
    results: dict = {"records": config.records, "predictor": config.predictor}
    sweeps = (("models", [(m, max(1, m // 10), 3) for m in config.models], "models (a device kind per 10)"),
              ("kinds", [(6, k, 3) for k in config.kinds], "device kinds (6 models)"),
              ("co_runners", [(6, 1, c) for c in config.co_runners], "most co-runners per batch (6 models)"))
    with tempfile.TemporaryDirectory() as folder:
        for name, points, label in sweeps:
            results[name] = [measure(config, m, k, c, Path(folder)) for m, k, c in points]
            plot(results[name], {"models": "models", "kinds": "kinds", "co_runners": "co_runners"}[name], label,
                 out / f"scaling-{name}.png")
    finish(out, results)


if __name__ == "__main__":
    main()
