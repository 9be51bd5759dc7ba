"""The admission-information floor: what a learner reaches knowing only what a scheduler's question
knows before dispatch, and the answers before dispatch measured against it."""

from __future__ import annotations

from predictor.analysis.admission_replay import (
    admission_form,
    information_floor,
    partial_overlap_records,
    prequential_mape,
    replay,
)


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
