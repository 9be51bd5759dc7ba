"""Prometheus metrics of the gRPC server: per-RPC counts and latencies, and the model's state.

* ``interference_rpc_requests_total{method, code}`` and
  ``interference_rpc_latency_seconds{method}`` come from a server interceptor
  (unary-response RPCs: every RPC of the service);
* ``interference_observations_learned_total``, ``..._rejected_total``,
  ``..._refused_total{reason}`` (outlier, rate_limit), ``..._duplicates_total``,
  ``interference_observation_log_sequence{position}`` (appended, synced, snapshot),
  ``interference_rolling_mape_percent{device_kind}``,
  ``interference_bound_coverage_ratio{device_kind}``,
  ``interference_drift_alarms_total{device_kind}``, ``interference_batches_running``,
  ``interference_ready``, ``interference_batches_queued``, ``interference_devices_saturated``,
  ``interference_pipeline_plans_total{outcome}``, ``interference_pipeline_searches_cut_total``,
  ``interference_transfer_correction_ratio{link}`` and ``interference_transfers_observed{link}``
  are read from the service at each scrape.

Each :class:`ServerMetrics` has its own registry, so several servers (tests)
live in one process.

The ``/metrics`` endpoint (:meth:`ServerMetrics.serve`) binds to ``127.0.0.1``
unless told otherwise, and can require a bearer token (``authorization: Bearer
<token>``, the tokens of the gRPC service, checked by
:meth:`~predictor.rpc.security.AuthPolicy.match`) with the ``metrics`` role:
without a valid one a scrape gets ``401``, with one lacking the role ``403``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import make_server

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler
from prometheus_client.registry import Collector

from predictor.rpc.names import method_name
from predictor.rpc.security import METRICS, AuthPolicy
from predictor.service.core import Service

LATENCY_BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.5, 1.0, 5.0)
PIPELINE_COUNTERS = ("interference_pipeline_plans", "interference_pipeline_searches_cut")
MIRRORED_COUNTERS = frozenset({
    "interference_observations_learned", "interference_observations_rejected", "interference_observations_refused",
    "interference_observations_duplicates", "interference_drift_alarms", "interference_transfers_observed",
    *PIPELINE_COUNTERS,
})
"""The counters of the service collector that ``--workers`` processes copy as gauges of the same name (the
learners, :class:`~predictor.rpc.model_gauges.ModelGauges`; the pipeline's, the workers,
:class:`~predictor.rpc.model_gauges.PipelineCounts`), which :class:`MultiProcessMetrics` sums over
processes into the counters a one-process server exports."""
PROCESS_LABELS = ("shard", "worker")


class _ServiceCollector(Collector):
    def __init__(self, service: Service):
        self.service = service

    def collect(self) -> Iterable[Metric]:
        status = self.service.status()
        learned = CounterMetricFamily("interference_observations_learned", "Observations learned.")
        learned.add_metric([], status.observations_learned)
        rejected = CounterMetricFamily("interference_observations_rejected", "Observations rejected.")
        rejected.add_metric([], status.observations_rejected)
        refused = CounterMetricFamily(
            "interference_observations_refused",
            "Observations refused by the robustness guards (also counted as rejected).",
            labels=["reason"],
        )
        refused.add_metric(["outlier"], status.observations_outliers)
        refused.add_metric(["rate_limit"], status.observations_rate_limited)
        duplicates = CounterMetricFamily(
            "interference_observations_duplicates",
            "Resent observations dropped as already learned (exactly-once learning).",
        )
        duplicates.add_metric([], status.observations_duplicates)
        log_position = GaugeMetricFamily(
            "interference_observation_log_sequence",
            "Observation log positions: last appended, last fsynced, last covered by a snapshot.",
            labels=["position"],
        )
        if status.log is not None:
            log_position.add_metric(["appended"], status.log.last_sequence)
            log_position.add_metric(["synced"], status.log.synced_sequence)
            log_position.add_metric(["snapshot"], status.log.snapshot_sequence)
        mape = GaugeMetricFamily(
            "interference_rolling_mape_percent", "Rolling prequential MAPE (%).", labels=["device_kind"]
        )
        coverage = GaugeMetricFamily(
            "interference_bound_coverage_ratio",
            f"Rolling fraction of latencies within their {status.coverage_confidence:g} upper bound.",
            labels=["device_kind"],
        )
        alarms = CounterMetricFamily(
            "interference_drift_alarms", "Drift alarms raised.", labels=["device_kind"]
        )
        for kind in status.device_kinds:
            if not math.isnan(kind.rolling_mape):
                mape.add_metric([kind.device_kind], kind.rolling_mape)
            if not math.isnan(kind.coverage):
                coverage.add_metric([kind.device_kind], kind.coverage)
            alarms.add_metric([kind.device_kind], kind.drift_alarms)
        running = GaugeMetricFamily("interference_batches_running", "Batches running in the live view.")
        running.add_metric([], status.batches_running)
        ready = GaugeMetricFamily("interference_ready", "1 when the service answers predictions.")
        ready.add_metric([], 1.0 if status.ready else 0.0)
        queued = GaugeMetricFamily("interference_batches_queued", "Batches reported queued (ReportBatchQueued).")
        saturated = GaugeMetricFamily(
            "interference_devices_saturated", "Devices whose queue utilisation (from rates) is >= 1."
        )
        books = self.service.state.queues.summary()
        queued.add_metric([], books["queued"])
        saturated.add_metric([], books["saturated"])
        correction = GaugeMetricFamily(
            "interference_transfer_correction_ratio",
            "Learned factor on the topology's nominal transfer time, per link class.", labels=["link"])
        transfers = CounterMetricFamily(
            "interference_transfers_observed", "Transfers observed (ReportBatchStart transfer_ms), per link class.",
            labels=["link"])
        for link, (factor, n) in self.service.state.transfers.corrections().items():
            correction.add_metric([link], factor)
            transfers.add_metric([link], n)
        plans = CounterMetricFamily(
            "interference_pipeline_plans", "PlanPipeline answers, by outcome (feasible, infeasible).", labels=["outcome"]
        )
        counts = dict(self.service.pipelines.counts)
        plans.add_metric(["feasible"], counts["feasible"])
        plans.add_metric(["infeasible"], counts["infeasible"])
        cut = CounterMetricFamily(
            "interference_pipeline_searches_cut", "PlanPipeline searches stopped at their limit (best plan found answered)."
        )
        cut.add_metric([], counts["searches_cut"])
        yield from (learned, rejected, refused, duplicates, log_position, mape, coverage, alarms, running, ready, queued,
                    saturated, correction, transfers, plans, cut)


def service_collector(service: Service) -> Collector:
    """The collector of ``service``'s counters and gauges, read at each ``collect()``."""
    return _ServiceCollector(service)


