"""``predictor serve``: run the prediction service until SIGINT or SIGTERM.

The arguments map onto :class:`~predictor.service.config.ServiceConfig` (the
model's options) and :class:`~predictor.rpc.processes.options.ServeOptions` (network,
process and security); :func:`predictor.rpc.processes.serve.serve` runs the server.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from predictor.cli.datasets import resolve_log
from predictor.predictors.registry import DEFAULT as DEFAULT_PREDICTOR
from predictor.rpc.overload import DEFAULT_ANSWER_THREADS, DEFAULT_SHED_WAIT_MS
from predictor.rpc.processes.options import ServeOptions
from predictor.runtime.cpu_priority import POLICIES, parse_cpus
from predictor.runtime.gc_tuning import DEFAULT_YOUNG_THRESHOLD
from predictor.runtime.gil import DEFAULT_SWITCH_INTERVAL_MS
from predictor.runtime.gil_yield import DEFAULT_LEARNER_YIELD_MS
from predictor.runtime.threads import log_blas_threads
from predictor.service import ServiceConfig
from predictor.service.live.topology import TopologyError, load_topology

SERVE_EPILOG = """\
start-up: the server listens at once with health NOT_SERVING; the snapshot in
--state is restored and the observation log after it replayed (or, for an
empty state folder, --warm-start LOG is learned from); then health turns
SERVING. Observations are acknowledged once in the log (--fsync). SIGINT/SIGTERM:
NOT_SERVING, --grace seconds for the calls in flight, a final snapshot in --state.

Examples:
  predictor serve --warm-start embedded            # learn the dataset shipped in the package first
  predictor serve --state state/ --warm-start embedded --port 50051
  predictor serve --state state/ --warm-start runs/cpu.jsonl.gz
  predictor serve --workers 2 --state state/      # 2 answering processes, 1 learner
  grpcurl -plaintext localhost:50051 list            # reflection
  grpcurl -plaintext -d '{"query": {"device": "cpu0", "batch": {"model": "mlp", "batch_size": 4},
      "co_runner_source": "CO_RUNNER_SOURCE_EXPLICIT"}}' \\
      localhost:50051 interference.v1.InterferenceService/PredictLatency
