"""Run the prediction service until stopped: the engine of ``predictor serve`` (:mod:`predictor.cli.serve`).

Start-up order: the server starts at once with health ``NOT_SERVING``; the
state is restored from ``--state`` (its snapshot, then the observation log
after it; or, for an empty state folder, learned from ``--warm-start``); the
collector freezes what was loaded (:func:`~predictor.runtime.gc_tuning.freeze_startup`);
then health turns ``SERVING``, and the log says so. On a signal, health turns
``NOT_SERVING``, in-flight RPCs get ``--grace`` seconds, and a final snapshot is
written.

Security (``--tls-cert``/``--tls-key``, ``--tls-client-ca`` for mutual TLS,
``--auth-token-file``, ``--allowed-client``, ``--protect-reads``) is described
in :mod:`predictor.rpc.security`; durability (``--fsync``) in
:mod:`predictor.service.durability.wal`.

The ports are checked first (:mod:`predictor.rpc.processes.ports`): a port in use ends the command at
once with status 2 and a message naming it; the gRPC port is then bound exclusively (shared only among
the answering workers of ``--workers N``).

``--workers N`` (N > 1) runs learner processes and N answering processes on the port instead
(:mod:`predictor.rpc.processes.supervisor`); ``--workers 1``, the default, is the single process below.
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import tempfile
import threading
from typing import Any

from predictor.rpc.front import Front
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.overload import check_answer_threads
from predictor.rpc.processes.options import ServeOptions, balanced_target, write_port_file
from predictor.rpc.processes.ports import check_port_free
from predictor.rpc.processes.supervisor import serve_workers
from predictor.rpc.security import metrics_policy, security_from_options, start_warnings
from predictor.rpc.server import public_server, stop_server
from predictor.rpc.tracing import tracing_from_option
from predictor.runtime.cpu_priority import (
    check_cpus,
    check_nice,
    check_policy,
    handler_split,
    pin_to_cpus,
)
from predictor.runtime.gc_tuning import (
    check_young_threshold,
    collector,
    freeze_startup,
)
from predictor.runtime.gil import check_switch_interval_ms, switch_interval
from predictor.runtime.gil_yield import check_period_ms, yielding
from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.estimates import fixed_point_kernel
from predictor.snapshot import SnapshotError

log = logging.getLogger("predictor.serve")


def serve(config: ServiceConfig, options: ServeOptions, stop: threading.Event | None = None) -> int:
    """Run the service until ``stop`` is set (or a signal arrives); returns the exit status."""
    stop = stop or threading.Event()
    try:  # before anything else: a port in use is named at once, not after the model has loaded
        check_port_free(options.host, options.port, "gRPC")
        if options.metrics_port:
            check_port_free(options.metrics_host, options.metrics_port, "metrics")
    except OSError as exc:
        print(f"predictor serve: error: {exc}", file=sys.stderr)
        return 2
    try:
        credentials, policy = security_from_options(options)
        tracing = tracing_from_option(options.trace, options.trace_endpoint)
        check_switch_interval_ms(options.switch_interval_ms)
        check_answer_threads(options.answer_threads)
        check_young_threshold(options.gc_young_threshold)
        check_period_ms(options.learner_yield_ms)
        check_nice(options.learner_nice)
        check_policy(options.learner_policy)
        check_cpus(options.learner_cpus, "--learner-cpus")  # CPUs this process may use
        check_cpus(options.worker_cpus, "--worker-cpus")
        other_cpus = handler_split(options.handler_cpus) if options.handler_cpus else ()
    except ValueError as exc:
        print(f"predictor serve: error: {exc}", file=sys.stderr)
        return 2
    if not (math.isfinite(options.shed_wait_ms) and options.shed_wait_ms >= 0):
        print(f"predictor serve: error: --shed-wait-ms must be >= 0 (0: never shed), got {options.shed_wait_ms}",
              file=sys.stderr)
        return 2
    if options.workers < 1:
        print(f"predictor serve: error: --workers must be >= 1, got {options.workers}", file=sys.stderr)
        return 2
    if options.shards and options.workers < 2:
        print("predictor serve: error: --shard needs --workers 2 or more (one process learns every kind)",
              file=sys.stderr)
        return 2
    if (options.learner_cpus or options.worker_cpus or options.pin_workers) and options.workers < 2:
        print("predictor serve: error: --learner-cpus, --worker-cpus and --pin-workers need --workers 2 or more "
              "(one process learns and answers)", file=sys.stderr)
        return 2
    if options.front and (options.workers > 1 or options.tls_cert is not None):
        print("predictor serve: error: --front takes plaintext calls to one process (not with --workers N or "
              "--tls-cert)", file=sys.stderr)
        return 2
    if options.front_limit < 0:
        print(f"predictor serve: error: --front-limit must be >= 0 (0: twice --answer-threads), got "
              f"{options.front_limit}", file=sys.stderr)
        return 2
    if options.handler_cpus and options.workers > 1:
        print("predictor serve: error: --handler-cpus needs --workers 1 (the threads of one process; with "
              "--workers N, --worker-cpus and --pin-workers place the answering processes)", file=sys.stderr)
        return 2
    if options.workers > 1:

        return serve_workers(config, options, stop, write_port_file, _install_signal_handlers)
    with (switch_interval(options.switch_interval_ms / 1e3), collector(options.gc_young_threshold),
          yielding(options.learner_yield_ms)):
        pin_to_cpus(other_cpus)  # every thread but the RPC handlers (pinned as each starts), and all started after
        return _serve_one_process(config, options, stop, credentials, policy, tracing)


def _serve_one_process(config: ServiceConfig, options: ServeOptions, stop: threading.Event, credentials: Any,
                       policy: Any, tracing: Any) -> int:
    """``--workers 1``: learn and answer in this process until ``stop``; returns the exit status."""

    fixed_point_kernel.warm()  # before the first ranking or moving query, not during it
    service = Service(config)
    metrics = ServerMetrics(service)
    # behind the front: on a Unix socket in a folder only this user may enter (no other process names
    # the callers' addresses to it)
    private = tempfile.TemporaryDirectory(prefix="predictor-front-") if options.front else None
    address = f"unix:{private.name}/backend.sock" if private else f"{options.host}:{options.port}"
    try:
        server, port = public_server(options, address, service, metrics, credentials, policy, tracing)
    except OSError as exc:  # taken since the check above
        print(f"predictor serve: error: {exc}", file=sys.stderr)
        return 2
    server.start()
    front = None
    if options.front:
        front = Front(f"{options.host}:{options.port}", address, limit=options.front_limit or 2 * options.answer_threads)
        try:
            port = front.start()
        except OSError as exc:  # not built, or its port taken since the check above
            print(f"predictor serve: error: {exc}", file=sys.stderr)
            server.stop(0).wait()
            return 2
    transport = "mutual TLS" if options.tls_client_ca else "TLS" if credentials is not None else "plaintext"
    through = f", through the admission front (at most {front.limit} answers in flight)" if front else ""
    print(
        f"predictor serve: listening on {options.host}:{port} ({transport}{through}; NOT_SERVING until ready)",
        flush=True,
    )
    print(f"predictor serve: {policy.describe()}", flush=True)
    if tracing is not None:
        print(f"predictor serve: OpenTelemetry traces of every RPC to {options.trace}", flush=True)
    for warning in start_warnings(options, policy, credentials):
        log.warning("%s", warning)
    if options.port_file:
        write_port_file(options.port_file, port)
    if options.targets_file:
        write_port_file(options.targets_file, balanced_target(options.host, [port]))
    if options.metrics_port:
        try:
            metrics_port = metrics.serve(options.metrics_port, options.metrics_host, metrics_policy(options, policy))
        except OSError as exc:
            print(f"predictor serve: error: cannot serve metrics: {exc}", file=sys.stderr)
            if front is not None:
                front.stop(0)
            server.stop(0).wait()
            return 2
        guarded = " (bearer token required)" if metrics_policy(options, policy) is not None else ""
        print(
            f"predictor serve: Prometheus metrics on http://{options.metrics_host}:{metrics_port}/metrics{guarded}",
            flush=True,
        )
    _install_signal_handlers(stop)
    try:
        said = service.open(options.state_dir, options.warm_start, ready=False)  # ready once started up, below
    except (SnapshotError, OSError, ValueError) as exc:
        print(f"predictor serve: error: {exc}", file=sys.stderr)
        if front is not None:
            front.stop(0)
        server.stop(0).wait()
        metrics.stop()
        return 2
    durability = (
        f"observation log fsync {config.fsync}"
        if service.obs_log is not None
        else "no observation log (no --state)"
        if options.state_dir is None
        else "observation log off"
    )
    freeze_startup(options.gc_young_threshold, log)  # the model as restored: never traversed by the collector again
    log.info("learner: %s", f"pauses for answers every {options.learner_yield_ms:g} ms of a block"
             if options.learner_yield_ms else "never pauses for answers")
    service.mark_ready()  # health SERVING after the freeze: the first answers pay for no start-up work
    print(f"predictor serve: {said}; predictor {config.predictor}; {durability}; SERVING", flush=True)
    stop.wait()
    print(f"predictor serve: stopping (grace {options.grace_s:g} s)", flush=True)
    if front is not None:
        front.stop(options.grace_s)
    stop_server(server, service, options.grace_s)
    if private is not None:
        private.cleanup()
    metrics.stop()
    if tracing is not None:
        tracing.shutdown()
    if service.state_dir is not None:
        print(f"predictor serve: state saved in {service.state_dir}", flush=True)
    return 0


def _install_signal_handlers(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
