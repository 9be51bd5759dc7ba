"""Typed domain errors of the service; the gRPC layer maps each to one status code.

Each error names the offending field (a dotted path in the request, e.g.
``query.co_runners[1].overlap``) where there is one.

Examples
--------
>>> str(InvalidArgument("query.batch.batch_size", "must be an integer >= 1, got 0"))
'query.batch.batch_size: must be an integer >= 1, got 0'
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base class: a request the service cannot answer, and why."""

    def __init__(self, message: str, field: str = ""):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class InvalidArgument(ServiceError):
    """A field of the request is malformed or out of range."""

    def __init__(self, field: str, message: str):
        super().__init__(message, field)


class NotFound(ServiceError):
    """A named entity (a device in the live view) is unknown."""

    def __init__(self, field: str, message: str):
        super().__init__(message, field)


class FailedPrecondition(ServiceError):
    """The service cannot answer as asked from what it has learned (e.g. a learned answer
    about a model it has never seen)."""

    def __init__(self, field: str, message: str):
        super().__init__(message, field)


class Unavailable(ServiceError):
    """The service is not ready (starting up, restoring state, or shutting down)."""


class ResourceExhausted(ServiceError):
    """A request exceeds a configured limit (candidates, stream length, live view size)."""

    def __init__(self, field: str, message: str):
        super().__init__(message, field)


class OutlierRejected(InvalidArgument):
    """An observation's latency is absurdly far from the prediction; it was not learned."""

    def __init__(self, message: str):
        super().__init__("record.latency_ms", message)


class RateLimited(ResourceExhausted):
    """A client (or a source) sent observations faster than its configured rate."""

    def __init__(self, message: str):
        super().__init__("record", message)
