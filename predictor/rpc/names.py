"""The names of the gRPC contract, spelled once.

Examples
--------
>>> METHOD_PREFIX + "PredictLatency"
'/interference.v1.InterferenceService/PredictLatency'
>>> method_name("/interference.v1.InterferenceService/CheckDeadline"), method_name("/grpc.health.v1.Health/Check")
('CheckDeadline', None)
"""

from __future__ import annotations

PACKAGE = "interference.v1"
SERVICE_NAME = f"{PACKAGE}.InterferenceService"
METHOD_PREFIX = f"/{SERVICE_NAME}/"


def method_path(name: str) -> str:
    """The full method path of RPC ``name`` (e.g. ``/interference.v1.InterferenceService/PredictLatency``)."""
    return METHOD_PREFIX + name


def method_name(path: str, prefix: str = METHOD_PREFIX) -> str | None:
    """The RPC name of a full method path under ``prefix``; None for another service's method."""
    return path[len(prefix) :] if path.startswith(prefix) else None
