"""The service core as a Ray Serve application: answering replicas beside one learner actor.

Each :class:`ServiceReplica` holds a :class:`~predictor.ray_serve.pinned.PinnedService` and
keeps it at the learner's latest :class:`~predictor.service.published.ModelVersion` (a
background thread asks for a newer one every ``refresh_s``; :meth:`ServiceReplica.sync`
asks at once). Callers use the Serve handle API with the service's own types::

    handle = deploy_service("interference", num_replicas=2)
    prediction = handle.predict.remote(Query("cpu0", BatchSpec("mlp", 2))).result()

A shard (a set of device kinds) is one application: call :func:`deploy_service` once per shard,
each with its own learner.
"""

from __future__ import annotations

import logging
import threading

import ray
from ray import serve
from ray.serve.handle import DeploymentHandle

from predictor.ray_serve.learner import learner_named, start_learner
from predictor.ray_serve.pinned import PinnedService
from predictor.records.record import BatchSpec
from predictor.runtime.threads import pin_blas_threads
from predictor.service import (
    Candidate,
    Deadline,
    DeadlineAnswer,
    Prediction,
    Query,
    Ranking,
    ServiceConfig,
)
from predictor.service.estimates import fixed_point_kernel

log = logging.getLogger("predictor.ray_serve.service_app")


@serve.deployment(ray_actor_options={"num_cpus": 0})
class ServiceReplica:
    """One answering replica: PredictLatency, CheckDeadline and RankPlacements from published versions.

    Parameters
    ----------
    learner
        Name of the learner actor (:func:`~predictor.ray_serve.learner.start_learner`).
    config
        The service's configuration (the learner's).
    refresh_s
        How often the background thread asks the learner for a newer version.
    """

    def __init__(self, learner: str, config: ServiceConfig | None = None, refresh_s: float = 0.05):
        if not refresh_s > 0:
            raise ValueError(f"refresh_s must be > 0, got {refresh_s!r}")
        pin_blas_threads()  # a replica is a process of its own: BLAS limited as every entry point does

        fixed_point_kernel.warm()  # as predictor serve does, before the first ranking or moving query
        self.pinned = PinnedService(config)
        self.learner = learner_named(learner)
        self.refresh_s = refresh_s
        self._stop = threading.Event()
        threading.Thread(target=self._refresh_loop, name="version-refresh", daemon=True).start()

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                published = ray.get(self.learner.published_after.remote(self.pinned.generation))
            except ray.exceptions.RayError as exc:  # a learner restarting or gone: keep the version held
                log.warning("no model version from the learner: %s", exc)
                continue
            if published is not None:
                self.pinned.install(*published)

    async def sync(self) -> int:
        """Install the learner's latest version now; returns the generation answered from."""
        published = await self.learner.published_after.remote(self.pinned.generation)
        if published is not None:
            self.pinned.install(*published)
        return self.pinned.generation

    def predict(self, query: Query, confidence: float | None = None) -> Prediction:
        """Predicted latency and calibrated upper bound of a planned batch."""
        return self.pinned.service.predict(query, confidence)

    def check_deadline(self, query: Query, deadline: Deadline, confidence: float | None = None) -> DeadlineAnswer:
        """Whether a planned batch finishes within ``deadline`` at ``confidence``."""
        return self.pinned.service.check_deadline(query, deadline, confidence)

    def rank_placements(self, batch: BatchSpec, candidates: list[Candidate], deadline: Deadline,
                        confidence: float | None = None, solo_latency_ms: float | None = None) -> Ranking:
        """Answers for one batch on many candidate devices, most slack first."""
        return self.pinned.service.rank_placements(batch, candidates, deadline, confidence, solo_latency_ms)

    def __del__(self) -> None:
        self._stop.set()


def deploy_service(name: str = "interference", *, config: ServiceConfig | None = None, num_replicas: int = 2,
                   warm_start: str | None = None, refresh_s: float = 0.05) -> DeploymentHandle:
    """Start the learner actor ``{name}-learner`` and the application ``name`` of answering replicas.

    Returns the handle of the answering deployment (Ray and Serve must be started, or are started
    by :func:`ray.serve.run` with defaults). The learner is found again by
    :func:`~predictor.ray_serve.learner.learner_named` (``f"{name}-learner"``).
    """
    if num_replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {num_replicas!r}")
    learner = f"{name}-learner"
    actor = start_learner(learner, config, warm_start)
    ray.get(actor.observations_learned.remote())  # started (a bad warm-start log raises here)
    app = ServiceReplica.options(num_replicas=num_replicas).bind(learner, config, refresh_s)
    return serve.run(app, name=name, route_prefix=None)
