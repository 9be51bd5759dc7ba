"""The ``tree`` learner's one-row path (row plans, packed walk) gives the dict path's numbers, bit for bit."""

from __future__ import annotations

import math
import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import learnable_records, records

from predictor.predictors import create
from predictor.records.colocations import CoLocations
from predictor.records.logio import read_records
from predictor.regressors.boosted import BoostedResidual, _RowPlan
from predictor.regressors.trees import PackedTrees, fit_trees
from predictor.testing import default_records

SMALL_TREE = "tree:first_fit=8,refit_every=8,swap_after=3,n_estimators=8,min_child_samples=2,background=False"


def same_bits(a: float, b: float) -> bool:
    """Identical float64 bit patterns (signed zeros and NaNs included)."""
    return np.float64(a).view(np.int64) == np.float64(b).view(np.int64)


def by_dicts(predictor, record) -> float:
    predictor._last = None  # no parts shared with the row path's call
    return predictor.predict_one_by_dicts(record)


def by_row(predictor, record) -> float:
    """The planned path: the first calls in a model version use the dicts (the version's first call,
    a layout's first sighting), the next makes the layout's plan and uses it."""
    answers = []
    for _ in range(3):
        predictor._last = None
        answers.append(predictor.predict_one(record))
    assert same_bits(answers[0], answers[1]) and same_bits(answers[1], answers[2])
    return answers[2]


def planned(model: BoostedResidual) -> int:
    """How many plans ``model`` holds now."""
    return sum(isinstance(plan, _RowPlan) for plan in (model._row_plans or {}).values())


@settings(max_examples=30, deadline=None)
@given(st.lists(learnable_records, min_size=1, max_size=40), st.lists(records, min_size=1, max_size=8),
       st.booleans(), st.booleans())
def test_row_path_equals_the_dict_path_while_learning(stream, queries, work, monotone):
    """Answers are the dict path's before the first fit, across refits and swaps (columns, codes and
    the corrector change: the plans are renewed), for unseen models, attributes and device kinds too."""
    predictor = create(SMALL_TREE + f",work={work},monotone={monotone}")
    for record in stream:
        for query in (*queries, record):
            assert same_bits(by_row(predictor, query), by_dicts(predictor, query))
        assert planned(predictor.regressor) > 0
        predictor.learn_one(record)
    assert predictor.regressor.trees is not None or len(stream) < 11  # first fit at 8, in place 3 later
    for query in (*queries, *stream[:5]):
        assert same_bits(by_row(predictor, query), by_dicts(predictor, query))


@settings(max_examples=15, deadline=None)
@given(st.lists(learnable_records, min_size=20, max_size=40), st.lists(records, min_size=1, max_size=5))
def test_batch_path_agrees_with_the_row_path(stream, queries):
    predictor = create(SMALL_TREE).fit(stream)
    for query in (*queries, *stream[:3]):
        rows = CoLocations.from_records([query, query])
        batch = predictor.predict_colocations(rows)
        one = by_row(predictor, query)
        np.testing.assert_allclose(batch, [one, one], rtol=1e-9)


def test_colliding_names_fall_back_to_the_dicts():
    """A numeric feature named like a category or its one-hot column: the dicts merge them, so does the row."""
    model = BoostedResidual(first_fit=10, refit_every=10, swap_after=2, n_estimators=5, background=False)
    rng = np.random.default_rng(0)
    for i in range(40):
        model.learn_parts({"a": float(rng.random()), "kind": float(i % 3), "kind=x": 1.0}, {"kind": "xy"[i % 2]},
                          float(rng.random()))
    for numeric, categories in (({"a": 0.3, "kind": 2.0}, {"kind": "x"}), ({"a": 0.3, "kind=x": 1.0}, {"kind": "x"}),
                                ({"a": 0.7}, {"kind": "y"}), ({"a": 0.7, "b": 9.0}, {"kind": "z"})):
        row = (tuple(numeric), np.array(list(numeric.values())), tuple(categories.items()))
        for _ in range(3):
            assert same_bits(model.predict_row(*row), model.predict_dicts(numeric, categories))
            assert same_bits(model.predict_parts(numeric, categories), model.predict_dicts(numeric, categories))
    assert planned(model) == 2  # the two rows without a colliding name


