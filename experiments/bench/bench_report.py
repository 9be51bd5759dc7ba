"""Reporting a log to a running service, as a user does: wall time and the server's CPU per record.

Starts a fresh ``predictor serve --warm-start embedded`` (the quickstart's server) per run and reports
the embedded dataset (or ``--log``) to it, one variant at a time, interleaved over ``repeats``:

* ``predictor report LOG``: the command, in a process of its own;
* ``client, records read as they come``: the README quickstart's
  ``client.report_observations(iter_records(LOG))``, in this process;
* ``client, one record a message``: the same with ``per_message=1``: what the client sent before it
  packed the records at hand (the service's per-record path).

Prints, per variant, the median wall time of the report, the server's CPU seconds per record during
it (``/proc``: user + system of the server process) and that CPU beside the one-record-a-message
variant's (measured in the same run).

Run: ``PYTHONPATH=$PWD .venv/bin/python -m experiments.bench.bench_report --repeats 3``
"""

from __future__ import annotations

import dataclasses
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from experiments.bench.bench_workers import start_server
from experiments.bench.cpu_accounting import process_cpu_seconds
from experiments.common import DEFAULT_DATASET, ROOT, finish, start
from predictor.records.logio import iter_records
from predictor.rpc.client import InterferenceClient


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    log: str = str(DEFAULT_DATASET)
    repeats: int = 3


def _command(target: str, log: str) -> None:
    subprocess.run([sys.executable, "-m", "predictor.cli", "report", log, "--target", target, "--quiet"],
                   cwd=ROOT, capture_output=True, check=True)


def _client(per_message: int | None) -> Callable[[str, str], None]:
    def report(target: str, log: str) -> None:
        options = {} if per_message is None else {"per_message": per_message}
        with InterferenceClient(target) as client:
            answer = client.report_observations(iter_records(log), **options)
        if answer.rejected:
            raise RuntimeError(f"the service rejected {answer.rejected} records")
    return report


VARIANTS: dict[str, Callable[[str, str], None]] = {
    "predictor report LOG": _command,
    "client, records read as they come": _client(None),
    "client, one record a message": _client(1),
}


def measure(name: str, log: str, folder: Path) -> tuple[float, float]:
    """Wall seconds of one report of ``log`` to a fresh server, and the server's CPU seconds meanwhile."""
    with tempfile.TemporaryDirectory(dir=folder) as own:  # a folder per server: its port file its own
        proc, target = start_server(Path(own), name, ["--warm-start", "embedded", "--allow-unauthenticated-writes"])
        try:
            cpu, began = process_cpu_seconds(proc.pid), time.perf_counter()
            VARIANTS[name](target, log)
            wall = time.perf_counter() - began
            cpu = process_cpu_seconds(proc.pid) - cpu
        finally:
            proc.terminate()
            proc.wait(30)
    return wall, cpu


def main() -> None:
    """Measure the variants interleaved; print the table and write the results."""
    config, out = start("bench_report", Config(), __doc__.splitlines()[0])
    records = sum(1 for _ in iter_records(config.log))
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(config.repeats):
            for name in VARIANTS:
                runs[name].append(measure(name, config.log, Path(folder)))
    baseline = statistics.median(cpu for _, cpu in runs["client, one record a message"])
    results = {}
    print(f"{records} records of {config.log}, median of {config.repeats}")
    print(f"{'variant':<36} {'wall s':>7} {'records/s':>10} {'server us CPU/record':>21} {'x one a message':>16}")
    for name, measured in runs.items():
        wall, cpu = statistics.median(w for w, _ in measured), statistics.median(c for _, c in measured)
        results[name] = {"wall_s": wall, "server_cpu_s": cpu, "runs": measured}
        print(f"{name:<36} {wall:>7.2f} {records / wall:>10,.0f} {1e6 * cpu / records:>21.0f} {cpu / baseline:>16.2f}")
    finish(out, {"records": records, "variants": results})


if __name__ == "__main__":
    main()
