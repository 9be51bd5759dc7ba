"""A learner process's model-state gauges, written for the supervisor's multiprocess endpoint.

In ``predictor serve --workers N`` the supervisor's ``/metrics``
(:class:`~predictor.rpc.metrics.MultiProcessMetrics`) sums what every process writes to
prometheus-client's multiprocess files; it holds no service itself. Each learner therefore copies
the gauges of its service's collector (rolling MAPE and bound coverage per device kind, observation
log positions, batches running and queued, devices saturated, readiness, transfer corrections: the
single process's, same names and labels) into multiprocess gauges, with one more label, ``shard``,
every ``every_s`` seconds and once more when it stops. They are ``livemax`` gauges: only live
processes count (the supervisor marks a dead learner's files dead), and a shard has one learner.

The service's counters (observations learned, rejected, refused, duplicates, drift alarms,
transfers observed) are copied the same way, as ``livemax`` gauges of the counter's name; a worker
copies its PlanPipeline counts (:class:`PipelineCounts`, label ``worker``). The supervisor's
endpoint sums each over the ``shard`` or ``worker`` label and exports it as the counter a
one-process server exports (:data:`MIRRORED_COUNTERS`, :class:`~predictor.rpc.metrics.MultiProcessMetrics`).
"""

from __future__ import annotations

import threading

from prometheus_client import Gauge

from predictor.rpc.metrics import MIRRORED_COUNTERS, PIPELINE_COUNTERS, service_collector
from predictor.service.core import Service

SHARD_LABEL = "shard"
WORKER_LABEL = "worker"


class PeriodicCopy:
    """Calls :meth:`export` now, every ``every_s`` seconds on a thread of its own, and once more when
    stopped: the copying loop of :class:`ModelGauges` and :class:`PipelineCounts`."""

    thread_name = "periodic-copy"

    def __init__(self, every_s: float):
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def export(self) -> None:
        """Copy now (subclasses say what)."""
        raise NotImplementedError

    def start(self) -> None:
        """Copy now, then every ``every_s`` seconds in a background thread."""
        self.export()
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
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


class ModelGauges(PeriodicCopy):
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

    thread_name = "model-gauges"

    def __init__(self, service: Service, shard: int, every_s: float = 0.5):
        super().__init__(every_s)
        self.collector = service_collector(service)
        self.shard = str(shard)
        self._gauges: dict[str, Gauge] = {}

    def export(self) -> None:
        """Copy every gauge and counter of the service's collector now (the pipeline's counters are the
        workers' to copy: PlanPipeline is answered there)."""
        for family in self.collector.collect():
            if family.type == "counter" and family.name in MIRRORED_COUNTERS and family.name not in PIPELINE_COUNTERS:
                samples = [s for s in family.samples if s.name == family.name + "_total"]
            elif family.type == "gauge":
                samples = family.samples
            else:
                continue
            for sample in samples:
                names = tuple(sample.labels)
                gauge = self._gauge(family.name, family.documentation, names)
                gauge.labels(*(sample.labels[n] for n in names), self.shard).set(sample.value)

    def _gauge(self, name: str, documentation: str, labels: tuple[str, ...]) -> Gauge:
        gauge = self._gauges.get(name)
        if gauge is None:
            gauge = Gauge(name, documentation, [*labels, SHARD_LABEL], registry=None, multiprocess_mode="livemax")
            self._gauges[name] = gauge
        return gauge


class PipelineCounts(PeriodicCopy):
    """Copies a worker's PlanPipeline counts (``service.pipelines.counts``) into ``livemax`` gauges named
    as the one-process counters (:data:`PIPELINE_COUNTERS`), labelled with ``worker``, every ``every_s``
    seconds and once more when it stops (see the module).

    Parameters
    ----------
    service
        The worker's service.
    worker
        The worker's index (the ``worker`` label's value).
    every_s
        Seconds between two copies.
    """

    thread_name = "pipeline-counts"

    def __init__(self, service: Service, worker: int, every_s: float = 0.5):
        super().__init__(every_s)
        self.service = service
        self.worker = str(worker)
        plans, cut = PIPELINE_COUNTERS
        self._plans = Gauge(plans, "PlanPipeline answers, by outcome (feasible, infeasible).",
                            ["outcome", WORKER_LABEL], registry=None, multiprocess_mode="livemax")
        self._cut = Gauge(cut, "PlanPipeline searches stopped at their limit (best plan found answered).",
                          [WORKER_LABEL], registry=None, multiprocess_mode="livemax")

    def export(self) -> None:
        """Copy the counts now."""
        counts = dict(self.service.pipelines.counts)
        for outcome in ("feasible", "infeasible"):
            self._plans.labels(outcome, self.worker).set(counts[outcome])
        self._cut.labels(self.worker).set(counts["searches_cut"])