def test_predicting_leaves_the_pickled_state_unchanged():
    """The plans and the packed trees are caches: a prediction does not change a model's pickle."""
    predictor = create(SMALL_TREE)
    stream = default_records(60)
    predictor.fit(stream[:40])
    before = pickle.dumps(predictor)
    for record in stream[40:] * 3:
        predictor.predict_one(record)
    assert planned(predictor.regressor) > 0 and "packed" in predictor.regressor.trees.__dict__
    assert pickle.dumps(predictor) == before
    restored = pickle.loads(before)
    assert all(same_bits(restored.predict_one(r), predictor.predict_one(r)) for r in stream[40:])
    published = predictor.frozen()  # a deep copy: it keeps the packed trees (no packing anew per version)
    assert "packed" in published.regressor.trees.__dict__
    assert published.regressor.trees.packed is not predictor.regressor.trees.packed
    assert all(same_bits(published.predict_one(r), predictor.predict_one(r)) for r in stream[40:])


@pytest.mark.parametrize("seed", range(4))
def test_packed_walk_equals_the_node_walk(seed):
    rng = np.random.default_rng(seed)
    X = rng.random((400, 5))
    X[:, 4] = 0.0  # a constant column: trees of one leaf where nothing else is left to split
    y = np.sin(6 * X[:, 0]) + X[:, 1] * X[:, 2]
    trees = fit_trees(X, y if seed < 3 else np.full(400, 1.5), names=tuple("abcde"), n_estimators=41 + seed,
                      num_leaves=15)
    packed = trees.packed
    assert isinstance(packed, PackedTrees) and packed.nodes.dtype == np.int32
    queries = np.vstack([X[:50], rng.normal(size=(50, 5)) * 3, np.full((1, 5), np.nan)])
    for x in queries:
        assert same_bits(trees.predict_vector(x), trees.walk_nodes(x))
    assert all(same_bits(a, b) for a, b in zip(trees.predict_matrix(queries), map(trees.walk_nodes, queries),
                                               strict=True))
    assert math.isfinite(trees.predict_vector(queries[-1]))


def test_a_new_corrector_renews_the_plans():
    """After a swap the corrector is a new one whose columns may come in another order, the
    column counts unchanged: a plan made for the old one must not be used."""
    model = BoostedResidual(first_fit=10, refit_every=10, swap_after=2, n_estimators=3, background=False)
    rng = np.random.default_rng(1)
    for _ in range(9):
        model.learn_parts({"a": float(rng.random()), "b": float(rng.random())}, {}, float(rng.random()))
    row = (("a", "b"), np.array([0.25, 0.75]), ())
    for _ in range(3):  # the third call makes the plan (see by_row)
        assert same_bits(model.predict_row(*row), model.predict_dicts({"a": 0.25, "b": 0.75}, {}))
    assert planned(model) == 1
    for _ in range(3):  # the refit starts at the 10th, its trees and a new corrector come at the 12th
        a, b = rng.random(2)
        model.learn_parts({"b": float(b), "a": float(a)}, {}, float(3 * a - b))
    assert model.n_refits == 1 and list(model._corrector.index.columns) == ["b", "a"]
    for _ in range(3):
        assert same_bits(model.predict_row(*row), model.predict_dicts({"a": 0.25, "b": 0.75}, {}))


def test_row_path_equals_the_dict_path_on_recorded_data(default_dataset):
    """The embedded CPU records (many layouts, every feature kind): answers bit for bit the dict path's
    across refits and swaps while learning, each layout's plan made and used."""
    stream, _ = read_records(default_dataset)
    predictor = create("tree:first_fit=150,refit_every=150,swap_after=20,n_estimators=60,background=False")
    predictor.fit(stream[:300])
    made = 0
    for record in stream[300:700]:
        assert same_bits(by_row(predictor, record), by_dicts(predictor, record))
        made += planned(predictor.regressor)
        predictor.learn_one(record)
        assert planned(predictor.regressor) == 0  # an observation ends the model version: plans forgotten
    assert predictor.regressor.n_refits >= 3 and made == 400


feature_names = st.sampled_from(["a", "b", "c", "d", "e"])
rows = st.tuples(st.dictionaries(feature_names, st.one_of(st.just(0.0), st.floats(-5.0, 5.0)), max_size=5),
                 st.dictionaries(st.sampled_from(["kind", "model"]), st.sampled_from(["x", "y", "z"]), max_size=2))


def row_of(numeric: dict[str, float], categories: dict[str, str]) -> tuple:
    return tuple(numeric), np.array(list(numeric.values()), dtype=float), tuple(categories.items())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(rows, st.floats(-3.0, 3.0)), min_size=1, max_size=40), st.lists(rows, min_size=1, max_size=6))
