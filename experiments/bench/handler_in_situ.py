"""PredictLatency's handler in situ: its CPU per call in a warm loop and between gRPC calls.

The bench's server spends about twice the handler's warm-loop CPU on each answer. This study
finds where: one process builds the service as the bench's server does (the default learner unless ``--predictor``, 2,000 warm-up
records) and calls the servicer's ``PredictLatency`` directly on the bench's requests, timing
each call's thread CPU (``time.thread_time_ns``), by stage, with something different run
between calls:

* ``warm loop``: nothing (what an in-process micro-benchmark measures);
* ``thread hand-off``: a round trip to another thread through two queues (what the server's
  thread pool adds);
* ``gRPC echo call``: a unary call to an echo server of the same process on port 0, made by
  another thread (the gRPC machinery a server runs between two answers);
* ``gRPC echo call, then 2 ms spin``: the same, then 2 ms of busy waiting before the answer
  (whether the cost fades with time);
* ``broad Python code``: JSON, regular expressions, zlib, decimals and small NumPy linear
  algebra (code unrelated to gRPC, to tell eviction by any large footprint from gRPC's own);
* ``sleep 0.2 ms``, ``sleep 1 ms``, ``sleep 5 ms``: the thread idle for that long, nothing else run in
  the process (whether time alone, not gRPC, costs the handler its caches);
* ``spin 5 ms``: 5 ms of busy waiting in the same thread (the CPU kept busy meanwhile).

Then the warm loop again, on the bench's requests split by what each says of its co-runners (none; all
by overlap; some by remaining time, the window path a scheduler that keeps the live view takes).

Measured on the shared 2-core machine (2026-11-24, one process, also with the process held on
one CPU): handler 93-103 µs warm, 112-160 after a hand-off, 210-250 after a gRPC call, 265
after the call and 2 ms of spin, 147-155 after the broad code; every stage about twice its
warm cost (decoding the query 12 -> 30 µs, the latencies 34 -> 73, the response 9 -> 16), a
tight loop's own cost unchanged, neither the GIL's switch interval, gRPC's poll strategy nor
its event-engine experiments changing it. So the in-server handler (~223 µs by the same timer
inside the bench's server) is the warm loop's code with its caches evicted between
calls: warm-loop micro-benchmarks understate an answer's cost by about 2x, and what lowers it
is less code and data touched per answer. The idle and spin conditions (added 2026-11-29) show the
eviction grows with the time between calls whatever runs meanwhile, gRPC or nothing
(``docs/performance.md``, "An answer's cost and the time since the last one").

Run: ``PYTHONPATH=$PWD .venv/bin/python -m experiments.bench.handler_in_situ``
"""

from __future__ import annotations

import collections
import dataclasses
import decimal
import functools
import json
import queue
import re
import sys
import threading
import time
import zlib
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
import numpy as np

from experiments.bench import bench_rpc
from experiments.bench.rpc_servers import _build_service
from experiments.common import finish, start
from predictor.predictors.registry import DEFAULT
from predictor.rpc import servicer as servicer_module
from predictor.rpc.protos import pb2
from predictor.rpc.servicer import InterferenceServicer
from predictor.runtime.gil import DEFAULT_SWITCH_INTERVAL_MS
from predictor.service import answering
from predictor.service.estimates import fixed_point_kernel

STAGES = ("plan_query", "_latencies", "_bounds", "answer")
"""The :class:`~predictor.service.answering.Answering` methods timed (inclusive), beside decoding and encoding."""


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    seed: int = 0
    rounds: int = 5
    warm_records: int = 2000
    predictor: str = DEFAULT  # the service's default learner


class StageClock:
    """Inclusive thread CPU of named functions, wrapped in place (undone by :meth:`close`)."""

    def __init__(self) -> None:
        self.ns: collections.Counter[str] = collections.Counter()
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str) -> None:
        """Time ``owner.name`` from now on, under ``name``."""
        real = getattr(owner, name)

        @functools.wraps(real)
        def timed(*args: Any, **kwargs: Any) -> Any:
            begin = time.thread_time_ns()
            try:
                return real(*args, **kwargs)
            finally:
                self.ns[name] += time.thread_time_ns() - begin

        self._undo.append((owner, name, real))
        setattr(owner, name, timed)

    def close(self) -> None:
        """Put back every function wrapped."""
        for owner, name, real in reversed(self._undo):
            setattr(owner, name, real)


