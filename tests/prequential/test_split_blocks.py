"""The split replay's scored part predicted per block (:func:`predictor.prequential.blocks.predict_rows`)
answers what ``predict_one`` answers record by record, within rounding."""

from __future__ import annotations

import argparse
import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import records as any_records

from experiments.common import DEFAULT_DATASET
from predictor.cli.evaluate import score
from predictor.predictors import create
from predictor.prequential.blocks import predict_rows, prequential_blocks
from predictor.prequential.evaluation import run_split
from predictor.records.logio import iter_rows, read_records, write_records

SPECS = ["rls", "rls:features='fine'", "rls:features='coarse',log_target=False,non_negative=False",
         "rls:non_negative=False", "sgd"]


@pytest.fixture(scope="module")
def shipped():
    """The embedded dataset's records, and the same lines as decoded rows."""
    return read_records(DEFAULT_DATASET)[0], list(iter_rows(DEFAULT_DATASET))


@pytest.fixture(scope="module")
def learned(shipped):
    """Per spec, a predictor that learned the first 3,000 shipped records (in compiled blocks)."""
    records, _ = shipped
    out = {}
    for spec in SPECS:
        predictor = create(spec)
        prequential_blocks(predictor, records[:3000])
        out[spec] = predictor
    return out


@pytest.mark.parametrize("spec", SPECS)
def test_rows_predicted_per_block_as_record_by_record(shipped, learned, spec):
    records, rows = shipped
    predictor = learned[spec]
    expected = [predictor.predict_one(r) for r in records[3000:]]
    np.testing.assert_allclose(predict_rows(predictor, rows[3000:]), expected, rtol=1e-12)
    np.testing.assert_allclose(predict_rows(predictor, records[3000:]), expected, rtol=1e-12)
    assert predict_rows(predictor, []) == []


def test_a_predictor_that_learned_nothing_answers_its_solo_latencies(shipped):
    records, rows = shipped
    predictor = create("rls")
    assert predict_rows(predictor, rows[:50]) == [predictor.predict_one(r) for r in records[:50]]


@settings(max_examples=40, deadline=None)
@given(st.lists(any_records, max_size=12))
def test_any_records_predicted_as_record_by_record(learned, drawn):
    """Unknown names, overlaps of 0, large values and co-runner models the model never saw."""
    for spec in ("rls", "rls:features='fine'"):
        predictor = learned[spec]
        np.testing.assert_allclose(predict_rows(predictor, drawn), [predictor.predict_one(r) for r in drawn],
                                   rtol=1e-9)


@pytest.mark.parametrize("solo", [True, False], ids=["solo", "no-solo"])
@pytest.mark.parametrize("keep_learning", [False, True])
@pytest.mark.parametrize("spec", ["rls", "rls:features='fine'", "sgd", "ewma", "ensemble:experts='rls,sgd'"])
def test_split_replay_scores_what_run_split_scores(tmp_path, spec, keep_learning, solo):
    """``predictor replay LOG`` (the CLI's :func:`~predictor.cli.evaluate.score` over decoded rows): the
    scored part's predictions of :func:`~predictor.prequential.evaluation.run_split` over the records,
    also where records carry no solo latency (the training part's solo profile taken in first by both)."""
    path = tmp_path / "log.jsonl.gz"
    records = list(itertools.islice(read_records(DEFAULT_DATASET)[0], 4000))
    if not solo:
        records = [dataclasses.replace(r, solo_latency_ms=None) for r in records]
    write_records(path, records)
    args = argparse.Namespace(prequential=False, split=0.75, seed=0, keep_learning=keep_learning, serial=False)
    got = score(spec, list(iter_rows(path)), args, lambda _n: None)
    expected = run_split(create(spec), records, keep_learning=keep_learning)
    assert got.measured == expected.measured and len(got.measured) == 1000
    np.testing.assert_allclose(got.predicted, expected.predicted, rtol=1e-9)
