"""An interference-aware request router for inference deployments (a Ray Serve ``RequestRouter``).

Ray Serve's default router samples two replicas and sends the request to the one with the
shorter queue. A queue length says nothing of *what* runs there: one long batch slows a new
one more than two short ones do. :class:`InterferenceAwareRouter` instead asks the
interference prediction service, for every candidate replica, what the request's latency
would be beside the batches running there
(:meth:`Service.rank_placements <predictor.service.Service.rank_placements>`), and ranks the
replicas where the predicted latency meets the request's deadline first, then by predicted latency.

What runs on a replica comes from its routing stats
(:class:`~predictor.ray_serve.colocation.ColocationState`, reported by
:class:`~collectors.ray_inference.InferenceReplica`) together with the router's own
:class:`~predictor.ray_serve.colocation.Ledger` of the requests it sent and that have not
completed. The predictions come from a :class:`~predictor.ray_serve.pinned.PinnedService`
in the router's process, kept at the learner actor's latest model version (asked for every
``refresh_s``, off the routing path). Until the learner has learned anything, or for a
request that is not an :class:`~predictor.ray_serve.requests.InferenceRequest`, every
candidate is one rank and Serve's queue-length choice decides.

It is an opt-in experiment, not a default: Serve's power-of-two-choices router has matched or beaten
it on the project's benchmark (``docs/scale-out.md``, "Default vs interference-aware router"); it
can help where replicas run batches side by side on a shared device. Use it through the
deployment's request router configuration::

    RequestRouterConfig(request_router_class=InterferenceAwareRouter,
                        request_router_kwargs={"learner": "interference-learner"},
                        request_routing_stats_period_s=0.1)
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ray.serve.request_router import FIFOMixin, PendingRequest, ReplicaID, RequestRouter, RunningReplica

from predictor.ray_serve.colocation import ColocationState, Ledger, RunningBatch, solo_key
from predictor.ray_serve.learner import learner_named
from predictor.ray_serve.pinned import PinnedService
from predictor.ray_serve.requests import InferenceRequest
from predictor.records.record import BatchSpec
from predictor.service import Candidate, CoRunnerSource, Deadline, Service, ServiceConfig, ServiceError

log = logging.getLogger("predictor.ray_serve.router")


def inference_request(pending: PendingRequest | None) -> InferenceRequest | None:
    """The :class:`~predictor.ray_serve.requests.InferenceRequest` a pending request carries, if any."""
    if pending is None:
        return None
    for value in (*pending.args, *pending.kwargs.values()):
        if isinstance(value, InferenceRequest):
            return value
    return None


def rank_replicas(service: Service, request: InferenceRequest, states: list[tuple[str, ColocationState | None]],
                  ledger: Ledger, confidence: float, now_s: float | None = None) -> list[tuple[int, float]]:
    """Replicas best first for ``request``: ``(index in states, predicted latency ms)``.

    ``states``: per replica, its key in ``ledger`` and its reported co-location state (``None``:
    not reported yet: a device of unknown kind). Its co-runners are the ledger's union
    (:meth:`Ledger.co_runners <predictor.ray_serve.colocation.Ledger.co_runners>`), each overlapping the
    request's solo window by its expected time left (when a replica reported that solo latency); the ranking is the
    service's answers (:meth:`Service.rank_placements <predictor.service.Service.rank_placements>`):
    replicas whose predicted latency meets the deadline first, then the lowest predicted latency.

    Raises :class:`~predictor.service.ServiceError` when the service cannot answer (nothing
    learned and no solo latency reported).
    """
    now_s = time.time() if now_s is None else now_s
    key_of = solo_key(request.model, request.batch_size)
    solo = next((s.solo_ms[key_of] for _, s in states if s is not None and key_of in s.solo_ms), None)
    candidates = []
    for key, state in states:
        co_runners = tuple(ledger.co_runners(key, state, now_s, solo))
        device, kind = (state.device, state.device_kind) if state is not None else (key, "")
        candidates.append(Candidate(device, kind, co_runners, CoRunnerSource.EXPLICIT))
    ranking = service.rank_placements(BatchSpec(request.model, request.batch_size), candidates,
                                      Deadline(ms=request.deadline_ms), confidence, solo)
    # By predicted latency (the replicas meeting the deadline come first): the upper bounds' factors
    # differ between co-runner counts (each count is calibrated apart), which would let a replica with
    # more co-runners outrank an idle one; the point prediction orders replicas by interference.
    placements = sorted(ranking.placements, key=lambda p: (p.prediction.latency_ms > ranking.deadline_ms,
                                                          p.prediction.latency_ms))
    return [(p.candidate_index, p.prediction.latency_ms) for p in placements]


class InterferenceAwareRouter(FIFOMixin, RequestRouter):
    """Ranks replicas by the service's predicted latency and deadline slack (see the module documentation)."""

    def initialize_state(self, learner: str = "", confidence: float = 0.9, refresh_s: float = 1.0,
                         predictor: str = "rls", **_: Any) -> None:
        """Set up from ``request_router_kwargs``.

        Parameters
        ----------
        learner
            Name of the learner actor whose versions the predictions come from (required).
        confidence
            Confidence of the upper bounds ranked by.
        refresh_s
            How often to ask the learner for a newer version.
        predictor
            The learner's predictor spec (as reported in answers).
        """
        if not learner:
            raise ValueError("request_router_kwargs.learner must name the learner actor")
        if not 0 < confidence < 1:
            raise ValueError(f"request_router_kwargs.confidence must be in (0, 1), got {confidence!r}")
        if not refresh_s > 0:
            raise ValueError(f"request_router_kwargs.refresh_s must be > 0, got {refresh_s!r}")
        self.learner_name = learner
        self.confidence = confidence
        self.refresh_s = refresh_s
        self.pinned = PinnedService(ServiceConfig(predictor=predictor))
        self.ledger = Ledger()
        self.decisions = 0  # requests ranked by the service
        self.fallbacks = 0  # requests left to the queue-length choice
        self._predicted: dict[str, dict[ReplicaID, float]] = {}  # internal request id -> replica -> ms
        self._learner: Any = None
        self._refreshed = -float("inf")
        self._refreshing = False

    # ------------------------------------------------------------------ model versions
    def _maybe_refresh(self) -> None:
        now = time.monotonic()
        if self._refreshing or now - self._refreshed < self.refresh_s:
            return
        self._refreshing = True
        self._refreshed = now
        asyncio.get_running_loop().create_task(self._refresh())

    async def _refresh(self) -> None:
        try:
            if self._learner is None:
                self._learner = learner_named(self.learner_name)
            published = await self._learner.published_after.remote(self.pinned.generation)
            if published is not None:
                self.pinned.install(*published)
        except Exception as exc:  # a missing or restarting learner: keep the version held
            log.warning("no model version from learner %r: %s", self.learner_name, exc)
        finally:
            self._refreshing = False

    # ------------------------------------------------------------------ routing
    def rank(self, request: InferenceRequest, replicas: list[RunningReplica],
             now_s: float | None = None) -> list[tuple[RunningReplica, float]]:
        """``replicas`` best first for ``request``, each with its predicted latency (ms)
        (:func:`rank_replicas` on their routing stats and this router's ledger)."""
        states = [(r.replica_id.unique_id, ColocationState.from_stats(r.routing_stats)) for r in replicas]
        ranked = rank_replicas(self.pinned.service, request, states, self.ledger, self.confidence, now_s)
        return [(replicas[i], ms) for i, ms in ranked]

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        """One rank per replica, best first by the service's answer (see the module documentation)."""
        self._maybe_refresh()
        request = inference_request(pending_request)
        if request is None or self.pinned.generation == 0 or len(candidate_replicas) < 2:
            self.fallbacks += 1
            return [candidate_replicas]
        try:
            ranked = self.rank(request, candidate_replicas)
        except (ServiceError, ValueError) as exc:
            log.warning("routing %s by queue length: %s", request.request_id, exc)
            self.fallbacks += 1
            return [candidate_replicas]
        self.decisions += 1
        self._predicted[pending_request.metadata.internal_request_id] = {r.replica_id: ms for r, ms in ranked}
        return [[replica] for replica, _ in ranked]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        """Enter the request in the ledger of ``replica_id`` with the latency predicted there."""
        internal = pending_request.metadata.internal_request_id
        request = inference_request(pending_request)
        predicted = self._predicted.pop(internal, {})
        if request is None:
            return
        expected = predicted.get(replica_id)
        if expected is None:
            state = ColocationState.from_stats(self._replicas[replica_id].routing_stats) \
                if replica_id in self._replicas else None
            expected = state.solo_ms.get(solo_key(request.model, request.batch_size), 0.0) if state else 0.0
        self.ledger.sent(replica_id.unique_id, internal,
                         RunningBatch(request.request_id, request.model, request.batch_size, time.time(), expected))

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        """Take the request out of the ledger."""
        self._predicted.pop(internal_request_id, None)
        self.ledger.completed(internal_request_id)
