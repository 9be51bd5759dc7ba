"""The ``tree`` learner (boosted trees + RLS corrector) and the per-key Hedge ``ensemble``."""

from __future__ import annotations

import math
import os
import pickle
import signal
import subprocess
import sys

import numpy as np
import pytest

from predictor.predictors import create
from predictor.predictors.tree import work_columns, work_features
from predictor.records.colocations import CoLocations
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.regressors import refit_worker
from predictor.regressors.boosted import BoostedResidual
from predictor.regressors.trees import fit_trees
from predictor.snapshot import restore_predictor, snapshot_predictor
from predictor.testing import CHECKS, check_predictor, default_records

SMALL_TREE = "tree:first_fit=8,refit_every=8,swap_after=3,n_estimators=8,min_child_samples=2"


@pytest.mark.parametrize("spec", [SMALL_TREE, SMALL_TREE + ",background=False,monotone=False",
                                  "ensemble:split_by='device_kind'", "ensemble:split_by=None"])
def test_check_predictor(spec):
    check_predictor(lambda: create(spec), default_records(80))


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_the_trees_are_in_use_during_the_checks(check):
    # the small spec refits several times on 80 records: the checks see trees, not the fallback mean
    predictor = create(SMALL_TREE)
    check(predictor, default_records(80))


def test_small_tree_fits_within_the_checks():
    predictor = create(SMALL_TREE)
    predictor.fit(default_records(80))
    assert predictor.regressor.n_refits >= 5 and predictor.regressor.trees is not None


