"""Fuzzing every RPC of a real server (port 0, real channel) with hypothesis.

Each example starts from a valid request and breaks it in one to three ways (NaN, infinities,
negative, zero and huge numbers, empty and over-long strings, too many map keys, co-runners or
candidates, contradictory fields), optionally with unknown fields appended to the wire bytes.
Every such request must fail with INVALID_ARGUMENT (or RESOURCE_EXHAUSTED, or NOT_FOUND for an
unknown device) whose ``invalid-field`` names one of the broken fields, never UNKNOWN or INTERNAL,
and must leave the model's state (the snapshot payload) and the observation log byte for byte as
they were. Undecodable bytes, oversized messages, streams cut short and cancelled streams too.

``-m slow`` runs the heavier variant (400 examples per RPC instead of 30).
"""

from __future__ import annotations

import logging
import math
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.rpc.errors import FIELD_KEY, decode_field
from predictor.rpc.names import METHOD_PREFIX
from predictor.rpc.protos import load
from predictor.rpc.server import create_server, stop_server
from predictor.service import Service, ServiceConfig
from predictor.service.synthetic import synthetic_records
from predictor.snapshot import dump_state
from tests.pickles import unshared

pb2, pb2_grpc = load()
PREFIX = METHOD_PREFIX
MAX_CANDIDATES = 20
MAX_STREAM = 40
MAX_MESSAGE = 64 * 1024
EXAMPLES = 30
HEAVY = 400
REJECTED = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.NOT_FOUND}

NOT_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
NOT_POSITIVE = NOT_FINITE | st.sampled_from([0.0, -0.0, -1.0, -1e-300, -1e308])
NOT_FRACTION = NOT_FINITE | st.sampled_from([-1e-9, -0.5, 1.0000001, 2.0, 1e308])
NOT_CONFIDENCE = NOT_FINITE | st.sampled_from([1.0, 1.5, -0.5, -1e308, 1e308])
NEGATIVE = NOT_FINITE | st.sampled_from([-1e-9, -1.0, -1e308])
BAD_SIZE = st.integers(min_value=-(2**31), max_value=0)
LONG = st.text(min_size=257, max_size=300)
BAD_NAME = st.just("") | LONG
KEY = st.text(min_size=1, max_size=8)


@dataclass
class Served:
    service: Service
    channel: grpc.Channel
    errors: list[logging.LogRecord]


class _Collect(logging.Handler):
    def __init__(self, sink: list[logging.LogRecord]):
        super().__init__(logging.ERROR)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    config = ServiceConfig(
        max_candidates=MAX_CANDIDATES, max_stream_records=MAX_STREAM, snapshot_every_s=0, fsync="never"
    )
    service = Service(config)
    server, port = create_server("127.0.0.1:0", service, max_message_bytes=MAX_MESSAGE)
    server.start()
    service.open(tmp_path_factory.mktemp("fuzz") / "state")
    for record in synthetic_records(300, seed=3):
        service.observe(record)
    errors: list[logging.LogRecord] = []
    handler = _Collect(errors)
    logging.getLogger().addHandler(handler)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield Served(service, channel, errors)
    logging.getLogger().removeHandler(handler)
    channel.close()
    stop_server(server, service, grace=0.2)


def fingerprint(service: Service) -> tuple:
    """What rejected input must not change: the model's state, the log, the live view."""
    log = service.obs_log
    return (
        service.state_payload(),
        log.last_seq if log else None,
        service.live.running_count(),
        service.observations_learned,
    )


# --------------------------------------------------------------------------- valid requests


def batch(model: str = "bert", size: int = 4) -> object:
    return pb2.Batch(model=model, batch_size=size, attrs={"l2_util": 0.5, "dram_util": 0.4})


def co_runner() -> object:
    return pb2.CoRunner(model="mlp", batch_size=2, attrs={"dram_util": 0.3}, overlap=0.5)


def query() -> object:
    return pb2.BatchQuery(
        device="sim0",
        device_kind="SimGPU",
        batch=batch(),
        co_runners=[co_runner()],
        co_runner_source=pb2.CO_RUNNER_SOURCE_EXPLICIT,
        signals={"sm_util": 0.5},
    )


