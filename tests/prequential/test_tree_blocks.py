"""The ``tree`` and ``ensemble`` replay (:mod:`predictor.prequential.tree_blocks`) equals ``run_prequential``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from experiments.common import DEFAULT_DATASET as DEFAULT_LOG
from predictor.predictors import create
from predictor.prequential.evaluation import run_prequential
from predictor.prequential.tree_blocks import prequential_tree_blocks, supports
from predictor.records.logio import iter_rows, read_records, write_records
from predictor.regressors.boosted import BoostedResidual, WindowAhead
from predictor.service.synthetic import fleet_records, synthetic_records

QUICK_TREE = "tree:first_fit=60,refit_every=150,swap_after=20,window=600,n_estimators=30"
"""Many refits and swaps in a short stream (each swap a point where the runs must stop)."""


def _shipped(n: int):
    records, _ = read_records(DEFAULT_LOG)
    return list(itertools.islice(records, n))


def _streams():
    return {"embedded": _shipped(1300), "synthetic": list(synthetic_records(500, seed=3)),
            "fleet": fleet_records(700, models=12, device_kinds=3, seed=2)}


def _tree_state(predictor) -> tuple:
    model = predictor.regressor
    corrector = model._corrector
    return (model._count, model.n_refits, model.n_refit_failures, model._next_refit, model._index.columns,
            model._codes, corrector.index.columns, corrector.n_updates, predictor.target_range,
            predictor.n_learned, predictor._slowdown_range)


def _assert_same_tree(fast, slow) -> None:
    assert _tree_state(fast) == _tree_state(slow)
    a, b = fast.regressor, slow.regressor
    np.testing.assert_array_equal(a._rows, b._rows)
    np.testing.assert_array_equal(a._targets, b._targets)
    np.testing.assert_allclose(a._mean, b._mean, rtol=1e-12)
    np.testing.assert_allclose(a._corrector._weights, b._corrector._weights, rtol=1e-9, atol=1e-12)
    if a.trees is not None:
        np.testing.assert_array_equal(a.trees.threshold, b.trees.threshold)
        np.testing.assert_array_equal(a.trees.value, b.trees.value)


@pytest.mark.parametrize("stream", ["embedded", "synthetic", "fleet"])
@pytest.mark.parametrize("spec", [QUICK_TREE, f"{QUICK_TREE},worker='thread'", f"{QUICK_TREE},background=False",
                                  f"{QUICK_TREE},swap_after=0"])
def test_tree_replay_equals_the_reference(spec, stream):
    records = _streams()[stream]
    fast, slow = create(spec), create(spec)
    assert supports(fast)
    got = prequential_tree_blocks(fast, records)
    expected = run_prequential(slow, records)
    assert fast.regressor.n_refits >= 3  # the stream crosses several swaps
    np.testing.assert_allclose(got.predicted, expected.predicted, rtol=1e-9)
    assert got.measured == expected.measured
    _assert_same_tree(fast, slow)
    # the learned models answer alike afterwards, and go on learning alike
    np.testing.assert_allclose([fast.predict_one(r) for r in records[-50:]],
                               [slow.predict_one(r) for r in records[-50:]], rtol=1e-9)
    more = list(synthetic_records(200, seed=9))
    np.testing.assert_allclose(run_prequential(fast, more).predicted, run_prequential(slow, more).predicted, rtol=1e-9)


def test_default_tree_and_ensemble_on_the_embedded_data_equal_the_reference():
    records = _shipped(2200)
    for spec in ("tree", "ensemble"):
        fast, slow = create(spec), create(spec)
        np.testing.assert_allclose(prequential_tree_blocks(fast, records).predicted,
                                   run_prequential(slow, records).predicted, rtol=1e-9)
    assert fast.weights == pytest.approx(slow.weights, rel=1e-9)
    assert fast._key_errors.keys() == slow._key_errors.keys()
    for key, errors in fast._key_errors.items():
        np.testing.assert_allclose(errors, slow._key_errors[key], rtol=1e-9)
    for a, b in zip(fast.expert_predictors, slow.expert_predictors, strict=True):
        np.testing.assert_allclose([a.predict_one(r) for r in records[-30:]],
                                   [b.predict_one(r) for r in records[-30:]], rtol=1e-9)


@pytest.mark.parametrize("experts", ["rls,sgd", "rls,tree,solo"])
def test_ensemble_replay_equals_the_reference(tmp_path, experts):
    """Each expert by its own fastest path (blockwise rls and sgd, the tree's runs, others record by record),
    then the weights: the same predictions; from decoded rows too; with the blocks learned on a second
    thread, the same to the bit."""

    def ensemble():
        made = create(f"ensemble:experts='{experts}'")
        if "tree" in experts:
            made._experts[1] = create(QUICK_TREE)  # (an expert's spec cannot hold a comma)
        return made

    records = _streams()["synthetic"] + _shipped(400)
    path = tmp_path / "log.jsonl.gz"
    write_records(path, records)
    fast, on_rows, slow, overlapped = ensemble(), ensemble(), ensemble(), ensemble()
    expected = run_prequential(slow, records).predicted
    got = prequential_tree_blocks(fast, records).predicted
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    np.testing.assert_allclose(prequential_tree_blocks(on_rows, iter_rows(path)).predicted, expected, rtol=1e-9)
    assert prequential_tree_blocks(overlapped, iter_rows(path), overlap=True).predicted == got
    assert overlapped.weights == fast.weights
    assert (fast.n_learned, fast._slowdown_range) == (slow.n_learned, slow._slowdown_range)
    assert fast.weights == pytest.approx(slow.weights, rel=1e-9)


def test_without_refits_ahead_the_same():
    records = _streams()["synthetic"]
    a, b = create(QUICK_TREE), create(QUICK_TREE)
    np.testing.assert_allclose(prequential_tree_blocks(a, records, refits_ahead=0).predicted,
                               prequential_tree_blocks(b, records, refits_ahead=3).predicted, rtol=1e-12)
    _assert_same_tree(a, b)


def test_a_refit_started_ahead_on_other_rows_is_not_taken():
    """A model that learns other observations than its window ahead saw starts its own refits: the same model
    as one that never had a window ahead."""
    rows = [({"size": float(i % 10)}, {"kind": "ab"[i % 2]}, 3.0 * (i % 10)) for i in range(90)]
    other = [({"size": float(i % 7)}, {"kind": "ab"[i % 3 == 0]}, 2.0 * (i % 7)) for i in range(90)]
    settings = {"refit_every": 20, "first_fit": 20, "swap_after": 5, "n_estimators": 10, "worker": "thread"}
    with_ahead, plain = BoostedResidual(**settings), BoostedResidual(**settings)
    ahead = WindowAhead(with_ahead)
    for numeric, categories, y in other[:45]:
        ahead.learn_parts(numeric, categories, y)
    assert ahead.pending == 2
    for numeric, categories, y in rows:
        with_ahead.learn_parts(numeric, categories, y)
        plain.learn_parts(numeric, categories, y)
    assert with_ahead.n_refits == plain.n_refits == 4
    np.testing.assert_array_equal(with_ahead.trees.value, plain.trees.value)
    assert ahead.pending == 0


def test_what_is_not_a_tree_or_an_ensemble_is_refused():
    assert not supports(create("rls"))
    with pytest.raises(ValueError, match="tree or an ensemble"):
        prequential_tree_blocks(create("rls"), [])
    with pytest.raises(ValueError, match="refits_ahead"):
        prequential_tree_blocks(create("tree"), [], refits_ahead=-1)


@pytest.mark.parametrize("threads", [False, True])
def test_refits_started_ahead_give_the_same_model(threads):
    """Refits started ahead (in the worker, or every other one in a thread) are taken at the model's own
    counts: the same trees and answers as refits started there."""
    rows = [({"size": float(i % 10), "other": float(i % 3)}, {"kind": "ab"[i % 2]}, 3.0 * (i % 10) + i % 3)
            for i in range(120)]
    settings = {"refit_every": 20, "first_fit": 20, "swap_after": 5, "n_estimators": 10}
    with_ahead, plain = BoostedResidual(**settings), BoostedResidual(**settings)
    ahead = WindowAhead(with_ahead, threads=threads)
    for i, (numeric, categories, y) in enumerate(rows):
        while ahead._shadow._count < min(i + 40, len(rows)):
            ahead.learn_parts(*rows[ahead._shadow._count])
        assert with_ahead.predict_parts(numeric, categories) == plain.predict_parts(numeric, categories)
        with_ahead.learn_parts(numeric, categories, y)
        plain.learn_parts(numeric, categories, y)
    assert with_ahead.n_refits == plain.n_refits == 5 and ahead.pending == 0  # each one taken (120: launched, not swapped)
    np.testing.assert_array_equal(with_ahead.trees.value, plain.trees.value)
