"""PredictLatency of two versions of the code against the echo floor, interleaved in one run.

Starts, each in its own process, the service as :mod:`experiments.bench.bench` starts it (``rls``,
2,000 warm-up records, the thread-pool server with metrics, auth and decoding) once from
this checkout and once from a git revision (``--base``, exported to a temporary folder), and
the echo of the same bytes (:mod:`experiments.bench.echo_server`); one sequential client
(:mod:`experiments.bench.rpc_load`) measures the three in turn, ``--rounds`` times. Prints, per
server, the p50 of each round, its ratio to the echo's p50 in the same round (median over
the rounds) and the server's CPU time per call; a loaded machine moves the absolute figures,
much less the ratios.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m experiments.bench.bench_predict_ab --base HEAD~1``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from experiments.bench import bench_rpc
from experiments.bench.cpu_accounting import process_cpu_seconds
from experiments.bench.echo_server import method_path
from experiments.bench.rpc_load import ClientPool
from experiments.bench.rpc_servers import ServerProcess, echo_main
from predictor.rpc.names import METHOD_PREFIX

ROOT = Path(__file__).resolve().parents[2]
GENERATED = Path("predictor/rpc/generated")
SERVE = """
import sys, tempfile
try:
    from experiments.bench import bench_rpc
    from experiments.bench.rpc_servers import _build_service
except ImportError:  # a revision from before experiments/ was split into bench/ and studies/
    from experiments import bench_rpc
    from experiments.rpc_servers import _build_service
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.server import create_server, stop_server
from predictor.runtime.threads import pin_blas_threads
pin_blas_threads(None)
spec = {"predictor": "rls", "outlier_gate": True, "warm_records": 2000, "seed": 0, "devices": bench_rpc.DEVICES,
        "max_candidates": 1024, "state_dir": tempfile.mkdtemp(prefix="bench-ab-")}
service = _build_service(spec)
server, port = create_server("127.0.0.1:0", service, metrics=ServerMetrics(service), max_workers=8)
server.start()
print(port, flush=True)
sys.stdin.readline()
stop_server(server, service, grace=0.5)
"""


class CodeServer:
    """The benchmark's service run from the code under ``root``, in a child process."""

    def __init__(self, root: Path):
        self.process = subprocess.Popen([sys.executable, "-c", SERVE], cwd=root, env=dict(os.environ, PYTHONPATH=str(root)),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip():
            raise RuntimeError(f"the service from {root} did not start")
        self.target = f"127.0.0.1:{int(line)}"

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the server process so far."""
        return process_cpu_seconds(self.process.pid)

    def stop(self) -> None:
        """Tell the server to stop and wait for it."""
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        self.process.wait(timeout=30)


def export(revision: str, into: Path) -> Path:
    """The files of ``revision`` of this repository under ``into``, with this checkout's generated code."""
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    shutil.copytree(ROOT / GENERATED, into / GENERATED, dirs_exist_ok=True)
    return into


def main() -> None:
    """Measure and print (see the module)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", help="git revision measured beside this checkout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.5, help="per server per round")
    parser.add_argument("--method", default="PredictLatency", choices=("PredictLatency", "CheckDeadline"))
    args = parser.parse_args()
    requests = bench_rpc.build_requests(bench_rpc.Config(ingest_records=10))
    with tempfile.TemporaryDirectory(prefix="bench-ab-base-") as folder:
        servers: dict[str, Any] = {}
        pool = ClientPool(1)
        try:
            servers["base"] = CodeServer(export(args.base, Path(folder)))
            servers["new"] = CodeServer(ROOT)
            canned = bench_rpc.canned_responses(servers["new"].target, requests)
            servers["echo"] = ServerProcess(echo_main, {
                "max_workers": 8, "server": "thread",
                "unary": {k: v for k, v in canned.items() if k != "ReportObservations"},
                "streams": {"ReportObservations": canned["ReportObservations"]}})
            results: dict[str, list[dict]] = {name: [] for name in ("echo", "base", "new")}
            for _ in range(args.rounds):
                for name in results:
                    path = method_path(args.method) if name == "echo" else METHOD_PREFIX + args.method
                    results[name].append(bench_rpc.measure(pool, servers[name], [
                        {"kind": "closed", "path": path, "requests": requests[args.method],
                         "duration_s": args.seconds}]))
        finally:
            for server in servers.values():
                server.stop()
            pool.close()
    print(f"{args.method}, one sequential client; base = {args.base}; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores")
    for name, rounds in results.items():
        ratios = [r["p50_ms"] / e["p50_ms"] for r, e in zip(rounds, results["echo"], strict=True)]
        print(f"{name:5s} p50 {statistics.median(r['p50_ms'] for r in rounds):.3f} ms "
              f"(rounds: {' '.join(format(r['p50_ms'], '.3f') for r in rounds)}); "
              f"p50 / echo p50 {statistics.median(ratios):.2f}x (rounds: {' '.join(format(x, '.2f') for x in ratios)}); "
              f"server CPU {statistics.median(r['server_cpu_us_per_call'] for r in rounds):.0f} us/call; "
              f"errors {sum(r['errors'] for r in rounds)}")


if __name__ == "__main__":
    main()
