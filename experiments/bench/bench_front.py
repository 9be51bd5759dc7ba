"""What the admission front costs a call when nothing is overloaded: one sequential client, direct and through it.

One server process as the benchmarks build it (:mod:`experiments.bench.rpc_servers`: the default learner
unless ``--predictor``, 2,000 warm-up records, shedding on) and the C++ admission front before it
(:mod:`predictor.rpc.front`, on a Unix socket, as ``predictor serve --front`` runs it). One client sends the bench's
PredictLatency requests one after another, ``--calls`` each way, alternating direct and through the
front for ``--rounds`` rounds. Per way: p50 and p99 latency, and the CPU per call of the Python
server and of the front (from ``/proc``). The overload side is ``experiments.bench.bench_overload``'s.

Run: ``make front && .venv/bin/python -m experiments.bench.bench_front``.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import grpc
import numpy as np

from experiments.bench import bench_rpc
from experiments.bench.cpu_accounting import process_cpu_seconds
from experiments.bench.rpc_servers import ServerProcess, service_main
from predictor.predictors.registry import DEFAULT
from predictor.rpc.front import Front
from predictor.rpc.names import method_path


def main(argv: list[str] | None = None) -> None:
    """Measure both ways, interleaved, and print one line per way and round."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="sequential calls per way and round (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each way once (default 3)")
    parser.add_argument("--predictor", default=DEFAULT, help="the server's learner (default: the default learner)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    payloads = bench_rpc.build_requests(bench_rpc.Config(seed=args.seed, ingest_records=100))["PredictLatency"]
    private = tempfile.TemporaryDirectory(prefix="bench-front-")
    socket = f"{private.name}/backend.sock"  # where predictor serve --front puts the server for its front
    server = ServerProcess(service_main, {"predictor": args.predictor, "warm_records": 2000, "seed": args.seed,
                                          "devices": bench_rpc.DEVICES, "metrics": True, "max_workers": 8,
                                          "max_concurrent_rpcs": 64, "max_candidates": 1024, "shed_wait_ms": 5.0,
                                          "answer_threads": 2, "unix_socket": socket})
    front = Front("127.0.0.1:0", f"unix:{socket}", limit=4)
    try:
        front.start()
        ways = {"direct": (server.target, [server.process.pid]),
                "through the front": (f"127.0.0.1:{front.port}", [server.process.pid, front.process.pid])}
        print("round | way | p50 ms | p99 ms | server CPU µs per call (Python + front)")
        for round_ in range(1, args.rounds + 1):
            for way, (target, pids) in ways.items():
                with grpc.insecure_channel(target) as channel:
                    call = channel.unary_unary(method_path("PredictLatency"))
                    for payload in payloads[:50]:  # connected and warm
                        call(payload)
                    before = [process_cpu_seconds(pid) for pid in pids]
                    latency = np.empty(args.calls)
                    for i in range(args.calls):
                        begin = time.perf_counter()
                        call(payloads[i % len(payloads)])
                        latency[i] = time.perf_counter() - begin
                    spent = [process_cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)]
                p50, p99 = (1e3 * float(np.percentile(latency, q)) for q in (50, 99))
                cpu = " + ".join(f"{1e6 * s / args.calls:.0f}" for s in spent)
                print(f"{round_} | {way} | {p50:.3f} | {p99:.3f} | {cpu}", flush=True)
    finally:
        front.stop()
        server.stop()
        private.cleanup()


if __name__ == "__main__":
    main()
