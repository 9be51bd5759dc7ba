"""The garbage collector's thresholds: answers seen open loop while the same process learns at full speed.

Starts the bench's service (:func:`experiments.bench.rpc_servers.service_main`: ``rls``, 2,000 warm-up
records, observation log on) once per collector setting of ``thresholds`` (``--gc-young-threshold``
of ``predictor serve``: 0 is Python's collector as it is, thresholds 700/10/10 and nothing frozen;
10,000 is the service's default, with start-up frozen: :mod:`predictor.runtime.gc_tuning`), then,
``rounds`` times interleaved over the settings, runs side by side for ``seconds``:

* a ``grpc.aio`` client process sending PredictLatency at ``rate`` calls/s, each call at its
  scheduled time whatever became of the earlier ones (latency from that time: no coordinated
  omission), the scheduler's view;
* a second client streaming 256-record ReportObservations messages as fast as they are taken.

Prints per setting and round the answers' p50, p99, p99.9 and maximum, and the records/s learned.

Measured on the shared 2-core machine (2026-11-24, 300 calls/s, 8 s, 3 rounds): Python's collector
p99 49-59 ms, p99.9 61-68, max 66-70, ingest 7,749-7,939 rec/s; 10,000 with start-up frozen p99
10.7-14.5 ms, p99.9 23-39, max 29-43, ingest 8,159-8,260 rec/s (p50 3.1-3.3 ms either way).
10,000 without freezing: p99 11.8-22.5 ms; 50,000 with freezing: no better than 10,000. Inside one
such process (a learner thread at full speed, 8 s): Python's collector ran ~700 young collections
of ~0.4 ms each and 3 full ones of up to 89 ms (424 ms in all); at 10,000 with start-up frozen, 8
young ones (9 ms) and no pause over 6 ms.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m experiments.bench.bench_gc``
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from experiments.bench import bench_rpc
from experiments.bench.rpc_load import ClientPool
from experiments.bench.rpc_servers import ServerProcess, service_main
from experiments.common import finish, start
from predictor.rpc.names import METHOD_PREFIX

BATCH = 256
"""Records per ReportObservations message."""


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    thresholds: tuple[int, ...] = (0, 10_000)
    rate: float = 300.0
    seconds: float = 8.0
    rounds: int = 3
    seed: int = 0


@contextlib.contextmanager
def served(seed: int, **settings: Any) -> Iterator[ServerProcess]:
    """The bench's service (``rls``, 2,000 warm-up records, 8 handler threads, metrics, a fresh state
    folder: the observation log on) in a process of its own, with ``settings`` added to its spec."""
    spec = {"predictor": "rls", "outlier_gate": True, "warm_records": 2000, "seed": seed,
            "devices": bench_rpc.DEVICES, "server": "thread", "max_workers": 8, "metrics": True,
            "max_candidates": 1024}
    with tempfile.TemporaryDirectory(prefix="bench-") as state:
        server = ServerProcess(service_main, {**spec, "state_dir": state, **settings})
        try:
            yield server
        finally:
            server.stop()


def measure(pool: ClientPool, server: ServerProcess, requests: dict[str, list[bytes]], config: Config) -> dict:
    """One round: the open-loop answers' percentiles (ms) and the stream's records/s, side by side."""
    stream = requests["ReportObservations (batched)"] * 3  # outlasts the answers' seconds
    query = {"kind": "open_async", "path": METHOD_PREFIX + "PredictLatency", "requests": requests["PredictLatency"],
             "rate": config.rate, "duration_s": config.seconds, "target": server.target, "timeout_s": 10.0}
    ingest = {"kind": "stream", "path": METHOD_PREFIX + "ReportObservations", "messages": stream,
              "target": server.target}
    answers, streamed = pool.run([query, ingest])
    latency = 1e3 * answers["corrected"][answers["codes"] == 0]
    records = len(stream) * BATCH
    return {"answered": int(latency.size), "calls": int(answers["codes"].size),
            **{f"p{q:g}_ms": float(np.percentile(latency, q)) for q in (50, 99, 99.9)},
            "max_ms": float(latency.max()), "ingest_per_s": records / streamed["elapsed"]}


def main() -> None:
    """Measure every setting, interleaved, and print a line per setting and round."""
    config, out = start("bench_gc", Config(), __doc__.splitlines()[0])
    requests = bench_rpc.build_requests(bench_rpc.Config(ingest_records=100 * BATCH, ingest_batch=BATCH,
                                                         seed=config.seed))
    pool = ClientPool(2)
    results: dict[int, list[dict]] = {young: [] for young in config.thresholds}
    try:
        for round_ in range(config.rounds):
            for young in config.thresholds:
                with served(config.seed, gc_young_threshold=young) as server:
                    row = measure(pool, server, requests, config)
                results[young].append(row)
                name = "Python's collector" if young == 0 else f"young every {young:,}, start-up frozen"
                print(f"round {round_ + 1} {name:<36} answered {row['answered']}/{row['calls']}  "
                      f"p50 {row['p50_ms']:.2f}  p99 {row['p99_ms']:.2f}  p99.9 {row['p99.9_ms']:.2f}  "
                      f"max {row['max_ms']:.1f} ms;  ingest {row['ingest_per_s']:,.0f} rec/s", flush=True)
    finally:
        pool.close()
    finish(out, {"config": dataclasses.asdict(config), "results": {str(k): v for k, v in results.items()}})


if __name__ == "__main__":
    main()