def record() -> object:
    return pb2.Record(
        device="sim0",
        device_kind="SimGPU",
        batch=batch(),
        latency_ms=40.0,
        co_runners=[co_runner()],
        signals={"sm_util": 0.5},
        source="fuzz",
    )


# --------------------------------------------------------------------------- ways to break them
# Each breaker draws what it needs and returns the field path the error must name.

Breaker = Callable[[st.DataObject, object, str], str]


def _set(attr: str, values: st.SearchStrategy, path: str | None = None) -> Breaker:
    def brk(data: st.DataObject, message: object, prefix: str) -> str:
        setattr(message, attr, data.draw(values))
        return f"{prefix}{path or attr}"

    return brk


def _in_batch(attr: str, values: st.SearchStrategy) -> Breaker:
    def brk(data: st.DataObject, message: object, prefix: str) -> str:
        setattr(message.batch, attr, data.draw(values))
        return f"{prefix}batch.{attr}"

    return brk


def _map_value(
    getter: Callable[[object], object], path: str, values: st.SearchStrategy = NOT_FINITE
) -> Breaker:
    def brk(data: st.DataObject, message: object, prefix: str) -> str:
        mapping = getter(message)
        key = data.draw(KEY)
        mapping[key] = data.draw(values)
        return f"{prefix}{path}.{key}"

    return brk


def _too_many_keys(getter: Callable[[object], object], path: str) -> Breaker:
    def brk(data: st.DataObject, message: object, prefix: str) -> str:
        mapping = getter(message)
        for i in range(65):
            mapping[f"k{i}"] = 0.5
        return f"{prefix}{path}"

    return brk


def _long_key(getter: Callable[[object], object], path: str) -> Breaker:
    def brk(data: st.DataObject, message: object, prefix: str) -> str:
        key = data.draw(LONG)
        getter(message)[key] = 0.5
        return f"{prefix}{path}.{key}"

    return brk


def _runner(attr: str, values: st.SearchStrategy) -> Breaker:
    def brk(data: st.DataObject, message: object, prefix: str) -> str:
        runner = message.co_runners[0]
        setattr(runner, attr, data.draw(values))
        return f"{prefix}co_runners[0].{attr}"

    return brk


def _runner_both(data: st.DataObject, message: object, prefix: str) -> str:
    message.co_runners[0].overlap = 0.5
    message.co_runners[0].remaining_ms = 3.0
    return f"{prefix}co_runners[0]"


def _too_many_runners(data: st.DataObject, message: object, prefix: str) -> str:
    for _ in range(65):
        message.co_runners.append(co_runner())
    return f"{prefix}co_runners"


def _live_view_with_runners(data: st.DataObject, message: object, prefix: str) -> str:
    message.co_runner_source = pb2.CO_RUNNER_SOURCE_LIVE_VIEW
    return f"{prefix}co_runners"


def _unknown_device(data: st.DataObject, message: object, prefix: str) -> str:
    del message.co_runners[:]
    message.co_runner_source = pb2.CO_RUNNER_SOURCE_LIVE_VIEW
    message.device = "never-seen-" + data.draw(st.text(max_size=5))
    return f"{prefix}device"


_unknown_device.last = True  # type: ignore[attr-defined]  # it removes the co-runners others break


def placement_breakers(with_batch: bool, record_like: bool = False) -> list[Breaker]:
    """Ways to break a BatchQuery, a PlacementCandidate or a Record (fields at ``prefix``)."""
    out = [
        _set("device", BAD_NAME),
        _set("device_kind", LONG),
        _map_value(lambda m: m.signals, "signals"),
        _too_many_keys(lambda m: m.signals, "signals"),
        _long_key(lambda m: m.signals, "signals"),
        _runner("overlap", NOT_FRACTION),
        _runner("batch_size", BAD_SIZE),
        _runner("model", BAD_NAME),
        _too_many_runners,
        _map_value(lambda m: m.co_runners[0].attrs, "co_runners[0].attrs"),
    ]
    if not record_like:
        out += [_runner("remaining_ms", NEGATIVE), _runner_both, _live_view_with_runners, _unknown_device]
    if with_batch:
        out += [
            _in_batch("model", BAD_NAME),
            _in_batch("batch_size", BAD_SIZE),
            _map_value(lambda m: m.batch.attrs, "batch.attrs"),
            _too_many_keys(lambda m: m.batch.attrs, "batch.attrs"),
            _set("solo_latency_ms", NOT_POSITIVE),
        ]
    return out


