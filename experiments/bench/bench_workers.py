"""Answer throughput of ``predictor serve --workers N``: PredictLatency calls/s with 1, 2, ... workers.

Starts one ``predictor serve`` per worker count, side by side (each a real process tree: with
``--workers N > 1`` a learner and N answering processes on one port), every one warm-started from
the same ``warm_records`` synthetic observations. Then, ``repeats`` times and interleaved over the
servers, ``clients`` client processes (:class:`experiments.bench.rpc_load.ClientPool`: each its own
connection, so that ``SO_REUSEPORT`` spreads them over the workers) call PredictLatency back to
back for ``duration_s`` (a closed loop of sequential clients; the same pool of pre-serialised
queries as :mod:`experiments.bench.bench_rpc`). Prints calls/s per server and the ratio to one worker,
taken within each repeat (medians over the repeats), and checks that every server answers the pool
with the same predictions (naming the fields that differ otherwise).

With ``--baseline DIR`` (a checkout of an earlier commit, its generated code in place), that
checkout's servers (``--baseline-workers``, default 1: the single process, which ``--workers 1``
must be no slower than) are measured beside them.

Beside the rates, each server's CPU per call (its whole process tree), the clients' CPU per call
and the machine's busy cores, and the *CPU bound*: the most calls/s the machine's cores could give at
those costs, the clients' included, since they run on the same cores. ``--client h2load`` runs each
client as an ``h2load`` process instead (:mod:`experiments.bench.h2load_clients`: HTTP/2 in C, a tenth of
the CPU per call of a grpcio client, one new connection per client and repeat), so that the clients
take less of the cores the servers are measured on.

``--open-rate R`` also offers each server, and an echo server of the same answer (the floor of
:mod:`experiments.bench.bench`), a steady R calls/s for ``duration_s`` in an open loop split over
``clients`` ``grpc.aio`` processes (:func:`experiments.bench.bench.open_loop`: each call sent at its
scheduled time, latency from that time), ``repeats`` times interleaved: how many calls each
answered and their p50 and p99, the target's "every call answered, p99 <= 1.3x the echo's" asked
of N workers.

``--server-args`` starts each ``--workers N`` server once per comma-separated set of more arguments
(``--workers 1 --server-args ",--handler-cpus 0"``: one process with and without its handler threads
on a CPU of their own).

Run: ``.venv/bin/python -m experiments.bench.bench_workers`` (``--workers 1,2 --clients 4 --repeats 3
--client python|h2load --open-rate 2000 --server-args ",--handler-cpus 0"``)
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from rich.console import Console
from rich.table import Table

from experiments.bench import bench_rpc, h2load_clients
from experiments.bench.cpu_accounting import cpu_around, cpu_per_call_ms
from experiments.bench.rpc_load import ClientPool
from experiments.common import ROOT, finish, start
from predictor.records.logio import write_records
from predictor.rpc.client import InterferenceClient
from predictor.rpc.names import METHOD_PREFIX
from predictor.rpc.protos import pb2
from predictor.rpc.security import open_channel
from predictor.service.synthetic import synthetic_records


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    workers: tuple[int, ...] = (1, 2)
    clients: int = 4
    duration_s: float = 4.0
    repeats: int = 3
    warm_records: int = 300
    n_queries: int = 64
    baseline: str = ""  # a checkout of the code before a change (e.g. from `git archive`): its servers too
    baseline_workers: tuple[int, ...] = (1,)
    seed: int = 0
    client: str = "python"  # python: grpcio client processes; h2load: nghttp2's h2load in C (experiments.bench.h2load_clients)
    open_rate: float = 0.0  # > 0: also a steady open loop at this many calls/s in all, against an echo too
    server_args: tuple[str, ...] = ("",)  # each --workers N server once per set of more arguments ("--handler-cpus 0")
    balanced: bool = True  # clients call the balanced target (--targets-file: every worker's own port, round robin)


@dataclasses.dataclass(frozen=True)
class CpuAccount:
    """Where one measurement's CPU went: per call, the server's process tree and the clients; the machine's busy cores."""

    server_ms: float
    clients_ms: float
    busy_cores: float

    @classmethod
    def of(cls, results: list[dict], server_s: float, busy_cores: float) -> CpuAccount:
        """The account of one measurement from its clients' results, the server's CPU seconds read around it
        (its warm-up calls included, so they are counted as calls) and the machine's busy cores meanwhile."""
        server_calls = sum(r["calls"] + r["warmup_calls"] for r in results)
        clients_ms = cpu_per_call_ms(sum(r["cpu_s"] for r in results), sum(r["calls"] for r in results))
        return cls(cpu_per_call_ms(server_s, server_calls), clients_ms, busy_cores)

    @classmethod
    def median(cls, accounts: list[CpuAccount]) -> CpuAccount:
        """Each figure's median over the repeats."""
        return cls(*(statistics.median(getattr(a, f.name) for a in accounts) for f in dataclasses.fields(cls)))


