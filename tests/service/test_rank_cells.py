"""A ranking's calibration cells found from indexed shapes (:class:`RowShapes`, integer codes) are
those found by looking each row's shape, kind and count up (the per-row path); the shapes found
for its rows in one compiled pass are each row's own, indexed as ``np.unique`` numbers their codes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.calibration.shapes import QueryShape
from predictor.records.colocations import CoLocations
from predictor.records.record import BatchSpec
from predictor.service.answering import _cells, _shapes_of
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
@given(rows=st.lists(st.tuples(st.lists(st.sampled_from(["overlap", "remaining", "neither"]), max_size=9),
                               st.booleans()), min_size=1, max_size=60))
def test_row_shapes_are_each_rows_own_indexed_as_uniques(rows):
    offsets = np.concatenate([[0], np.cumsum([len(given) for given, _ in rows])]).astype(np.int64)
    flags = [flag for given, _ in rows for flag in given]
    has_overlap = np.array([flag == "overlap" for flag in flags], dtype=bool)
    has_remaining = np.array([flag == "remaining" for flag in flags], dtype=bool)
    signals = np.array([signal for _, signal in rows], dtype=bool)
    shapes = _shapes_of(offsets, has_overlap, has_remaining, signals)
    counts = [(len(given), given.count("overlap"), given.count("remaining"), signal) for given, signal in rows]
    assert [shapes[i] for i in range(len(rows))] == [QueryShape.of(n, o, r, signals=s) for n, o, r, s in counts]
    base = max(n for n, _, _, _ in counts) + 1
    codes = np.array([((n * base + o) * base + r) * 2 + s for n, o, r, s in counts], dtype=np.int64)
    assert shapes.index.tolist() == np.unique(codes, return_inverse=True)[1].reshape(-1).tolist()