QUERY_BREAKERS = placement_breakers(with_batch=True)
CANDIDATE_BREAKERS = placement_breakers(with_batch=False)
RECORD_BREAKERS = placement_breakers(with_batch=True, record_like=True) + [
    _set("latency_ms", NOT_POSITIVE),
    _set("start_s", NOT_FINITE),
    _set("schema", st.sampled_from(["coloc/v0", "x", "coloc/v2"])),
    _set("source", LONG),
    _runner("remaining_ms", st.floats(min_value=0, max_value=1e3)),
]


def _confidence(data: st.DataObject, message: object, prefix: str) -> str:
    message.confidence = data.draw(NOT_CONFIDENCE)
    return "confidence"


def _deadline_ms(data: st.DataObject, message: object, prefix: str) -> str:
    message.deadline_ms = data.draw(NOT_POSITIVE)
    return "deadline_ms"


def _no_deadline(data: st.DataObject, message: object, prefix: str) -> str:
    message.ClearField("deadline")
    return "deadline"


def _break(data: st.DataObject, message: object, breakers: list[Breaker], prefix: str) -> set[str]:
    chosen = data.draw(st.lists(st.sampled_from(breakers), min_size=1, max_size=3))
    chosen.sort(key=lambda brk: getattr(brk, "last", False))
    return {brk(data, message, prefix) for brk in chosen}


def unknown_fields(data: st.DataObject) -> bytes:
    """Wire bytes of fields no version of the contract defines (ignored, as proto3 requires)."""
    if not data.draw(st.booleans()):
        return b""
    number = data.draw(st.integers(min_value=1000, max_value=5000))
    tag = (number << 3) | 2
    payload = data.draw(st.binary(max_size=16))
    return _varint(tag) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


# --------------------------------------------------------------------------- calling


def unary(served: Served, method: str, payload: bytes) -> grpc.RpcError | None:
    call = served.channel.unary_unary(PREFIX + method)
    try:
        call(payload, timeout=10)
    except grpc.RpcError as exc:
        return exc
    return None


def field_of(error: grpc.RpcError) -> str:
    return decode_field(dict(error.trailing_metadata() or ()).get(FIELD_KEY, ""))


def names_a_broken_field(field: str, broken: set[str]) -> bool:
    return field in broken or any(field.startswith(b) or b.startswith(field + ".") for b in broken)


def check_rejected(served: Served, method: str, message: object, broken: set[str], extra: bytes) -> None:
    before = fingerprint(served.service)
    error = unary(served, method, message.SerializeToString() + extra)
    assert error is not None, f"{method} accepted a request broken at {broken}"
    assert error.code() in REJECTED, (error.code(), error.details())
    field = field_of(error)
    assert names_a_broken_field(field, broken), (field, broken, error.details())
    assert error.details().startswith(f"{field}: "), error.details()
    assert fingerprint(served.service) == before, f"state changed by a rejected {method}"
    assert not served.errors, [r.getMessage() for r in served.errors]


def fuzzed(examples: int) -> Callable:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# --------------------------------------------------------------------------- properties


def predict_latency(served: Served, data: st.DataObject) -> None:
    request = pb2.PredictLatencyRequest(query=query(), confidence=0.9)
    broken = _break(data, request.query, QUERY_BREAKERS, "query.")
    if data.draw(st.booleans()):
        broken.add(_confidence(data, request, ""))
    check_rejected(served, "PredictLatency", request, broken, unknown_fields(data))


def check_deadline(served: Served, data: st.DataObject) -> None:
    request = pb2.CheckDeadlineRequest(query=query(), deadline_ms=50.0)
    broken: set[str] = set()
    if data.draw(st.booleans()):
        broken |= _break(data, request.query, QUERY_BREAKERS, "query.")
    broken.add(data.draw(st.sampled_from([_deadline_ms, _no_deadline, _confidence]))(data, request, ""))
    check_rejected(served, "CheckDeadline", request, broken, unknown_fields(data))