def start_server(folder: Path, label: str, args: list[str], root: Path = ROOT,
                 balanced: bool = False) -> tuple[subprocess.Popen, str]:
    """``predictor serve ARGS`` of the checkout at ``root`` on a free port; returns the process and its
    target once it answers (every worker of ``--workers N``): with ``balanced``, the balanced target
    (``--targets-file``: every worker's own port)."""
    name = re.sub(r"\W+", "-", label).strip("-")
    port_file, log_path = folder / f"{name}.port", folder / f"{name}.log"
    targets_file = folder / f"{name}.targets"
    log = open(log_path, "wb")  # noqa: SIM115 - kept open for the process's life
    proc = subprocess.Popen(
        [sys.executable, "-m", "predictor.cli", "serve", "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0",
         "--port-file", str(port_file), "--grace", "0.5", *(["--targets-file", str(targets_file)] if balanced else []),
         *args],
        stdout=log, stderr=subprocess.STDOUT, cwd=root, env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(root)),
    )
    deadline = time.monotonic() + 600
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{label} did not start:\n{log_path.read_text()}")
        time.sleep(0.1)
    target = f"127.0.0.1:{int(port_file.read_text())}"
    with InterferenceClient(target) as client:
        client.wait_ready(600)
    # one connection's server is ready; with --workers N, the line ending in SERVING says they all are
    while b"; SERVING" not in log_path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{label} did not start:\n{log_path.read_text()}")
        time.sleep(0.1)
    return proc, targets_file.read_text().strip() if balanced else target