def test_regressor_rows_equal_the_dicts_while_learning(stream, queries):
    """The regressor alone, over feature sets that come and go: columns seen only as 0 (no scale yet in
    the corrector: its masked division), unseen names and categories, refits and swaps, the mean
    before the first fit; ``predict_row`` and ``predict_parts`` give ``predict_dicts``' bits."""
    model = BoostedResidual(first_fit=6, refit_every=6, swap_after=2, n_estimators=4, min_child_samples=1,
                            background=False)
    for (numeric, categories), y in stream:
        for query in (*queries, (numeric, categories)):
            expected = model.predict_dicts(*query)
            for _ in range(3):  # the dicts, the layout seen, its plan
                assert same_bits(model.predict_row(*row_of(*query)), expected)
                assert same_bits(model.predict_parts(*query), expected)
        model.learn_parts(numeric, categories, y)


def test_a_column_without_a_scale_is_zero_in_the_planned_row():
    """A feature learned only as 0 has no scale in the corrector: the dict path's masked division puts 0
    there whatever the row's value; so does the plan (a divisor of 0)."""
    model = BoostedResidual(first_fit=8, refit_every=8, swap_after=1, n_estimators=3, background=False)
    rng = np.random.default_rng(2)
    for _ in range(12):
        model.learn_parts({"a": float(rng.random()), "zero": 0.0}, {}, float(rng.random()))
    assert not model._corrector._all_scaled
    numeric = {"a": 0.5, "zero": 7.0}
    for _ in range(3):
        assert same_bits(model.predict_parts(numeric, {}), model.predict_dicts(numeric, {}))
    (plan,) = (p for p in model._row_plans.values() if isinstance(p, _RowPlan))
    assert (plan.divisors == 0).sum() == 1


def test_a_category_coded_by_a_refused_observation_renews_the_plans():
    """An observation refused for its target still codes its new category: the model's answer for that
    category changes (it is no longer unseen), so plans made before must go."""
    model = BoostedResidual(first_fit=8, refit_every=8, swap_after=1, n_estimators=3, background=False)
    rng = np.random.default_rng(3)
    for i in range(12):
        model.learn_parts({"a": float(rng.random())}, {"kind": "xy"[i % 2]}, float(rng.random() + (i % 2)))
    numeric, categories = {"a": 0.5}, {"kind": "new"}
    for _ in range(3):
        assert same_bits(model.predict_parts(numeric, categories), model.predict_dicts(numeric, categories))
    assert planned(model) == 1
    with pytest.raises(ValueError, match="y"):
        model.learn_parts(numeric, categories, float("nan"))
    assert model._codes["kind"]["new"] == 2
    for _ in range(3):
        assert same_bits(model.predict_parts(numeric, categories), model.predict_dicts(numeric, categories))


def test_concurrent_planned_answers_stay_apart():
    """Threads answering different rows from the same plans at once (the walk releases the GIL) get
    each row's own answer: every call fills vectors of its own."""
    predictor = create(SMALL_TREE)
    stream = default_records(120)
    predictor.fit(stream[:80])
    model = predictor.regressor
    queries = [(tuple(numeric), np.fromiter(numeric.values(), dtype=float), tuple(categories.items()))
               for numeric, categories in (predictor.parts(r) for r in stream[80:])]
    expected = [model.predict_dicts(dict(zip(n, v.tolist(), strict=True)), dict(c)) for n, v, c in queries]
    for query in queries * 3:
        model.predict_row(*query)
    assert planned(model) > 0

    def answer(offset: int) -> bool:
        return all(same_bits(model.predict_row(*queries[(offset + i) % len(queries)]),
                             expected[(offset + i) % len(queries)]) for i in range(2000))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(answer, range(8)))


def test_a_row_of_the_wrong_length_is_refused():
    model = BoostedResidual(first_fit=8, refit_every=8, swap_after=1, n_estimators=3, background=False)
    for i in range(12):
        model.learn_parts({"a": float(i), "b": 1.0}, {}, float(i))
    for _ in range(3):  # the dicts, the layout seen, its plan: each refuses it
        with pytest.raises(ValueError, match="values"):
            model.predict_row(("a", "b"), np.array([1.0]), ())
        assert same_bits(model.predict_row(("a", "b"), np.array([1, 2]), ()), model.predict_dicts({"a": 1.0, "b": 2.0}, {}))