def rank_placements(served: Served, data: st.DataObject) -> None:
    n = data.draw(st.integers(min_value=1, max_value=4))
    request = pb2.RankPlacementsRequest(
        batch=batch(),
        candidates=[
            pb2.PlacementCandidate(
                device=f"sim{i % 2}",
                device_kind="SimGPU",
                co_runners=[co_runner()],
                co_runner_source=pb2.CO_RUNNER_SOURCE_EXPLICIT,
            )
            for i in range(n)
        ],
        deadline_ms=50.0,
    )
    way = data.draw(st.sampled_from(["candidate", "batch", "count", "deadline"]))
    if way == "candidate":
        i = data.draw(st.integers(min_value=0, max_value=n - 1))
        broken = _break(data, request.candidates[i], CANDIDATE_BREAKERS, f"candidates[{i}].")
    elif way == "batch":
        breakers = [
            _in_batch("model", BAD_NAME),
            _in_batch("batch_size", BAD_SIZE),
            _map_value(lambda m: m.batch.attrs, "batch.attrs"),
            _set("solo_latency_ms", NOT_POSITIVE),
        ]
        broken = _break(data, request, breakers, "")
    elif way == "count":
        many = data.draw(st.sampled_from([0, MAX_CANDIDATES + 1, 3 * MAX_CANDIDATES]))
        del request.candidates[:]
        for i in range(many):
            request.candidates.add(device=f"sim{i}", co_runner_source=pb2.CO_RUNNER_SOURCE_EXPLICIT)
        broken = {"candidates"}
    else:
        broken = {data.draw(st.sampled_from([_deadline_ms, _no_deadline, _confidence]))(data, request, "")}
    check_rejected(served, "RankPlacements", request, broken, unknown_fields(data))


def report_observations(served: Served, data: st.DataObject) -> None:
    """A stream of broken records: each rejected naming its field, nothing learned, nothing logged."""
    n = data.draw(st.integers(min_value=1, max_value=6))
    requests, expected = [], []
    for _ in range(n):
        message = pb2.ReportObservationsRequest(record=record())
        broken = {"record." + b for b in _break(data, message.record, RECORD_BREAKERS, "")}
        if data.draw(st.integers(min_value=0, max_value=9)) == 0:
            message.batch_id = data.draw(LONG)
            broken.add("batch_id")
        if data.draw(st.integers(min_value=0, max_value=9)) == 0:
            message.ClearField("record")
            broken = {"record."}  # every required field is missing
        requests.append(message.SerializeToString() + unknown_fields(data))
        expected.append(broken)
    before = fingerprint(served.service)
    call = served.channel.stream_unary(PREFIX + "ReportObservations")
    response = pb2.ReportObservationsResponse.FromString(call(iter(requests), timeout=10))
    assert (response.accepted, response.rejected) == (0, n), response
    assert [r.index for r in response.rejections] == list(range(n))
    for rejection, broken in zip(response.rejections, expected, strict=True):
        assert names_a_broken_field(rejection.field, broken), (rejection, broken)
        assert rejection.reason
    assert fingerprint(served.service) == before
    assert not served.errors, [r.getMessage() for r in served.errors]


def report_batch_start(served: Served, data: st.DataObject) -> None:
    request = pb2.ReportBatchStartRequest(
        device="sim0", device_kind="SimGPU", batch_id="b-1", batch=batch(), elapsed_ms=1.0
    )
    breakers = [
        _set("device", BAD_NAME),
        _set("device_kind", LONG),
        _set("batch_id", BAD_NAME),
        _set("elapsed_ms", NEGATIVE),
        _in_batch("model", BAD_NAME),
        _in_batch("batch_size", BAD_SIZE),
        _map_value(lambda m: m.batch.attrs, "batch.attrs"),
    ]
    check_rejected(
        served, "ReportBatchStart", request, _break(data, request, breakers, ""), unknown_fields(data)
    )


def report_batch_end(served: Served, data: st.DataObject) -> None:
    request = pb2.ReportBatchEndRequest(device="sim0", batch_id="b-1")
    breakers = [_set("device", st.just("")), _set("batch_id", st.just("")), _unknown_device_end]
    check_rejected(
        served, "ReportBatchEnd", request, _break(data, request, breakers, ""), unknown_fields(data)
    )