"""


def register(subparsers: Any) -> None:
    """Add the ``serve`` sub-command."""
    parser = subparsers.add_parser(
        "serve",
        help="run the prediction service (gRPC, health, reflection, Prometheus metrics)",
        description="Run the online interference prediction service.",
        epilog=SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=50051, help="gRPC port (default 50051)")
    parser.add_argument(
        "--metrics-port", type=int, default=9464, help="Prometheus port, 0 for none (default 9464)"
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address of the Prometheus endpoint (default 127.0.0.1: this machine only)",
    )
    parser.add_argument("--predictor", default=DEFAULT_PREDICTOR,
                        help=f"predictor spec, e.g. rls or rls:forgetting=0.99 (default {DEFAULT_PREDICTOR})")
    parser.add_argument(
        "--state", metavar="DIR", help="folder of snapshots: restored at start, saved periodically"
    )
    parser.add_argument(
        "--warm-start",
        metavar="LOG",
        help="coloc/v1 log to learn from when no snapshot exists; 'embedded': the CPU dataset shipped "
        "in the package",
    )
    parser.add_argument(
        "--snapshot-every",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds between snapshots, 0 for only at shutdown (default 60)",
    )
    parser.add_argument(
        "--grace", type=float, default=5.0, help="seconds for in-flight calls at stop (default 5)"
    )
    parser.add_argument("--confidence", type=float, default=0.99, help="default confidence (default 0.99)")
    parser.add_argument("--max-workers", type=int, default=8,
                        help="RPC threads (default 8; with shedding, answers run on --answer-threads apart)")
    parser.add_argument(
        "--max-candidates", type=int, default=8192, help="candidates per RankPlacements (default 8192)"
    )
    parser.add_argument(
        "--max-message-bytes", type=int, default=4 * 1024 * 1024, help="largest gRPC message (default 4 MiB)"
    )
    parser.add_argument(
        "--max-stream-records",
        type=int,
        default=1_000_000,
        help="records per ReportObservations stream (default 1000000)",
    )
    parser.add_argument(
        "--max-concurrent-rpcs",
        type=int,
        default=64,
        help="RPCs in flight (queued included) beyond which calls are refused at once with "
        "RESOURCE_EXHAUSTED (default 64; 0: no limit)",
    )
    parser.add_argument(
        "--shed-wait-ms",
        type=float,
        default=DEFAULT_SHED_WAIT_MS,
        metavar="MS",
        help="overload: a call expected to wait longer than MS for a handler thread is refused at once with "
        "RESOURCE_EXHAUSTED, so that the calls answered stay fast (each worker of --workers N alike; "
        "default 5; 0: off, calls queue up to --max-concurrent-rpcs)",
    )
    parser.add_argument(
        "--answer-threads",
        type=int,
        default=DEFAULT_ANSWER_THREADS,
        metavar="N",
        help="with shedding: the threads computing answers (the read calls), apart from the --max-workers "
        f"others, so that streams never hold them; few, as they share the GIL with gRPC (default {DEFAULT_ANSWER_THREADS})",
    )
    parser.add_argument(
        "--front",
        action="store_true",
        help="take calls in with the C++ admission front (`make front`; predictor.rpc.front): it listens on "
        "--host:--port, forwards every call to this server on a private Unix socket and refuses the answers beyond "
        "--front-limit in flight at once with RESOURCE_EXHAUSTED, however busy Python is (one process, "
        "plaintext or bearer tokens; default off)",
    )
    parser.add_argument(
        "--front-limit",
        type=int,
        default=0,
        metavar="N",
        help="with --front: the answers in flight behind it (default 0: twice --answer-threads)",
    )
    parser.add_argument(
        "--port-file", metavar="FILE", help="write the bound gRPC port to FILE once listening"
    )
    parser.add_argument(
        "--targets-file", metavar="FILE",
        help="write the balanced target to FILE once listening (ipv4:HOST:P1,HOST:P2: with --workers N, every "
        "worker's own port; a client channel opened on it sends its calls round robin over the workers, "
        "however few its connections)",
    )
    parser.add_argument(
        "--topology",
        metavar="FILE",
        help="devices' hosts and racks and the link bandwidths (TOML, or JSON for a .json name): a query "
        "giving its input's place and size gets the transfer time added (see predictor.service.live.topology)",
    )
    durability = parser.add_argument_group("durability (with --state)")
    durability.add_argument(
        "--fsync",
        choices=("always", "batch", "never"),
        default="always",
        help="when the observation log is fsynced: before each acknowledgement (always, default: "
        "survives a machine crash), every --fsync-interval (batch) or never; all survive kill -9",
    )
    durability.add_argument(
        "--fsync-interval", type=float, default=1.0, metavar="S", help="period of --fsync batch (default 1 s)"
    )
    durability.add_argument(
        "--no-observation-log",
        action="store_true",
        help="keep no write-ahead log: observations since the last snapshot are lost on a crash",
    )
    durability.add_argument(
        "--no-live-log",
        action="store_true",
        help="keep no side log of batch starts and ends: a restart forgets what runs where",
    )
    durability.add_argument(
        "--live-horizon",
        type=float,
        metavar="S",
        help="at a restart, drop running batches that started longer ago than this (default: 60 s)",
    )
    durability.add_argument(
        "--dedup-window",
        type=int,
        default=100_000,
        metavar="N",
        help="exactly-once learning: sequence numbers remembered behind each producer's highest "
        "(default 100000)",
    )
    robust = parser.add_argument_group("robust learning")
    robust.add_argument(
        "--no-outlier-gate", action="store_true", help="learn even absurd latencies (default: refuse them)"
    )
    robust.add_argument("--outlier-k", type=float, default=8.0, help="gate threshold in MADs (default 8)")
    robust.add_argument(
        "--outlier-min-ratio",
        type=float,
        default=4.0,
        help="never refuse within this factor of the prediction (default 4)",
    )
    robust.add_argument(
        "--rate-limit",
        type=float,
        default=0.0,
        metavar="PER_S",
        help="observations per second per client (or source), 0 for none (default 0)",
    )
    robust.add_argument("--rate-burst", type=int, default=1000, help="burst of the rate limit (default 1000)")
    robust.add_argument(
        "--rate-limit-by",
        choices=("client", "source"),
        default="client",
        help="key of the rate limit of unauthenticated callers: peer address (client, default) or the "
        "records' source field; an authenticated caller is always limited as its identity",
    )
    security = parser.add_argument_group("security")
    security.add_argument("--tls-cert", metavar="PEM", help="server certificate (chain): serve over TLS")
    security.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    security.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        help="CA of the clients: mutual TLS, every client must present a certificate it signed",
    )
    security.add_argument(
        "--auth-token-file",
        metavar="FILE",
        help="bearer tokens with roles, one per line: '<name> sha256:<hex of the token> roles=<role>[,<role>]' "
        "(roles: read, observe, metrics, admin; see predictor.rpc.security): state-changing RPCs need a token "
        "(metadata 'authorization: Bearer <token>') or a client certificate with the observe role",
    )
    security.add_argument(
        "--allowed-client",
        action="append",
        metavar="CN[=ROLES]",
        help="client certificate common name allowed to call, with its roles (e.g. collector-1=observe,read; "
        "default read,observe); repeatable; none given: any verified certificate has read,observe",
    )
    security.add_argument(
        "--allow-unauthenticated-writes",
        action="store_true",
        help="with no token file nor client CA: take the state-changing RPCs from any address (default: from "
        "this machine only, loopback); warned at start",
    )
    security.add_argument(
        "--protect-reads",
        action="store_true",
        help="read-only RPCs need a token or a client certificate too (health and reflection stay open)",
    )
    security.add_argument(
        "--metrics-token",
        action="store_true",
        help="the Prometheus endpoint needs 'authorization: Bearer <token>' with a token of --auth-token-file "
        "holding the metrics role (the default whenever --auth-token-file is given)",
    )
    security.add_argument(
        "--open-metrics",
        action="store_true",
        help="the Prometheus endpoint answers without a token even with --auth-token-file",
    )
    parser.add_argument(
        "--trace",
        choices=("off", "console", "otlp"),
        default="off",
        help="OpenTelemetry traces of every RPC: off (default), console (JSON spans on stdout) or otlp "
        "(a collector over OTLP/gRPC; needs opentelemetry-exporter-otlp-proto-grpc)",
    )
    parser.add_argument("--trace-endpoint", metavar="HOST:PORT", default=None,
                        help="where --trace otlp sends spans (default localhost:4317)")
    scale = parser.add_argument_group("scaling out (one machine)")
    scale.add_argument(
        "--workers", type=int, default=1, metavar="N",
        help="answering processes on the port (SO_REUSEPORT); N > 1 also runs a learner process per shard "
        "that the workers forward observations to and read published model versions from (default 1: one process)",
    )
    scale.add_argument(
        "--shard", action="append", metavar="KINDS",
        help="with --workers > 1: the device kinds (comma-separated) of one learner (repeatable; kinds named by "
        "none go to the first; state in --state/shard-<i>)",
    )
    scale.add_argument(
        "--learner-nice", type=int, default=0, metavar="N",
        help="with --workers > 1: the learner processes' niceness increment (0-19; e.g. 10: when the CPUs are "
        "short, answers run before learning, and ingest takes what they leave; default 0)",
    )
    scale.add_argument(
        "--learner-cpus", metavar="LIST", default="",
        help="with --workers > 1: the CPUs the learner processes run on, a Linux CPU list (e.g. 2-3); with "
        "--worker-cpus, learning never runs on an answering core (default: any CPU)",
    )
    scale.add_argument(
        "--worker-cpus", metavar="LIST", default="",
        help="with --workers > 1: the CPUs the answering workers run on (e.g. 0-1; default: any CPU)",
    )
    scale.add_argument(
        "--pin-workers", action="store_true",
        help="with --workers > 1: each answering worker on one CPU of its own (of --worker-cpus, else of the "
        "CPUs the learners leave; round robin), which keeps its caches warm",
    )
    scale.add_argument(
        "--handler-cpus", metavar="LIST", default="",
        help="with --workers 1: the CPUs the RPC handler threads run on (where answers are computed), a Linux CPU "
        "list (e.g. 0); every other thread of the process (gRPC's own, the learner) runs on the CPUs left, so "
        "that gRPC's work between answers does not evict theirs from the caches (default: any CPU)",
    )
    scale.add_argument(
        "--learner-policy", choices=tuple(POLICIES), default="normal",
        help="with --workers > 1: the learner processes' scheduling class: normal, batch (never preempts an "
        "answer that wakes up) or idle (runs only on cores the answers leave: under answer load that fills "
        "every core, observations wait to be learned and acknowledged; default normal)",
    )
    scale.add_argument(
        "--switch-interval-ms", type=float, default=DEFAULT_SWITCH_INTERVAL_MS, metavar="MS",
        help="how long a thread may hold the GIL while another waits, in the answering processes (Python's "
        f"default is 5; default {DEFAULT_SWITCH_INTERVAL_MS:g}: answers wait less behind learning in one process)",
    )
    scale.add_argument(
        "--gc-young-threshold", type=int, default=DEFAULT_YOUNG_THRESHOLD, metavar="N",
        help="allocations between two collections of the garbage collector's youngest generation, in every "
        "process; what start-up built is frozen (Python's default is 700; default "
        f"{DEFAULT_YOUNG_THRESHOLD:,}: ~5%% of a learner's time and 85 ms pauses of every thread otherwise; "
        "0: Python's collector as it is)",
    )
    scale.add_argument(
        "--learner-yield-ms", type=float, default=DEFAULT_LEARNER_YIELD_MS, metavar="MS",
        help="one process (--workers 1): while it learns a block and the service is being asked (a call within "
        "the last second), the learner pauses 50 µs at least every MS of its numpy-heavy stages, so that an "
        "answer waiting for the GIL takes it (default "
        f"{DEFAULT_LEARNER_YIELD_MS:g}; 0: never; under full-speed ingest answers' p99 about half, learning "
        "4-10%% slower)",
    )
    parser.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> ServiceConfig:
    """The :class:`ServiceConfig` of parsed ``serve`` arguments (``SystemExit`` naming the field and
    line of a bad ``--topology`` file)."""
    topology = None
    if getattr(args, "topology", None):
        try:
            topology = load_topology(args.topology)
        except TopologyError as exc:
            raise SystemExit(f"predictor serve: --topology {args.topology}: {exc}") from None
    return ServiceConfig(
        topology=topology,
        predictor=args.predictor,
        snapshot_every_s=args.snapshot_every,
        max_candidates=args.max_candidates,
        default_confidence=args.confidence,
        max_stream_records=args.max_stream_records,
        observation_log=not args.no_observation_log,
        fsync=args.fsync,
        fsync_interval_s=args.fsync_interval,
        outlier_gate=not args.no_outlier_gate,
        outlier_k=args.outlier_k,
        outlier_min_ratio=args.outlier_min_ratio,
        rate_limit=args.rate_limit,
        rate_burst=args.rate_burst,
        rate_limit_by=args.rate_limit_by,
        live_log=not args.no_live_log,
        live_horizon_s=args.live_horizon,
        dedup_window=args.dedup_window,
    )


def options_from_args(args: argparse.Namespace) -> ServeOptions:
    """The :class:`ServeOptions` of parsed ``serve`` arguments."""
    return ServeOptions(
        host=args.host,
        port=args.port,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        metrics_token=args.metrics_token,
        open_metrics=args.open_metrics,
        trace=args.trace,
        trace_endpoint=args.trace_endpoint,
        state_dir=args.state,
        warm_start=resolve_log(args.warm_start) if args.warm_start else None,
        grace_s=args.grace,
        max_workers=args.max_workers,
        max_message_bytes=args.max_message_bytes,
        max_concurrent_rpcs=args.max_concurrent_rpcs,
        shed_wait_ms=args.shed_wait_ms,
        answer_threads=args.answer_threads,
        port_file=args.port_file,
        targets_file=args.targets_file,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        auth_token_file=args.auth_token_file,
        allowed_clients=tuple(args.allowed_client or ()),
        protect_reads=args.protect_reads,
        allow_unauthenticated_writes=args.allow_unauthenticated_writes,
        workers=args.workers,
        shards=tuple(args.shard or ()),
        learner_nice=args.learner_nice,
        learner_policy=args.learner_policy,
        learner_cpus=_cpus(args.learner_cpus, "--learner-cpus"),
        worker_cpus=_cpus(args.worker_cpus, "--worker-cpus"),
        pin_workers=args.pin_workers,
        handler_cpus=_cpus(args.handler_cpus, "--handler-cpus"),
        switch_interval_ms=args.switch_interval_ms,
        gc_young_threshold=args.gc_young_threshold,
        learner_yield_ms=args.learner_yield_ms,
        front=args.front,
        front_limit=args.front_limit,
    )


def _cpus(text: str, option: str) -> tuple[int, ...]:
    """The CPUs of ``option``'s list (none when empty); ``SystemExit`` naming the option otherwise."""
    if not text:
        return ()
    try:
        return parse_cpus(text, option)
    except ValueError as exc:
        raise SystemExit(f"predictor serve: error: {exc}") from None


def run(args: argparse.Namespace) -> int:
    """Entry of ``predictor serve``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    log_blas_threads(logging.getLogger("predictor.serve"))
    from predictor.rpc.processes.serve import serve  # grpc: not at parse

    return serve(config_from_args(args), options_from_args(args))