def differing_answers(targets: dict[str, str], requests: list[bytes]) -> tuple[dict[str, list[str]], list[int]]:
    """Per server, the fields of its answers that differ from the first server's (none: the same answers),
    and the length of the first server's answer to each request."""
    answers, sizes = {}, []
    decode = pb2().PredictLatencyResponse.FromString
    for label, target in targets.items():
        with open_channel(target, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
            call = channel.unary_unary(METHOD_PREFIX + "PredictLatency")
            raw = [call(r, timeout=30) for r in requests]
        sizes = sizes or [len(answer) for answer in raw]
        answers[label] = [decode(answer).prediction for answer in raw]
    first = next(iter(answers.values()))
    return {
        label: sorted({f.name for a, b in zip(these, first, strict=True) for f, _ in a.ListFields()
                       if getattr(a, f.name) != getattr(b, f.name)})
        for label, these in answers.items()
    }, sizes


def main() -> None:
    """Start the servers, measure them interleaved, print the table."""
    config, out = start("bench_workers", Config(), __doc__.splitlines()[0])
    requests = bench_rpc.build_requests(bench_rpc.Config(n_queries=config.n_queries, ingest_records=1,
                                                         seed=config.seed))["PredictLatency"]
    folder = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    warm = folder / "warm.jsonl.gz"
    write_records(warm, synthetic_records(config.warm_records, seed=config.seed + 1, devices=bench_rpc.DEVICES))
    servers = {}
    for w, more in itertools.product(config.workers, config.server_args):
        label = " ".join(["--workers", str(w), *more.split()])
        servers[label] = start_server(folder, label, ["--workers", str(w), "--warm-start", str(warm), *more.split()],
                                        balanced=config.balanced)
    if config.baseline:  # the servers of another checkout (before a change)
        servers |= {f"baseline --workers {w}": start_server(folder, f"baseline workers {w}",
                                                            ["--workers", str(w), "--warm-start", str(warm)],
                                                            Path(config.baseline).resolve())
                    for w in config.baseline_workers}
    targets = {label: target for label, (_, target) in servers.items()}
    if config.client not in ("python", "h2load"):
        raise SystemExit(f"--client: python or h2load, not {config.client!r}")
    if config.client == "h2load" and not h2load_clients.available():
        raise SystemExit("--client h2load: h2load is not installed (Debian: apt-get install nghttp2-client)")
    pool = ClientPool(config.clients if config.client == "python" else 0)
    rates: dict[str, list[float]] = {label: [] for label in servers}
    accounts: dict[str, list[CpuAccount]] = {label: [] for label in servers}
    try:
        differing, answer_sizes = differing_answers(targets, requests)
        for _ in range(config.repeats):
            for label, target in targets.items():
                task = {"kind": "closed", "target": target, "path": METHOD_PREFIX + "PredictLatency",
                        "requests": requests, "duration_s": config.duration_s}
                if config.client == "python":
                    results, window = cpu_around(servers[label][0].pid, lambda t=task: pool.run([t] * config.clients))
                else:
                    results, window = cpu_around(servers[label][0].pid, lambda t=target: h2load_clients.run(
                        t, METHOD_PREFIX + "PredictLatency", requests, config.clients, config.duration_s,
                        answer_sizes))
                if sum(r["errors"] for r in results):
                    raise RuntimeError(f"{label}: {sum(r['errors'] for r in results)} calls failed, e.g. "
                                   f"{next(r['first_error'] for r in results if r.get('first_error'))}")
                rates[label].append(sum(r["calls"] / r["elapsed"] for r in results))
                accounts[label].append(CpuAccount.of(results, window.tree_s, window.busy_cores))
        open_runs = open_loop_runs(config, requests, targets) if config.open_rate > 0 else {}
    finally:
        pool.close()
        for proc, _ in servers.values():
            proc.send_signal(signal.SIGTERM)
        for proc, _ in servers.values():
            proc.wait(timeout=120)
    base = next(iter(servers))
    cpus = os.cpu_count() or 1
    table = Table(title=f"PredictLatency, {config.clients} sequential {config.client} clients (closed loop, "
                        f"{config.duration_s:g} s), median of {config.repeats}; {cpus} CPUs")
    for column in ("server", "calls/s", f"ratio to {base}", "per repeat (calls/s)", "server CPU ms/call",
                   "clients' CPU ms/call", "cores busy", f"CPU bound (calls/s on {cpus} cores)",
                   f"bound / {base}"):
        table.add_column(column, justify="right" if column != "server" else "left")
    results = {"differing_fields": differing, "rates": rates, "ratio": {}, "cpu": {}}
    for label in servers:
        ratio = statistics.median(r / b for r, b in zip(rates[label], rates[base], strict=True))
        cpu = CpuAccount.median(accounts[label])
        bound = cpus / (cpu.server_ms + cpu.clients_ms) * 1e3
        results["ratio"][label] = ratio
        results["cpu"][label] = dataclasses.asdict(cpu) | {"bound_calls_per_s": bound}
        table.add_row(label, f"{statistics.median(rates[label]):,.0f}", f"{ratio:.2f}x",
                      " ".join(f"{r:,.0f}" for r in rates[label]), f"{cpu.server_ms:.3f}", f"{cpu.clients_ms:.3f}",
                      f"{cpu.busy_cores:.2f}", f"{bound:,.0f}", f"{bound / statistics.median(rates[base]):.2f}x")
    console = Console(width=200)
    console.print(table)
    console.print("CPU bound: the most calls/s this machine's cores could give at the measured CPU per call of "
                  "the server and the clients together (the clients run on the same cores).")
    for label, fields in differing.items():
        console.print(f"{label}: answers equal to {base}'s" if not fields
                      else f"{label}: answers differ from {base}'s in {', '.join(fields)}")
    if open_runs:
        results["open_loop"] = open_runs
        console.print(open_loop_table(config, open_runs))
    finish(out, results)


def open_loop_runs(config: Config, requests: list[bytes], targets: dict[str, str]) -> dict[str, list[dict]]:
    """Each server and an echo of its answer offered ``config.open_rate`` calls/s (:func:`experiments.bench.bench.open_loop`
    over ``config.clients`` processes), interleaved ``config.repeats`` times: per server, each repeat's outcome."""
    from experiments.bench.bench import open_loop
    from experiments.bench.echo_server import method_path
    from experiments.bench.rpc_servers import ServerProcess, echo_main

    with grpc.insecure_channel(next(iter(targets.values()))) as channel:
        answer = channel.unary_unary(METHOD_PREFIX + "PredictLatency")(requests[0])
    echo = ServerProcess(echo_main, {"max_workers": 8, "server": "thread", "streams": {}, "unary": {
        "PredictLatency": ("PredictLatencyRequest", "PredictLatencyResponse", answer)}})
    paths = {"echo": (echo.target, method_path("PredictLatency"))} | {
        label: (target, METHOD_PREFIX + "PredictLatency") for label, target in targets.items()}
    runs: dict[str, list[dict]] = {label: [] for label in paths}
    pool = ClientPool(config.clients)
    try:
        for _ in range(config.repeats):
            for label, (target, path) in paths.items():
                runs[label].append(open_loop(pool, target, path, requests, config.open_rate, config.duration_s,
                                             config.clients))
    finally:
        pool.close()
        echo.stop()
    return runs


def open_loop_table(config: Config, runs: dict[str, list[dict]]) -> Table:
    """The open loop's calls answered, p50 and p99 per server and repeat, and each p99 against the echo's."""
    table = Table(title=f"PredictLatency offered {config.open_rate:,.0f} calls/s (open loop, {config.clients} "
                        f"grpc.aio processes, {config.duration_s:g} s), {config.repeats} repeats interleaved")
    for column in ("server", "answered / offered", "p50 ms", "p99 ms", "p99 / echo's (same repeat)"):
        table.add_column(column, justify="right" if column != "server" else "left")
    for label, outcomes in runs.items():
        table.add_row(label, " ".join(f"{r['answered']:,}/{r['calls']:,}" for r in outcomes),
                      " ".join(f"{r['answered_p50_ms']:.1f}" for r in outcomes),
                      " ".join(f"{r['answered_p99_ms']:.1f}" for r in outcomes),
                      " ".join(f"{r['answered_p99_ms'] / e['answered_p99_ms']:.1f}x"
                               for r, e in zip(outcomes, runs["echo"], strict=True)))
    return table


if __name__ == "__main__":
    main()