def _unknown_device_end(data: st.DataObject, message: object, prefix: str) -> str:
    message.device = "never-seen-" + data.draw(st.text(min_size=1, max_size=5))
    return "device"


def get_status(served: Served, data: st.DataObject) -> None:
    """GetStatus has no fields: unknown ones are ignored, nothing changes."""
    before = fingerprint(served.service)
    extra = unknown_fields(data) or _varint((77 << 3) | 0) + _varint(data.draw(st.integers(0, 2**63)))
    assert unary(served, "GetStatus", extra) is None
    assert fingerprint(served.service) == before


def plan_pipeline(served: Served, data: st.DataObject) -> None:
    n_stages = data.draw(st.integers(min_value=1, max_value=3))
    n = data.draw(st.integers(min_value=1, max_value=3))
    request = pb2.PlanPipelineRequest(
        stages=[pb2.PipelineStage(name=f"s{i}", batch=batch()) for i in range(n_stages)],
        candidates=[
            pb2.PlacementCandidate(device=f"sim{i % 2}", device_kind="SimGPU", co_runners=[co_runner()],
                                   co_runner_source=pb2.CO_RUNNER_SOURCE_EXPLICIT)
            for i in range(n)
        ],
        deadline_ms=50.0,
    )
    way = data.draw(st.sampled_from(["candidate", "stage", "edge", "count", "price", "deadline"]))
    if way == "candidate":
        i = data.draw(st.integers(min_value=0, max_value=n - 1))
        broken = _break(data, request.candidates[i], CANDIDATE_BREAKERS, f"candidates[{i}].")
    elif way == "stage":
        i = data.draw(st.integers(min_value=0, max_value=n_stages - 1))
        breakers = [
            _in_batch("model", BAD_NAME),
            _in_batch("batch_size", BAD_SIZE),
            _map_value(lambda m: m.batch.attrs, "batch.attrs"),
            _set("solo_latency_ms", NOT_POSITIVE),
        ]
        broken = _break(data, request.stages[i], breakers, f"stages[{i}].")
    elif way == "edge":
        u = data.draw(st.integers(min_value=0, max_value=n_stages - 1))
        request.edges.add(from_stage=u, to_stage=data.draw(st.integers(min_value=n_stages, max_value=2**32 - 1)))
        broken = {"edges[0].to_stage"}
    elif way == "count":
        what = data.draw(st.sampled_from(["candidates", "stages"]))
        if what == "candidates":
            many = data.draw(st.sampled_from([0, MAX_CANDIDATES + 1]))
            del request.candidates[:]
            for i in range(many):
                request.candidates.add(device=f"sim{i}", co_runner_source=pb2.CO_RUNNER_SOURCE_EXPLICIT)
        else:
            many = data.draw(st.sampled_from([0, 65]))
            del request.stages[:]
            for _ in range(many):
                request.stages.add(batch=batch())
        broken = {what}
    elif way == "price":
        request.cost = pb2.PIPELINE_COST_PRICE
        request.price_per_s.extend([1.0] * (n - 1) + [data.draw(NEGATIVE)])
        broken = {"price_per_s", f"price_per_s[{n - 1}]"}
    else:
        broken = {data.draw(st.sampled_from([_deadline_ms, _no_deadline, _confidence]))(data, request, "")}
    check_rejected(served, "PlanPipeline", request, broken, unknown_fields(data))


PROPERTIES = {
    "PredictLatency": predict_latency,
    "CheckDeadline": check_deadline,
    "RankPlacements": rank_placements,
    "ReportObservations": report_observations,
    "ReportBatchStart": report_batch_start,
    "ReportBatchEnd": report_batch_end,
    "GetStatus": get_status,
    "PlanPipeline": plan_pipeline,
}


@pytest.mark.parametrize("method", list(PROPERTIES))
@fuzzed(EXAMPLES)
@given(data=st.data())
def test_fuzzed_requests_are_rejected_naming_the_field(served, method, data):
    PROPERTIES[method](served, data)


