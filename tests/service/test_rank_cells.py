"""A ranking's calibration cells found from indexed shapes (:class:`RowShapes`, integer codes) are
those found by looking each row's shape, kind and count up (the per-row path); the distinct codes
of its shapes, counted, are ``np.unique``'s."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.calibration.shapes import QueryShape
from predictor.records.colocations import CoLocations
from predictor.records.record import BatchSpec
from predictor.service.answering import _cells, _distinct_codes
from predictor.service.estimates.placements import RowShapes

SHAPES = [QueryShape.of(c, c, 0, signals=s) for c in range(3) for s in (False, True)]


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, len(SHAPES) - 1), st.sampled_from(["a", "b", "c"]),
                               st.integers(0, 12)), min_size=2, max_size=60))
def test_indexed_shapes_give_the_per_row_cells(rows):
    index = np.array([shape for shape, _, _ in rows])
    built = CoLocations.build(BatchSpec("m", 1), [f"d{i}" for i in range(len(rows))],
                              [[("x", 1, {}, 1.0)] * count for _, _, count in rows],
                              device_kinds=[kind for _, kind, _ in rows])
    shapes = RowShapes(SHAPES, index)
    assert [shapes[i] for i in range(len(rows))] == [SHAPES[i] for i in index.tolist()]
    indexed, looked_up = _cells(shapes, built), _cells(list(shapes), built)
    assert [(cell, at.tolist()) for cell, at in indexed] == [(cell, at.tolist()) for cell, at in looked_up]
    assert shapes.keys() == [SHAPES[i].key for i in index.tolist()]


@settings(max_examples=200, deadline=None)
@given(codes=st.lists(st.integers(0, 50), max_size=80) | st.lists(st.integers(0, 2**40), max_size=20))
def test_distinct_codes_are_uniques(codes):
    array = np.array(codes, dtype=np.int64)
    distinct, inverse = _distinct_codes(array)
    want, want_inverse = np.unique(array, return_inverse=True)
    assert distinct.tolist() == want.tolist()
    assert inverse.tolist() == want_inverse.reshape(-1).tolist()
