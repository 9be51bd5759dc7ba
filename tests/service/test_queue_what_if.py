"""A query's what-if on its device's queue: the wait at a given arrival rate and service-time moments.

On a real server (port 0): the what-if's wait is the M/G/1 wait of its numbers (Pollaczek-Khinchine,
checked against the formula), a field left out is the learned value, utilisation >= 1 is answered
as the saturated queue, and every bad value is refused with INVALID_ARGUMENT naming its field while
the server goes on answering.
"""

from __future__ import annotations

import math

import grpc
import pytest

from predictor.records.record import BatchSpec
from predictor.rpc import convert
from predictor.rpc.client import InterferenceClient
from predictor.rpc.errors import FIELD_KEY
from predictor.rpc.server import create_server, stop_server
from predictor.service import CoRunnerSource, Query, Service, ServiceConfig
from predictor.service.live.queues import QueueWhatIf
from predictor.service.synthetic import synthetic_records

QUERY = Query("sim0", BatchSpec("bert", 4, {"l2_util": 0.5}), device_kind="SimGPU",
              co_runner_source=CoRunnerSource.EXPLICIT)


@pytest.fixture
def client():
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open()
    for record in synthetic_records(200, seed=1):
        service.observe(record)
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    with InterferenceClient(f"127.0.0.1:{port}") as client:
        yield client
    stop_server(server, service, grace=0.1)


def _pk_wait_ms(rate_per_s: float, mean_ms: float, sd_ms: float) -> float:
    rate = rate_per_s / 1000.0
    return rate * (sd_ms ** 2 + mean_ms ** 2) / (2 * (1 - rate * mean_ms))


def test_the_what_if_wait_is_the_mg1_wait_of_its_numbers(client):
    plain = client.predict(QUERY)
    assert plain.queue_wait_ms == 0.0  # nothing learned of the device's queue
    asked = client.predict(Query(**{**_fields(QUERY), "what_if": QueueWhatIf(50.0, 10.0, 5.0)}))
    assert asked.queue_wait_ms == pytest.approx(_pk_wait_ms(50.0, 10.0, 5.0))
    assert asked.queue_utilisation == pytest.approx(0.5)
    assert asked.completion_ms == pytest.approx(asked.queue_wait_ms + asked.latency_ms + asked.load_ms)
    exponential = client.predict(Query(**{**_fields(QUERY), "what_if": QueueWhatIf(50.0, 10.0)}))
    assert exponential.queue_wait_ms == pytest.approx(_pk_wait_ms(50.0, 10.0, 10.0))  # sd unset: that of M/M/1
    no_arrivals = client.predict(Query(**{**_fields(QUERY), "what_if": QueueWhatIf(0.0, 10.0)}))
    assert no_arrivals.queue_wait_ms == 0.0
    saturated = client.check_deadline(Query(**{**_fields(QUERY), "what_if": QueueWhatIf(100.0, 10.0)}), 50.0)
    assert saturated.prediction.queue_saturated and saturated.probability == 0.0 and not saturated.feasible
    assert math.isinf(saturated.prediction.queue_wait_ms)  # unset on the wire: no number given


def test_a_field_left_out_is_the_learned_value(client):
    for i in range(40):  # the device's rates learned from its reports (one batch at a time)
        client.batch_start("sim0", f"b{i}", BatchSpec("bert", 4), device_kind="SimGPU")
        client.batch_end("sim0", f"b{i}")
    learned = client.predict(QUERY)
    assert learned.queue_wait_ms is not None and learned.queue_utilisation is not None
    only_rate = client.predict(Query(**{**_fields(QUERY), "what_if": QueueWhatIf(arrival_rate_per_s=0.0)}))
    assert only_rate.queue_wait_ms == 0.0


def _fields(query: Query) -> dict:
    return {name: getattr(query, name) for name in query.__dataclass_fields__}


def test_every_bad_what_if_is_refused_naming_its_field_and_the_server_keeps_serving(client):
    pb2 = client._pb2
    cases = [
        ({"arrival_rate_per_s": -1.0}, "query.arrival_rate_per_s"),
        ({"arrival_rate_per_s": math.nan}, "query.arrival_rate_per_s"),
        ({"arrival_rate_per_s": math.inf}, "query.arrival_rate_per_s"),
        ({"service_mean_ms": 0.0, "arrival_rate_per_s": 1.0}, "query.service_mean_ms"),
        ({"service_mean_ms": math.nan, "arrival_rate_per_s": 1.0}, "query.service_mean_ms"),
        ({"service_sd_ms": -2.0, "service_mean_ms": 5.0, "arrival_rate_per_s": 1.0}, "query.service_sd_ms"),
        ({"service_mean_ms": 1e300, "arrival_rate_per_s": 1.0}, "query.service_mean_ms"),
        ({"arrival_rate_per_s": 10.0}, "query.service_mean_ms"),  # nothing learned in its place
        ({"service_mean_ms": 10.0}, "query.arrival_rate_per_s"),
    ]
    for fields, named in cases:
        message = convert.query_to_pb(QUERY)
        for name, value in fields.items():
            setattr(message, name, value)
        for call, request in ((client.stub.PredictLatency, pb2.PredictLatencyRequest(query=message)),
                              (client.stub.CheckDeadline, pb2.CheckDeadlineRequest(query=message, deadline_ms=50))):
            with pytest.raises(grpc.RpcError) as info:
                call(request, timeout=5)
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT, (fields, info.value.details())
            assert dict(info.value.trailing_metadata()).get(FIELD_KEY) == named
            assert info.value.details().startswith(f"{named}: ")
    assert client.predict(QUERY).latency_ms > 0 and client.status().ready
