"""Rows made from plans (:class:`~predictor.regressors.rls_kernel.RowPlans`): the compiled run that
builds each row from its base values (:class:`~predictor.regressors.rls_kernel.PlannedRun`) learns
what the dense-row kernel learns from the same rows built in Python, to the bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.features.extract import RowLayout, interaction_values
from predictor.regressors import rls_kernel
from predictor.regressors.least_squares import RLS
from predictor.regressors.rls_kernel import PlannedRun, RowPlans, learn_rows_fits

COLUMNS = 12  # features of the model, besides the intercept


def _model(seed: int, non_negative: bool) -> RLS:
    """A model of ``COLUMNS`` named columns, each with its scale (a few rows learned by the reference)."""
    rng = np.random.default_rng(seed)
    model = RLS(0.998, 1.0, non_negative_contention=non_negative)
    names = [f"co:f{i}" if i % 2 else f"f{i}" for i in range(COLUMNS)]
    for _ in range(3):
        row = dict(zip(names, (rng.normal(size=COLUMNS) + 2.0).tolist(), strict=True))
        model.learn_vector(model.vectorize(row, grow=True), float(rng.normal()))
    assert (model._column_scale > 0).all()
    return model


@st.composite
def planned_rows(draw):
    """Plans over the model's columns and rows following them: (plans as layouts, their positions, the
    plan of each row, each row's base values)."""
    layouts, positions = [], []
    for _ in range(draw(st.integers(1, 4))):
        count = draw(st.integers(1, 5))
        products = draw(st.lists(st.tuples(st.integers(0, count - 1), st.integers(0, count - 1)), max_size=4))
        keys = draw(st.lists(st.integers(0, count - 1), max_size=3))
        width = count + len(products) + len(keys)
        columns = draw(st.permutations(range(1, COLUMNS + 1)))[: min(width, COLUMNS)]
        if len(columns) < width:  # more values than columns: some land on the same column (the last wins)
            columns = columns + draw(st.lists(st.sampled_from(columns), min_size=width - len(columns),
                                              max_size=width - len(columns)))
        left = np.array([a for a, _ in products], dtype=np.intp)
        right = np.array([b for _, b in products], dtype=np.intp)
        layouts.append(RowLayout(tuple(f"v{i}" for i in range(width)), np.array(keys, dtype=np.intp), left, right))
        positions.append(np.array(columns, dtype=np.int64))
    n = draw(st.integers(1, 60))
    plan_of_row = draw(st.lists(st.integers(0, len(layouts) - 1), min_size=n, max_size=n))
    values = st.floats(-5, 5, allow_nan=False) | st.just(0.0)
    bases = [draw(st.lists(values, min_size=len(layouts[p].names) - layouts[p].left.size - layouts[p].keys.size,
                           max_size=len(layouts[p].names) - layouts[p].left.size - layouts[p].keys.size))
             for p in plan_of_row]
    return layouts, positions, plan_of_row, bases


def _dense(model: RLS, layout: RowLayout, positions: np.ndarray, base: list[float]) -> np.ndarray:
    """The scaled row :meth:`RLS.vectorize` gives for the values of ``layout`` made from ``base``."""
    row = np.zeros(model._weights.size)
    row[0] = 1.0 / model._column_scale[0]
    row[positions] = interaction_values(layout, np.array(base)) / model._column_scale[positions]
    return row


@settings(max_examples=60, deadline=None)
@given(rows=planned_rows(), seed=st.integers(0, 2**16), non_negative=st.booleans(), split=st.integers(0, 60),
       mirrored=st.booleans())
def test_planned_rows_learn_what_the_same_dense_rows_learn(rows, seed, non_negative, split, mirrored):
    before = rls_kernel.MIRROR_FROM
    rls_kernel.MIRROR_FROM = 0 if mirrored else 1 << 30  # both ways of computing S x, whatever the width
    try:
        _learn_both(*rows, seed, non_negative, split)
    finally:
        rls_kernel.MIRROR_FROM = before


