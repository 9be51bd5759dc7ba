"""Domain errors to gRPC status codes, in one place (and back, for the client).

A servicer method decorated with :func:`grpc_errors` turns a
:class:`~predictor.service.errors.ServiceError` (or a record validation
error) into an aborted call with the mapped code; the details start with the
offending field's path and the trailing metadata carries it under
``invalid-field`` (percent-encoded outside printable ASCII, as a map key sent
by a client may hold anything). Anything else is left to gRPC (``UNKNOWN``)
and logged.
"""

from __future__ import annotations

import functools
import logging
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from predictor.records import RecordError
from predictor.service.errors import InvalidArgument, NotFound, ResourceExhausted, ServiceError, Unavailable
from predictor.service.snapshot import SnapshotError

FIELD_KEY = "invalid-field"
_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")
log = logging.getLogger("predictor.rpc")

STATUS_CODES: dict[type[Exception], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    RecordError: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    SnapshotError: grpc.StatusCode.FAILED_PRECONDITION,
}

_ERRORS: dict[grpc.StatusCode, type[ServiceError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
}

F = TypeVar("F", bound=Callable[..., Any])


def encode_field(field: str) -> str:
    """A field path as a legal metadata value: printable ASCII, anything else percent-encoded.

    >>> encode_field("query.signals.\x1f%"), decode_field(encode_field("query.signals.é"))
    ('query.signals.%1F%25', 'query.signals.é')
    """
    return urllib.parse.quote(field, safe=_SAFE)


def decode_field(value: str) -> str:
    """The field path of an ``invalid-field`` metadata value."""
    return urllib.parse.unquote(value)


def status_code(error: Exception) -> grpc.StatusCode:
    """The status code for a domain error (``INTERNAL`` for anything unmapped)."""
    for klass in type(error).__mro__:
        if klass in STATUS_CODES:
            return STATUS_CODES[klass]
    return grpc.StatusCode.INTERNAL


def grpc_errors(method: F) -> F:
    """Decorate a servicer method: domain errors abort the call with their status code."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except (ServiceError, RecordError, SnapshotError) as exc:
            field = getattr(exc, "field", "") or ""
            if field:
                context.set_trailing_metadata(((FIELD_KEY, encode_field(field)),))
            context.abort(status_code(exc), str(exc))

    return wrapper  # type: ignore[return-value]


def from_rpc_error(error: grpc.RpcError) -> Exception:
    """The domain error a failed call stands for (the :class:`grpc.RpcError` itself when none)."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    field = ""
    for key, value in (error.trailing_metadata() or ()) if hasattr(error, "trailing_metadata") else ():
        if key == FIELD_KEY:
            field = decode_field(value)
    message = details or ""
    if field and message.startswith(f"{field}: "):
        message = message[len(field) + 2 :]
    if code == grpc.StatusCode.UNAVAILABLE:
        return Unavailable(message)
    klass = _ERRORS.get(code)
    if klass is None:
        return error
    return klass(field, message)
