"""Ingest throughput: records learned per CPU second by a real service, by blocks and record by record.

Feeds the first ``max_records`` records of a log, in messages of ``message`` records, to
a fresh :class:`~predictor.service.core.Service` (the default learner, observation log on in a
temporary state directory, fsync as configured) through
:meth:`~predictor.service.core.Service.report_observations`, and measures the CPU
seconds of the ingest (``time.process_time``). Variants, run interleaved ``repeats``
times so that they share the machine's load:

* ``service, per record``: every record ends a block (the path before blocks: each record's
  admission-time questions replayed against the model just before it, learned one by one);
* ``service``: the default configuration: by blocks of a message (``docs/design.md``);
* ``service, no replay``: ``admission_replay=False`` (the admission-time questions about
  each record are not replayed): the share of the replay;
* ``service, no replay, no gate``: also ``outlier_gate=False``;
* ``learning, per record``: the predictor alone, ``predict_learn_one`` per record
  (:func:`~predictor.prequential.evaluation.run_prequential`);
* ``learning, blockwise``: the same steps by the compiled kernel over blocks
  (:func:`~predictor.prequential.blocks.prequential_blocks`; an ensemble's experts each by theirs,
  :func:`~predictor.prequential.tree_blocks.prequential_tree_blocks`).

Reports medians of records per CPU second, each variant's ratio to ``service, per record`` and its
CPU per record as a multiple of ``learning, blockwise`` (issue 42's target for ``service``: at
most 2x). The compiled kernel is loaded once before timing, and the cyclic garbage collector runs
as a serving process runs it (``gc_young``: :func:`~predictor.runtime.gc_tuning.collector`; 0:
Python's own thresholds).

``--fleets 6x1,120x12``: instead, the ``service`` variant alone (no observation log, as
``bench_scaling``'s ingest) on ``max_records`` records of
:func:`~predictor.service.synthetic.fleet_records` per fleet (models x device kinds), interleaved,
each fleet's rate beside the first one's (issue 44: at least 0.7x at 120 models and 12 kinds).
``--warm-records N``: each timed ingest first takes in N other records of its fleet, untimed (the
service in steady state: a fleet's calibration cells, names and layouts mostly met already).

``--stages true``: then one more ``service`` ingest, timed by stage (:func:`stage_costs`).

Figures measured so far: ``docs/performance-history.md`` (Moved from docstrings).

Run: ``PYTHONPATH=$PWD .venv/bin/python -m experiments.bench.bench_ingest --max-records 4096 --out DIR``
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable

from experiments.bench.handler_in_situ import StageClock
from experiments.common import DEFAULT_DATASET, finish, start
from predictor.predictors import DEFAULT, create
from predictor.prequential import tree_blocks
from predictor.prequential.evaluation import run_prequential
from predictor.records.logio import read_records
from predictor.records.record import Record
from predictor.runtime.gc_tuning import DEFAULT_YOUNG_THRESHOLD, collector
from predictor.service.admission import AdmissionCalibration
from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.ingest import MESSAGE_END, Ingest
from predictor.service.synthetic import fleet_records


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    log: str = str(DEFAULT_DATASET)
    max_records: int = 4096
    message: int = 256
    repeats: int = 3
    predictor: str = DEFAULT  # the service's default learner
    gc_young: int = DEFAULT_YOUNG_THRESHOLD
    fleets: tuple[str, ...] = ()
    warm_records: int = 0  # with --fleets: records taken in, untimed, before each timed ingest
    stages: bool = False  # then one more ``service`` ingest, timed by stage (:func:`stage_costs`)


STAGES = ((Ingest, "_take"), (Ingest, "_replays"), (Ingest, "_learn_records"), (Ingest, "_score"),
          (AdmissionCalibration, "observe_block"))
"""What :func:`stage_costs` times: taking a record in (checks, log, dedup), the admission-time replay of
a part, its learning (scoring each record included), the scoring alone, the admission calibrator."""


def stage_costs(records: list[Record], config: Config, service: ServiceConfig) -> dict[str, float]:
    """Thread CPU (µs a record) of each of :data:`STAGES` over one ingest of ``records`` (inclusive:
    ``_score`` runs within ``_learn_records``); the timers add a little to each."""
    clock = StageClock()
    for owner, name in STAGES:
        clock.wrap(owner, name)
    try:
        with collector(config.gc_young):
            ingest_seconds(records, config.message, service)
    finally:
        clock.close()
    return {name: clock.ns[name] / len(records) / 1e3 for _, name in STAGES}


def ingest_seconds(records: list[Record], message: int, config: ServiceConfig, per_record: bool = False,
                   warm: list[Record] | None = None) -> float:
    """CPU seconds a fresh service (observation log on) spends taking in ``records`` in messages of ``message``.

    ``per_record``: each record ends a block (:data:`~predictor.service.ingest.MESSAGE_END` after
    it): the per-record path, each replayed against the model just before it; one sync per message
    as in the block path. ``warm``: records taken in first, untimed."""
    with tempfile.TemporaryDirectory() as state_dir:
        service = Service(config)
        service.open(state_dir)
        service.mark_ready()
        for at in range(0, len(warm or ()), message):
            service.report_observations([(r, "") for r in warm[at:at + message]])  # type: ignore[index]
        learned = 0
        begin = time.process_time()
        for at in range(0, len(records), message):
            chunk = records[at:at + message]
            items = [x for r in chunk for x in ((r, ""), MESSAGE_END)] if per_record else [(r, "") for r in chunk]
            learned += service.report_observations(items).accepted
        seconds = time.process_time() - begin
        service.close()
    if learned == 0:
        raise RuntimeError("the service learned none of the records")
    return seconds


def learning_seconds(records: list[Record], spec: str, blockwise: bool) -> float:
    """CPU seconds of a prequential pass of a fresh ``spec`` predictor over ``records``."""
    predictor = create(spec)
    begin = time.process_time()
    if blockwise:
        tree_blocks.fastest_prequential(predictor, records)
    else:
        run_prequential(predictor, records)
    return time.process_time() - begin


def fleets(config: Config, out) -> None:
    """``--fleets``: the service's ingest of each synthetic fleet, interleaved (see the module)."""
    sets = {}
    for spec in config.fleets:
        models, _, kinds = spec.partition("x")
        if not (models.isdigit() and kinds.isdigit()):
            raise SystemExit(f"--fleets: each fleet is MODELSxKINDS, e.g. 120x12; got {spec!r}")
        sets[spec] = fleet_records(config.warm_records + config.max_records, models=int(models),
                                   device_kinds=int(kinds), seed=0)
    service = ServiceConfig(predictor=config.predictor, observation_log=False, snapshot_every_s=0)
    for records in sets.values():  # the compiled kernels each fleet's sizes take, loaded once
        ingest_seconds(records[:3 * config.message], config.message, service)
    seconds: dict[str, list[float]] = {spec: [] for spec in sets}
    warm = config.warm_records
    with collector(config.gc_young):
        for _ in range(config.repeats):
            for spec, records in sets.items():
                seconds[spec].append(ingest_seconds(records[warm:], config.message, service, warm=records[:warm]))
    rates = {spec: config.max_records / statistics.median(values) for spec, values in seconds.items()}
    first = rates[config.fleets[0]]
    print(f"fleet_records x {config.max_records} (after {warm} untimed), messages of {config.message}, "
          f"median of {config.repeats}")
    print(f"{'models x kinds':<16} {'rec/CPU-s':>10} {'us CPU/rec':>10} {'x first':>8}  us CPU/rec per repeat")
    for spec, rate in rates.items():
        each = " ".join(f"{value / config.max_records * 1e6:.0f}" for value in seconds[spec])
        print(f"{spec:<16} {rate:>10.0f} {1e6 / rate:>10.1f} {rate / first:>8.2f}  {each}")
    finish(out, {"config": dataclasses.asdict(config), "cpu_seconds": seconds, "records_per_cpu_second": rates})


