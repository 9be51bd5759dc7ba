"""The learner: one process that ingests observations and publishes model versions.

:class:`Learner` is a plain class; :func:`start_learner` runs it as a named Ray actor,
the one writer beside many answering replicas
(:mod:`predictor.ray_serve.service_app`). Replicas ask it for a
version newer than theirs, with the books answers read (:meth:`Learner.published_after`); it publishes
through the service's
own :class:`~predictor.service.published.Publisher`, so they get the same immutable copies
the in-process answers read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import ray

from predictor.records.record import parse_record
from predictor.runtime.threads import pin_blas_threads
from predictor.service import Service, ServiceConfig
from predictor.service.published import ModelVersion
from predictor.service.replicas.file_publisher import books_held
from predictor.service.replicas.version_pickle import dumps


class Learner:
    """The service's learning half, as a Ray actor's body.

    Parameters
    ----------
    config
        The service's configuration.
    warm_start
        A ``coloc/v1`` log learned before the first observation (optional).
    """

    def __init__(self, config: ServiceConfig | None = None, warm_start: str | None = None):
        pin_blas_threads()  # an actor is a process of its own: BLAS limited as every entry point does
        self.service = Service(config or ServiceConfig())
        self.service.open(warm_start=warm_start)

    def observe(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Learn ``coloc/v1`` records (dicts, as logged); returns how many were learned.

        Raises :class:`~predictor.records.record.RecordError` naming the field of the first bad record.
        """
        parsed = [parse_record(dict(r)) for r in records]
        for record in parsed:
            self.service.observe(record)
        return len(parsed)

    def publish(self) -> int:
        """Publish what is learned now (unless already published); returns its generation."""
        return self.service.state.publish().generation

    def version_after(self, generation: int) -> ModelVersion | None:
        """The latest version (published now if due), or ``None`` when it is not newer than ``generation``."""
        version = self.service.state.model()
        return version if version.generation > generation else None

    def published_after(self, generation: int) -> tuple[ModelVersion, bytes] | None:
        """:meth:`version_after` with the books answers read besides the model (the live view, queues,
        memory, transfers and the filling of omitted signals and overlaps), pickled with fresh locks
        (:func:`~predictor.service.replicas.version_pickle.dumps`): what a replica installs
        (:meth:`PinnedService.install <predictor.ray_serve.pinned.PinnedService.install>`) to answer as
        this process answers. ``None`` when the version is not newer than ``generation``."""
        version = self.version_after(generation)
        if version is None:
            return None
        with books_held(self.service.state) as books:
            return version, dumps(books)

    def observations_learned(self) -> int:
        """How many observations the predictor learned."""
        return self.service.observations_learned


def start_learner(name: str, config: ServiceConfig | None = None, warm_start: str | None = None,
                  namespace: str = "serve") -> ray.actor.ActorHandle:
    """Start the learner as a named, detached Ray actor (found again by :func:`learner_named`;
    it outlives the handles to it until :func:`stop_learner` or the end of the Ray cluster).

    One CPU thread is enough: it learns records one at a time. It takes no CPU reservation
    (``num_cpus=0``) so that it fits beside the replicas on a small machine.
    """
    if not name:
        raise ValueError("name must be a non-empty string")
    actor = ray.remote(num_cpus=0)(Learner)
    return actor.options(name=name, namespace=namespace, lifetime="detached").remote(config, warm_start)


def learner_named(name: str, namespace: str = "serve") -> ray.actor.ActorHandle:
    """The running learner actor called ``name``."""
    return ray.get_actor(name, namespace=namespace)


def stop_learner(name: str, namespace: str = "serve") -> bool:
    """Stop the learner actor called ``name``; returns whether one was running."""
    try:
        actor = ray.get_actor(name, namespace=namespace)
    except ValueError:
        return False
    ray.kill(actor)
    return True
