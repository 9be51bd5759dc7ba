"""Server processes of the RPC benchmark: the real service and its echo floor, each in its own process.

:class:`ServerProcess` spawns one and waits for its port. The service is
built as ``predictor serve`` builds it (:func:`~predictor.rpc.server.create_server`:
the thread-pool server with the Prometheus metrics, auth and decoding
interceptors, health and reflection), warmed up prequentially on synthetic
records so that answers come from a learned model with calibrated bounds.
The echo (:mod:`experiments.bench.echo_server`) answers canned responses of the same
sizes as the service's, on the thread-pool server (``server="thread"``) or
on ``grpc.aio`` (``"aio"``).

A service spec with ``"canned"`` (method name -> a serialised response) answers those methods
with the response, through everything else of the service's server: the request decoded, the
interceptors (metrics, auth), the error wrapper and the thread pool. Against the echo it
measures what the RPC layer costs; against the service, what computing the answer costs.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import sys
import time
from typing import Any

from experiments.bench.cpu_accounting import process_cpu_seconds
from experiments.bench.echo_server import create_echo_aio_server, create_echo_server
from predictor.rpc.errors import grpc_errors
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.overload import DEFAULT_ANSWER_THREADS
from predictor.rpc.protos import pb2
from predictor.rpc.server import bind, create_server, stop_server
from predictor.rpc.servicer import InterferenceServicer
from predictor.runtime import gil_yield
from predictor.runtime.cpu_priority import handler_split, pin_to_cpus
from predictor.runtime.gc_tuning import DEFAULT_YOUNG_THRESHOLD, freeze_startup, set_young_threshold
from predictor.runtime.gil import DEFAULT_SWITCH_INTERVAL_MS
from predictor.runtime.threads import pin_blas_threads
from predictor.service import Service, ServiceConfig
from predictor.service.estimates import fixed_point_kernel
from predictor.service.synthetic import synthetic_records


def _build_service(spec: dict) -> Any:
    service = Service(
        ServiceConfig(
            predictor=spec["predictor"],
            max_candidates=max(1024, spec["max_candidates"]),
            max_stream_records=10_000_000,
            snapshot_every_s=0,
            outlier_gate=spec.get("outlier_gate", True),
        )
    )
    service.open(spec.get("state_dir"))  # a state folder: the observation log on (fsync per stream)
    for record in synthetic_records(spec["warm_records"], seed=spec["seed"], devices=spec["devices"]):
        service.observe(record)
    return service


def service_main(conn: Any, spec: dict) -> None:
    """Serve the real service on ``127.0.0.1:0`` (and on the Unix socket ``unix_socket`` where the spec
    names one); send the port, stop when told. With ``handler_cpus``, as
    ``predictor serve --handler-cpus`` runs: the RPC handler threads on those CPUs, every other thread on the rest."""
    pin_blas_threads(spec.get("blas_threads"))
    handler_cpus = tuple(spec.get("handler_cpus", ()))
    if handler_cpus:
        pin_to_cpus(handler_split(handler_cpus))
    # the GIL's switch interval of `predictor serve` (predictor.runtime.gil), unless the spec names one
    sys.setswitchinterval(spec.get("switch_interval_s") or DEFAULT_SWITCH_INTERVAL_MS / 1e3)

    service = _build_service(spec)
    fixed_point_kernel.warm()  # as `predictor serve` does: compiled before the first answer, not during it
    # and its garbage collector (predictor.runtime.gc_tuning), unless the spec names another threshold (0: Python's)
    young = spec.get("gc_young_threshold", DEFAULT_YOUNG_THRESHOLD)
    set_young_threshold(young)
    freeze_startup(young)
    # and the learner's pauses for answers (predictor.runtime.gil_yield), unless the spec names another period (0: none)
    gil_yield.configure(spec.get("learner_yield_ms", gil_yield.DEFAULT_LEARNER_YIELD_MS))
    metrics = ServerMetrics(service) if spec["metrics"] else None
    servicer = _canned_servicer(service, spec["canned"]) if spec.get("canned") else None
    server, port = create_server("127.0.0.1:0", service, metrics=metrics, max_workers=spec["max_workers"],
                                 max_concurrent_rpcs=spec.get("max_concurrent_rpcs"), servicer=servicer,
                                 handler_cpus=handler_cpus, shed_wait_ms=spec.get("shed_wait_ms"),
                                 answer_threads=spec.get("answer_threads", DEFAULT_ANSWER_THREADS))
    if spec.get("unix_socket"):  # also where `predictor serve --front` puts it for its front
        bind(server, f"unix:{spec['unix_socket']}")
    server.start()
    conn.send(port)
    conn.recv()
    stop_server(server, service, grace=0.5)


def _canned_servicer(service: Any, canned: dict[str, tuple[str, str, bytes]]) -> InterferenceServicer:
    """The service's servicer with the methods of ``canned`` (name -> request type, response type,
    serialised response) answering that response, wrapped in the servicer's error handling."""
    messages = pb2()
    methods = {}
    for name, (_, response, payload) in canned.items():
        answer = getattr(messages, response).FromString(payload)
        methods[name] = grpc_errors(lambda self, request, context, answer=answer: answer)
    return type("CannedServicer", (InterferenceServicer,), methods)(service)


def _echo_methods(spec: dict) -> tuple[dict, dict]:
    messages = pb2()

    def build(methods: dict) -> dict:
        return {
            name: (getattr(messages, request), getattr(messages, response).FromString(payload))
            for name, (request, response, payload) in methods.items()
        }

    return build(spec["unary"]), build(spec["streams"])


def echo_main(conn: Any, spec: dict) -> None:
    """Serve the echo floor on ``127.0.0.1:0``; send the port, stop when told."""
    pin_blas_threads(spec.get("blas_threads"))
    # the GIL's switch interval of `predictor serve` (predictor.runtime.gil), unless the spec names one
    sys.setswitchinterval(spec.get("switch_interval_s") or DEFAULT_SWITCH_INTERVAL_MS / 1e3)
    unary, streams = _echo_methods(spec)
    if spec["server"] == "aio":

        async def main() -> None:
            server, port = create_echo_aio_server("127.0.0.1:0", unary, streams)
            await server.start()
            conn.send(port)
            await asyncio.get_running_loop().run_in_executor(None, conn.recv)
            await server.stop(0.5)

        asyncio.run(main())
        return
    server, port = create_echo_server("127.0.0.1:0", unary, streams, max_workers=spec["max_workers"])
    server.start()
    conn.send(port)
    conn.recv()
    server.stop(0.5).wait()


class ServerProcess:
    """One server in a spawned process; ``target`` is ``127.0.0.1:port`` once it listens."""

    def __init__(self, main: Any, spec: dict, timeout_s: float = 300.0):
        context = mp.get_context("spawn")
        self._conn, child = context.Pipe()
        self.process = context.Process(target=main, args=(child, spec), daemon=True)
        self.process.start()
        end = time.monotonic() + timeout_s
        while not self._conn.poll(0.1):
            if not self.process.is_alive():
                raise RuntimeError(f"the server process died on start (exit code {self.process.exitcode})")
            if time.monotonic() > end:
                self.process.kill()
                raise RuntimeError(f"the server process did not start within {timeout_s} s")
        self.port = int(self._conn.recv())
        self.target = f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the server process so far (all its threads)."""
        return process_cpu_seconds(self.process.pid)

    def stop(self) -> None:
        """Tell the server to stop; kill it if it has not exited within 10 s."""
        self._conn.send("stop")
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