@pytest.mark.slow
@pytest.mark.parametrize("method", list(PROPERTIES))
@fuzzed(HEAVY)
@given(data=st.data())
def test_fuzzed_requests_heavy(served, method, data):
    PROPERTIES[method](served, data)


# --------------------------------------------------------------------------- wire-level abuse


@fuzzed(EXAMPLES)
@given(method=st.sampled_from(list(PROPERTIES)), cut=st.integers(min_value=1, max_value=60), data=st.data())
def test_undecodable_bytes_are_invalid_argument(served, method, cut, data):
    """Truncated messages, bad UTF-8 in strings, wrong wire types: INVALID_ARGUMENT, never INTERNAL."""
    valid = {
        "PredictLatency": pb2.PredictLatencyRequest(query=query()),
        "CheckDeadline": pb2.CheckDeadlineRequest(query=query(), deadline_ms=5.0),
        "RankPlacements": pb2.RankPlacementsRequest(batch=batch(), deadline_ms=5.0),
        "ReportObservations": pb2.ReportObservationsRequest(record=record()),
        "ReportBatchStart": pb2.ReportBatchStartRequest(device="sim0", batch_id="x", batch=batch()),
        "ReportBatchEnd": pb2.ReportBatchEndRequest(device="sim0", batch_id="x"),
        "GetStatus": pb2.GetStatusRequest(),
        "PlanPipeline": pb2.PlanPipelineRequest(stages=[pb2.PipelineStage(batch=batch())], deadline_ms=5.0),
    }[method].SerializeToString()
    way = data.draw(st.sampled_from(["truncate", "bad-utf8", "bad-tag"]))
    if way == "truncate":  # a message that ends in the middle of a field: its length runs past the end
        payload = valid + b"\x0a" + _varint(cut + 1 + data.draw(st.integers(0, 1000))) + b"x" * cut
    elif way == "bad-utf8" and method != "GetStatus":  # GetStatus has no string to break
        payload = b"\x0a\x03\x0a\x01\xff" if method != "ReportBatchEnd" else b"\x0a\x02\xc3\x28"
    else:
        payload = valid + b"\x07"  # wire type 7 does not exist
    before = fingerprint(served.service)
    if method == "ReportObservations":
        index = data.draw(st.integers(min_value=0, max_value=2))
        stream = [b"\x0a\x00"] * index + [payload]  # empty records before it: rejected, not learned
        call = served.channel.stream_unary(PREFIX + method)
        with pytest.raises(grpc.RpcError) as info:
            call(iter(stream), timeout=10)
        error = info.value
        assert field_of(error) == f"requests[{index}]"
    else:
        error = unary(served, method, payload)
        assert error is not None
        assert field_of(error) == "request"
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert "not a valid interference.v1." in error.details()
    assert fingerprint(served.service) == before
    assert not served.errors, [r.getMessage() for r in served.errors]


@pytest.mark.parametrize(
    "method", ["PredictLatency", "RankPlacements", "ReportBatchStart", "ReportObservations"]
)
def test_oversized_messages_are_resource_exhausted(served, method):
    huge = "x" * (MAX_MESSAGE + 1)
    message = {
        "PredictLatency": pb2.PredictLatencyRequest(query=pb2.BatchQuery(device=huge)),
        "RankPlacements": pb2.RankPlacementsRequest(batch=pb2.Batch(model=huge)),
        "ReportBatchStart": pb2.ReportBatchStartRequest(batch_id=huge),
        "ReportObservations": pb2.ReportObservationsRequest(record=pb2.Record(device=huge)),
    }[method]
    before = fingerprint(served.service)
    if method == "ReportObservations":
        with pytest.raises(grpc.RpcError) as info:
            served.channel.stream_unary(PREFIX + method)(iter([message.SerializeToString()]), timeout=10)
        error = info.value
    else:
        error = unary(served, method, message.SerializeToString())
    assert error is not None and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
    assert "larger than max" in error.details()
    assert fingerprint(served.service) == before


def test_a_stream_past_its_length_limit_is_resource_exhausted_naming_records(served):
    bad = pb2.ReportObservationsRequest(record=pb2.Record(device="sim0")).SerializeToString()
    before = fingerprint(served.service)
    with pytest.raises(grpc.RpcError) as info:
        served.channel.stream_unary(PREFIX + "ReportObservations")(iter([bad] * (MAX_STREAM + 5)), timeout=10)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert field_of(info.value) == "records"
    assert fingerprint(served.service) == before


