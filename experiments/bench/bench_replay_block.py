"""Ingest's admission-time replay of a block: planned per record against every question planned as a query.

A real :class:`~predictor.service.core.Service` (``rls``, no log) learns the first ``warm``
records of a log by blocks; the next ``blocks`` blocks of ``message`` records are then
replayed against it (nothing more is learned, so every run answers from the same model) by

* ``per question``: :func:`~predictor.service.replay_block.replay_block_per_question`, each
  admission-time question planned as a query (:meth:`Answering.plan_query
  <predictor.service.answering.Answering.plan_query>`): the path before the block planner;
* ``per record``: :meth:`Answering.replay_block
  <predictor.service.answering.Answering.replay_block>`, a record's questions planned once
  (:func:`~predictor.service.replay_block.replay_block`),

interleaved ``repeats`` times. Reports the median microseconds per record (``perf_counter_ns``
and CPU time), the ratio, and whether the two answered the same, bit for bit.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m experiments.bench.bench_replay_block``
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence

from experiments.common import DEFAULT_DATASET, finish, start
from predictor.records.logio import read_records
from predictor.records.record import Record
from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.replay_block import Replayed, replay_block_per_question


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    log: str = str(DEFAULT_DATASET)
    warm: int = 1024
    message: int = 256
    blocks: int = 4
    repeats: int = 5
    predictor: str = "rls"


def _timed(replay: Callable[[Sequence[Record]], Replayed], blocks: list[list[Record]]) -> tuple[float, float, list]:
    """Wall and CPU nanoseconds of replaying every block, and the answers."""
    cpu, wall = time.process_time_ns(), time.perf_counter_ns()
    answers = [replay(block) for block in blocks]
    return time.perf_counter_ns() - wall, time.process_time_ns() - cpu, answers


def _bits(answers: list[Replayed]) -> list:
    return [[[(shape.key, latency.hex()) for shape, latency in q] for q in block] for block in answers]


def main() -> None:
    """Replay the blocks both ways, interleaved, and print microseconds per record."""
    config, out = start("bench_replay_block", Config(), __doc__.splitlines()[0])
    records = read_records(config.log)[0][: config.warm + config.blocks * config.message]
    service = Service(ServiceConfig(predictor=config.predictor, observation_log=False, snapshot_every_s=0))
    service.open()
    for at in range(0, config.warm, config.message):
        service.report_observations([(r, "") for r in records[at:min(at + config.message, config.warm)]])
    answering = service.answers
    blocks = [records[at:at + config.message] for at in range(config.warm, len(records), config.message)]
    n = sum(map(len, blocks))
    variants: dict[str, Callable[[Sequence[Record]], Replayed]] = {
        "per question": lambda block: replay_block_per_question(answering, block),
        "per record": answering.replay_block,
    }
    for replay in variants.values():  # warm: compiled kernels and caches, as in a running server
        replay(blocks[0])
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    answers: dict[str, list] = {}
    for _ in range(config.repeats):
        for name, replay in variants.items():
            w, c, answers[name] = _timed(replay, blocks)
            wall[name].append(w / n / 1e3)
            cpu[name].append(c / n / 1e3)
    same = _bits(answers["per question"]) == _bits(answers["per record"])
    questions = sum(len(q) for block in answers["per record"] for q in block)
    print(f"{n} records ({questions} questions answered) of {config.log}, blocks of {config.message} "
          f"after {config.warm} learned, median of {config.repeats}")
    print(f"{'variant':<14} {'us/rec wall':>12} {'us/rec CPU':>12}")
    medians = {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in variants}
    for name, (w, c) in medians.items():
        print(f"{name:<14} {w:>12.1f} {c:>12.1f}")
    ratio = medians["per question"][1] / medians["per record"][1]
    print(f"per record is {ratio:.2f}x cheaper (CPU); the same answers bit for bit: {same}")
    service.close()
    finish(out, {"config": dataclasses.asdict(config), "records": n, "questions": questions,
                 "wall_us_per_record": wall, "cpu_us_per_record": cpu, "ratio_cpu": ratio, "identical": same})
    if not same:
        raise SystemExit("the two replays answered differently")


if __name__ == "__main__":
    main()
