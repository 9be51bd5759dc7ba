"""Domain errors to gRPC status codes, in one place (and back, for the client).

A servicer method decorated with :func:`grpc_errors` turns a
:class:`~predictor.service.errors.ServiceError` (or a record validation
error) into an aborted call with the mapped code; the details start with the
offending field's path and the trailing metadata carries it under
``invalid-field`` (percent-encoded outside printable ASCII, as a map key sent
by a client may hold anything). Anything else is left to gRPC (``UNKNOWN``)
and logged.

Every mapping goes through one table, :data:`STATUS_TABLE`: the servicer's
domain errors, the undecodable requests (:mod:`predictor.rpc.decoding`) and
the refused callers (:mod:`predictor.rpc.security`) on the server side, and
:func:`from_rpc_error` on the client side (the rows marked ``client``).

Examples
--------
>>> status_code(InvalidArgument("query.batch", "missing")).name, status_code(Unauthenticated("no token")).name
('INVALID_ARGUMENT', 'UNAUTHENTICATED')
>>> type(from_code(grpc.StatusCode.NOT_FOUND, "device", "unknown device 'gpu9'")).__name__
'NotFound'
"""

from __future__ import annotations

import functools
import logging
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import grpc

from predictor.records.record import RecordError
from predictor.runtime.durable import SnapshotError
from predictor.service.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    ServiceError,
    Unavailable,
)

FIELD_KEY = "invalid-field"
_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")
log = logging.getLogger("predictor.rpc")



class Unauthenticated(Exception):
    """A caller without a valid credential called a protected RPC (``UNAUTHENTICATED``)."""


class PermissionDenied(Exception):
    """An authenticated caller is not allowed to call this RPC (``PERMISSION_DENIED``)."""


@dataclass(frozen=True)
class StatusRow:
    """One row of the mapping: an error type, its status code, and whether the client raises it back.

    Attributes
    ----------
    error
        The exception type (its subclasses map alike unless they have a row of their own).
    code
        The gRPC status code a call that raised it ends with.
    client
        Whether :func:`from_rpc_error` turns that code back into ``error`` on the client side.
    """

    error: type[Exception]
    code: grpc.StatusCode
    client: bool = False


STATUS_TABLE: tuple[StatusRow, ...] = (
    StatusRow(InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT, client=True),
    StatusRow(RecordError, grpc.StatusCode.INVALID_ARGUMENT),
    StatusRow(NotFound, grpc.StatusCode.NOT_FOUND, client=True),
    StatusRow(Unavailable, grpc.StatusCode.UNAVAILABLE, client=True),
    StatusRow(ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED, client=True),
    StatusRow(FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION, client=True),
    StatusRow(SnapshotError, grpc.StatusCode.FAILED_PRECONDITION),
    StatusRow(Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    StatusRow(PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    StatusRow(ServiceError, grpc.StatusCode.INTERNAL),  # any other service error: the message, not UNKNOWN
)
STATUS_CODES: dict[type[Exception], grpc.StatusCode] = {row.error: row.code for row in STATUS_TABLE}
_ERRORS: dict[grpc.StatusCode, type[Exception]] = {row.code: row.error for row in STATUS_TABLE if row.client}
MAPPED: tuple[type[Exception], ...] = tuple(STATUS_CODES)

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


def abort(context: grpc.ServicerContext, error: Exception) -> NoReturn:
    """End the call with ``error``'s status code; its field, if any, goes to the trailing metadata."""
    field = getattr(error, "field", "") or ""
    if field:
        context.set_trailing_metadata(((FIELD_KEY, encode_field(field)),))
    context.abort(status_code(error), str(error))
    raise AssertionError("grpc's context.abort returned")  # pragma: no cover  (it always raises)


def grpc_errors(method: F) -> F:
    """Decorate a servicer method: domain errors abort the call with their status code."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except MAPPED as exc:
            abort(context, exc)

    return wrapper  # type: ignore[return-value]


def from_code(code: grpc.StatusCode | None, field: str, message: str) -> Exception | None:
    """The client-side error for a status code, field and message (None when the code has no row)."""
    klass = _ERRORS.get(code)  # type: ignore[arg-type]
    if klass is None:
        return None
    error = klass.__new__(klass)
    ServiceError.__init__(error, message, field)  # every client row is a ServiceError
    return error


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
    return from_code(code, field, message) or error
