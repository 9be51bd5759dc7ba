"""A learner process's model-state gauges, written for the supervisor's multiprocess endpoint.

In ``predictor serve --workers N`` the supervisor's ``/metrics``
(:class:`~predictor.rpc.metrics.MultiProcessMetrics`) sums what every process writes to
prometheus-client's multiprocess files; it holds no service itself. Each learner therefore copies
the gauges of its service's collector (rolling MAPE and bound coverage per device kind, observation
log positions, batches running and queued, devices saturated, readiness, transfer corrections: the
single process's, same names and labels) into multiprocess gauges, with one more label, ``shard``,
every ``every_s`` seconds and once more when it stops. They are ``livemax`` gauges: only live
processes count (the supervisor marks a dead learner's files dead), and a shard has one learner.
"""

from __future__ import annotations

import threading

from prometheus_client import Gauge

from predictor.rpc.metrics import service_collector
from predictor.service.core import Service

SHARD_LABEL = "shard"


class ModelGauges:
    """Copies ``service``'s gauges into multiprocess gauges labelled with ``shard``, periodically.

    Parameters
    ----------
    service
        The learner's service.
    shard
        The learner's shard (the ``shard`` label's value).
    every_s
        Seconds between two copies.
    """

    def __init__(self, service: Service, shard: int, every_s: float = 0.5):
        self.collector = service_collector(service)
        self.shard = str(shard)
        self.every_s = every_s
        self._gauges: dict[str, Gauge] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def export(self) -> None:
        """Copy every gauge of the service's collector now."""
        for family in self.collector.collect():
            if family.type != "gauge":
                continue
            for sample in family.samples:
                names = tuple(sample.labels)
                gauge = self._gauge(family.name, family.documentation, names)
                gauge.labels(*(sample.labels[n] for n in names), self.shard).set(sample.value)

    def _gauge(self, name: str, documentation: str, labels: tuple[str, ...]) -> Gauge:
        gauge = self._gauges.get(name)
        if gauge is None:
            gauge = Gauge(name, documentation, [*labels, SHARD_LABEL], registry=None, multiprocess_mode="livemax")
            self._gauges[name] = gauge
        return gauge

    def start(self) -> None:
        """Copy now, then every ``every_s`` seconds in a background thread."""
        self.export()
        self._thread = threading.Thread(target=self._loop, name="model-gauges", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread after a last copy."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.export()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.export()

