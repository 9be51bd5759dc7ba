"""One server interceptor doing what the metrics, auth and decoding interceptors do, with the
per-method work done once.

The chain ``metrics -> auth -> decoding`` built, on every call, three new
method handlers and three closures, and looked up the Prometheus children of
the method by label each time. :class:`ThinInterceptor` does the same things
in the same order (the call is timed and counted around authentication, which
runs around decoding, which runs around the servicer) with:

* per method, once: the method's name, its Prometheus children (per status
  code, created on first use), whether it is protected, the deserializer;
* per method, once: the wrapped handler and its closure (authentication reads
  the call's metadata from its context);
* per call: a check that the call's deadline has not already passed while
  it waited for a worker: such a call is answered ``DEADLINE_EXCEEDED`` at
  once, without being computed for a client that has given up;
* per method, once: its response serialiser, which sends an answer the servicer wrote as
  bytes (:class:`~predictor.rpc.wire.Serialized`) as it is;
* with a shedder (:mod:`predictor.rpc.overload`), per answer (a unary ``read``
  method of the prediction service): it runs on the answers' own threads, and as
  the call arrives, whether it would wait longer than the bound for one; if so its
  handler is the method's refusal (``RESOURCE_EXHAUSTED`` sent by gRPC's polling
  thread itself), built once.

The semantics are those of :class:`~predictor.rpc.metrics.ServerMetrics`'s
interceptor, :class:`~predictor.rpc.security.AuthInterceptor` and
:class:`~predictor.rpc.decoding.DecodeErrorsInterceptor` (which stay, for
servers composed by hand); ``tests/rpc/test_rpc.py``, ``tests/rpc/test_security_auth.py``
and ``tests/rpc/test_fuzz_rpc.py`` run against it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from predictor.rpc import wire
from predictor.rpc.decoding import _decode, _Undecodable
from predictor.rpc.errors import abort
from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.names import METHOD_PREFIX, method_name
from predictor.rpc.overload import Shedder
from predictor.rpc.security import _CALLER, READ, AuthInterceptor, AuthPolicy, role_of
from predictor.runtime.gil_yield import asked

_OK = grpc.StatusCode.OK
_UNKNOWN = grpc.StatusCode.UNKNOWN
_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


class _Method:
    """What a method's calls share: computed on its first call."""

    __slots__ = ("name", "label", "ours", "answer", "protected", "deserialize", "counters", "latency", "source",
                 "handler", "refusal")

    def __init__(self, path: str, handler: Any, metrics: ServerMetrics | None, policy: AuthPolicy):
        self.name = method_name(path) or path
        self.ours = path.startswith(METHOD_PREFIX)
        self.answer = self.ours and handler.unary_unary is not None and role_of(self.name) == READ
        self.protected = policy.protects(self.name)
        self.deserialize = handler.request_deserializer if self.ours else None
        self.counters: dict[grpc.StatusCode, Any] = {}
        self.latency = metrics.latency.labels(self.name) if metrics is not None else None
        self.source = handler  # held: the key's id() stays this handler's
        self.handler: Any = None  # the wrapped method handler, built on the first call
        self.refusal: Any = None  # the handler refusing a call when overloaded, built on the first refusal

    def observe(self, metrics: ServerMetrics, code: grpc.StatusCode, seconds: float) -> None:
        counter = self.counters.get(code)
        if counter is None:
            counter = self.counters[code] = metrics.requests.labels(self.name, code.name)
        counter.inc()
        self.latency.observe(seconds)


