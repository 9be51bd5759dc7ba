"""The benchmark's RPC-layer floor (:func:`experiments.bench.rpc_servers._canned_servicer`): the service's
server answering a recorded response for the named methods, the service for the others."""

from __future__ import annotations

import grpc
import pytest

from experiments.bench import bench_rpc
from experiments.bench.rpc_servers import _canned_servicer
from predictor.rpc.names import METHOD_PREFIX
from predictor.rpc.protos import pb2
from predictor.rpc.server import create_server, stop_server
from predictor.service import Service, ServiceConfig
from predictor.service.synthetic import synthetic_records


@pytest.fixture()
def service() -> Service:
    service = Service(ServiceConfig(predictor="rls"))
    service.open(None)
    for record in synthetic_records(200, seed=0, devices=bench_rpc.DEVICES):
        service.observe(record)
    return service


def test_named_methods_answer_the_recording_and_the_others_the_service(service: Service):
    requests = bench_rpc.build_requests(bench_rpc.Config(candidates=4, ingest_records=8, ingest_batch=4))
    messages = pb2()
    recorded = messages.PredictLatencyResponse(prediction=messages.Prediction(latency_ms=123.5, predictor="canned"))
    servicer = _canned_servicer(service, {"PredictLatency": ("PredictLatencyRequest", "PredictLatencyResponse",
                                                             recorded.SerializeToString())})
    server, port = create_server("127.0.0.1:0", service, servicer=servicer)
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            for payload in requests["PredictLatency"][:3]:
                answer = messages.PredictLatencyResponse.FromString(
                    channel.unary_unary(METHOD_PREFIX + "PredictLatency")(payload))
                assert answer == recorded
            # a method not recorded is the service's own answer
            check = messages.CheckDeadlineResponse.FromString(
                channel.unary_unary(METHOD_PREFIX + "CheckDeadline")(requests["CheckDeadline"][0]))
            assert check.prediction.predictor == "rls" and check.prediction.latency_ms > 0
            # the request is still decoded by the layer: bytes that are no request are refused
            with pytest.raises(grpc.RpcError) as refused:
                channel.unary_unary(METHOD_PREFIX + "PredictLatency")(b"\xff\xff\xff")
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    finally:
        stop_server(server, service, grace=0)
