"""CLI sub-commands of the service: ``serve``, ``query`` and ``demo``.

Importing this module is cheap: gRPC, the generated code and the workload are
imported when a command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

SERVE_EPILOG = """\
start-up: the server listens at once with health NOT_SERVING; the snapshot in
--state is restored (or, without one, --warm-start LOG is learned from); then
health turns SERVING. SIGINT/SIGTERM: NOT_SERVING, --grace seconds for the
calls in flight, a final snapshot in --state.

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
    parser.set_defaults(func=_lazy("predictor.rpc.serve"))


def _register_query(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "query",
        help="ask a running service: predict, deadline, rank, status",
        description="Ask a running prediction service and print the answer.",
    )
    parser.add_argument("--target", default="localhost:50051", help="host:port (default localhost:50051)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call (default 10)")
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


def _lazy(module: str) -> Any:
    """A ``func`` that imports ``module`` only when the command runs and calls its ``run(args)``."""

    def func(args: argparse.Namespace) -> int:
        import importlib

        return int(importlib.import_module(module).run(args) or 0)

    return func
