"""The gRPC server factory: service, health, reflection and metrics on one server.

Examples
--------
>>> from predictor.service import Service, ServiceConfig
>>> service = Service(ServiceConfig(predictor="solo"))
>>> server, port = create_server("127.0.0.1:0", service)
>>> server.start(); port > 0
True
>>> stop_server(server, service, grace=0.1)
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Sequence
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.overload import DEFAULT_ANSWER_THREADS, QueueClock, Shedder, check_answer_threads
from predictor.rpc.processes.options import ServeOptions
from predictor.rpc.protos import SERVICE_NAME, load
from predictor.rpc.security import AuthPolicy
from predictor.rpc.servicer import InterferenceServicer
from predictor.rpc.thin import ThinInterceptor
from predictor.runtime.cpu_priority import pin_handler_thread
from predictor.service.core import Service

DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_CONCURRENT_RPCS = 64
"""``predictor serve``'s bound on RPCs in flight (queued ones included): beyond it a call is refused
at once with ``RESOURCE_EXHAUSTED`` rather than queued until its client gives up."""
log = logging.getLogger("predictor.rpc")
_HEALTH: weakref.WeakKeyDictionary[grpc.Server, health.HealthServicer] = weakref.WeakKeyDictionary()
_SHEDDERS: weakref.WeakKeyDictionary[grpc.Server, Shedder] = weakref.WeakKeyDictionary()


def create_server(
    address: str,
    service: Service,
    *,
    max_workers: int = 8,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_concurrent_rpcs: int | None = None,
    metrics: ServerMetrics | None = None,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    credentials: grpc.ServerCredentials | None = None,
    auth: AuthPolicy | None = None,
    tracing: grpc.ServerInterceptor | None = None,
    servicer: InterferenceServicer | None = None,
    handler_cpus: Sequence[int] = (),
    reuse_port: bool = False,
    shed_wait_ms: float | None = None,
    answer_threads: int = DEFAULT_ANSWER_THREADS,
) -> tuple[grpc.Server, int]:
    """Build (not start) a server for ``service`` bound to ``address``; returns it and its port.

    Parameters
    ----------
    address
        ``host:port``; port 0 binds any free port (tests).
    service
        The service; health reports ``NOT_SERVING`` until it is ready, then ``SERVING``.
    max_workers
        Threads handling RPCs (with ``shed_wait_ms``: all but the answers).
    max_message_bytes
        Largest message received or sent; larger ones fail with ``RESOURCE_EXHAUSTED``.
    max_concurrent_rpcs
        RPCs in flight beyond which new ones fail with ``RESOURCE_EXHAUSTED`` (None: no limit).
    metrics
        Prometheus metrics to record RPCs into (none recorded when omitted).
    interceptors
        Further server interceptors.
    credentials
        TLS (or mutual TLS) credentials (:func:`~predictor.rpc.security.server_credentials`);
        omitted: a plaintext port.
    auth
        Who may call what (:class:`~predictor.rpc.security.AuthPolicy`; default: everyone).
        Undecodable requests are answered ``INVALID_ARGUMENT`` in any case.
    tracing
        OpenTelemetry's server interceptor (:mod:`predictor.rpc.tracing`), put outermost so that
        calls refused by auth or overload are traced too; omitted: no tracing.
    servicer
        The RPCs' servicer (default: :class:`~predictor.rpc.servicer.InterferenceServicer` of ``service``;
        a learner's or an answering worker's in ``predictor serve --workers N``).
    handler_cpus
        The CPUs the handler threads run on, each pinned as it starts
        (:func:`~predictor.runtime.cpu_priority.pin_handler_thread`; ``predictor serve --handler-cpus``);
        none: wherever the threads that start them may run.
    reuse_port
        Share the port with other sockets bound with ``SO_REUSEPORT`` (the answering workers of
        ``predictor serve --workers N``); default: bind it exclusively, so that a port already in use
        fails with ``OSError`` naming it rather than silently sharing its connections with another server.
    shed_wait_ms
        Refuse at once with ``RESOURCE_EXHAUSTED`` an answer (a unary ``read`` call) that would wait longer
        than this for a thread of its own (:mod:`predictor.rpc.overload`; ``predictor serve --shed-wait-ms``);
        ``None`` or 0: every call is queued (up to ``max_concurrent_rpcs``).
    answer_threads
        With ``shed_wait_ms``: the threads computing answers (the unary ``read`` methods), apart from
        the ``max_workers`` others (``predictor serve --answer-threads``).
    """
    pb2, pb2_grpc = load()
    pool_options: dict[str, Any] = {
        "max_workers": max_workers,
        "thread_name_prefix": "rpc",
        "initializer": functools.partial(pin_handler_thread, tuple(handler_cpus)) if handler_cpus else None,
    }
    shedder = None
    if shed_wait_ms:
        check_answer_threads(answer_threads)
        shedder = Shedder(QueueClock(**{**pool_options, "max_workers": answer_threads,
                                        "thread_name_prefix": "answer"}), shed_wait_ms)
    pool = futures.ThreadPoolExecutor(**pool_options)
    # metrics, auth, overload and decoding in one interceptor, per-method work done once (see predictor.rpc.thin)
    all_interceptors = [ThinInterceptor(metrics, auth or AuthPolicy(), shedder), *interceptors]
    if tracing is not None:
        all_interceptors.insert(0, _KeepsThreadPool(tracing) if shedder is not None else tracing)
    server = grpc.server(
        pool,
        interceptors=all_interceptors,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.so_reuseport", 1 if reuse_port else 0),
        ],
        maximum_concurrent_rpcs=max_concurrent_rpcs,
    )
    pb2_grpc.add_InterferenceServiceServicer_to_server(servicer or InterferenceServicer(service), server)

    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)

    def on_ready(ready: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        health_servicer.set("", status)
        health_servicer.set(SERVICE_NAME, status)

    service.add_ready_listener(on_ready)
    _HEALTH[server] = health_servicer
    if shedder is not None:
        _SHEDDERS[server] = shedder

    names = (
        pb2.DESCRIPTOR.services_by_name["InterferenceService"].full_name,
        health.SERVICE_NAME,
        reflection.SERVICE_NAME,
    )
    reflection.enable_server_reflection(names, server)
    return server, bind(server, address, credentials)


def bind(server: grpc.Server, address: str, credentials: grpc.ServerCredentials | None = None) -> int:
    """Add ``address`` (``host:port``) to the server's ports, with TLS when ``credentials`` are given;
    returns the port bound (``OSError`` naming the address when it cannot be)."""
    try:
        if credentials is not None:
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:  # gRPC's "Failed to bind"
        port = 0
    if port == 0:
        raise OSError(f"cannot bind the gRPC server to {address}: the port is in use, or the address is not this "
                      "machine's")
    return port


_BEHAVIOURS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


class _KeepsThreadPool(grpc.ServerInterceptor):
    """``interceptor`` (tracing's), with the thread pool that the handler it wraps asked for
    (``experimental_thread_pool``: the answers' threads, the refusals' polling thread) kept on the
    handler it returns, which would otherwise run on the server's pool."""

    def __init__(self, interceptor: grpc.ServerInterceptor):
        self.interceptor = interceptor

    def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        """The wrapped interceptor's handler, running on the inner handler's thread pool."""
        inner: list[Any] = []

        def inner_handler(details: Any) -> Any:
            inner.append(continuation(details))
            return inner[-1]

        handler = self.interceptor.intercept_service(inner_handler, handler_call_details)
        if handler is not None and inner and inner[-1] is not None and handler is not inner[-1]:
            for name in _BEHAVIOURS:
                pool = getattr(getattr(inner[-1], name), "experimental_thread_pool", None)
                behaviour = getattr(handler, name)
                if pool is not None and behaviour is not None:
                    behaviour.experimental_thread_pool = pool
        return handler


def stop_server(server: grpc.Server, service: Service, grace: float = 5.0) -> None:
    """Graceful stop: health goes ``NOT_SERVING`` (so balancers drain), in-flight RPCs get
    ``grace`` seconds, then the answers' threads stop and the service closes (final snapshot when it has
    a state folder)."""
    health_servicer = _HEALTH.pop(server, None)
    if health_servicer is not None:
        health_servicer.enter_graceful_shutdown()
    server.stop(grace).wait()
    shedder = _SHEDDERS.pop(server, None)
    if shedder is not None:
        shedder.close()  # the answers' threads
    service.close()


def public_server(options: ServeOptions, address: str, service: Service, metrics: Any, credentials: Any, policy: Any,
                  tracing: Any, servicer: Any = None, *, reuse_port: bool = False) -> tuple[Any, int]:
    """The server clients reach (one process's, or an answering worker's): ``create_server`` with
    the RPC options of ``options`` (threads, message size, concurrency limit, shedding), its security
    (``credentials``, ``policy``: :func:`security_from_options`) and ``tracing``
    (:func:`~predictor.rpc.tracing.tracing_from_option`); ``reuse_port``: an answering worker's, sharing
    the port with its siblings. Built, not started."""
    return create_server(
        address,
        service,
        max_workers=options.max_workers,
        max_message_bytes=options.max_message_bytes,
        max_concurrent_rpcs=options.max_concurrent_rpcs or None,
        metrics=metrics,
        credentials=credentials,
        auth=policy,
        tracing=tracing.interceptor if tracing is not None else None,
        servicer=servicer,
        handler_cpus=options.handler_cpus,
        reuse_port=reuse_port,
        shed_wait_ms=options.shed_wait_ms or None,
        answer_threads=options.answer_threads,
    )