def _learn_both(layouts, positions, plan_of_row, bases, seed, non_negative, split):
    planned, dense = _model(seed, non_negative), _model(seed, non_negative)
    targets = np.random.default_rng(seed).normal(size=len(plan_of_row))
    expected = learn_rows_fits(dense, np.array([_dense(dense, layouts[p], positions[p], bases[t])
                                                for t, p in enumerate(plan_of_row)]), targets)
    plans = RowPlans()
    for layout, columns in zip(layouts, positions, strict=True):
        plans.add(columns, layout.left, layout.right, layout.keys)
    run = PlannedRun(planned)
    got = []
    for part in (slice(0, split), slice(split, None)):  # two blocks: the state carried from one to the next
        block = run.block(plans, np.array(plan_of_row[part], dtype=np.int64),
                          np.array([v for b in bases[part] for v in b], dtype=float), targets[part])
        block.compute()
        got.append((block.predictions, block.fits))
    run.finish()
    np.testing.assert_array_equal(np.concatenate([g[0] for g in got]), expected[0])
    np.testing.assert_array_equal(np.concatenate([g[1] for g in got]), expected[1])
    np.testing.assert_array_equal(planned._weights, dense._weights)
    np.testing.assert_array_equal(np.triu(planned._s), np.triu(dense._s))
    assert (planned.n_updates, planned.n_refused, planned._scale) == (dense.n_updates, dense.n_refused, dense._scale)


def test_row_plans_grow_in_place_and_a_block_keeps_the_plans_it_was_made_with():
    plans = RowPlans()
    first = plans.add(np.array([3, 1]), np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp), np.array([0]))
    held = plans.arrays()
    for i in range(200):  # past the first capacity: the buffers are reallocated
        assert plans.add(np.array([1 + i % 5, 2, 3]), np.array([0]), np.array([1]), np.zeros(0, dtype=np.intp)) == i + 1
    positions, position_offsets, left, right, product_offsets, keys, copy_offsets = plans.arrays()
    assert len(plans) == 201 and position_offsets.size == 202
    assert positions[position_offsets[0]:position_offsets[1]].tolist() == [3, 1] and first == 0
    assert held[0][:2].tolist() == [3, 1] and held[1].tolist() == [0, 2]  # what a block in flight reads
    assert positions[position_offsets[150]:position_offsets[151]].tolist() == [1 + 149 % 5, 2, 3]
    assert (left[product_offsets[150]], right[product_offsets[150]]) == (0, 1)
    assert copy_offsets[150] == copy_offsets[151] == 1 and keys[0] == 0
    assert plans.base_values(np.array([0, 150, 150]), 10) == 1 + 2 + 2


@pytest.mark.parametrize(("positions", "left", "right", "keys", "message"), [
    ([1, 2], [0], [], [], "cannot hold"),
    ([1], [0], [0], [], "left must index the plan.s 0 base values"),
    ([1, 2, 3], [0], [2], [], "right must index"),
    ([1, 2], [], [], [5], "keys must index"),
    ([0, 2], [], [], [], "from 1 on"),
])
def test_a_plan_that_does_not_add_up_is_refused(positions, left, right, keys, message):
    with pytest.raises(ValueError, match=message):
        RowPlans().add(*(np.array(a, dtype=np.int64) for a in (positions, left, right, keys)))


def test_a_block_that_does_not_fit_its_plans_or_its_model_is_refused():
    model = _model(0, False)
    plans = RowPlans()
    plans.add(np.array([1, 2]), np.array([0]), np.array([0]), np.zeros(0, dtype=np.intp))
    plans.add(np.array([COLUMNS + 1, COLUMNS + 5]), np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp),
              np.zeros(0, dtype=np.intp))
    run = PlannedRun(model)
    with pytest.raises(ValueError, match="one of the 2 plans"):
        run.block(plans, np.array([2]), np.array([1.0]), np.array([0.0]))
    with pytest.raises(ValueError, match="take 2 base values, got 1"):
        run.block(plans, np.array([0, 0]), np.array([1.0]), np.array([0.0, 0.0]))
    with pytest.raises(ValueError, match="past the model's 13 columns"):
        run.block(plans, np.array([1]), np.array([1.0, 2.0]), np.array([0.0]))
    with pytest.raises(ValueError, match="2 rows' plans for 1 targets"):
        run.block(plans, np.array([0, 0]), np.array([1.0, 2.0]), np.array([0.0]))
    before = model._weights.copy()
    run.finish()
    np.testing.assert_array_equal(model._weights, before)  # nothing learned
    with pytest.raises(RuntimeError, match="finished"):
        run.block(plans, np.array([0]), np.array([1.0]), np.array([0.0]))
