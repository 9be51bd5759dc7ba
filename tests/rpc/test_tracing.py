"""OpenTelemetry traces of every RPC (``predictor serve --trace``): real servers on port 0, spans
read back from OpenTelemetry's in-memory exporter."""

from __future__ import annotations

import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from predictor.rpc.client import InterferenceClient
from predictor.rpc.names import METHOD_PREFIX
from predictor.rpc.processes.options import ServeOptions
from predictor.rpc.processes.serve import serve
from predictor.rpc.protos import load
from predictor.rpc.server import create_server, stop_server
from predictor.rpc.tracing import Tracing, tracing_from_option
from predictor.service import Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

pb2, pb2_grpc = load()
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.fixture
def traced():
    exporter = InMemorySpanExporter()
    tracing = Tracing(exporter, batch=False)
    service = Service(ServiceConfig(snapshot_every_s=0))
    server, port = create_server("127.0.0.1:0", service, tracing=tracing.interceptor)
    server.start()
    service.open()
    yield exporter, f"127.0.0.1:{port}"
    stop_server(server, service, grace=0.1)
    tracing.shutdown()


def test_every_rpc_is_a_span_with_its_status_and_the_callers_trace(traced):
    exporter, target = traced
    records = synthetic_records(50, seed=3)
    with InterferenceClient(target) as client:
        client.wait_ready(10)
        assert client.report_observations(records).accepted == 50
    with grpc.insecure_channel(target) as channel:
        stub = pb2_grpc.InterferenceServiceStub(channel)
        query = pb2.BatchQuery(device=records[0].device, batch=pb2.Batch(model=records[0].batch.model, batch_size=1),
                               co_runner_source=pb2.CO_RUNNER_SOURCE_EXPLICIT)
        stub.PredictLatency(pb2.PredictLatencyRequest(query=query),
                            metadata=[("traceparent", f"00-{TRACE_ID}-{PARENT}-01")])
        with pytest.raises(grpc.RpcError) as refused:
            stub.PredictLatency(pb2.PredictLatencyRequest(query=query, confidence=2.0))
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    spans = {}
    for span in exporter.get_finished_spans():
        spans.setdefault(span.name, []).append(span)
    predict = spans[f"{METHOD_PREFIX}PredictLatency"]
    assert f"{METHOD_PREFIX}ReportObservations" in spans and len(predict) == 2
    continued = [s for s in predict if format(s.context.trace_id, "032x") == TRACE_ID]
    assert len(continued) == 1 and format(continued[0].parent.span_id, "016x") == PARENT
    assert continued[0].attributes["rpc.grpc.status_code"] == grpc.StatusCode.OK.value[0]
    failed = [s for s in predict if s is not continued[0]][0]
    # A caller's mistake is not a server error (OpenTelemetry's conventions): the code says it.
    assert failed.attributes["rpc.grpc.status_code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert failed.status.status_code is not StatusCode.ERROR
    assert all(s.resource.attributes["service.name"] == "interference-predictor" for s in predict)


def test_tracing_is_off_by_default_and_options_are_checked():
    assert ServeOptions().trace == "off" and tracing_from_option("off") is None
    with pytest.raises(ValueError, match="--trace must be one of"):
        tracing_from_option("jaeger")
    console = tracing_from_option("console")
    assert console is not None
    console.shutdown()


def test_serve_refuses_an_unknown_exporter_with_a_clear_error(capsys):
    assert serve(ServiceConfig(snapshot_every_s=0), ServeOptions(port=0, metrics_port=0, trace="jaeger")) == 2
    assert "--trace must be one of off, console, otlp" in capsys.readouterr().err
