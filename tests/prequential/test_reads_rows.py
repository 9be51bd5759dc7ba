"""A predictor that reads decoded rows (``reads_rows``) learns and answers them as it does the
records of the same lines, to the bit, so a replay builds no record per line for it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import learnable_records

from experiments.common import DEFAULT_DATASET
from predictor.predictors import create
from predictor.predictors.registry import BUILT_IN, predictor_class
from predictor.prequential.evaluation import read_by, run_prequential, run_split
from predictor.records.logio import iter_rows
from predictor.records.record import record_to_dict
from predictor.records.typed_decoding import ColocRow, decode_row, record_of

SPECS = ["solo", "static", "static:non_negative=False", "static:fit_after=5", "ewma", "ewma:fit_after=5",
         "rls", "rls:split_by='model'", "rls:split_by='device_kind'", "rls:clip=3.0", "rls:drift_reset=0.5",
         "rls:features='coarse'", "sgd", "sgd:l2=0.001"]


@pytest.fixture(scope="module")
def shipped_rows():
    """The first 2,500 lines of the embedded dataset, decoded as rows."""
    return [row for row, _ in zip(iter_rows(DEFAULT_DATASET), range(2500), strict=False)]


def test_every_built_in_that_reads_rows_is_checked_here():
    reading = {name for name in BUILT_IN if predictor_class(name).reads_rows}
    assert reading == {spec.split(":")[0] for spec in SPECS}
    assert not predictor_class("tree").reads_rows and not predictor_class("ensemble").reads_rows


@pytest.mark.parametrize("spec", SPECS)
def test_rows_replay_as_their_records(spec, shipped_rows):
    records = [record_of(row) for row in shipped_rows]
    assert all(isinstance(row, ColocRow) for row in shipped_rows)
    by_rows, by_records = create(spec), create(spec)
    assert run_prequential(by_rows, shipped_rows).predicted == run_prequential(by_records, records).predicted
    probes = records[::97]
    assert [by_rows.predict_one(r) for r in probes] == [by_records.predict_one(r) for r in probes]
    split_rows = run_split(create(spec), shipped_rows, split=0.6)
    assert split_rows.predicted == run_split(create(spec), records, split=0.6).predicted


@settings(max_examples=25, deadline=None)
@given(st.lists(learnable_records, min_size=1, max_size=60), st.sampled_from(SPECS))
def test_any_rows_replay_as_their_records(records, spec):
    rows = [decode_row(json.dumps(record_to_dict(r))) for r in records]
    assert all(isinstance(row, ColocRow) for row in rows)
    as_records = [record_of(row) for row in rows]
    assert (run_prequential(create(spec), rows).predicted
            == run_prequential(create(spec), as_records).predicted)


def test_read_by_gives_records_to_a_predictor_that_reads_none(shipped_rows):
    rows = shipped_rows[:5]
    assert list(read_by(create("rls"), rows)) == rows
    made = list(read_by(create("tree"), rows))
    assert made == [record_of(row) for row in rows] and not any(isinstance(r, ColocRow) for r in made)
