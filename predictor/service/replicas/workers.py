"""An answering worker's state: the latest versions its shards' learners published, read from files.

In ``predictor serve --workers N`` every answering process holds a :class:`WorkerState` in place
of a learner's :class:`~predictor.service.state.ServiceState`: the same answering code
(:mod:`predictor.service.answering`) runs on it, but :meth:`WorkerState.model` and the books it
reads (``live``, ``queues``, ``memory``, ``transfers``, ``filling``) are the latest ones published
by the learner of the shard named by :data:`~predictor.service.replicas.shards.SHARD` (set per RPC by the
worker's servicer), checked for a newer generation at every read
(:class:`~predictor.service.replicas.version_file.VersionReader`: one the learner must have every answer see
is loaded at once, the others by a background thread while answers use the version held). The worker learns nothing itself; the
answers it remembers for admission linking go to the learners
(:class:`~predictor.service.replicas.answer_forwarding.ForwardedMemory`) when it is given their queues.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from predictor.service.admission import AdmissionCalibration
from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.published import ModelVersion
from predictor.service.replicas.answer_forwarding import ForwardedMemory
from predictor.service.replicas.shards import SHARD, ShardMap
from predictor.service.replicas.version_file import VersionReader
from predictor.service.state import ServiceState

_BOOKS = ("live", "queues", "memory", "transfers", "filling")


class WorkerState(ServiceState):
    """A :class:`ServiceState` whose model and books are the learners' latest published versions.

    Parameters
    ----------
    config
        The service's configuration (the learners').
    folder
        Where the learners write their version files.
    shards
        The shards (one version file pair each).
    outboxes
        One queue per shard to its learner: the answers remembered for admission linking are sent
        there (:class:`~predictor.service.replicas.answer_forwarding.ForwardedMemory`); none: kept here, unused.
    """

    def __init__(self, config: ServiceConfig, folder: str | Path, shards: ShardMap,
                 outboxes: Sequence[Any] | None = None):
        self._own: dict[str, Any] = {}
        self._outboxes = outboxes
        super().__init__(config)
        self.shards = shards
        self.models = [VersionReader(folder, shards.model_name(i)) for i in range(len(shards))]
        self.books = [VersionReader(folder, shards.books_name(i)) for i in range(len(shards))]

    def new_admission(self) -> AdmissionCalibration:
        """The configured admission calibration, its answer memory forwarding to the learners."""
        admission = super().new_admission()
        if self._outboxes is not None:
            admission.memory = ForwardedMemory(self._outboxes, self.config.answer_memory)
        return admission

    def published(self) -> bool:
        """Whether every shard's learner has published a first version."""
        return all(r.available() for r in (*self.models, *self.books))

    def wait_published(self, timeout: float, poll_s: float = 0.02) -> bool:
        """Wait up to ``timeout`` seconds for :meth:`published`; returns it."""
        deadline = time.monotonic() + timeout
        while not self.published():
            if time.monotonic() > deadline:
                return False
            time.sleep(poll_s)
        return True

    def model(self) -> ModelVersion:
        """The latest version published by the learner of the RPC's shard."""
        return self.models[SHARD.get()].latest()

    def shard_of(self, kind: str, device: str = "") -> int:
        """The shard of a query: by its device kind, else by the kind its device was reported with."""
        if len(self.shards) == 1:
            return 0
        if not kind and device:
            for reader in self.books:
                kind = reader.latest().live.kind_of(device)
                if kind:
                    break
        return self.shards.shard_of(kind)


def _book(name: str) -> property:
    def get(self: WorkerState) -> Any:
        if "models" not in self.__dict__:  # ServiceState.__init__ still running
            return self._own[name]
        return getattr(self.books[SHARD.get()].latest(), name)

    def put(self: WorkerState, value: Any) -> None:
        self._own[name] = value  # what ServiceState.__init__ builds; the published books replace it

    return property(get, put, doc=f"The ``{name}`` book the RPC's shard's learner published last.")


for _name in _BOOKS:
    setattr(WorkerState, _name, _book(_name))


def worker_service(config: ServiceConfig, folder: str | Path, shards: ShardMap,
                   outboxes: Sequence[Any] | None = None) -> Service:
    """A :class:`Service` that answers from the versions in ``folder`` (see :class:`WorkerState`)."""
    return Service(config, state=WorkerState(config, folder, shards, outboxes))
