"""Answers while ingest runs: PredictLatency p50/p99 idle and under a full-speed ReportObservations stream.

Starts ``predictor serve --workers N`` for each N of ``workers`` side by side (as
:mod:`experiments.bench.bench_workers` does, warm-started alike). Then, ``repeats`` times and
interleaved over the servers and the two conditions, ``clients`` sequential client processes
(:class:`experiments.bench.rpc_load.ClientPool`, each its own connection) call PredictLatency back to
back for ``duration_s``:

* **idle**: nothing else runs;
* **ingest**: one more client process sends ReportObservations as fast as the server takes
  them for the same ``duration_s``: messages of ``batch`` records of ``records``
  (``predictor/data/cpu-default.jsonl.gz``), cycled, one message a call and each call as soon as
  the previous one is acknowledged (one long stream would queue far more than the learner takes in
  ``duration_s`` in the flow-control windows between client, worker and learner, and measure the
  backlog's drain instead).

With ``--baseline DIR`` (a checkout of an earlier commit, its generated code in place), that
checkout's servers (``--baseline-workers``, default 2) are measured beside them, interleaved.

Prints per server the p50 and p99 of the answers' latencies in each condition (medians over the
repeats), the ratio ingest/idle (median of the per-repeat ratios; the target is p99 <= 1.3x) and
the records/s the stream achieved.

``--learner-nice 0,10``, ``--learner-policy normal,idle`` and ``--server-args ",--learner-cpus 1
--worker-cpus 0"`` add a ``--workers N`` server (N > 1) per combination (``predictor.runtime.cpu_priority``);
``--one-process-args ",--handler-cpus 0"`` a ``--workers 1`` server per set of arguments.

Run: ``.venv/bin/python -m experiments.bench.bench_isolation`` (``--workers 1,2 --clients 2 --repeats 3``)
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import statistics
import tempfile
import threading
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from experiments.bench import bench_rpc, h2load_clients
from experiments.bench.bench_workers import differing_answers, start_server
from experiments.bench.cpu_accounting import cpu_around
from experiments.bench.rpc_load import ClientPool
from experiments.common import ROOT, finish, start
from predictor.records.logio import read_records, write_records
from predictor.rpc import convert
from predictor.rpc.names import METHOD_PREFIX
from predictor.rpc.protos import pb2
from predictor.service.synthetic import synthetic_records

CONDITIONS = ("idle", "ingest")
TARGET_P99_RATIO = 1.3


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    workers: tuple[int, ...] = (1, 2)
    clients: int = 2
    duration_s: float = 4.0
    repeats: int = 3
    batch: int = 256
    records: str = "predictor/data/cpu-default.jsonl.gz"
    warm_records: int = 300
    n_queries: int = 64
    baseline: str = ""  # a checkout of the code before a change (e.g. from `git archive`): its servers too
    baseline_workers: tuple[int, ...] = (2,)
    learner_nice: tuple[int, ...] = (0,)  # each --workers N > 1 server once per --learner-nice value
    learner_policy: tuple[str, ...] = ("normal",)  # ... and per --learner-policy value
    server_args: tuple[str, ...] = ("",)  # ... and per set of more arguments (e.g. "--learner-cpus 1 --worker-cpus 0")
    one_process_args: tuple[str, ...] = ("",)  # each --workers 1 server once per set of more arguments ("--handler-cpus 0")
    seed: int = 0
    client: str = "python"  # the answer clients: python (grpcio processes) or h2load (experiments.bench.h2load_clients)
    rps: float = 0.0  # with --client h2load: each answer client's calls per second (0: back to back)


def ingest_messages(path: str | Path, batch: int) -> list[bytes]:
    """The records of ``path`` as serialised ReportObservations messages of ``batch`` records."""
    if batch < 1:
        raise ValueError(f"batch: must be >= 1, got {batch}")
    records, _ = read_records(ROOT / path)
    pbs = [convert.record_to_pb(r) for r in records]
    request = pb2().ReportObservationsRequest
    return [request(records=pbs[i : i + batch]).SerializeToString() for i in range(0, len(pbs), batch)]


def measure(pool: ClientPool, target: str, config: Config, queries: list[bytes], stream: list[bytes] | None,
            records_per_message: float = 0.0, answer_sizes: list[int] | None = None) -> tuple[np.ndarray, float]:
    """PredictLatency latencies (s) of ``config.clients`` sequential clients, and the records/s ingested
    meanwhile from ``stream`` (``records_per_message`` on average; 0 without ``stream``).
    ``answer_sizes``: the length of the answer to each query, which h2load clients check
    (:mod:`experiments.bench.h2load_clients`). (:func:`measure_with_cpu` adds where the CPU went.)"""
    task = {"kind": "closed", "target": target, "path": METHOD_PREFIX + "PredictLatency", "requests": queries,
            "duration_s": config.duration_s}
    tasks = [task] * config.clients if config.client == "python" else []
    if stream is not None:  # one message a call, back to back: each waits for its acknowledgement
        tasks.append({"kind": "closed", "target": target, "path": METHOD_PREFIX + "ReportObservations",
                      "requests": stream, "duration_s": config.duration_s, "warmup": 0})
    if config.client == "python":
        results = pool.run(tasks)
    else:  # the answer clients are h2load processes; the ingest client (if any) runs in the pool meanwhile
        ingest: list[dict] = []
        thread = threading.Thread(target=lambda: ingest.extend(pool.run(tasks))) if tasks else None
        if thread is not None:
            thread.start()
        results = h2load_clients.run(target, task["path"], queries, config.clients, config.duration_s, answer_sizes,
                                     config.rps)
        if thread is not None:
            thread.join()
            if not ingest:
                raise RuntimeError(f"{target}: the ingest client failed")
        results += ingest
    errors = sum(r["errors"] for r in results)
    if errors:
        raise RuntimeError(f"{target}: {errors} calls failed")
    latencies = np.concatenate([r["latency"] for r in results[: config.clients]])
    if stream is None:
        return latencies, 0.0
    ingest = results[-1]
    return latencies, ingest["calls"] * records_per_message / ingest["elapsed"]


def measure_with_cpu(pool: ClientPool, server_pid: int, target: str, config: Config, queries: list[bytes],
                     stream: list[bytes] | None, records_per_message: float,
                     answer_sizes: list[int] | None = None) -> tuple[np.ndarray, float, float, float]:
    """:func:`measure`, and the cores the server's process tree and the whole machine kept busy meanwhile."""
    (latencies, rate), window = cpu_around(
        server_pid, lambda: measure(pool, target, config, queries, stream, records_per_message, answer_sizes))
    return latencies, rate, window.tree_cores, window.busy_cores


