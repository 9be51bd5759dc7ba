"""The network and process options of ``predictor serve`` (the model's are in :class:`~predictor.service.config.ServiceConfig`).

Light: importing it loads no gRPC, so the command line builds its options while it parses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from predictor.rpc.overload import DEFAULT_ANSWER_THREADS, DEFAULT_SHED_WAIT_MS
from predictor.runtime.gc_tuning import DEFAULT_YOUNG_THRESHOLD
from predictor.runtime.gil import DEFAULT_SWITCH_INTERVAL_MS
from predictor.runtime.gil_yield import DEFAULT_LEARNER_YIELD_MS


@dataclass(frozen=True)
class ServeOptions:
    """Network and process options of ``predictor serve`` (the model's are in :class:`ServiceConfig`)."""

    host: str = "0.0.0.0"
    port: int = 50051
    metrics_port: int = 9464  # 0: no metrics endpoint
    metrics_host: str = "127.0.0.1"  # the metrics endpoint's address (not the service's)
    metrics_token: bool = False  # scrapes need a bearer token of auth_token_file (the default with tokens)
    open_metrics: bool = False  # scrapes need no token even with auth_token_file
    trace: str = "off"  # OpenTelemetry exporter of RPC spans: off, console, otlp (predictor.rpc.tracing)
    trace_endpoint: str | None = None  # where otlp sends spans
    state_dir: str | None = None
    warm_start: str | None = None
    grace_s: float = 5.0
    max_workers: int = 8
    max_message_bytes: int = 4 * 1024 * 1024
    max_concurrent_rpcs: int | None = 64  # DEFAULT_MAX_CONCURRENT_RPCS; 0 or None: no limit
    shed_wait_ms: float = DEFAULT_SHED_WAIT_MS  # refuse a call expected to wait longer for a thread (predictor.rpc.overload); 0: never
    answer_threads: int = DEFAULT_ANSWER_THREADS  # with shedding: the threads computing answers, apart from max_workers
    port_file: str | None = None
    targets_file: str | None = None  # the balanced target of every worker's own port (balanced_target)
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    auth_token_file: str | None = None
    allowed_clients: tuple[str, ...] = ()
    protect_reads: bool = False
    allow_unauthenticated_writes: bool = False  # no credential configured: writes from any address, not loopback only
    workers: int = 1  # answering processes; > 1: learner processes and workers (predictor.rpc.processes.supervisor)
    shards: tuple[str, ...] = ()  # --shard: device kinds per learner (predictor.service.replicas.shards)
    learner_nice: int = 0  # the learner processes' niceness increment (--workers > 1)
    learner_policy: str = "normal"  # the learner processes' scheduling class (predictor.runtime.cpu_priority)
    learner_cpus: tuple[int, ...] = ()  # the CPUs the learner processes run on (none: any)
    worker_cpus: tuple[int, ...] = ()  # the CPUs the answering workers run on (none: any)
    pin_workers: bool = False  # each answering worker on one CPU of its own (predictor.runtime.cpu_priority.worker_cpus)
    handler_cpus: tuple[int, ...] = ()  # one process: its RPC handler threads' CPUs, the rest elsewhere (none: any)
    switch_interval_ms: float = DEFAULT_SWITCH_INTERVAL_MS  # the GIL's switch interval (predictor.runtime.gil)
    gc_young_threshold: int = DEFAULT_YOUNG_THRESHOLD  # the collector's (predictor.runtime.gc_tuning); 0: Python's
    learner_yield_ms: float = DEFAULT_LEARNER_YIELD_MS  # one process: the learner's pauses for answers (gil_yield)
    front: bool = False  # calls taken in by the C++ admission front (predictor.rpc.front); the server on a Unix socket
    front_limit: int = 0  # answers in flight behind the front (0: twice answer_threads)


def write_port_file(path: str, port: int | str) -> None:
    """Write ``port`` (or a target) and a newline to the file ``path`` atomically (a reader never sees
    it half written)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(f"{port}\n")
    os.replace(tmp, target)


def balanced_target(host: str, ports: list[int]) -> str:
    """The gRPC target a client spreads its calls over ``ports`` of ``host`` with: ``ipv4:HOST:P1,HOST:P2``
    (a wildcard ``host`` becomes the loopback address); a client channel opened on it
    (:func:`~predictor.rpc.security.open_channel`) connects to every port and sends its calls round robin.

    >>> balanced_target("0.0.0.0", [5001, 5002])
    'ipv4:127.0.0.1:5001,127.0.0.1:5002'
    >>> balanced_target("::", [5001])
    'ipv6:[::1]:5001'
    """
    host = host.strip("[]")
    if ":" in host:
        address = "::1" if host == "::" else host
        return "ipv6:" + ",".join(f"[{address}]:{port}" for port in ports)
    address = "127.0.0.1" if host in ("", "0.0.0.0") else host
    return "ipv4:" + ",".join(f"{address}:{port}" for port in ports)
