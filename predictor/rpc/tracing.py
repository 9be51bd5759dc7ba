"""OpenTelemetry traces of every RPC, off by default (``predictor serve --trace console|otlp``).

With tracing on, the server's outermost interceptor is OpenTelemetry's own gRPC server
interceptor (``opentelemetry-instrumentation-grpc``): one span per call, named after the full
method (``/interference.v1.InterferenceService/PredictLatency``), with the status code and the
peer, and the caller's trace context taken from the request metadata (W3C ``traceparent``), so a
scheduler's trace continues into the service. Spans leave through a batching processor (never on
the calling thread) to the exporter chosen:

* ``console``: JSON spans on standard output (for a look, or a log collector);
* ``otlp``: an OpenTelemetry collector over OTLP/gRPC (``--trace-endpoint``, default
  ``localhost:4317``); needs ``opentelemetry-exporter-otlp-proto-grpc``, which is not installed
  by default: the error says so;
* ``off`` (the default): no interceptor, no import of OpenTelemetry, nothing per call.

Tests pass a span exporter object instead (an in-memory one) to read the spans back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on
    import grpc

EXPORTERS = ("off", "console", "otlp")
SERVICE_NAME = "interference-predictor"


def _exporter(kind: str, endpoint: str | None) -> Any:
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(service_name=SERVICE_NAME)
    if kind == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise ValueError("--trace otlp needs the package opentelemetry-exporter-otlp-proto-grpc "
                             "(pip install opentelemetry-exporter-otlp-proto-grpc)") from exc
        return OTLPSpanExporter(endpoint=endpoint or "localhost:4317", insecure=True)
    raise ValueError(f"--trace must be one of {', '.join(EXPORTERS)}, got {kind!r}")


class Tracing:
    """A tracer provider and the server interceptor that records into it.

    Parameters
    ----------
    exporter
        ``"console"``, ``"otlp"``, or a span exporter object (``SpanExporter``).
    endpoint
        Where ``otlp`` sends spans (``host:port``).
    batch
        Export through a batching processor (``False``: synchronously, as tests want).
    """

    def __init__(self, exporter: str | Any, endpoint: str | None = None, batch: bool = True):
        from opentelemetry.instrumentation.grpc import server_interceptor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        span_exporter = _exporter(exporter, endpoint) if isinstance(exporter, str) else exporter
        self.provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
        processor = BatchSpanProcessor if batch else SimpleSpanProcessor
        self.provider.add_span_processor(processor(span_exporter))
        self.interceptor: grpc.ServerInterceptor = server_interceptor(tracer_provider=self.provider)

    def shutdown(self) -> None:
        """Export what is pending and stop."""
        self.provider.shutdown()


def tracing_from_option(kind: str, endpoint: str | None = None) -> Tracing | None:
    """The :class:`Tracing` of ``--trace KIND`` (None for ``off``); ``ValueError`` naming the option."""
    if kind == "off":
        return None
    if kind not in EXPORTERS:
        raise ValueError(f"--trace must be one of {', '.join(EXPORTERS)}, got {kind!r}")
    return Tracing(kind, endpoint)
