"""The admission-information floor: what a learner reaches knowing only what a scheduler's question
knows before dispatch, and the answers before dispatch measured against it."""

from __future__ import annotations

import dataclasses

import pytest

from predictor.analysis.admission_replay import (
    admission_form,
    demo_questions,
    information_floor,
    partial_overlap_records,
    prequential_mape,
    replay,
    replay_demo,
)
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.service.config import ServiceConfig


def test_the_admission_form_keeps_only_what_the_question_knows():
    record = next(r for r in partial_overlap_records(200, seed=2) if r.co_runners and r.signals)
    form = admission_form(record)
    assert form.signals == {} and [c.overlap for c in form.co_runners] == [1.0] * len(record.co_runners)
    assert ([(c.model, c.batch_size, c.attrs) for c in form.co_runners]
            == [(c.model, c.batch_size, c.attrs) for c in record.co_runners])
    assert (form.batch, form.latency_ms, form.solo_latency_ms) == (record.batch, record.latency_ms, record.solo_latency_ms)


def test_answers_before_dispatch_are_near_the_floor_where_the_question_lacks_the_overlaps():
    records = partial_overlap_records(1500, seed=0)
    observed = prequential_mape(records, "rls")
    floor = information_floor(records, "rls")
    assert floor > 1.2 * observed  # not knowing the overlaps costs any learner
    admission = replay(records, "synthetic").total.mape
    assert admission <= 1.2 * floor


def _batch(model: str, start_s: float, latency_ms: float, solo_ms: float, beside: tuple = ()) -> Record:
    return Record("cpu0", BatchSpec(model, 1), latency_ms, device_kind="cpu", solo_latency_ms=solo_ms,
                  start_s=start_s, co_runners=tuple(CoRunner(m, 1, overlap=o) for m, o in beside))


def test_the_demo_questions_name_the_batch_running_beside_by_its_time_left():
    records = [_batch("a", 0.000, 10.0, 8.0, (("b", 0.8),)), _batch("b", 0.002, 12.0, 10.0, (("a", 0.7),)),
               _batch("c", 0.020, 5.0, 5.0)]
    events = demo_questions(records, lag_s=0.1)
    assert [(i, q is None) for i, q in events] == [(0, False), (1, False), (2, False), (0, True), (1, True), (2, True)]
    a, b, c = (q for _, q in events[:3])
    assert a.co_runners == () and c.co_runners == ()  # nothing ran when they started
    (beside,) = b.co_runners  # a, started 2 ms before with a solo latency of 8 ms: 6 ms left
    assert (beside.model, beside.overlap) == ("a", None) and beside.remaining_ms == pytest.approx(6.0)
    assert b.batch_id == "b1" and b.signals == {} and b.solo_latency_ms == 10.0


def test_a_demo_log_replays_as_the_demo_asked():
    records = [dataclasses.replace(r, device="cpu0", start_s=i * 0.004)
               for i, r in enumerate(partial_overlap_records(400, seed=3))]
    config = ServiceConfig(snapshot_every_s=0, observation_log=False, default_confidence=0.95)
    first, again = (replay_demo(records, config, warmup_s=0.4) for _ in range(2))
    assert first.records == 400 and first.answered == 300  # the first 0.4 s unscored
    assert first.total.mape == again.total.mape  # a function of the log alone
    assert 0.9 <= first.total.coverage(0.95) <= 1.0
