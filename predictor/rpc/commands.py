"""CLI sub-commands of the service: ``serve``, ``query`` and ``demo``.

Importing this module is cheap: gRPC, the generated code and the workload are
imported when a command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

SERVE_EPILOG = """\
start-up: the server listens at once with health NOT_SERVING; the snapshot in
--state is restored and the observation log after it replayed (or, for an
empty state folder, --warm-start LOG is learned from); then health turns
SERVING. Observations are acknowledged once in the log (--fsync). SIGINT/SIGTERM:
NOT_SERVING, --grace seconds for the calls in flight, a final snapshot in --state.

examples:
  predictor serve --state state/ --warm-start predictor/data/cpu-default.jsonl.gz
  grpcurl -plaintext localhost:50051 list            # reflection
  grpcurl -plaintext -d '{"query": {"device": "cpu0", "batch": {"model": "mlp", "batch_size": 4},
      "co_runner_source": "CO_RUNNER_SOURCE_EXPLICIT"}}' \\
      localhost:50051 interference.v1.InterferenceService/PredictLatency
"""


def register(subparsers: Any) -> None:
    """Add ``serve``, ``query`` and ``demo``."""
    _register_serve(subparsers)
    _register_query(subparsers)
    _register_demo(subparsers)


def _register_serve(subparsers: Any) -> None:
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
    parser.add_argument("--predictor", default="rls", help="predictor spec, e.g. rls or rls:forgetting=0.99")
    parser.add_argument(
        "--state", metavar="DIR", help="folder of snapshots: restored at start, saved periodically"
    )
    parser.add_argument(
        "--warm-start", metavar="LOG", help="coloc/v1 log to learn from when no snapshot exists"
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
    parser.add_argument("--max-workers", type=int, default=8, help="RPC threads (default 8)")
    parser.add_argument(
        "--max-candidates", type=int, default=1024, help="candidates per RankPlacements (default 1024)"
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
        help="RPCs in flight beyond which calls are refused (default: no limit)",
    )
    parser.add_argument(
        "--port-file", metavar="FILE", help="write the bound gRPC port to FILE once listening"
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
        help="key of the rate limit: authenticated identity, else peer address (client, default), "
        "or the records' source field",
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
        help="bearer tokens, one per line ('<name> <token>' or '<token>'): state-changing RPCs need one "
        "(metadata 'authorization: Bearer <token>') or a client certificate",
    )
    security.add_argument(
        "--allowed-client",
        action="append",
        metavar="CN",
        help="client certificate common name allowed to change state (repeatable; default: any verified)",
    )
    security.add_argument(
        "--protect-reads",
        action="store_true",
        help="read-only RPCs need a token or a client certificate too (health and reflection stay open)",
    )
    parser.set_defaults(func=_lazy("predictor.rpc.serve"))


def _register_query(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "query",
        help="ask a running service: predict, deadline, rank, status",
        description="Ask a running prediction service and print the answer.",
    )
    parser.add_argument("--target", default="localhost:50051", help="host:port (default localhost:50051)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call (default 10)")
    add_client_security_arguments(parser)
    what = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    from predictor.rpc.query import add_batch_arguments, add_placement_arguments

    predict = what.add_parser("predict", help="predicted latency and upper bound of a batch on a device")
    add_placement_arguments(predict)
    add_batch_arguments(predict)
    deadline = what.add_parser("deadline", help="whether a batch meets a deadline on a device")
    add_placement_arguments(deadline)
    add_batch_arguments(deadline)
    deadline.add_argument("--deadline-ms", type=float, required=True, help="deadline, ms from now")
    rank = what.add_parser("rank", help="rank candidate devices for a batch (live view of each)")
    rank.add_argument("--devices", required=True, help="comma list of devices")
    add_batch_arguments(rank)
    rank.add_argument("--deadline-ms", type=float, required=True, help="deadline, ms from now")
    what.add_parser("status", help="observations learned, rolling error, coverage, drift alarms")
    parser.set_defaults(func=_lazy("predictor.rpc.query"))


def _register_demo(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="the service, the real CPU workload and a sample scheduler, end to end",
        description="Start the service in-process, run the real CPU workload streaming observations to it "
        "while a sample scheduler checks each batch's deadline, then print a summary.",
    )
    parser.add_argument("--duration", type=float, help="seconds of workload (default 60, 8 with --short)")
    parser.add_argument("--short", action="store_true", help="two small models, quick profiling (for tests)")
    parser.add_argument("--predictor", default="rls", help="predictor spec (default rls)")
    parser.add_argument(
        "--warm-start",
        metavar="LOG",
        help="log to warm-start from (default: the embedded CPU dataset, when present)",
    )
    parser.add_argument(
        "--slo", type=float, default=2.5, help="deadline as a multiple of solo latency (default 2.5)"
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="confidence a batch needs to be dispatched (default 0.95)",
    )
    parser.add_argument("--save", metavar="LOG", help="also write the records streamed to this log")
    parser.add_argument("--no-live", action="store_true", help="no live table (plain output)")
    parser.set_defaults(func=_lazy("predictor.rpc.demo"))


def add_client_security_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-server-name``, ``--auth-token-file``."""
    group = parser.add_argument_group("security")
    group.add_argument("--tls-ca", metavar="PEM", help="CA of the server's certificate: connect over TLS")
    group.add_argument("--tls-cert", metavar="PEM", help="client certificate for mutual TLS")
    group.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    group.add_argument(
        "--tls-server-name", metavar="NAME", help="name to check the server certificate against"
    )
    group.add_argument("--auth-token-file", metavar="FILE", help="file holding the bearer token to send")


def client_from_args(args: argparse.Namespace) -> Any:
    """An :class:`~predictor.rpc.client.InterferenceClient` for the target and security arguments."""
    from predictor.rpc.client import InterferenceClient
    from predictor.rpc.security import channel_credentials, read_token

    credentials = None
    if args.tls_ca or args.tls_cert:
        credentials = channel_credentials(args.tls_ca, args.tls_cert, args.tls_key)
    token = read_token(args.auth_token_file) if args.auth_token_file else None
    return InterferenceClient(
        args.target,
        timeout=args.timeout,
        credentials=credentials,
        token=token,
        server_name=args.tls_server_name,
    )


def _lazy(module: str) -> Any:
    """A ``func`` that imports ``module`` only when the command runs and calls its ``run(args)``."""

    def func(args: argparse.Namespace) -> int:
        import importlib

        return int(importlib.import_module(module).run(args) or 0)

    return func
