"""A service that answers from the model versions it is given, and learns nothing itself.

A Serve replica (or a router) holds one: the learner actor publishes immutable
:class:`~predictor.service.published.ModelVersion` objects and each holder installs
the latest it has received, with the learner's books (the filling of omitted signals and overlaps,
the live view). Answers then go the way every answer goes
(:class:`~predictor.service.answering.Answering`, reading
:meth:`ServiceState.model <predictor.service.state.ServiceState.model>`), so a replica
answers exactly what the learner's own process answers from the same version.

Examples
--------
>>> from predictor.records.record import BatchSpec, parse_record
>>> from predictor.service import CoRunnerSource, Query, Service, ServiceConfig
>>> learner = Service(ServiceConfig(predictor="solo"))
>>> _ = learner.open()
>>> _ = learner.observe(parse_record({"schema": "coloc/v1", "device": "cpu0",
...     "batch": {"model": "mlp", "batch_size": 2}, "latency_ms": 4.0}))
>>> replica = PinnedService(ServiceConfig(predictor="solo"))
>>> replica.install(learner.state.publish())
True
>>> replica.service.predict(Query("cpu0", BatchSpec("mlp", 2), co_runner_source=CoRunnerSource.EXPLICIT)).latency_ms
4.0
"""

from __future__ import annotations

import pickle
import threading

from predictor.service import Service, ServiceConfig
from predictor.service.published import ModelVersion
from predictor.service.replicas.file_publisher import Books


class PinnedService:
    """A :class:`~predictor.service.Service`, opened, that answers from installed versions only.

    Parameters
    ----------
    config
        The answering configuration (confidence, limits); its ``predictor`` should name the
        learner's, as it is reported in answers.
    """

    def __init__(self, config: ServiceConfig | None = None):
        self.service = Service(config or ServiceConfig())
        self.service.open()
        self._lock = threading.Lock()

    @property
    def generation(self) -> int:
        """The learner's change count of the installed version (0: none installed yet)."""
        return self.service.state.version.generation

    def install(self, version: ModelVersion, books: Books | bytes | None = None) -> bool:
        """Answer from ``version`` from now on, unless it is older than the installed one; with
        ``books`` (:meth:`Learner.published_after <predictor.ray_serve.learner.Learner.published_after>`:
        pickled, or as they are),
        fill in omitted signals and overlaps, resolve device kinds and running batches from the
        learner's books too, as the learner's own process does.

        Returns whether it was installed. The state's generation is set to the version's, so
        :meth:`ServiceState.model <predictor.service.state.ServiceState.model>` takes it as current
        and never re-publishes from the (empty) local learner.
        """
        if not isinstance(version, ModelVersion):
            raise TypeError(f"version must be a ModelVersion, got {type(version).__name__}")
        with self._lock:
            state = self.service.state
            if version.generation < state.version.generation:
                return False
            if isinstance(books, bytes):
                books = pickle.loads(books)
            if books is not None:
                state.live, state.queues, state.memory = books.live, books.queues, books.memory
                state.transfers, state.filling = books.transfers, books.filling
            state.version = version
            state.generation = version.generation
            return True
