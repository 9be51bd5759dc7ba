"""A fleet's learned state: what a snapshot costs to take, to write and to restart from, by fleet size.

For each fleet (``models`` models on a device kind per ten of them, as
:mod:`experiments.bench.bench_scaling` sweeps them), a :class:`~predictor.service.core.Service` with no
log learns ``records`` :func:`~predictor.service.synthetic.fleet_records` in messages of 256; then,
``repeats`` times:

* the state's payload (:meth:`ServiceState.state_payload <predictor.service.state.ServiceState.state_payload>`:
  what is pickled while the state's lock is held, learning waiting);
* the whole snapshot written (:meth:`Service.save_snapshot <predictor.service.core.Service.save_snapshot>`:
  the payload, its checksum, the file, fsync);
* a fresh service restarted from it (:meth:`Service.restore_snapshot
  <predictor.service.core.Service.restore_snapshot>`).

Prints the minimum and median milliseconds of each, the snapshot's size, and each figure over the
first fleet's, whole and per record learned (issue 44 asks for snapshot and restart at 240 models
within 2× of 6 models per record learned). By default every fleet learns the same ``records``;
with ``records_per_model`` each learns that many records a model, as a fleet's traffic grows with it.
The cyclic collector runs as in ``predictor serve`` (``gc_young``: ``--gc-young-threshold``).

Run: ``PYTHONPATH=$PWD .venv/bin/python -m experiments.bench.bench_snapshot`` (about a minute;
``--models 6,240 --records 20000 --repeats 7``).
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from experiments.common import finish, start
from predictor.predictors import DEFAULT
from predictor.runtime.gc_tuning import DEFAULT_YOUNG_THRESHOLD, collector
from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.synthetic import fleet_records

MESSAGE = 256


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    models: tuple[int, ...] = (6, 240)
    records: int = 20_000
    records_per_model: int = 0
    repeats: int = 7
    predictor: str = "default"
    seed: int = 0
    gc_young: int = DEFAULT_YOUNG_THRESHOLD


def _timed(work: Callable[[], object]) -> float:
    begin = time.perf_counter()
    work()
    return time.perf_counter() - begin


def measure(config: Config, models: int, folder: Path) -> dict:
    """Every figure of one fleet, ``config.repeats`` times (seconds), and the snapshot's bytes."""
    predictor = DEFAULT if config.predictor == "default" else config.predictor
    learned = config.records_per_model * models if config.records_per_model else config.records
    records = fleet_records(learned, models=models, device_kinds=max(1, models // 10), max_co_runners=3,
                            seed=config.seed)
    service = Service(ServiceConfig(predictor=predictor, observation_log=False, snapshot_every_s=0))
    service.open()
    for at in range(0, len(records), MESSAGE):
        service.report_observations([(record, "") for record in records[at:at + MESSAGE]])
    del records
    gc.collect()
    path = folder / f"fleet-{models}.snapshot"
    runs: dict[str, list[float]] = {"payload": [], "written": [], "restart": []}
    try:
        for _ in range(config.repeats):
            runs["payload"].append(_timed(service.state.state_payload))
            runs["written"].append(_timed(lambda: service.save_snapshot(path)))
            fresh = Service(ServiceConfig(predictor=predictor, observation_log=False, snapshot_every_s=0))
            fresh.open()
            runs["restart"].append(_timed(lambda fresh=fresh: fresh.restore_snapshot(path)))
            fresh.close()
    finally:
        service.close()
    return {"models": models, "kinds": max(1, models // 10), "records": learned, "bytes": path.stat().st_size,
            "runs": runs}


def main() -> None:
    """Measure every fleet; print the table and write the results."""
    config, out = start("bench_snapshot", Config(), __doc__.splitlines()[0])
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-snapshot-") as folder, collector(config.gc_young):
        for models in config.models:
            results.append(measure(config, models, Path(folder)))
    first = results[0]
    learned = (f"{config.records_per_model:,} records a model" if config.records_per_model
               else f"{config.records:,} records")
    table = Table(title=f"A fleet's state after {learned}: ms, minimum / median of {config.repeats}")
    for column in ("models", "kinds", "records", "MB", "payload", "written", "restart",
                   "written + restart × first fleet", "the same, per record learned"):
        table.add_column(column, justify="right")
    for found in results:
        cells = [f"{1e3 * min(found['runs'][k]):.1f} / {1e3 * statistics.median(found['runs'][k]):.1f}"
                 for k in ("payload", "written", "restart")]

        def both(result: dict) -> float:
            return statistics.median(result["runs"]["written"]) + statistics.median(result["runs"]["restart"])

        ratio = both(found) / both(first)
        table.add_row(str(found["models"]), str(found["kinds"]), f"{found['records']:,}", f"{found['bytes'] / 1e6:.2f}",
                      *cells, f"{ratio:.1f}×", f"{ratio * first['records'] / found['records']:.2f}×")
    Console().print(table)
    finish(out, {"fleets": results})


if __name__ == "__main__":
    main()