class MetricsEndpoint:
    """A ``/metrics`` HTTP endpoint of :attr:`registry` (see :meth:`serve`)."""

    registry: CollectorRegistry
    _http: Any = None

    def serve(self, port: int, host: str = "127.0.0.1", auth: AuthPolicy | None = None) -> int:
        """Serve ``/metrics`` over HTTP on ``host:port`` (0: any free port); returns the port.

        With ``auth`` (a policy with tokens), a scrape needs ``authorization: Bearer <token>``
        with one of its tokens holding the ``metrics`` role; otherwise it is answered ``401`` (no
        valid token) or ``403`` (a token without the role).
        """
        app = make_wsgi_app(self.registry)
        if auth is not None and auth.token_digests:
            app = _token_required(app, auth)
        server = make_server(host, port, app, ThreadingWSGIServer, handler_class=_SilentHandler)
        threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
        self._http = server
        return int(server.server_port)

    def stop(self) -> None:
        """Stop the ``/metrics`` HTTP server, if serving."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


class MultiProcessMetrics(MetricsEndpoint):
    """The RPC metrics of every process of ``predictor serve --workers N``, summed.

    prometheus-client's multiprocess mode: each process (workers and learners) started with
    ``PROMETHEUS_MULTIPROC_DIR`` set writes its counters and histograms to its own files in that
    folder; :class:`~prometheus_client.multiprocess.MultiProcessCollector` sums them at each
    scrape (the counts of a process that died stay in the sums).

    Parameters
    ----------
    folder
        The multiprocess folder (empty at start).
    """

    def __init__(self, folder: str):
        from prometheus_client.multiprocess import MultiProcessCollector

        self.registry = CollectorRegistry()
        self.registry.register(_Mirrored(MultiProcessCollector(None, path=folder)))
        self._http = None


class _Mirrored(Collector):
    """The families of ``collector``, the gauges copied from the service's counters
    (:data:`MIRRORED_COUNTERS`) summed over the processes' labels and exported as those counters."""

    def __init__(self, collector: Collector):
        self.collector = collector

    def collect(self) -> Iterable[Metric]:
        for family in self.collector.collect():
            if family.name not in MIRRORED_COUNTERS:
                yield family
                continue
            sums: dict[tuple[tuple[str, str], ...], float] = {}
            for sample in family.samples:
                labels = tuple((k, v) for k, v in sorted(sample.labels.items()) if k not in PROCESS_LABELS)
                sums[labels] = sums.get(labels, 0.0) + sample.value
            names = [k for k, _ in next(iter(sums))] if sums else []
            counter = CounterMetricFamily(family.name, family.documentation, labels=names)
            for labels, value in sums.items():
                counter.add_metric([v for _, v in labels], value)
            yield counter