def test_walk_equals_lightgbm():
    rng = np.random.default_rng(1)
    X = rng.random((800, 6))
    y = np.sin(3 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.05 * rng.normal(size=800)
    trees, booster = fit_trees(X, y, names=tuple("abcdef"), n_estimators=60, return_booster=True)
    np.testing.assert_array_equal(trees.predict_matrix(X), booster.predict(X))
    assert all(trees.predict_vector(X[i]) == booster.predict(X[i : i + 1])[0] for i in range(50))


def test_monotone_constraint_holds():
    rng = np.random.default_rng(2)
    X = rng.random((1000, 2))
    y = -2.0 * X[:, 1] + 0.5 * X[:, 0] + 0.3 * rng.normal(size=1000)  # decreasing in column 1 in the data
    trees = fit_trees(X, y, names=("own", "co:x"), monotone=[0, 1], n_estimators=40)
    grid = np.linspace(0, 1, 50)
    for own in (0.1, 0.5, 0.9):
        values = trees.predict_matrix(np.column_stack([np.full(50, own), grid]))
        assert np.all(np.diff(values) >= -1e-12)


def _pairs(n, seed=0):
    rng = np.random.default_rng(seed)
    records = []
    for _ in range(n):
        seq = float(rng.integers(16, 512))
        co = float(rng.random())
        latency = 0.02 * seq ** 1.3 * (1 + 0.8 * co) * math.exp(0.02 * rng.normal())
        records.append(Record("d0", BatchSpec("bert", 4, {"seq": seq}), latency,
                              co_runners=(CoRunner("gpt2", 2, {"seq": 64.0}, overlap=co),)))
    return records


@pytest.mark.parametrize("worker", ["process", "thread"])
def test_a_refit_never_blocks_a_prediction_and_the_swap_is_deterministic(worker):
    records = _pairs(700)
    first = create(f"tree:first_fit=300,refit_every=300,swap_after=100,worker='{worker}'")
    second = create("tree:first_fit=300,refit_every=300,swap_after=100,background=False")
    for r in records[:350]:
        first.learn_one(r)
        second.learn_one(r)
    assert first.regressor.refit_pending  # launched at 300, swaps at 400
    first.predict_one(records[400])  # answers meanwhile (from the old model)
    for r in records[350:]:
        first.learn_one(r)
        second.learn_one(r)
    assert first.predict_many(records[:50]) == second.predict_many(records[:50])
    assert first.regressor.n_refits == 2
    _assert_same_trees(first.regressor.trees, second.regressor.trees)


def _assert_same_trees(a, b):
    assert a is not None and b is not None and a.names == b.names
    for field in ("feature", "threshold", "left", "right", "value", "roots"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_the_worker_process_fits_the_trees_a_thread_fits():
    names, X, y = ("a", "b", "co:c"), *_regression(1500)
    here = fit_trees(X, y, names=names, monotone=[0, 0, 1], n_estimators=80)
    there = refit_worker.submit(fit_trees, X, y, names=names, monotone=[0, 0, 1], n_estimators=80).result()
    assert refit_worker.worker_pids() and os.getpid() not in refit_worker.worker_pids()
    _assert_same_trees(here, there)


def _regression(n, seed=6):
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    return X, np.sin(4 * X[:, 0]) * X[:, 1] + X[:, 2] + 0.05 * rng.normal(size=n)


def test_a_dying_refit_worker_is_replaced_and_the_refit_redone():
    records = _pairs(1000, seed=7)
    spec = "tree:first_fit=300,refit_every=300,swap_after=100,n_estimators=300"
    model, reference = create(spec), create(spec + ",background=False")
    for r in records[:300]:
        model.learn_one(r)
        reference.learn_one(r)
    assert model.regressor.refit_pending
    killed = refit_worker.worker_pids()
    assert killed
    os.kill(killed[0], signal.SIGKILL)  # the worker dies during (or before) this refit
    for r in records[300:]:
        model.learn_one(r)
        reference.learn_one(r)
    assert model.regressor.n_refits == reference.regressor.n_refits == 3
    assert model.regressor.n_refit_failures == 0
    _assert_same_trees(model.regressor.trees, reference.regressor.trees)
    assert model.predict_many(records[:50]) == reference.predict_many(records[:50])
    alive = refit_worker.worker_pids()  # the later refits ran in a fresh worker
    assert alive and killed[0] not in alive


def test_pickle_during_a_refit_redoes_it_identically():
    records = _pairs(500)
    model = create("tree:first_fit=300,refit_every=300,swap_after=150")
    for r in records[:320]:
        model.learn_one(r)
    assert model.regressor.refit_pending
    copy = pickle.loads(pickle.dumps(model))
    for r in records[320:]:
        model.learn_one(r)
        copy.learn_one(r)
    assert model.predict_many(records[:30]) == copy.predict_many(records[:30])


def test_tree_learns_latency_from_attributes_without_a_solo_latency():
    records = _pairs(2000)
    model = create("tree:first_fit=500,refit_every=500,swap_after=50")
    model.fit(records[:1500])
    errors = [abs(model.predict_one(r) - r.latency_ms) / r.latency_ms for r in records[1500:]]
    rls = create("rls").fit(records[:1500])
    rls_errors = [abs(rls.predict_one(r) - r.latency_ms) / r.latency_ms for r in records[1500:]]
    assert np.mean(errors) < 0.05 < np.mean(rls_errors)


def test_matrix_path_equals_record_path():
    records = _pairs(400, seed=3)
    model = create("tree:first_fit=100,refit_every=100,swap_after=10")
    model.fit(records)
    batch = BatchSpec("bert", 4, {"seq": 100.0})
    rows = CoLocations.build(batch, ["d0", "d1", "d2"],
                             [[("gpt2", 2, {"seq": 64.0}, 0.3)], [], [("gpt2", 2, {"seq": 64.0}, 0.9)]],
                             device_kinds=["", "", "other"])
    np.testing.assert_allclose(model.predict_colocations(rows), model.predict_many(rows.records()), rtol=1e-9)


def test_monotone_in_overlap_end_to_end():
    records = _pairs(1200, seed=4)
    model = create("tree:first_fit=400,refit_every=400,swap_after=10")
    model.fit(records)
    trees = model.regressor.trees
    assert trees is not None
    values = []
    for overlap in np.linspace(0, 1, 21):
        r = Record("d0", BatchSpec("bert", 4, {"seq": 200.0}), None,
                   co_runners=(CoRunner("gpt2", 2, {"seq": 64.0}, overlap=float(overlap)),))
        x = model.features(r)
        coded, _ = model.regressor._split(x, grow=False)
        values.append(trees.predict_vector(model.regressor._index.vector(coded, grow=False)))
    assert np.all(np.diff(values) >= -1e-12)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="swap_after"):
        BoostedResidual(refit_every=10, swap_after=20)
    with pytest.raises(ValueError, match="window"):
        create("tree:window=1")
    with pytest.raises(ValueError, match="worker"):
        create("tree:worker='gpu'")
    with pytest.raises(ValueError, match="split_by"):
        create("ensemble:split_by='colour'")


def test_ensemble_picks_per_key():
    # model a: latency linear in the co-runner overlap (rls wins); model b: constant (both fine)
    ens = create("ensemble:experts='rls,solo',eta=200")
    rng = np.random.default_rng(5)
    for _ in range(600):
        overlap = float(rng.random())
        for model, latency in (("a", 10 * (1 + 2 * overlap)), ("b", 10.0)):
            ens.learn_one(Record("d", BatchSpec(model, 1), latency, solo_latency_ms=10.0,
                                 co_runners=(CoRunner("c", 1, {}, overlap=overlap),)))
    assert ens.key_weights("a")["rls"] > 0.99
    assert set(ens.key_weights("b")) == {"rls", "solo"}
    assert ens._key_errors.keys() == {"a", "b"}


def test_ensemble_one_pass_equals_predict_then_learn():
    # predict_learn_one asks each expert for predict_learn_one: the answers and the weights are those of
    # predict_one then learn_one, bit for bit (320 records: the tree's first refit swapped in at 300)
    one_pass, two_calls = create("ensemble"), create("ensemble")
    records = default_records(320)
    answers = [one_pass.predict_learn_one(r) for r in records]
    expected = []
    for record in records:
        expected.append(two_calls.predict_one(record))
        two_calls.learn_one(record)
    assert answers == expected
    assert one_pass._errors == two_calls._errors and one_pass._key_errors == two_calls._key_errors
    assert one_pass._experts[1].regressor.n_refits == 1  # the trees answered the last 20 records
    assert [one_pass.predict_one(r) for r in records[:10]] == [two_calls.predict_one(r) for r in records[:10]]


def test_ensemble_keeps_the_old_registry_name_and_variants():
    assert type(create("ensemble")).__name__ == "EnsemblePredictor"
    ensemble = create("ensemble")
    assert ensemble.experts == "rls,tree:max_bin=63,n_estimators=100,learning_rate=0.3,refit_every=2000,sgd"
    tree = ensemble.expert_predictors[1]
    assert (tree.name, tree.max_bin, tree.n_estimators, tree.learning_rate, tree.refit_every) == ("tree", 63, 100, 0.3, 2000)
    assert list(ensemble.weights) == ["rls", "tree:max_bin=63,n_estimators=100,learning_rate=0.3,refit_every=2000", "sgd"]
    with pytest.raises(ValueError, match="experts"):
        create("ensemble:experts='rls,ensemble:eta=2.0'")
    check_predictor(lambda: create("ensemble:experts='rls,static'"), default_records(30))


def test_walk_handles_single_leaf_trees():
    X = np.random.default_rng(3).random((100, 3))
    trees, booster = fit_trees(X, np.full(100, 2.5), names=("a", "b", "c"), n_estimators=5, return_booster=True)
    assert trees.predict_vector(X[0]) == booster.predict(X[:1])[0] == pytest.approx(2.5)


def test_work_features_multiply_attributes_by_batch_sizes():
    record = Record("d0", BatchSpec("bert", 4, {"seq": 100.0}), 1.0,
                    co_runners=(CoRunner("gpt2", 2, {"seq": 64.0}, overlap=0.5), CoRunner("vit", 8, {"seq": 10.0},
                                                                                           overlap=0.0),
                                CoRunner("vit", 3, {"size": 224.0}, overlap=1.0)))
    assert work_features(record) == {"own:seq*batch": 400.0, "co:seq*batch": 64.0, "co:size*batch": 672.0}
    rows = CoLocations.from_records([record])
    names, values = work_columns(rows)
    assert dict(zip(names, values[0].tolist(), strict=True)) == {**work_features(record)}
    assert "own:seq*batch" not in create("tree:work=False")._parts(record)[0]


def test_a_snapshot_taken_while_the_worker_process_refits_restores_the_same_model():
    records = _pairs(800, seed=8)
    model = create("tree:first_fit=300,refit_every=300,swap_after=150")
    for r in records[:320]:
        model.learn_one(r)
    assert model.regressor.refit_pending and model.regressor._pending.future is not None  # in the worker
    restored = restore_predictor(snapshot_predictor(model))
    for r in records[320:]:
        model.learn_one(r)
        restored.learn_one(r)
    assert restored.regressor.n_refits == model.regressor.n_refits == 2
    _assert_same_trees(restored.regressor.trees, model.regressor.trees)
    assert restored.predict_many(records[:30]) == model.predict_many(records[:30])


def test_the_walks_come_from_numba_s_disk_cache_in_a_new_process():
    # module-level kernels: a fresh interpreter loads them compiled (a closure's cache key changed with
    # every process, so each process compiled the walks anew, seconds each)
    script = ("import numpy as np\nfrom predictor.regressors import trees\n"
              "t = trees.fit_trees(np.random.default_rng(0).random((50, 2)), np.arange(50.0), names=('a', 'b'), n_estimators=3)\n"
              "t.predict_vector(np.zeros(2)); t.predict_matrix(np.zeros((2, 2)))\n"
              "print(sum(trees._walk_packed.stats.cache_hits.values()), sum(trees._walk_many.stats.cache_hits.values()))")
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True) for _ in range(2)]
    assert runs[1].stdout.split() == ["1", "1"], runs[1].stdout + runs[1].stderr


def test_max_bin_coarsens_the_thresholds():
    X = np.random.default_rng(4).random((2000, 1))
    fine = fit_trees(X, X[:, 0], names=("a",), n_estimators=20)
    coarse = fit_trees(X, X[:, 0], names=("a",), n_estimators=20, max_bin=8)
    assert len(set(coarse.threshold[coarse.feature >= 0].tolist())) <= 7 < len(set(fine.threshold[fine.feature >= 0].tolist()))
    assert create("tree:max_bin=8").regressor.max_bin == 8
    with pytest.raises(ValueError, match="max_bin"):
        create("tree:max_bin=1")
