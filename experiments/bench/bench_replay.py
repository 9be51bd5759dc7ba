"""Replay throughput: ``predictor replay`` on about a million records, end to end.

Resamples a log (by default the shipped dataset) with replacement into a
compressed log of ``n_records`` lines, giving each a fresh increasing
``start_s`` so it is a time-ordered stream, then measures in one run:

* the floor: reading and validating the compressed log (no prediction);
* ``predictor replay LOG --predictor rls --prequential`` end to end;
* the same with the ``fine`` feature set (smaller model).

Reports records per second and the ratio of each replay to the floor.

Run: ``.venv/bin/python -m experiments.bench.bench_replay`` (``--n-records 1000000``)
"""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys
import time

from experiments.common import DEFAULT_DATASET, ROOT, finish, relative, start
from predictor.records.logio import RecordWriter, iter_records, read_records


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    source: str = str(DEFAULT_DATASET)
    n_records: int = 1_000_000
    predictors: tuple[str, ...] = ("rls", "rls:features='fine'", "sgd")
    seed: int = 0


def resample(source: str, target, n: int, seed: int) -> None:
    """Write ``n`` records drawn with replacement from ``source`` to ``target``, ``start_s`` 10 ms apart."""
    records, _ = read_records(source)
    rng = random.Random(seed)
    with RecordWriter(target) as writer:
        for i in range(n):
            writer.write(dataclasses.replace(rng.choice(records), start_s=float(i) * 0.01))


def main() -> None:
    """Resample the log, time the read floor and each ``predictor replay``; print and write the results."""
    config, out = start("bench_replay", Config(), __doc__.splitlines()[0])
    log = out / f"resampled-{config.n_records}.jsonl.gz"
    if not log.exists():
        resample(config.source, log, config.n_records, config.seed)
    begin = time.perf_counter()
    n = sum(1 for _ in iter_records(log))
    floor = n / (time.perf_counter() - begin)
    results: dict = {"n_records": n, "read_and_validate_per_s": floor, "replay": {}}
    print(f"floor: read and validate {n:,} records at {floor:,.0f} records/s")
    for spec in config.predictors:
        summary = out / f"replay-{spec.split(':')[0]}-{len(results['replay'])}.json"
        begin = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "predictor.cli", "replay", relative(log.resolve()), "--predictor", spec,
             "--prequential", "--json", str(summary.resolve())],
            check=True, stdout=subprocess.DEVNULL, cwd=ROOT,  # from the root: the summary names the log relatively
        )
        rate = n / (time.perf_counter() - begin)
        results["replay"][spec] = {"records_per_s": rate, "ratio_to_floor": rate / floor}
        print(f"replay {spec}: {rate:,.0f} records/s end to end ({rate / floor:.2f} x the read floor)")
    log.unlink()
    finish(out, results)


if __name__ == "__main__":
    main()