class ServerMetrics(MetricsEndpoint):
    """Metrics of one server and its service.

    Parameters
    ----------
    service
        The service whose state is exported.
    registry
        Where the metrics live (default: a new registry).
    """

    def __init__(self, service: Service, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        self.requests = Counter(
            "interference_rpc_requests", "RPCs handled.", ["method", "code"], registry=self.registry
        )
        self.latency = Histogram(
            "interference_rpc_latency_seconds",
            "Time spent handling an RPC.",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_ServiceCollector(service))
        self._http = None

    def interceptor(self) -> grpc.ServerInterceptor:
        """A server interceptor counting and timing every RPC into these metrics."""
        return _MetricsInterceptor(self)

    def observe(self, method: str, code: grpc.StatusCode, seconds: float) -> None:
        """Count one RPC of ``method`` ending with ``code`` and record its handling time."""
        self.requests.labels(method, code.name).inc()
        self.latency.labels(method).observe(seconds)


def _token_required(app: Callable, policy: AuthPolicy) -> Callable:
    """``app`` behind a bearer-token check (constant time in the token, as for the RPCs)."""

    def checked(environ: dict, start_response: Callable) -> Iterable[bytes]:
        scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        name = policy.match(token.strip()) if scheme.lower() == "bearer" else None
        if name is None:
            start_response(
                "401 Unauthorized",
                [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="metrics"')],
            )
            return [b"metrics need 'authorization: Bearer <token>'\n"]
        if not policy.allows(f"token:{name}", METRICS):
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [f"token {name!r} is not allowed to scrape the metrics: it needs the '{METRICS}' role\n".encode()]
        return app(environ, start_response)

    return checked


class _MetricsInterceptor(grpc.ServerInterceptor):
    def __init__(self, metrics: ServerMetrics):
        self.metrics = metrics

    def intercept_service(self, continuation: Callable, handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        full = handler_call_details.method
        method = method_name(full) or full
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._timed(handler.unary_unary, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._timed(handler.stream_unary, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # streaming responses (health Watch, reflection) are not timed

    def _timed(self, behaviour: Callable, method: str) -> Callable:
        metrics = self.metrics

        def timed(request: Any, context: grpc.ServicerContext) -> Any:
            start = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                return behaviour(request, context)
            except Exception:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            finally:
                metrics.observe(method, code, time.perf_counter() - start)

        return timed
