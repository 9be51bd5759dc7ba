"""What an inference deployment is asked and answers: the contract between the router and its replicas.

The interference-aware router (:mod:`~predictor.ray_serve.router`) reads the
:class:`InferenceRequest` a pending request carries; the replicas
(:mod:`collectors.ray_inference`) run it and answer an :class:`InferenceResult`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """One batch to run.

    Attributes
    ----------
    request_id
        The caller's id of the request (unique; reported while it runs).
    model, batch_size
        What to run.
    deadline_ms
        Its deadline from submission, in ms (what the interference-aware router ranks replicas by).
    """

    request_id: str
    model: str
    batch_size: int
    deadline_ms: float

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("request_id must be a non-empty string")
        if not self.model:
            raise ValueError("model must be a non-empty string")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {self.batch_size!r}")
        if not self.deadline_ms > 0:
            raise ValueError(f"deadline_ms must be > 0, got {self.deadline_ms!r}")


@dataclass(frozen=True, slots=True)
class InferenceResult:
    """What a replica answers: where the batch ran, and for how long.

    Attributes
    ----------
    request_id
        The request's id.
    device
        The replica's device.
    latency_ms
        The batch's execution time on the replica.
    co_runners
        How many other batches ran there when it started.
    """

    request_id: str
    device: str
    latency_ms: float
    co_runners: int
