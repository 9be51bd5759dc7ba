"""Undecodable request messages become ``INVALID_ARGUMENT``, not ``INTERNAL``.

gRPC Python answers a request whose bytes do not parse as the method's
message (truncated, invalid UTF-8 in a string, wrong wire type) with
``INTERNAL: Exception deserializing request!``. This interceptor takes the
decoding into the handler: a unary request that does not parse fails with
``INVALID_ARGUMENT`` on field ``request``; the ``i``-th message of a request
stream with ``INVALID_ARGUMENT`` on ``requests[i]`` (the messages before it
were handled as usual, the stream is not acknowledged).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from predictor.rpc.errors import abort
from predictor.rpc.names import METHOD_PREFIX
from predictor.service.errors import InvalidArgument

PREFIX = METHOD_PREFIX


_LAST = threading.local()


def raw_bytes(request: Any) -> bytes | None:
    """The bytes ``request`` was parsed from, where it is the unary request this thread decoded
    last (its handler may read them again column-wise), handed over once; ``None`` otherwise."""
    if getattr(_LAST, "request", None) is not request:
        return None
    raw = _LAST.raw
    _LAST.request = _LAST.raw = None
    return raw


class _Undecodable(InvalidArgument):
    """A request message whose bytes do not parse (``INVALID_ARGUMENT`` on its field)."""


def _type_name(deserialize: Callable[[bytes], Any]) -> str:
    owner = getattr(deserialize, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return getattr(descriptor, "full_name", "request")


def _decode(deserialize: Callable[[bytes], Any], raw: bytes, field: str) -> Any:
    try:
        request = deserialize(raw)
    except Exception as exc:  # protobuf raises DecodeError, but a custom deserializer may raise anything
        reason = str(exc) or type(exc).__name__
        raise _Undecodable(
            field, f"not a valid {_type_name(deserialize)} message ({len(raw)} bytes: {reason})"
        ) from None
    if field == "request":  # a unary request: its handler may ask for the bytes (:func:`raw_bytes`)
        _LAST.request, _LAST.raw = request, raw
    return request


class DecodeErrorsInterceptor(grpc.ServerInterceptor):
    """Decode requests inside the handler so that bad bytes give ``INVALID_ARGUMENT``.

    Parameters
    ----------
    prefix
        Only methods whose full name starts with it are handled (default: the prediction service).
    """

    def __init__(self, prefix: str = PREFIX):
        self.prefix = prefix

    def intercept_service(self, continuation: Callable, handler_call_details: Any) -> Any:
        """Wrap the prediction service's handlers so that they decode their own requests."""
        handler = continuation(handler_call_details)
        if handler is None or not handler_call_details.method.startswith(self.prefix):
            return handler
        deserialize = handler.request_deserializer
        if deserialize is None:
            return handler
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, deserialize),
                request_deserializer=None,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._stream(handler.stream_unary, deserialize),
                request_deserializer=None,
                response_serializer=handler.response_serializer,
            )
        return handler

    @staticmethod
    def _unary(behaviour: Callable, deserialize: Callable[[bytes], Any]) -> Callable:
        def decoded(raw: bytes, context: grpc.ServicerContext) -> Any:
            try:
                request = _decode(deserialize, raw, "request")
            except _Undecodable as error:
                abort(context, error)
            return behaviour(request, context)

        return decoded

    @staticmethod
    def _stream(behaviour: Callable, deserialize: Callable[[bytes], Any]) -> Callable:
        def decoded(raw_iterator: Iterator[bytes], context: grpc.ServicerContext) -> Any:
            def requests() -> Iterator[Any]:
                for index, raw in enumerate(raw_iterator):
                    yield _decode(deserialize, raw, f"requests[{index}]")

            try:
                return behaviour(requests(), context)
            except _Undecodable as error:
                abort(context, error)

        return decoded