def main() -> None:
    """Measure the variants interleaved and print records per CPU second."""
    config, out = start("bench_ingest", Config(), __doc__.splitlines()[0])
    if config.fleets:
        fleets(config, out)
        return
    records = read_records(config.log)[0][: config.max_records]
    base = ServiceConfig(predictor=config.predictor)
    learning_seconds(records[:300], config.predictor, True)  # load the compiled kernels once, as a running server has
    ingest_seconds(records[:2 * config.message], config.message, base)  # (the calibrator's too)
    variants: dict[str, Callable[[], float]] = {
        "service, per record": lambda: ingest_seconds(records, config.message, base, per_record=True),
        "service": lambda: ingest_seconds(records, config.message, base),
        "service, replay base every 256": lambda: ingest_seconds(
            records, config.message, dataclasses.replace(base, replay_every_records=256)),
        "service, no replay": lambda: ingest_seconds(
            records, config.message, dataclasses.replace(base, admission_replay=False)),
        "service, no replay, no gate": lambda: ingest_seconds(
            records, config.message, dataclasses.replace(base, admission_replay=False, outlier_gate=False)),
        "learning, per record": lambda: learning_seconds(records, config.predictor, False),
        "learning, blockwise": lambda: learning_seconds(records, config.predictor, True),
    }
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    with collector(config.gc_young):
        for _ in range(config.repeats):
            for name, run in variants.items():
                seconds[name].append(run())
    rates = {name: len(records) / statistics.median(values) for name, values in seconds.items()}
    floor = rates["learning, blockwise"]
    print(f"{len(records)} records of {config.log}, messages of {config.message}, median of {config.repeats}")
    print(f"{'variant':<30} {'rec/CPU-s':>10} {'us CPU/rec':>10} {'x per rec':>10} {'CPU x blockwise':>16}"
          "  CPU x blockwise per repeat")
    for name, rate in rates.items():
        each = " ".join(f"{mine / theirs:.2f}" for mine, theirs in zip(seconds[name], seconds["learning, blockwise"],
                                                                      strict=True))
        print(f"{name:<30} {rate:>10.0f} {1e6 / rate:>10.1f} {rate / rates['service, per record']:>10.2f} "
              f"{floor / rate:>16.2f}  {each}")
    stages = stage_costs(records, config, base) if config.stages else {}
    if stages:
        print("service, by stage (thread CPU, us a record, inclusive):",
              ", ".join(f"{name} {value:.1f}" for name, value in stages.items()))
    finish(out, {"config": dataclasses.asdict(config), "records": len(records), "cpu_seconds": seconds,
                 "records_per_cpu_second": rates, "stages_us_per_record": stages})


if __name__ == "__main__":
    main()
