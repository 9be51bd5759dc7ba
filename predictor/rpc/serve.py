"""``predictor serve``: run the prediction service until SIGINT or SIGTERM.

Start-up order: the server starts at once with health ``NOT_SERVING``; the
state is restored from ``--state`` (or learned from ``--warm-start``); then
health turns ``SERVING``. On a signal, health turns ``NOT_SERVING``, in-flight
RPCs get ``--grace`` seconds, and a final snapshot is written.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from dataclasses import dataclass

from predictor.service.config import ServiceConfig

log = logging.getLogger("predictor.serve")


@dataclass(frozen=True)
class ServeOptions:
    """Network and process options of ``predictor serve`` (the model's are in :class:`ServiceConfig`)."""

    host: str = "0.0.0.0"
    port: int = 50051
    metrics_port: int = 9464  # 0: no metrics endpoint
    state_dir: str | None = None
    warm_start: str | None = None
    grace_s: float = 5.0
    max_workers: int = 8
    max_message_bytes: int = 4 * 1024 * 1024


def config_from_args(args: argparse.Namespace) -> ServiceConfig:
    return ServiceConfig(
        predictor=args.predictor,
        snapshot_every_s=args.snapshot_every,
        max_candidates=args.max_candidates,
        default_confidence=args.confidence,
    )


def options_from_args(args: argparse.Namespace) -> ServeOptions:
    return ServeOptions(
        host=args.host,
        port=args.port,
        metrics_port=args.metrics_port,
        state_dir=args.state,
        warm_start=args.warm_start,
        grace_s=args.grace,
        max_workers=args.max_workers,
        max_message_bytes=args.max_message_bytes,
    )


def serve(config: ServiceConfig, options: ServeOptions, stop: threading.Event | None = None) -> int:
    """Run the service until ``stop`` is set (or a signal arrives); returns the exit status."""
    from predictor.rpc.metrics import ServerMetrics
    from predictor.rpc.server import create_server, stop_server
    from predictor.service.core import Service
    from predictor.service.snapshot import SnapshotError

    stop = stop or threading.Event()
    service = Service(config)
    metrics = ServerMetrics(service)
    server, port = create_server(
        f"{options.host}:{options.port}",
        service,
        max_workers=options.max_workers,
        max_message_bytes=options.max_message_bytes,
        metrics=metrics,
    )
    server.start()
    print(f"predictor serve: listening on {options.host}:{port} (NOT_SERVING until ready)", flush=True)
    if options.metrics_port:
        metrics_port = metrics.serve(options.metrics_port, options.host)
        print(
            f"predictor serve: Prometheus metrics on http://{options.host}:{metrics_port}/metrics", flush=True
        )
    _install_signal_handlers(stop)
    try:
        said = service.open(options.state_dir, options.warm_start)
    except (SnapshotError, OSError, ValueError) as exc:
        print(f"predictor serve: error: {exc}", file=sys.stderr)
        server.stop(0).wait()
        metrics.stop()
        return 2
    print(f"predictor serve: {said}; predictor {config.predictor}; SERVING", flush=True)
    stop.wait()
    print(f"predictor serve: stopping (grace {options.grace_s:g} s)", flush=True)
    stop_server(server, service, options.grace_s)
    metrics.stop()
    if service.state_dir is not None:
        print(f"predictor serve: state saved in {service.state_dir}", flush=True)
    return 0


def _install_signal_handlers(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())


def run(args: argparse.Namespace) -> int:
    """Entry of ``predictor serve``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return serve(config_from_args(args), options_from_args(args))
