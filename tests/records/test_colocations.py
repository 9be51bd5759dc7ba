"""What :class:`CoLocations` derives for every row: each co-runner's row (computed once, shared by
the rows at other overlaps, read-only) and the record a solo latency is looked up by (row ``i``'s
batch alone, which every predictor reads as it reads the row itself)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.predictors import create
from predictor.records.colocations import CoLocations
from predictor.records.record import BatchSpec
from predictor.service.synthetic import synthetic_records

runner = st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 8), st.just({}), st.floats(0.0, 1.0))


@settings(max_examples=50, deadline=None)
@given(rows=st.lists(st.lists(runner, max_size=4), min_size=1, max_size=12))
def test_each_co_runners_row_is_computed_once_and_cannot_be_written(rows):
    built = CoLocations.build(BatchSpec("m", 2), [f"d{i}" for i in range(len(rows))], rows)
    row_of = built.rows_of_runners()
    assert row_of.tolist() == [i for i, runners in enumerate(rows) for _ in runners]
    assert built.with_overlaps(built.overlaps * 0.5).rows_of_runners() is row_of  # the offsets are the same
    with pytest.raises(ValueError):
        row_of[:] = 0


RECORDS = synthetic_records(300, seed=2)


@pytest.mark.parametrize("spec", ["rls", "sgd", "tree", "forest", "ensemble", "ewma", "static", "solo"])
@pytest.mark.parametrize("given_solo", [None, 7.5])
@pytest.mark.parametrize("batch", [RECORDS[200].batch, BatchSpec("never-seen", 3)])
def test_a_rows_batch_alone_has_the_rows_solo_latency(spec, given_solo, batch):
    predictor = create(spec)
    for record in RECORDS[:200]:
        predictor.predict_learn_one(record)
    rows = CoLocations.from_records([dataclasses.replace(r, batch=batch, latency_ms=None, solo_latency_ms=given_solo)
                                     for r in RECORDS[200:230]])
    for i in range(len(rows)):
        alone = rows.alone(i)
        assert not alone.co_runners and not alone.signals
        assert predictor.solo_latency(alone) == predictor.solo_latency(rows.record(i))
        assert predictor.knows_solo(alone) == predictor.knows_solo(rows.record(i))
