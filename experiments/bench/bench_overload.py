"""Overload shed by time: PredictLatency offered a steady rate beyond the service's capacity.

Three servers in processes of their own, as ``predictor serve`` builds them (8 handler threads, at
most 64 calls in flight), driven in the same run by the same ``grpc.aio`` open-loop client (each call
sent at its scheduled time whatever became of the earlier ones, with a client deadline of
``--deadline-s``):

* the service shedding by time (``--shed-wait-ms``, ``predictor serve``'s default 5 ms), its answers on
  ``--answer-threads`` threads of their own (``predictor serve``'s default);
* the same service queueing every call on its 8 threads (bounded by length only: 64 in flight);
* with ``--front`` (the default once ``make front`` built it), the shedding service behind the C++
  admission front (:mod:`predictor.rpc.front`), on a Unix socket, as ``predictor serve --front`` runs it;
* the echo floor (:mod:`experiments.bench.echo_server`, 8 threads) answering canned responses of the same size.

The service's capacity is the rate the queueing one answers when offered ``--saturating-rate`` calls/s
(the excess beyond 64 in flight refused by gRPC); the service is then
offered ``--factor`` times that, as is the echo. Per server the figures are: calls answered, refused
(``RESOURCE_EXHAUSTED``), ended otherwise (``CANCELLED``, ``DEADLINE_EXCEEDED``: a client that gave up),
the refusals' p99 and the answered calls' p50 and p99, each from the call's scheduled send (and the
p99s again from the moment the client sent it, which leaves out the client's own lateness), and the
server's CPU per call offered (the Python process's, plus the front's behind it). The last
line sets the shedding service against the issue's targets, absolute and relative to the echo's p99 at
the same rate (the floor of this machine and client).

With ``--pin`` (the default on a machine of 2 or more cores), the client processes run on the first
half of the machine's cores and the servers on the other half, as a client on another machine would:
the client's lateness then does not depend on how much CPU the server under test uses, and the
figures are per server core.

Run: ``.venv/bin/python -m experiments.bench.bench_overload`` (``--seconds``, ``--factor``, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np

from experiments.bench import bench_rpc
from experiments.bench.cpu_accounting import process_cpu_seconds
from experiments.bench.echo_server import method_path
from experiments.bench.rpc_load import ClientPool
from experiments.bench.rpc_servers import ServerProcess, echo_main, service_main
from predictor.rpc.front import Front, front_binary
from predictor.rpc.names import METHOD_PREFIX
from predictor.rpc.overload import DEFAULT_ANSWER_THREADS, DEFAULT_SHED_WAIT_MS
from predictor.runtime.gil import DEFAULT_SWITCH_INTERVAL_MS

PATH = METHOD_PREFIX + "PredictLatency"


def halves() -> tuple[set[int], set[int]] | None:
    """The client's cores and the servers' cores (the first half and the rest of this process's), or
    ``None`` on a single core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    middle = len(cores) // 2
    return set(cores[:middle]), set(cores[middle:])


@contextlib.contextmanager
def started_on(cores: set[int] | None) -> Iterator[None]:
    """Processes started inside run on ``cores`` (they inherit this process's affinity); ``None``: as is."""
    if cores is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def offer(pool: ClientPool, target: str, path: str, payloads: list[bytes], rate: float, seconds: float,
          deadline_s: float, clients: int) -> dict[str, Any]:
    """``payloads`` sent to ``target`` at ``rate`` calls/s for ``seconds`` (open loop, ``clients`` processes);
    the outcome counts and latencies (ms, from each call's scheduled send)."""
    task = {"kind": "open_async", "path": path, "requests": payloads, "rate": rate / clients,
            "duration_s": seconds, "target": target, "timeout_s": deadline_s}
    results = pool.run([task] * clients)
    codes = np.concatenate([r["codes"] for r in results])
    latency = np.concatenate([r["corrected"] for r in results])
    from_send = np.concatenate([r["latency"] for r in results])
    answered = codes == 0
    refused = codes == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    cancelled = codes == grpc.StatusCode.CANCELLED.value[0]

    def percentile(values: np.ndarray, q: float) -> float:
        return 1e3 * float(np.percentile(values, q)) if values.size else math.nan

    return {"calls": int(codes.size), "answered": int(answered.sum()), "refused": int(refused.sum()),
            "cancelled": int(cancelled.sum()), "other": int((~answered & ~refused & ~cancelled).sum()),
            "answered_per_s": answered.sum() / max(r["elapsed"] for r in results),
            "refused_p99_ms": percentile(latency[refused], 99), "refused_max_ms": percentile(latency[refused], 100),
            "refused_sent_p99_ms": percentile(from_send[refused], 99),
            "answered_sent_p99_ms": percentile(from_send[answered], 99),
            "answered_p50_ms": percentile(latency[answered], 50),
            "answered_p99_ms": percentile(latency[answered], 99)}


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each offered load (default 8)")
    parser.add_argument("--factor", type=float, default=1.7, help="offered load / capacity (default 1.7)")
    parser.add_argument("--saturating-rate", type=float, default=2000.0,
                        help="the offer that measures the capacity, calls/s (default 2000)")
    parser.add_argument("--capacity", type=float, default=0.0,
                        help="the service's capacity, calls/s, when known (default 0: measured as above)")
    parser.add_argument("--shed-wait-ms", type=float, default=DEFAULT_SHED_WAIT_MS,
                        help=f"the shedding bound (default {DEFAULT_SHED_WAIT_MS:g})")
    parser.add_argument("--answer-threads", type=int, default=DEFAULT_ANSWER_THREADS,
                        help=f"the shedding service's answer threads (default {DEFAULT_ANSWER_THREADS})")
    parser.add_argument("--switch-interval-ms", type=float, default=DEFAULT_SWITCH_INTERVAL_MS,
                        help=f"the shedding service's GIL switch interval (default {DEFAULT_SWITCH_INTERVAL_MS:g}, "
                             "`predictor serve`'s)")
    parser.add_argument("--deadline-s", type=float, default=1.0, help="each call's client deadline (default 1)")
    parser.add_argument("--clients", type=int, default=1, help="client processes (default 1)")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                        help="client on the first half of the cores, servers on the rest (default on; "
                             "--no-pin: every process anywhere)")
    parser.add_argument("--front", action=argparse.BooleanOptionalAction, default=front_binary() is not None,
                        help="also the shedding service behind the C++ admission front (`predictor serve --front`; "
                             "default on when `make front` built it)")
    parser.add_argument("--front-limit", type=int, default=0,
                        help="the front's answers in flight (default 0: twice --answer-threads, as serve's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    split = halves() if args.pin else None
    client_cores, server_cores = split if split else (None, None)

    requests = bench_rpc.build_requests(bench_rpc.Config(seed=args.seed, ingest_records=100))
    payloads = requests["PredictLatency"]
    spec = {"predictor": "rls", "warm_records": 2000, "seed": args.seed, "devices": bench_rpc.DEVICES,
            "metrics": True, "max_workers": 8, "max_concurrent_rpcs": 64, "max_candidates": 1024}
    with started_on(client_cores):
        pool = ClientPool(args.clients)
    servers: list[ServerProcess] = []
    front: Front | None = None
    private = tempfile.TemporaryDirectory(prefix="bench-front-")
    try:
        with started_on(server_cores):
            shedding = ServerProcess(service_main, {**spec, "shed_wait_ms": args.shed_wait_ms,
                                                    "unix_socket": f"{private.name}/backend.sock",
                                                    "answer_threads": args.answer_threads,
                                                    "switch_interval_s": args.switch_interval_ms / 1e3})
            servers.append(shedding)
            queueing = ServerProcess(service_main, spec)
            servers.append(queueing)
        canned = {"PredictLatency": bench_rpc.canned_responses(shedding.target, requests)["PredictLatency"]}
        with started_on(server_cores):
            echo = ServerProcess(echo_main, {"max_workers": 8, "server": "thread", "unary": canned,
                                             "streams": {}})
        servers.append(echo)
        if args.front:
            with started_on(server_cores):
                front = Front("127.0.0.1:0", f"unix:{private.name}/backend.sock",  # as predictor serve --front
                              limit=args.front_limit or 2 * args.answer_threads)
                front.start()
        capacity = args.capacity or offer(pool, queueing.target, PATH, payloads, args.saturating_rate, args.seconds,
                                          args.deadline_s, args.clients)["answered_per_s"]
        rate = args.factor * capacity
        def run(target: str, path: str, pids: list[int]) -> dict[str, Any]:
            """``offer`` at ``rate``, with the CPU seconds the processes ``pids`` spent on it."""
            before = [process_cpu_seconds(pid) for pid in pids]
            found = offer(pool, target, path, payloads, rate, args.seconds, args.deadline_s, args.clients)
            spent = [process_cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)]
            return found | {"cpu_us_per_call": [1e6 * s / found["calls"] for s in spent]}

        rows = [
            (f"service, shedding beyond {args.shed_wait_ms:g} ms ({args.answer_threads} answer threads, "
             f"switch interval {args.switch_interval_ms:g} ms)", run(shedding.target, PATH, [shedding.process.pid])),
            *([(f"the same behind the admission front (at most {front.limit} answers in flight)",
                run(f"127.0.0.1:{front.port}", PATH, [shedding.process.pid, front.process.pid]))]
              if front is not None else []),
            ("service, queueing (64 in flight)", run(queueing.target, PATH, [queueing.process.pid])),
            ("echo floor", run(echo.target, method_path("PredictLatency"), [echo.process.pid])),
        ]
    finally:
        if front is not None:
            front.stop()
        for server in servers:
            server.stop()
        pool.close()
        private.cleanup()
    measured = "given" if args.capacity else f"answered when offered {args.saturating_rate:,.0f}/s"
    placement = (f"client on cores {sorted(client_cores)}, servers on cores {sorted(server_cores)}"
                 if client_cores else "every process on any core")
    print(f"{placement}; capacity ({measured}): {capacity:,.0f} calls/s; offered "
          f"{args.factor:g}x = {rate:,.0f} calls/s for {args.seconds:g} s, client deadline {args.deadline_s:g} s")
    header = ("server", "calls", "answered", "refused", "cancelled", "other", "refused p99 ms", "refused max ms",
              "answered p50 ms", "answered p99 ms", "refused p99 from send ms", "answered p99 from send ms",
              "server CPU µs per call offered (Python + front)")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for name, r in rows:
        print(" | ".join([name, f"{r['calls']:,}", f"{r['answered']:,}", f"{r['refused']:,}", f"{r['cancelled']:,}",
                          f"{r['other']:,}", f"{r['refused_p99_ms']:.1f}", f"{r['refused_max_ms']:.1f}",
                          f"{r['answered_p50_ms']:.1f}", f"{r['answered_p99_ms']:.1f}",
                          f"{r['refused_sent_p99_ms']:.1f}", f"{r['answered_sent_p99_ms']:.1f}",
                          " + ".join(f"{us:.0f}" for us in r["cpu_us_per_call"])]))
    echo_p99 = rows[-1][1]["answered_p99_ms"]
    echo_sent_p99 = rows[-1][1]["answered_sent_p99_ms"]
    for name, shed in rows[:2] if front is not None else rows[:1]:
        print(f"{name.partition(' (')[0]} against the targets: cancelled {shed['cancelled']} (0); refused p99 {shed['refused_p99_ms']:.1f} ms "
              f"(<= 5 ms; <= echo p99 + 5 = {echo_p99 + 5:.1f} ms); answered p99 {shed['answered_p99_ms']:.1f} ms "
              f"(<= 50 ms), {shed['answered_p99_ms'] / echo_p99:.2f}x the echo's p99 {echo_p99:.1f} ms (<= 3x); from "
              f"the call's send: refused p99 {shed['refused_sent_p99_ms']:.1f} ms against the echo's p99 "
              f"{echo_sent_p99:.1f} ms")


if __name__ == "__main__":
    main()
