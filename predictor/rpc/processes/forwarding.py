"""Who called, carried from an answering worker to a learner over the machine-local channel.

A worker (``predictor serve --workers N``) authenticates its callers; the learner it forwards
observations and live-view reports to sees only the worker. The worker sends the caller's identity
and address as metadata (:func:`caller_metadata`); the learner, reachable only through a socket in a
folder of its own user, takes them as the caller (:func:`adopt_forwarded_caller`), so that rate
limits, the outlier gate and exactly-once learning see the same identity as in one process.
"""

from __future__ import annotations

from typing import Any

import grpc

from predictor.rpc.security import _CALLER, Caller, current_caller

IDENTITY_KEY = "x-interference-forwarded-identity"
PEER_KEY = "x-interference-forwarded-peer"


def caller_metadata(context: grpc.ServicerContext) -> tuple[tuple[str, str], ...]:
    """The metadata naming the caller of the RPC being handled, for the learner."""
    caller = current_caller(context)
    return (IDENTITY_KEY, caller.identity), (PEER_KEY, caller.peer)


def adopt_forwarded_caller(context: Any) -> None:
    """Take the caller named by a worker's metadata as the caller of this RPC (when it names one)."""
    metadata = dict(context.invocation_metadata() or ())
    if PEER_KEY in metadata:
        _CALLER.set(Caller(metadata.get(IDENTITY_KEY, ""), metadata[PEER_KEY]))