def main() -> None:
    """Start the servers, measure them idle and under ingest, interleaved; print the table."""
    config, out = start("bench_isolation", Config(), __doc__.splitlines()[0])
    queries = bench_rpc.build_requests(bench_rpc.Config(n_queries=config.n_queries, ingest_records=1,
                                                        seed=config.seed))["PredictLatency"]
    stream = ingest_messages(config.records, config.batch)
    records_per_message = len(read_records(ROOT / config.records)[0]) / len(stream)
    folder = Path(tempfile.mkdtemp(prefix="bench-isolation-"))
    warm = folder / "warm.jsonl.gz"
    write_records(warm, synthetic_records(config.warm_records, seed=config.seed + 1, devices=bench_rpc.DEVICES))
    servers = {}
    for w in config.workers:
        variants = itertools.product(config.learner_nice, config.learner_policy, config.server_args)
        for nice, policy, more in variants if w > 1 else [(0, "normal", more) for more in config.one_process_args]:
            extra = (["--learner-nice", str(nice)] if nice else []) + (["--learner-policy", policy]
                                                                       if policy != "normal" else []) + more.split()
            label = " ".join(["--workers", str(w), *extra])
            servers[label] = start_server(folder, label, ["--workers", str(w), "--warm-start", str(warm), *extra])
    if config.baseline:  # the servers of another checkout (before a change), measured beside
        servers |= {f"baseline --workers {w}": start_server(folder, f"baseline workers {w}",
                                                            ["--workers", str(w), "--warm-start", str(warm)],
                                                            Path(config.baseline).resolve())
                    for w in config.baseline_workers}
    if config.client not in ("python", "h2load"):
        raise SystemExit(f"--client: python or h2load, not {config.client!r}")
    if config.rps and config.client != "h2load":
        raise SystemExit("--rps: only with --client h2load")
    if config.client == "h2load" and not h2load_clients.available():
        raise SystemExit("--client h2load: h2load is not installed (Debian: apt-get install nghttp2-client)")
    pool = ClientPool(config.clients + 1 if config.client == "python" else 1)
    differing, answer_sizes = differing_answers({label: target for label, (_, target) in servers.items()}, queries)
    for label, fields in differing.items():
        if fields:
            print(f"{label}: answers differ from the first server's in {', '.join(fields)}")
    runs: dict[str, dict[str, list]] = {
        label: {f"{prefix}{figure}": [] for prefix in ("", "ingest_")
                for figure in ("p50", "p99", "server_cores", "busy_cores")} | {"records_per_s": []}
        for label in servers}
    try:
        for _ in range(config.repeats):
            for label, (proc, target) in servers.items():
                for condition in CONDITIONS:
                    latencies, rate, server_cores, busy_cores = measure_with_cpu(
                        pool, proc.pid, target, config, queries, stream if condition == "ingest" else None,
                        records_per_message, answer_sizes)
                    prefix = "" if condition == "idle" else "ingest_"
                    runs[label][prefix + "p50"].append(1e3 * float(np.percentile(latencies, 50)))
                    runs[label][prefix + "p99"].append(1e3 * float(np.percentile(latencies, 99)))
                    runs[label][prefix + "server_cores"].append(server_cores)
                    runs[label][prefix + "busy_cores"].append(busy_cores)
                    if condition == "ingest":
                        runs[label]["records_per_s"].append(rate)
    finally:
        pool.close()
        for proc, _ in servers.values():
            proc.send_signal(signal.SIGTERM)
        for proc, _ in servers.values():
            proc.wait(timeout=120)
    pace = f", {config.rps:g} calls/s each" if config.rps else ""
    table = Table(title=f"PredictLatency of {config.clients} sequential {config.client} clients{pace} ({config.duration_s:g} s), idle and "
                        f"while one more client streams ReportObservations ({config.batch} records a message); "
                        f"median of {config.repeats}; {os.cpu_count()} CPUs")
    for column in ("server", "p50 idle (ms)", "p50 ingest (ms)", "p50 ratio", "p99 idle (ms)", "p99 ingest (ms)",
                   f"p99 ratio (target <= {TARGET_P99_RATIO:g}x)", "ingest records/s",
                   "server cores idle / ingest", "busy cores idle / ingest"):
        table.add_column(column, justify="right" if column != "server" else "left")
    results: dict = {"runs": runs, "ratio": {}}
    for label, run in runs.items():
        ratios = {q: statistics.median(b / a for a, b in zip(run[q], run["ingest_" + q], strict=True))
                  for q in ("p50", "p99")}
        results["ratio"][label] = ratios
        table.add_row(label, *(f"{statistics.median(run[k]):.2f}" for k in ("p50", "ingest_p50")),
                      f"{ratios['p50']:.2f}x", *(f"{statistics.median(run[k]):.2f}" for k in ("p99", "ingest_p99")),
                      f"{ratios['p99']:.2f}x", f"{statistics.median(run['records_per_s']):,.0f}",
                      *(" / ".join(f"{statistics.median(run[prefix + k]):.2f}" for prefix in ("", "ingest_"))
                        for k in ("server_cores", "busy_cores")))
    Console(width=220).print(table)
    print("server cores: CPU of the server's process tree (learner, workers, supervisor) per second of the "
          f"measurement; busy cores: the whole machine's (clients included), of {os.cpu_count()}")
    finish(out, results)


if __name__ == "__main__":
    main()