class ThinInterceptor(grpc.ServerInterceptor):
    """Metrics, authentication and request decoding in one interceptor (see the module).

    Parameters
    ----------
    metrics
        Where RPCs are counted and timed (``None``: not recorded).
    policy
        Who may call what.
    shedder
        Runs the answers on its threads and refuses those that would wait too long for one
        (:mod:`predictor.rpc.overload`); ``None``: every call is queued on the server's pool.
    """

    def __init__(self, metrics: ServerMetrics | None, policy: AuthPolicy, shedder: Shedder | None = None):
        self.metrics = metrics
        self.auth = AuthInterceptor(policy)
        self.shedder = shedder
        self._methods: dict[tuple[str, int], _Method] = {}

    def _method(self, path: str, handler: Any) -> _Method:
        key = (path, id(handler))
        method = self._methods.get(key)
        if method is None:
            method = self._methods[key] = _Method(path, handler, self.metrics, self.auth.policy)
        return method

    def intercept_service(self, continuation: Callable, handler_call_details: Any) -> Any:
        """The handler of this call, wrapped (health Watch and reflection streams pass through)."""
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        unary = handler.unary_unary is not None
        if not unary and handler.stream_unary is None:
            return handler
        if self.metrics is None and not handler_call_details.method.startswith(METHOD_PREFIX):
            return handler
        method = self._method(handler_call_details.method, handler)
        if self.shedder is not None and method.answer and self.shedder.overloaded() is not None:
            if method.refusal is None:
                method.refusal = self._refusal(method, handler)
            return method.refusal
        if method.handler is None:
            method.handler = self._handler(method, handler, unary)
        return method.handler

    def _refusal(self, method: _Method, handler: Any) -> Any:
        """The method's handler when overloaded: ``RESOURCE_EXHAUSTED`` at once, on gRPC's polling thread
        (:class:`~predictor.rpc.overload.AtOnce`). It is a request-streaming handler whatever the method,
        so that nothing waits for the request: its message is never read, nothing is computed."""
        metrics, shedder = self.metrics, self.shedder
        assert shedder is not None
        details = shedder.message(method.name)

        def refuse(requests: Any, context: grpc.ServicerContext) -> Any:
            if metrics is not None:
                method.observe(metrics, _EXHAUSTED, 0.0)
            context.abort(_EXHAUSTED, details)

        refuse.experimental_thread_pool = shedder.refusals  # type: ignore[attr-defined]  (grpc's hook)
        return grpc.stream_unary_rpc_method_handler(refuse, request_deserializer=None,
                                                    response_serializer=handler.response_serializer)

    def _handler(self, method: _Method, handler: Any, unary: bool) -> Any:
        """The method's wrapped handler: built once, as every call's is the same (the call's
        metadata is read from its context)."""
        behaviour = handler.unary_unary if unary else handler.stream_unary
        deserialize = method.deserialize
        if method.ours:
            behaviour = self._wrap(behaviour, method, unary)
            if method.answer and self.shedder is not None:
                behaviour.experimental_thread_pool = self.shedder.pool  # type: ignore[attr-defined]  (grpc's hook)
        elif self.metrics is not None:
            behaviour = self._timed(behaviour, method)
        if deserialize is None:
            deserialize = handler.request_deserializer
        factory = grpc.unary_unary_rpc_method_handler if unary else grpc.stream_unary_rpc_method_handler
        serialize = handler.response_serializer
        if method.ours and serialize is not None:  # an answer written as bytes is sent as it is
            serialize = wire.serializer(serialize)
        return factory(behaviour, request_deserializer=None if method.ours else deserialize,
                       response_serializer=serialize)

    def _timed(self, behaviour: Callable, method: _Method) -> Callable:
        metrics = self.metrics

        def timed(request: Any, context: grpc.ServicerContext) -> Any:
            start = time.perf_counter()
            code = _OK
            try:
                return behaviour(request, context)
            except Exception:
                code = context.code() or _UNKNOWN
                raise
            finally:
                method.observe(metrics, code, time.perf_counter() - start)  # type: ignore[arg-type]

        return timed

    def _wrap(self, behaviour: Callable, method: _Method, unary: bool) -> Callable:
        """``behaviour`` with the deadline check, authentication, decoding, errors and metrics.

        A method whose caller is anonymous (:func:`_anonymous_read`) skips authentication's
        per-call work (reading the metadata, setting the caller): a local flag decides, with no
        added call per RPC.
        """
        metrics, authenticate = self.metrics, self.auth._authenticate
        name, protected, deserialize = method.name, method.protected, method.deserialize
        anonymous = _anonymous_read(self.auth.policy, name)

        def handled(raw: Any, context: grpc.ServicerContext) -> Any:
            start = time.perf_counter()
            code = _OK
            if unary:
                asked()  # an answer is wanted: the learner pauses for it (predictor.runtime.gil_yield)
            try:
                remaining = context.time_remaining()
                if remaining is not None and remaining <= 0:
                    context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed before the call was handled")
                token = None if anonymous else _CALLER.set(
                    authenticate(name, context.invocation_metadata() or (), context, protected))
                try:
                    if deserialize is None:
                        return behaviour(raw, context)
                    try:
                        request = _decode(deserialize, raw, "request") if unary else _decoded(raw, deserialize)
                        return behaviour(request, context)
                    except _Undecodable as error:
                        abort(context, error)
                finally:
                    if token is not None:
                        _CALLER.reset(token)
            except Exception:
                code = context.code() or _UNKNOWN
                raise
            finally:
                if unary:
                    asked()
                if metrics is not None:
                    method.observe(metrics, code, time.perf_counter() - start)

        return handled


def _anonymous_read(policy: AuthPolicy, name: str) -> bool:
    """Whether every call of method ``name`` is a read that authentication lets through as the
    anonymous caller of its peer whatever its metadata (no tokens, no client certificates): its
    caller is then what :func:`~predictor.rpc.security.current_caller` finds from the context,
    and nothing need be computed per call."""
    return not policy.enforced and role_of(name) == READ


def _decoded(raw_iterator: Iterator[bytes], deserialize: Callable[[bytes], Any]) -> Iterator[Any]:
    for index, raw in enumerate(raw_iterator):
        yield _decode(deserialize, raw, f"requests[{index}]")
