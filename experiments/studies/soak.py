"""Load and soak: concurrent clients, mixed traffic, a real server process, for a minute.

``predictor serve`` runs as its own process (with a state folder, so every observation goes
through the write-ahead log and periodic snapshots). Client threads, spread over separate worker
processes, each with its own channel, send a mix of ``PredictLatency``, ``CheckDeadline``,
``RankPlacements`` (8 candidates), ``ReportBatchStart``/``End`` pairs and ``ReportObservations``
streams for ``duration_s``. The main process samples the server's resident memory every second.

A call the server sheds (``RESOURCE_EXHAUSTED``, overloaded: see ``predictor.rpc.overload``) is
not an error: it is counted apart and the client goes on after :data:`SHED_BACKOFF_S`, as a
scheduler would.

Results (``experiments/results/soak/results.json``): calls, errors and shed calls per RPC, latency p50/p90/p99
per RPC and overall, throughput (calls/s and observations/s), the server's RSS over time with its
start, end, peak and slope over the second half, and the server's status at the end.

Run: ``python -m experiments.studies.soak`` (``--duration-s 10 --clients 4`` for a quick look).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from experiments.common import ROOT, finish, start
from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.service import Candidate, CoRunnerSource, PlannedCoRunner, Query
from predictor.service.errors import ResourceExhausted
from predictor.service.synthetic import synthetic_records

SHED_BACKOFF_S = 0.005
"""How long a client waits before its next call after the server shed one (overloaded)."""
OPS = ("predict", "deadline", "rank", "observe", "start_end")


@dataclasses.dataclass(frozen=True)
class SoakConfig:
    """What the soak runs."""

    duration_s: float = 60.0
    clients: int = 10  # client threads, each with its own channel
    client_processes: int = 2  # worker processes the threads are spread over
    weights: tuple[float, ...] = (0.35, 0.15, 0.1, 0.3, 0.1)  # of OPS
    stream_records: int = 10  # records per ReportObservations stream
    candidates: int = 8
    warmup_records: int = 500
    snapshot_every_s: float = 5.0
    fsync: str = "always"
    sample_every_s: float = 1.0
    seed: int = 0


# --------------------------------------------------------------------------- the server


def start_server(folder: Path, config: SoakConfig) -> tuple[subprocess.Popen, int]:
    """``predictor serve`` as a child process on a free port; returns it and its port."""
    port_file = folder / "port"
    log = open(folder / "server.log", "wb")  # noqa: SIM115  (kept open for the child's lifetime)
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "predictor.cli", "serve", "--host", "127.0.0.1", "--port", "0",
            "--metrics-port", "0", "--port-file", str(port_file), "--state", str(folder / "state"),
            "--snapshot-every", str(config.snapshot_every_s), "--fsync", config.fsync, "--grace", "2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the server did not start:\n{(folder / 'server.log').read_text()}")
        time.sleep(0.05)
    return proc, int(port_file.read_text())


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


# --------------------------------------------------------------------------- the clients


def _client_thread(target: str, index: int, config: SoakConfig, stop_at: float, out: dict[str, Any]) -> None:
    rng = random.Random(config.seed * 1000 + index)
    records = synthetic_records(2000, seed=config.seed * 1000 + index)
    runner = PlannedCoRunner("mlp", 4, {"l2_util": 0.1, "dram_util": 0.6}, overlap=0.8)
    latencies: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    shed: dict[str, int] = defaultdict(int)
    samples: list[str] = []
    observed = 0
    position = 0
    with InterferenceClient(target, timeout=30) as client:
        while time.monotonic() < stop_at:
            op = rng.choices(OPS, weights=config.weights)[0]
            device = f"sim{rng.randrange(2)}"
            batch = BatchSpec(
                rng.choice(["bert", "resnet", "mlp"]), rng.choice([1, 2, 4, 8]), {"l2_util": 0.4}
            )
            query = Query(device, batch, co_runners=(runner,), co_runner_source=CoRunnerSource.EXPLICIT)
            began = time.perf_counter()
            try:
                if op == "predict":
                    client.predict(query)
                elif op == "deadline":
                    client.check_deadline(query, 50.0)
                elif op == "rank":
                    candidates = [
                        Candidate(f"sim{i}", "SimGPU", (runner,) * (i % 3), CoRunnerSource.EXPLICIT)
                        for i in range(config.candidates)
                    ]
                    client.rank_placements(batch, candidates, 50.0)
                elif op == "observe":
                    chunk = [records[(position + i) % len(records)] for i in range(config.stream_records)]
                    position += config.stream_records
                    report = client.report_observations(chunk, timeout=30)
                    observed += report.accepted
                    if report.accepted != len(chunk):
                        raise RuntimeError(
                            f"{report.rejected} of {len(chunk)} rejected: {report.rejections[:1]}"
                        )
                else:
                    batch_id = f"c{index}-{position}"
                    position += 1
                    client.batch_start(device, batch_id, batch, device_kind="SimGPU")
                    client.batch_end(device, batch_id)
            except Exception as exc:
                if isinstance(exc, ResourceExhausted) and "overloaded" in str(exc):
                    shed[op] += 1  # refused at once by an overloaded server: retry later, as it asks
                    time.sleep(SHED_BACKOFF_S)
                    continue
                errors[op] += 1  # every failure is counted and sampled
                if len(samples) < 5:
                    samples.append(f"{op}: {type(exc).__name__}: {exc}")
                continue
            latencies[op].append(time.perf_counter() - began)
    out[str(index)] = {
        "latencies": dict(latencies),
        "errors": dict(errors),
        "shed": dict(shed),
        "samples": samples,
        "observed": observed,
    }


def worker(target: str, indexes: list[int], config: SoakConfig, stop_at_wall: float) -> dict[str, Any]:
    """One client process: a thread per client index until ``stop_at_wall`` (Unix seconds)."""
    stop_at = time.monotonic() + (stop_at_wall - time.time())
    out: dict[str, Any] = {}
    threads = [
        threading.Thread(target=_client_thread, args=(target, i, config, stop_at, out)) for i in indexes
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


# --------------------------------------------------------------------------- the run


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ms = np.asarray(values) * 1000.0
    return {
        "n": int(ms.size),
        "p50_ms": float(np.percentile(ms, 50)),
        "p90_ms": float(np.percentile(ms, 90)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
    }


def run_soak(config: SoakConfig, folder: Path | None = None) -> dict[str, Any]:
    """Run the soak; returns the results (nothing written)."""
    folder = Path(folder or tempfile.mkdtemp(prefix="soak-"))
    folder.mkdir(parents=True, exist_ok=True)
    proc, port = start_server(folder, config)
    target = f"127.0.0.1:{port}"
    try:
        with InterferenceClient(target, timeout=30) as client:
            client.wait_ready(60)
            client.report_observations(synthetic_records(config.warmup_records, seed=config.seed + 99))
        rss: list[tuple[float, float]] = []
        began = time.time()
        stop_at = began + config.duration_s
        per_process = [
            list(range(config.clients))[i :: config.client_processes] for i in range(config.client_processes)
        ]
        context = multiprocessing.get_context("spawn")
        with context.Pool(config.client_processes) as pool:
            pending = [pool.apply_async(worker, (target, idx, config, stop_at)) for idx in per_process if idx]
            while not all(p.ready() for p in pending):
                rss.append((round(time.time() - began, 2), rss_mb(proc.pid)))
                time.sleep(config.sample_every_s)
            parts = [p.get() for p in pending]
        elapsed = time.time() - began
        with InterferenceClient(target, timeout=30) as client:
            status = client.status()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return summarize(config, parts, rss, elapsed, status, proc.returncode)


def summarize(
    config: SoakConfig,
    parts: list[dict],
    rss: list[tuple[float, float]],
    elapsed: float,
    status: Any,
    rc: int | None,
) -> dict[str, Any]:
    """The soak's results: calls, errors, throughput, latency per RPC, server memory, final status."""
    clients = [c for part in parts for c in part.values()]
    by_op: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    shed: dict[str, int] = defaultdict(int)
    samples: list[str] = []
    for client in clients:
        for op, values in client["latencies"].items():
            by_op[op] += values
        for op, count in client["errors"].items():
            errors[op] += count
        for op, count in client["shed"].items():
            shed[op] += count
        samples += client["samples"]
    calls = sum(len(v) for v in by_op.values())
    observed = sum(c["observed"] for c in clients)
    times = np.array([t for t, _ in rss])
    mem = np.array([m for _, m in rss])
    second_half = times >= times.max() / 2 if times.size else times
    slope = (
        float(np.polyfit(times[second_half], mem[second_half], 1)[0] * 60) if second_half.sum() >= 3 else 0.0
    )
    steady = mem[times >= min(10.0, times.max() / 5)] if times.size else mem
    return {
        "duration_s": elapsed,
        "clients": len(clients),
        "calls": calls,
        "errors": int(sum(errors.values())),
        "errors_by_rpc": dict(errors),
        "error_samples": samples[:10],
        "shed": int(sum(shed.values())),
        "shed_by_rpc": dict(shed),
        "throughput_calls_per_s": calls / elapsed,
        "observations_per_s": observed / elapsed,
        "observations_acknowledged": observed,
        "latency_all": _percentiles([x for v in by_op.values() for x in v]),
        "latency_by_rpc": {op: _percentiles(v) for op, v in sorted(by_op.items())},
        "rss_mb": {
            "start": float(steady[0]) if steady.size else None,
            "end": float(mem[-1]) if mem.size else None,
            "peak": float(mem.max()) if mem.size else None,
            "slope_mb_per_min_second_half": slope,
            "series": rss,
        },
        "server": {
            "observations_learned": status.observations_learned,
            "observations_rejected": status.observations_rejected,
            "log_last_sequence": status.log.last_sequence if status.log else None,
            "log_snapshot_sequence": status.log.snapshot_sequence if status.log else None,
            "exit_code": rc,
        },
    }


def main() -> None:
    """Run the soak in a fresh folder; write the results and print a one-line summary."""
    config, out = start("soak", SoakConfig(), __doc__.splitlines()[0])
    results = run_soak(config, Path(tempfile.mkdtemp(prefix="soak-")))
    finish(out, results)
    latency = results["latency_all"]
    memory = results["rss_mb"]
    print(
        f"{results['calls']} calls in {results['duration_s']:.0f} s by {results['clients']} clients: "
        f"{results['errors']} errors, {results['shed']} shed (retried); {results['throughput_calls_per_s']:.0f} calls/s, "
        f"{results['observations_per_s']:.0f} observations/s; p50 {latency['p50_ms']:.2f} ms, "
        f"p99 {latency['p99_ms']:.2f} ms; server RSS {memory['start']:.0f} -> {memory['end']:.0f} MiB "
        f"(peak {memory['peak']:.0f}, {memory['slope_mb_per_min_second_half']:+.1f} MiB/min in the second half)"
    )


if __name__ == "__main__":
    main()