def test_cancelled_and_cut_streams_leave_no_trace_of_bad_records(served):
    """A client that cancels mid-stream: the server carries on, nothing of the broken records is kept."""
    before = fingerprint(served.service)
    bad = pb2.ReportObservationsRequest(record=pb2.Record(device="sim0", batch=batch())).SerializeToString()

    def slow():
        for _ in range(5):
            yield bad
        time.sleep(2)  # the client gives up before this
        yield bad

    call = served.channel.stream_unary(PREFIX + "ReportObservations")
    future = call.future(slow(), timeout=10)
    time.sleep(0.15)
    future.cancel()
    with pytest.raises(grpc.FutureCancelledError):
        future.result()

    # a stream whose client stops sending without closing: the deadline ends it
    def hanging():
        yield bad
        time.sleep(1.0)

    with pytest.raises(grpc.RpcError) as info:
        call(hanging(), timeout=0.3)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    time.sleep(0.1)
    assert fingerprint(served.service) == before
    # and the server still answers
    assert unary(served, "GetStatus", b"") is None
    assert not served.errors, [r.getMessage() for r in served.errors]


ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [1e308, -1e308, 5e-324, 1e9, 1e10]
)


@fuzzed(EXAMPLES)
@given(data=st.data())
def test_any_numbers_in_observations_never_break_the_model(served, data):
    """Records with arbitrary floats everywhere: each learned or rejected naming its field; the stream is
    answered; predictions stay finite; and when every record was rejected, nothing changed."""
    messages = []
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        message = record()
        message.latency_ms = data.draw(ANY_FLOAT)
        if data.draw(st.booleans()):
            message.solo_latency_ms = data.draw(ANY_FLOAT)
        message.batch.attrs["l2_util"] = data.draw(ANY_FLOAT)
        message.signals["sm_util"] = data.draw(ANY_FLOAT)
        message.co_runners[0].attrs["dram_util"] = data.draw(ANY_FLOAT)
        message.co_runners[0].overlap = data.draw(ANY_FLOAT)
        messages.append(pb2.ReportObservationsRequest(record=message).SerializeToString())
    before, model_before = fingerprint(served.service), model_bytes(served.service)
    call = served.channel.stream_unary(PREFIX + "ReportObservations")
    response = pb2.ReportObservationsResponse.FromString(call(iter(messages), timeout=10))
    assert response.accepted + response.rejected == len(messages)
    assert all(r.field.startswith("record.") and r.reason for r in response.rejections)
    if response.accepted == 0 and response.outliers == 0:
        assert fingerprint(served.service) == before
    elif response.accepted == 0:  # refused as outliers: logged, and the gate saw them, but nothing learned
        assert fingerprint(served.service)[2:] == before[2:]
        assert model_bytes(served.service) == model_before
    answer = pb2.PredictLatencyResponse.FromString(
        unary_ok(served, "PredictLatency", pb2.PredictLatencyRequest(query=query()))
    ).prediction
    assert math.isfinite(answer.latency_ms) and 0 < answer.latency_ms < 1e6
    assert math.isfinite(answer.upper_bound_ms) and answer.upper_bound_ms >= answer.latency_ms
    assert not served.errors, [r.getMessage() for r in served.errors]


def model_bytes(service: Service) -> bytes:
    """The predictor, calibrator and monitor alone (not the outlier gates), each pickled on its own
    without pickle's memo (``Pickler.fast``), after a round trip through a pickle: their values, whatever
    objects they share. A refused record may restore the predictor from a pickle (an ``ensemble``), whose
    strings and tuples are then its own, not shared with other parts, and whose attribute names are
    interned: the same values, which a memo would write in another layout."""
    return b"".join(unshared(pickle.loads(dump_state(part)))
                    for part in (service.state.predictor, service.state.calibrator, service.state.monitor))


def unary_ok(served: Served, method: str, message: object) -> bytes:
    return served.channel.unary_unary(PREFIX + method)(message.SerializeToString(), timeout=10)
