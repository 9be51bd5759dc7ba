"""The learner's pauses for answers (``--learner-yield-ms``): answers while the same process learns.

Starts the bench's service (:func:`experiments.bench.rpc_servers.service_main`: ``rls``, 2,000 warm-up
records, observation log on, the collector tuned) once per period of ``periods`` (0: the learner
never pauses; :mod:`predictor.runtime.gil_yield`), and, ``rounds`` times interleaved over the periods,
measures side by side with a second client streaming 256-record ReportObservations messages as
fast as they are taken:

* ``sequential``: one client sending PredictLatency back to back for ``seconds`` (the bench's
  "p99 while 1 client ingests" row);
* ``open loop``: a ``grpc.aio`` client sending PredictLatency at ``rate`` calls/s, each call at
  its scheduled time (:func:`experiments.bench.bench_gc.measure`), the scheduler's view.

Prints per period and round each client's p50, p99, p99.9 and maximum, and the records/s learned.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m experiments.bench.bench_learner_yield``
"""

from __future__ import annotations

import dataclasses

import numpy as np

from experiments.bench import bench_gc, bench_rpc
from experiments.bench.rpc_load import ClientPool
from experiments.bench.rpc_servers import ServerProcess
from experiments.common import finish, start
from predictor.rpc.names import METHOD_PREFIX


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    periods: tuple[float, ...] = (0.0, 1.0, 0.5)
    rate: float = 300.0
    seconds: float = 8.0
    rounds: int = 3
    seed: int = 0


def sequential(pool: ClientPool, server: ServerProcess, requests: dict[str, list[bytes]], config: Config) -> dict:
    """One round: a back-to-back PredictLatency client's percentiles (ms) beside the stream's records/s."""
    stream = requests["ReportObservations (batched)"] * 3
    query = {"kind": "closed", "path": METHOD_PREFIX + "PredictLatency", "requests": requests["PredictLatency"],
             "duration_s": config.seconds, "target": server.target}
    ingest = {"kind": "stream", "path": METHOD_PREFIX + "ReportObservations", "messages": stream,
              "target": server.target}
    answers, streamed = pool.run([query, ingest])
    latency = 1e3 * np.asarray(answers["latency"])
    return {"answered": int(latency.size), **{f"p{q:g}_ms": float(np.percentile(latency, q)) for q in (50, 99, 99.9)},
            "max_ms": float(latency.max()), "ingest_per_s": len(stream) * bench_gc.BATCH / streamed["elapsed"]}


def main() -> None:
    """Measure every period, interleaved, and print a line per period, client and round."""
    config, out = start("bench_learner_yield", Config(), __doc__.splitlines()[0])
    requests = bench_rpc.build_requests(bench_rpc.Config(ingest_records=100 * bench_gc.BATCH,
                                                         ingest_batch=bench_gc.BATCH, seed=config.seed))
    pool = ClientPool(2)
    results: dict[str, list[dict]] = {}
    try:
        for round_ in range(config.rounds):
            for period in config.periods:
                with bench_gc.served(config.seed, learner_yield_ms=period) as server:
                    rows = {"sequential": sequential(pool, server, requests, config),
                            "open loop": bench_gc.measure(pool, server, requests,
                                                          bench_gc.Config(rate=config.rate, seconds=config.seconds))}
                name = "never" if period == 0 else f"every {period:g} ms"
                for client, row in rows.items():
                    results.setdefault(f"{period:g} {client}", []).append(row)
                    print(f"round {round_ + 1} pause {name:<12} {client:<10} answered {row['answered']:>6}  "
                          f"p50 {row['p50_ms']:.2f}  p99 {row['p99_ms']:.2f}  p99.9 {row['p99.9_ms']:.2f}  "
                          f"max {row['max_ms']:.1f} ms;  ingest {row['ingest_per_s']:,.0f} rec/s", flush=True)
    finally:
        pool.close()
    finish(out, {"config": dataclasses.asdict(config), "results": results})


if __name__ == "__main__":
    main()
