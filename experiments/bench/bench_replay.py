"""Replay throughput: ``predictor replay`` end to end, each run beside a process that only reads the file.

Resamples a log (by default the shipped dataset) with replacement into a compressed log of
``n_records`` lines, giving each a fresh increasing ``start_s`` so it is a time-ordered stream, then,
``repeats`` times, interleaved:

* the floor: a Python process that only gunzips the log and ``json.loads`` each line;
* each of ``runs``: ``predictor replay LOG --predictor NAME [FLAGS]`` as a process of its own (the
  default protocol, the 75/25 split, unless a run says ``--prequential``).

Start-up, ``repeats`` times beside the same runs: the CPU of ``predictor --help`` and of each run over the
log's first ``startup_records`` records (what a call costs before its records do), beside the floor's
over them.

Reports per run the median and spread (lowest, highest) of its records per second and their ratio
to the floor of the same repeat, of its CPU per record (every thread of the process, start-up
included) and the floor's CPU over it (the ratio per core), and the ratio of the default split to
the default prequential replay. Wall-clock figures on a shared machine move with its load: read
the ratios, each taken against the floor of its own repeat, and on a loaded machine the CPU ones.

Run: ``.venv/bin/python -m experiments.bench.bench_replay`` (``--n-records 200000 --repeats 3``,
``--keep-log true``: the resampled log kept for the next run;
``--runs "rls --prequential,rls,solo"``: a run is a predictor spec, then any ``predictor replay`` flags;
``default`` names the default learner, :data:`predictor.predictors.DEFAULT`, whose spec holds a comma)
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from experiments.common import DEFAULT_DATASET, ROOT, finish, relative, start
from predictor.predictors.registry import DEFAULT
from predictor.records.logio import RecordWriter, iter_records, read_records

FLOOR = ("import gzip, json, sys\n"
         "with gzip.open(sys.argv[1], 'rt', encoding='utf-8') as stream:\n"
         "    print(sum(1 for line in stream if json.loads(line)))\n")
"""The floor's program: gunzip the log and ``json.loads`` each line (what any reader of it must do)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    source: str = str(DEFAULT_DATASET)
    n_records: int = 200_000
    runs: tuple[str, ...] = ("rls --prequential", "rls", "default", "default --prequential", "solo", "static", "ewma",
                             "sgd", "sgd --prequential")
    repeats: int = 3
    seed: int = 0
    keep_log: bool = False
    startup_records: int = 1000


def resample(source: str, target, n: int, seed: int) -> None:
    """Write ``n`` records drawn with replacement from ``source`` to ``target``, ``start_s`` 10 ms apart."""
    records, _ = read_records(source)
    rng = random.Random(seed)
    with RecordWriter(target) as writer:
        for i in range(n):
            writer.write(dataclasses.replace(rng.choice(records), start_s=float(i) * 0.01))


def startup(log: Path, out: Path, config: Config) -> dict[str, dict[str, float]]:
    """CPU seconds (median, lowest, highest of ``repeats``) of ``predictor --help``, of the floor and of
    each run over the first ``startup_records`` records of ``log``."""
    small = out / f"first-{config.startup_records}.jsonl.gz"
    with RecordWriter(small) as writer:
        for record in itertools.islice(iter_records(log), config.startup_records):
            writer.write(record)
    commands = {"predictor --help": [sys.executable, "-m", "predictor.cli", "--help"],
                "floor": [sys.executable, "-c", FLOOR, str(small)],
                **{run: replay_command(small, run) for run in config.runs}}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(config.repeats):
        for name, command in commands.items():
            cpu[name].append(timed_process(command)[1])
    small.unlink()
    return {name: spread(values) for name, values in cpu.items()}


def timed_process(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, every thread) of running ``command`` from the repository root."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - begin
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def replay_command(log: Path, run: str) -> list[str]:
    """The ``predictor replay`` command of ``run`` (``"SPEC [FLAGS]"``; the spec ``default``: :data:`DEFAULT`)."""
    spec, *flags = shlex.split(run)
    spec = DEFAULT if spec == "default" else spec
    return [sys.executable, "-m", "predictor.cli", "replay", relative(log.resolve()), "--predictor", spec, *flags]


def spread(values: list[float]) -> dict[str, float]:
    """Median, lowest and highest of ``values``."""
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


def main() -> None:
    """Resample the log; time the floor and every run, interleaved; print and write the results."""
    config, out = start("bench_replay", Config(), __doc__.splitlines()[0])
    log = out / f"resampled-{config.n_records}.jsonl.gz"
    if not log.exists():
        resample(config.source, log, config.n_records, config.seed)
    n = config.n_records
    subprocess.run(replay_command(log, "rls --prequential"), check=True, stdout=subprocess.DEVNULL,
                   cwd=ROOT)  # compiled kernels cached on disk before any timing
    repeats: list[dict[str, dict[str, float]]] = []
    for repeat in range(config.repeats):
        wall, cpu = timed_process([sys.executable, "-c", FLOOR, str(log)])
        floor = {"records_per_s": n / wall, "cpu_us_per_record": 1e6 * cpu / n, "ratio_to_floor": 1.0,
                 "cpu_ratio_to_floor": 1.0}
        measured = {"floor": floor}
        for run in config.runs:
            wall, cpu = timed_process(replay_command(log, run))
            measured[run] = {"records_per_s": n / wall, "cpu_us_per_record": 1e6 * cpu / n,
                             "ratio_to_floor": n / wall / floor["records_per_s"],
                             "cpu_ratio_to_floor": floor["cpu_us_per_record"] / (1e6 * cpu / n)}
        repeats.append(measured)
        print(f"repeat {repeat + 1}: " + ", ".join(f"{name} {m['ratio_to_floor']:.2f}x" for name, m in measured.items()))
    summary = {name: {key: spread([r[name][key] for r in repeats]) for key in repeats[0][name]}
               for name in repeats[0]}
    print(f"{n:,} records, median (lowest-highest) of {config.repeats} repeats, each beside the floor of its repeat")
    print(f"{'run':<26} {'rec/s':>9} {'x floor':>17} {'us CPU/rec':>18} {'x floor, CPU':>17}")
    for name, figures in summary.items():
        rate, ratio, cpu, per_cpu = (figures[k] for k in ("records_per_s", "ratio_to_floor", "cpu_us_per_record",
                                                          "cpu_ratio_to_floor"))
        print(f"{name:<26} {rate['median']:>9,.0f} {ratio['median']:>5.2f} ({ratio['low']:.2f}-{ratio['high']:.2f})"
              f" {cpu['median']:>6.1f} ({cpu['low']:.1f}-{cpu['high']:.1f})"
              f" {per_cpu['median']:>5.2f} ({per_cpu['low']:.2f}-{per_cpu['high']:.2f})")
    results: dict = {"n_records": n, "repeats": repeats, "summary": summary}
    if config.startup_records:
        results["startup_cpu_s"] = started = startup(log, out, config)
        print(f"start-up: CPU seconds over the first {config.startup_records:,} records, median (lowest-highest)")
        for name, figures in started.items():
            print(f"{name:<26} {figures['median']:>6.2f} ({figures['low']:.2f}-{figures['high']:.2f})")
    if "rls" in summary and "rls --prequential" in summary:
        split = spread([r["rls"]["records_per_s"] / r["rls --prequential"]["records_per_s"] for r in repeats])
        results["split_over_prequential"] = split
        print(f"split / prequential (rls): {split['median']:.2f} ({split['low']:.2f}-{split['high']:.2f})")
    if not config.keep_log:
        log.unlink()
    finish(out, results)


if __name__ == "__main__":
    main()
