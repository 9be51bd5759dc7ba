"""Ingest's admission-time replay of a block, planned per record (:mod:`predictor.service.replay_block`).

The block planner validates and fills a record's questions once and answers each alone; what it
answers must be exactly what planning every question as a query and predicting it alone gives
(:func:`~predictor.service.replay_block.replay_block_per_question`, as PredictLatency answers): the
same questions refused, the same shapes, the same latencies bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.records import rules
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.service import Service, ServiceConfig
from predictor.service.admission import admission_queries
from predictor.service.replay_block import replay_block, replay_block_per_question, replay_record, vouched
from predictor.service.synthetic import synthetic_records

LIMIT = 1e6  # the services' max_value: numbers beyond it are refused


@functools.cache
def _service(fill_missing: bool) -> Service:
    """A service that learned a few hundred records on devices d0, d1 (half with signals)."""
    service = Service(ServiceConfig(snapshot_every_s=0, observation_log=False, outlier_gate=False,
                                    fill_missing=fill_missing, max_value=LIMIT))
    service.open()
    warm = synthetic_records(300, seed=5, devices=("d0", "d1"))
    warm = [dataclasses.replace(r, signals={"busy": 0.1 * (i % 7)}) if i % 2 else r for i, r in enumerate(warm)]
    service.report_observations([(r, "") for r in warm])
    return service


_NAMES = ["resnet", "bert", "mlp", "never-seen"]
_attrs = st.sampled_from([{}, {"l2_util": 0.3, "dram_util": 0.2}, {"l2_util": 0.5, "dram_util": 0.4}])
_odd_attrs = st.sampled_from([
    {"l2_util": 1, "dram_util": 0.2},  # an integer: not vouched for; the parser takes it as 1.0
    {"l2_util": 5e6},  # beyond the magnitude limit: refused
    {"x" * (rules.MAX_NAME_LENGTH + 1): 0.1},  # a name too long: refused
    {"l2_util": float("nan")},  # not finite: refused
])


@st.composite
def _co_runner(draw: st.DrawFn, odd: bool) -> CoRunner:
    overlap = draw(st.floats(0.0, 1.0) | (st.sampled_from([1.5, -0.1, 1]) if odd else st.nothing()))
    return CoRunner(draw(st.sampled_from(_NAMES[:3])), draw(st.integers(1, 3)),
                    draw(_attrs | _odd_attrs if odd else _attrs), overlap)


@st.composite
def _record(draw: st.DrawFn) -> Record:
    odd = draw(st.integers(0, 5)) == 0  # one record in six has some field the rules refuse or convert
    solo = draw(st.sampled_from([None, 6.0, 10.0]) | (st.sampled_from([5e6, 8, -1.0]) if odd else st.nothing()))
    return Record(
        device=draw(st.sampled_from(["d0", "d1", "d2"])),
        batch=BatchSpec(draw(st.sampled_from(_NAMES)), draw(st.integers(1, 2)), draw(_attrs)),
        latency_ms=draw(st.floats(1.0, 50.0)),
        device_kind=draw(st.sampled_from(["SimGPU", "", "Other"])),
        solo_latency_ms=solo,
        co_runners=tuple(draw(st.lists(_co_runner(odd), max_size=3))),
        signals=draw(st.sampled_from([{}, {"busy": 0.4}])),
    )


def _bits(replayed: list[list[tuple]]) -> list[list[tuple[str, str]]]:
    return [[(shape.key, latency.hex()) for shape, latency in answers] for answers in replayed]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_record(), min_size=1, max_size=40), st.booleans())
def test_a_block_replays_exactly_as_every_question_planned_as_a_query(records, fill_missing):
    answering = _service(fill_missing).answers
    assert _bits(replay_block(answering, records)) == _bits(replay_block_per_question(answering, records))


def _plain(**changes) -> Record:
    record = Record(device="d0", batch=BatchSpec("bert", 2, {"l2_util": 0.5, "dram_util": 0.4}), latency_ms=20.0,
                    device_kind="SimGPU", solo_latency_ms=10.0, signals={"busy": 0.3},
                    co_runners=(CoRunner("mlp", 1, {"l2_util": 0.1}, 0.4), CoRunner("resnet", 2, {}, 0.7)))
    return dataclasses.replace(record, **changes)


def test_refused_questions_are_left_out_and_converted_fields_answered_as_typed():
    answering = _service(True).answers
    plain = _plain()
    bad_overlap = _plain(co_runners=(CoRunner("mlp", 1, {}, 1.5),))  # refused with its overlap, not without
    too_large = _plain(solo_latency_ms=5e6)  # every question refused
    integer = _plain(batch=BatchSpec("bert", 2, {"l2_util": 1, "dram_util": 0.4}))  # the parser's float
    as_float = _plain(batch=BatchSpec("bert", 2, {"l2_util": 1.0, "dram_util": 0.4}))
    assert vouched(plain, LIMIT) and vouched(as_float, LIMIT)
    assert not any(vouched(r, LIMIT) for r in (bad_overlap, too_large, integer))
    block = [plain, bad_overlap, too_large, integer, as_float]
    replayed = replay_block(answering, block)
    assert _bits(replayed) == _bits(replay_block_per_question(answering, block))
    assert [len(answers) for answers in replayed] == [2, 1, 0, 2, 2]
    assert len(admission_queries(bad_overlap)) == 2 and replayed[1][0][0].runners == "unknown"
    assert _bits(replayed[3:4]) == _bits(replayed[4:5])
    # a block of one record is the replay of that record
    assert _bits([replay_record(answering, plain)]) == _bits(replayed[:1])


def test_a_question_asked_again_in_a_block_is_answered_as_when_asked_alone():
    answering = _service(True).answers
    plain = _plain()
    # each differs from ``plain`` in one thing a group's answers depend on
    variants = [
        _plain(co_runners=(CoRunner("mlp", 1, {"l2_util": 0.1}, 0.9), CoRunner("resnet", 2, {}, 0.7))),
        _plain(co_runners=(CoRunner("mlp", 1, {"l2_util": 0.2}, 0.4), CoRunner("resnet", 2, {}, 0.7))),
        _plain(co_runners=(CoRunner("resnet", 2, {}, 0.7), CoRunner("mlp", 1, {"l2_util": 0.1}, 0.4))),
        _plain(batch=BatchSpec("bert", 2, {"dram_util": 0.4, "l2_util": 0.5})),
        _plain(solo_latency_ms=11.0), _plain(device="d1"), _plain(device_kind="Other"),
    ]
    block = [plain, *variants, plain, *variants, dataclasses.replace(plain, latency_ms=30.0)]
    replayed = replay_block(answering, block)
    assert _bits(replayed) == _bits(replay_block_per_question(answering, block))
    alone = _bits([replay_record(answering, r) for r in block])
    assert _bits(replayed) == alone
    differ = [i for i, a in enumerate(alone[1:len(variants) + 1]) if a != alone[0]]
    assert {0, 1, 4} <= set(differ), differ  # an overlap, a co-runner attribute, the solo latency: a variant answered as ``plain`` is seen