def echo_caller(payload: bytes) -> tuple[Callable[[], None], Callable[[], None]]:
    """A function that has another thread make one unary gRPC call to an echo server of this
    process, and a function that stops the server."""
    server = grpc.server(futures.ThreadPoolExecutor(2))
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("echo.Echo", {"Call": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    call = channel.unary_unary("/echo.Echo/Call")
    call(payload)
    return _in_other_thread(lambda: call(payload)), lambda: (channel.close(), server.stop(0))


def _in_other_thread(work: Callable[[], Any]) -> Callable[[], None]:
    """A function that has a daemon thread run ``work`` once and waits for it."""
    asked: queue.SimpleQueue[None] = queue.SimpleQueue()
    done: queue.SimpleQueue[None] = queue.SimpleQueue()

    def serve() -> None:
        while True:
            asked.get()
            work()
            done.put(None)

    threading.Thread(target=serve, daemon=True).start()
    return lambda: (asked.put(None), done.get())


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def broad_code() -> Callable[[], None]:
    """Unrelated code with a large footprint: the standard library's and NumPy's."""
    data = {"a": list(range(50)), "b": {str(i): i * 1.5 for i in range(50)}}
    small = np.random.default_rng(0).normal(size=(16, 16))

    def run() -> None:
        json.loads(json.dumps(data))
        re.purge()
        re.compile(r"(\d+)-(\w+)\s*").match("12-ab x")
        zlib.compress(b"x" * 2000)
        decimal.Decimal(1) / decimal.Decimal(7)
        np.linalg.svd(small)
        np.fft.fft(small[0])
        np.median(small)

    return run


def measure(servicer: InterferenceServicer, requests: list[Any], between: Callable[[], Any], rounds: int,
            clock: StageClock) -> dict[str, float]:
    """Mean thread CPU (µs) per call of the handler and of each stage, ``between`` run before each call."""
    clock.ns.clear()
    total = calls = 0
    for _ in range(rounds):
        for request in requests:
            between()
            begin = time.thread_time_ns()
            servicer.PredictLatency(request, None)
            total += time.thread_time_ns() - begin
            calls += 1
    return {"handler": total / calls / 1e3, **{name: ns / calls / 1e3 for name, ns in clock.ns.items()}}


def kind_of(request: Any) -> str:
    """What a PredictLatency request says of its co-runners: none, each by overlap, or some by remaining
    time (the window path: a scheduler that keeps the live view asks so)."""
    runners = request.query.co_runners
    if not runners:
        return "no co-runner"
    if any(runner.HasField("remaining_ms") for runner in runners):
        return "some by remaining time"
    return "all by overlap"


def main() -> None:
    """Measure the handler under each condition, interleaved twice, and print the table."""
    config, out = start("handler_in_situ", Config(), __doc__.splitlines()[0])
    sys.setswitchinterval(DEFAULT_SWITCH_INTERVAL_MS / 1e3)  # as `predictor serve` sets it
    bench = bench_rpc.Config(seed=config.seed)
    service = _build_service({"predictor": config.predictor, "max_candidates": 1024, "warm_records": config.warm_records,
                              "seed": config.seed, "devices": bench_rpc.DEVICES})
    fixed_point_kernel.warm()
    payloads = bench_rpc.build_requests(bench)["PredictLatency"]
    requests = [pb2().PredictLatencyRequest.FromString(p) for p in payloads]
    servicer = InterferenceServicer(service)
    clock = StageClock()
    clock.wrap(servicer_module.convert, "query_from_pb")
    clock.wrap(servicer_module.convert, "answer_row_to_pb")
    for name in STAGES:
        clock.wrap(answering.Answering, name)
    echo, stop_echo = echo_caller(payloads[0])
    conditions: dict[str, Callable[[], Any]] = {
        "warm loop": lambda: None,
        "thread hand-off": _in_other_thread(lambda: None),
        "gRPC echo call": echo,
        "gRPC echo call, then 2 ms spin": lambda: (echo(), _spin(0.002)),
        "broad Python code": broad_code(),
        "sleep 0.2 ms": lambda: time.sleep(0.0002),
        "sleep 1 ms": lambda: time.sleep(0.001),
        "sleep 5 ms": lambda: time.sleep(0.005),
        "spin 5 ms": lambda: _spin(0.005),
    }
    try:
        measure(servicer, requests, lambda: None, 1, clock)  # warm
        results: dict[str, list[dict[str, float]]] = {name: [] for name in conditions}
        for _ in range(2):
            for name, between in conditions.items():
                results[name].append(measure(servicer, requests, between, config.rounds, clock))
        kinds: dict[str, list[Any]] = {}
        for request in requests:
            kinds.setdefault(kind_of(request), []).append(request)
        by_kind: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
        for _ in range(2):
            for kind, chosen in kinds.items():
                by_kind[kind].append(measure(servicer, chosen, lambda: None, config.rounds, clock))
    finally:
        stop_echo()
        clock.close()
        service.close()
    columns = ["handler", "query_from_pb", *STAGES, "answer_row_to_pb"]
    print(f"thread CPU per PredictLatency call (µs, mean over {len(requests) * config.rounds} calls; "
          "the better of 2 interleaved runs)")
    print(f"{'between calls':<32}" + "".join(f"{c:>17}" for c in columns))
    best = {name: min(runs, key=lambda r: r["handler"]) for name, runs in results.items()}
    for name, row in best.items():
        print(f"{name:<32}" + "".join(f"{row.get(c, float('nan')):>17.1f}" for c in columns))
    warm = best["warm loop"]["handler"]
    for name, row in best.items():
        print(f"{name:<32} {row['handler'] / warm:.2f}x the warm loop")
    print("the warm loop by what the query says of its co-runners")
    print(f"{'co-runners':<24}{'queries':>8}" + "".join(f"{c:>17}" for c in columns))
    best_kind = {kind: min(runs, key=lambda r: r["handler"]) for kind, runs in by_kind.items()}
    for kind, row in best_kind.items():
        print(f"{kind:<24}{len(kinds[kind]):>8}" + "".join(f"{row.get(c, float('nan')):>17.1f}" for c in columns))
    finish(out, {"config": dataclasses.asdict(config), "runs": results, "best": best, "by_kind": by_kind})


if __name__ == "__main__":
    main()
