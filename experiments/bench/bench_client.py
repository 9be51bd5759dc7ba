"""A scheduler's PredictLatency through the Python client, against the same call's bytes sent raw.

Starts a fresh ``predictor serve --warm-start embedded`` (the quickstart's server) and asks it the
quickstart's question (``resnet`` at batch size 4 on ``cpu0``, a ``bert`` co-runner at overlap 0.5)
from one sequential client in this process, ``calls`` times per variant, the variants interleaved
over ``repeats`` rounds:

* ``client.predict``: :meth:`InterferenceClient.predict <predictor.rpc.client.InterferenceClient.predict>`,
  what a scheduler writes (the query converted, the typed call, the answer converted);
* ``typed stub``: the generated stub called with the request message built once (gRPC's typed call
  alone: the request serialised and the response parsed by protobuf);
* ``raw bytes``: the same request's bytes through ``channel.unary_unary`` with no (de)serialiser
  (what issue 42's echo ratios are measured with).

Prints per variant the median over rounds of the calls' p50 wall time, of the client process's CPU
per call (every thread of it: gRPC's own included) and of the server's CPU per call (``/proc``),
each beside the raw variant's of the same round.

Then what a client pays before its first question, in fresh interpreters, ``startup_repeats`` times
interleaved: the floor ``import grpc`` (what any Python gRPC client loads); ``from predictor import
InterferenceClient``; and the quickstart's question through the command line (``predictor query
predict ...`` against the same server, answer printed). Each one's wall time, CPU (every thread)
and peak resident memory, medians.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m experiments.bench.bench_client`` (about a minute;
``--calls 300 --repeats 1``: a quick run, the calls' figures rough, the start-up ones as good).
"""

from __future__ import annotations

import dataclasses
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from experiments.bench.bench_workers import start_server
from experiments.bench.cpu_accounting import process_cpu_seconds
from experiments.common import finish, start
from predictor.records.record import BatchSpec
from predictor.rpc import convert
from predictor.rpc.client import InterferenceClient
from predictor.rpc.names import METHOD_PREFIX
from predictor.rpc.protos import pb2
from predictor.service import CoRunnerSource, PlannedCoRunner, Query

QUERY = Query("cpu0", BatchSpec("resnet", 4), co_runners=(PlannedCoRunner("bert", 2, overlap=0.5),),
              co_runner_source=CoRunnerSource.EXPLICIT)
"""The quickstart's ``predictor query predict --device cpu0 --model resnet --batch-size 4 --co-runner bert:2:0.5``."""


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    calls: int = 2000
    repeats: int = 5
    startup_repeats: int = 5


def startup_programs(target: str) -> dict[str, str]:
    """Each start-up variant's program (run by a fresh ``python -c``); each prints its peak RSS (KiB) last
    (``VmHWM``: ``ru_maxrss`` would keep the forking parent's)."""
    peak = "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM')))"
    question = ["query", "--target", target, "predict", "--device", "cpu0", "--model", "resnet", "--batch-size", "4",
                "--co-runner", "bert:2:0.5"]
    return {
        "import grpc (floor)": f"import grpc\n{peak}",
        "import the client": f"from predictor import InterferenceClient\n{peak}",
        "predictor query predict": f"from predictor.cli.main import main\nassert main({question!r}) == 0\n{peak}",
    }


def run_startup(program: str) -> dict[str, float]:
    """One fresh interpreter running ``program``: its wall time, CPU (s) and peak RSS (MiB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True)
    wall = time.perf_counter() - begin
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"wall_s": wall, "cpu_s": cpu, "rss_mib": int(done.stdout.split()[-1]) / 1024}


def variants(client: InterferenceClient) -> dict[str, Callable[[], object]]:
    """Each variant's one call, all asking :data:`QUERY`."""
    request = pb2().PredictLatencyRequest(query=convert.query_to_pb(QUERY))
    payload = request.SerializeToString()
    raw = client.channel.unary_unary(METHOD_PREFIX + "PredictLatency")
    typed = client.stub.PredictLatency
    return {
        "client.predict": lambda: client.predict(QUERY),
        "typed stub": lambda: typed(request, timeout=client.timeout),
        "raw bytes": lambda: raw(payload, timeout=client.timeout),
    }


def measure(call: Callable[[], object], calls: int, server_pid: int) -> dict[str, float]:
    """``calls`` sequential calls: their p50 wall time, and the client's and the server's CPU per call (s)."""
    walls = []
    server, client = process_cpu_seconds(server_pid), time.process_time()
    for _ in range(calls):
        begin = time.perf_counter()
        call()
        walls.append(time.perf_counter() - begin)
    return {"p50_s": statistics.median(walls), "client_cpu_s": (time.process_time() - client) / calls,
            "server_cpu_s": (process_cpu_seconds(server_pid) - server) / calls}


def main() -> None:
    """Measure the variants interleaved; print the table and write the results."""
    config, out = start("bench_client", Config(), __doc__.splitlines()[0])
    runs: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        proc, target = start_server(Path(folder), "client", ["--warm-start", "embedded"])
        try:
            with InterferenceClient(target) as client:
                client.wait_ready(120)
                calls = variants(client)
                for call in calls.values():  # connections and caches warm before the timing
                    for _ in range(200):
                        call()
                for _ in range(config.repeats):
                    for name, call in calls.items():
                        runs.setdefault(name, []).append(measure(call, config.calls, proc.pid))
            programs = startup_programs(target)
            startups: dict[str, list[dict[str, float]]] = {name: [] for name in programs}
            for _ in range(config.startup_repeats):
                for name, program in programs.items():
                    startups[name].append(run_startup(program))
        finally:
            proc.terminate()
            proc.wait(30)
    results = {}
    print(f"PredictLatency, one sequential client, {config.calls:,} calls a round, medians of {config.repeats} rounds")
    print(f"{'variant':<16} {'p50 ms':>7} {'x raw':>6} {'client us CPU':>14} {'x raw':>6} {'server us CPU':>14} {'x raw':>6}")
    for name, measured in runs.items():
        found = {key: statistics.median(run[key] for run in measured) for key in measured[0]}
        ratios = {key: statistics.median(run[key] / raw[key] for run, raw in zip(measured, runs["raw bytes"],
                                                                                   strict=True)) for key in found}
        results[name] = {**found, "ratio_to_raw": ratios, "runs": measured}
        print(f"{name:<16} {1e3 * found['p50_s']:>7.3f} {ratios['p50_s']:>6.2f} {1e6 * found['client_cpu_s']:>14.0f} "
              f"{ratios['client_cpu_s']:>6.2f} {1e6 * found['server_cpu_s']:>14.0f} {ratios['server_cpu_s']:>6.2f}")
    print(f"before the first question, fresh interpreters, medians of {config.startup_repeats}")
    print(f"{'variant':<24} {'wall s':>7} {'CPU s':>7} {'peak RSS MiB':>13}")
    started = {}
    for name, measured in startups.items():
        started[name] = {key: statistics.median(run[key] for run in measured) for key in measured[0]} | {"runs": measured}
        print(f"{name:<24} {started[name]['wall_s']:>7.3f} {started[name]['cpu_s']:>7.3f} {started[name]['rss_mib']:>13.0f}")
    finish(out, {"query": str(QUERY), "variants": results, "startup": started})


if __name__ == "__main__":
    main()
