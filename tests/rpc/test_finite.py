"""Finite answers for every input, through a real gRPC server (port 0, real channel).

Every numeric field of a query (solo latency, attributes, signals, overlaps, remaining times,
deadline in ms, deadline time stamp, confidence) is drawn from anything a double or an int can
hold, NaN and infinities included. Every answer is then either an error naming a field
(INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED; never INTERNAL or UNKNOWN) or an OK response
all of whose numbers are finite. The issue's examples are explicit tests.

``-m slow`` runs 10,000 fuzzed queries (``test_no_ok_answer_is_ever_non_finite_heavy``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import grpc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from predictor.rpc.convert import NonFiniteAnswer, prediction_to_pb, require_finite
from predictor.rpc.errors import FIELD_KEY
from predictor.rpc.protos import load
from predictor.rpc.server import create_server, stop_server
from predictor.service import Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

pb2, pb2_grpc = load()
EXPECTED_ERRORS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.RESOURCE_EXHAUSTED}
HEAVY = 10_000
NOW = int(time.time())  # drawn time stamps lie around it (a strategy must draw the same way each time)


@pytest.fixture(scope="module")
def stub():
    service = Service(ServiceConfig(observation_log=False, max_candidates=16))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    for record in synthetic_records(300, seed=8):
        service.observe(record)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield pb2_grpc.InterferenceServiceStub(channel)
    channel.close()
    stop_server(server, service, grace=0.5)


def doubles(message, path: str = "") -> Iterator[tuple[str, float]]:
    """Every double (and float) field of a message, recursively, with its path."""
    for field, value in message.ListFields():
        name = f"{path}{field.name}"
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry = field.message_type.fields_by_name["value"]
            if entry.type in (entry.TYPE_DOUBLE, entry.TYPE_FLOAT):
                yield from ((f"{name}.{k}", v) for k, v in value.items())
        elif field.message_type is not None:
            for i, item in enumerate(value if repeated else [value]):
                yield from doubles(item, f"{name}[{i}]." if repeated else f"{name}.")
        elif field.type in (field.TYPE_DOUBLE, field.TYPE_FLOAT):
            yield from ((name, v) for v in (value if repeated else [value]))


# Anything a double can hold, weighted towards the edges the issue names; most fields get a
# plausible value (the largest valid magnitudes included), so that many answers come out OK.
wild = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 1e10, 1e9, 1e-300, 5e-324, 0.0, -0.0, math.nan, math.inf, -math.inf]),
)
plausible = st.one_of(st.floats(1e-6, 1.0), st.floats(1e-3, 1e4), st.sampled_from([1e9, 9.99e8, 1e-9, 1.0]))


def mostly(good, bad, one_in: int = 25):
    """``good``, and ``bad`` about once in ``one_in`` draws (``one_of`` would draw each half the time)."""
    return st.sampled_from([False] * (one_in - 1) + [True]).flatmap(lambda odd: bad if odd else good)


anything = mostly(plausible, wild)
numbers = st.dictionaries(st.sampled_from(["l2_util", "dram_util", "sm_util", "x"]), anything, max_size=3)


@st.composite
def co_runners(draw):
    runner = pb2.CoRunner(model=draw(st.sampled_from(["mlp", "bert", "new"])), batch_size=draw(st.integers(1, 64)),
                          attrs=draw(numbers))
    given = draw(st.sampled_from(["neither", "overlap", "remaining"] * 5 + ["both"]))
    if given in ("overlap", "both"):
        runner.overlap = draw(mostly(st.floats(0.0, 1.0), wild))
    if given in ("remaining", "both"):
        runner.remaining_ms = draw(anything)
    return runner


@st.composite
def queries(draw):
    query = pb2.BatchQuery(
        device=draw(st.sampled_from(["sim0", "sim1"])),
        device_kind="SimGPU",
        batch=pb2.Batch(model=draw(st.sampled_from(["bert", "mlp", "new"])), batch_size=draw(st.integers(1, 64)),
                        attrs=draw(numbers)),
        co_runners=draw(st.lists(co_runners(), max_size=4)),
        co_runner_source=draw(st.sampled_from([0, 1, 1, 1, 1, 2])),
        signals=draw(numbers),
    )
    solo = draw(mostly(st.one_of(st.none(), st.floats(1e-3, 1e9)), wild, 10))
    if solo is not None:
        query.solo_latency_ms = solo
    return query


@st.composite
def set_deadline(draw, request):
    if draw(st.booleans()):
        request.deadline_ms = draw(mostly(st.floats(1e-3, 1e9), wild))
    else:
        now = NOW
        request.deadline_time.seconds = draw(
            mostly(st.integers(now - 100, now + 1000), st.integers(-(2**62), 2**62), 10))
        request.deadline_time.nanos = draw(
            mostly(st.integers(0, 10**9 - 1), st.integers(-(2**31), 2**31 - 1), 10))
    return request


@st.composite
def requests(draw):
    which = draw(st.sampled_from(["PredictLatency", "CheckDeadline", "RankPlacements"]))
    confidence = draw(mostly(st.one_of(st.just(0.0), st.floats(0.5, 0.999)), wild, 10))
    if which == "PredictLatency":
        return which, pb2.PredictLatencyRequest(query=draw(queries()), confidence=confidence)
    if which == "CheckDeadline":
        return which, draw(set_deadline(pb2.CheckDeadlineRequest(query=draw(queries()), confidence=confidence)))
    request = pb2.RankPlacementsRequest(
        batch=pb2.Batch(model="bert", batch_size=draw(st.integers(1, 64)), attrs=draw(numbers)),
        candidates=[
            pb2.PlacementCandidate(device=q.device, device_kind=q.device_kind, co_runners=q.co_runners,
                                   co_runner_source=q.co_runner_source, signals=q.signals)
            for q in draw(st.lists(queries(), min_size=1, max_size=4))
        ],
        confidence=confidence,
    )
    solo = draw(mostly(st.one_of(st.none(), st.floats(1e-3, 1e9)), wild, 10))
    if solo is not None:
        request.solo_latency_ms = solo
    return which, draw(set_deadline(request))


def check_answer(stub, which: str, request) -> None:
    try:
        response = getattr(stub, which)(request, timeout=10)
    except grpc.RpcError as error:
        assert error.code() in EXPECTED_ERRORS, (error.code(), error.details(), request)
        assert dict(error.trailing_metadata() or ()).get(FIELD_KEY), error.details()
        event(f"{which}: {error.code().name} {dict(error.trailing_metadata() or ()).get(FIELD_KEY)}")
        return
    event(f"{which}: OK")
    bad = [(path, v) for path, v in doubles(response) if not math.isfinite(v)]
    assert not bad, (which, bad, request)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=requests())
def test_no_ok_answer_is_ever_non_finite(stub, case):
    check_answer(stub, *case)


@pytest.mark.slow
@settings(max_examples=HEAVY, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=requests())
def test_no_ok_answer_is_ever_non_finite_heavy(stub, case):
    check_answer(stub, *case)


# ------------------------------------------------------------------ the examples


def _error(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), dict(info.value.trailing_metadata() or ()).get(FIELD_KEY)


def _query(**fields) -> pb2.BatchQuery:
    return pb2.BatchQuery(device="sim0", batch=pb2.Batch(model="bert", batch_size=4),
                          co_runner_source=pb2.CO_RUNNER_SOURCE_EXPLICIT, **fields)


@pytest.mark.parametrize("solo", [1e308, 1e10])
def test_absurd_solo_latency_is_invalid_everywhere(stub, solo):
    """The issue: ``solo_latency_ms = 1e308`` gave an infinite bound and -inf slack with OK; 1e10 passed."""
    query = _query(solo_latency_ms=solo)
    assert _error(lambda: stub.PredictLatency(pb2.PredictLatencyRequest(query=query))) == (
        grpc.StatusCode.INVALID_ARGUMENT, "query.solo_latency_ms")
    assert _error(lambda: stub.CheckDeadline(pb2.CheckDeadlineRequest(query=query, deadline_ms=50.0))) == (
        grpc.StatusCode.INVALID_ARGUMENT, "query.solo_latency_ms")
    rank = pb2.RankPlacementsRequest(batch=pb2.Batch(model="bert", batch_size=4), deadline_ms=50.0,
                                     candidates=[pb2.PlacementCandidate(device="sim0")], solo_latency_ms=solo)
    code, field = _error(lambda: stub.RankPlacements(rank))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and field.endswith("solo_latency_ms")


def test_deadline_time_with_nanos_of_a_second_is_invalid(stub):
    """The issue: ``nanos = 1e9`` was accepted and yielded deadline_ms of about -1.8e12."""
    request = pb2.CheckDeadlineRequest(query=_query())
    request.deadline_time.seconds = int(time.time()) + 1
    request.deadline_time.nanos = 10**9
    assert _error(lambda: stub.CheckDeadline(request)) == (grpc.StatusCode.INVALID_ARGUMENT, "deadline_time.nanos")
    request.deadline_time.nanos = -1
    assert _error(lambda: stub.CheckDeadline(request)) == (grpc.StatusCode.INVALID_ARGUMENT, "deadline_time.nanos")
    request.deadline_time.nanos = 0
    request.deadline_time.seconds = 0  # 1970: not within a sane range of now
    assert _error(lambda: stub.CheckDeadline(request)) == (grpc.StatusCode.INVALID_ARGUMENT, "deadline_time.seconds")
    request.deadline_time.seconds = int(time.time()) + 1
    answer = stub.CheckDeadline(request)
    assert 0 < answer.deadline_ms <= 1000.0


@pytest.mark.parametrize(
    "request_, field",
    [
        (pb2.CheckDeadlineRequest(query=_query(), deadline_ms=1e10), "deadline_ms"),
        (pb2.PredictLatencyRequest(query=_query(co_runners=[pb2.CoRunner(model="m", batch_size=1, remaining_ms=1e300)])),
         "query.co_runners[0].remaining_ms"),
        (pb2.PredictLatencyRequest(query=_query(signals={"s": 1e300})), "query.signals.s"),
        (pb2.PredictLatencyRequest(query=_query(), confidence=math.nan), "confidence"),
    ],
)
def test_every_numeric_query_field_has_the_record_limits(stub, request_, field):
    method = type(request_).__name__.removesuffix("Request")
    assert _error(lambda: getattr(stub, method)(request_)) == (grpc.StatusCode.INVALID_ARGUMENT, field)


def test_last_guard_refuses_a_non_finite_answer():
    """Should a non-finite number reach the conversion, it is an error, never an OK answer."""
    from predictor.calibration.conformal import BoundSource
    from predictor.service.types import Prediction

    prediction = Prediction(5.0, 5.0, 1.0, math.inf, 0.99, BoundSource.FALLBACK, 0, "rls", 1, (), "k")
    with pytest.raises(NonFiniteAnswer):
        prediction_to_pb(prediction)
    with pytest.raises(NonFiniteAnswer):
        require_finite("x", 1.0, math.nan)
