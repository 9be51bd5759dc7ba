"""The ``tree`` learner's hot path and what a background refit costs the answers.

1. **One-row prediction** (what ``PredictLatency`` asks of the predictor), p50 over a pool of
   records of the embedded CPU dataset, after learning ``train`` records: ``tree`` (features,
   trees, corrector; its row path: row plans, packed walk) interleaved call by call with its
   dict path (feature dicts, the regressor's dict views, the walk over the node arrays: the
   one-row path before the row path, ``tree_dict_path_us``, same answers bit for bit, checked)
   and with the row path's previous form (numpy scatters into copies, then the walk, the corrector's
   scaling and dot product, each a call of its own: ``tree_previous_row_path_us``), the three
   interleaved call by call,
   and ``rls`` likewise with its dict path (the interaction-feature dict mapped to the model's
   columns by name: the one-row path before the row fast path, ``rls_dict_path_us``, same
   answers, checked), and their ratios; and the trees alone evaluated by the packed numba walk
   (:mod:`predictor.regressors.trees`), interleaved with the walk over the node arrays, and
   against LightGBM's own single-row ``Booster.predict`` on the same trees (same window, same
   settings: equal answers, checked).
2. **PredictLatency during a refit**: the real service (``tree``) behind a real gRPC server on
   a free port, warmed up on ``train`` records; one client sends ``calls`` sequential
   ``PredictLatency`` requests per block, alternating blocks with no refit and blocks while a
   refit runs in the background (a new one started whenever the last has finished), ``rounds``
   times; p50 and p99 of each kind, and their ratio. Once with the refit in a worker thread
   (``tree:worker='thread'``, the baseline) and once in the worker process (``tree``, the
   default), in the same run: both services up, their blocks interleaved.

Run: ``.venv/bin/python -m experiments.bench.bench_tree`` (about 3 minutes; ``--refit false``: part 1
only); writes
``experiments/results/bench_tree/``.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from experiments.common import DEFAULT_DATASET, finish, start
from predictor.predictors import create
from predictor.records.logio import read_records
from predictor.regressors.trees import fit_trees


@dataclasses.dataclass(frozen=True)
class Config:
    """What the benchmark runs."""

    train: int = 4000
    pool: int = 300
    repeats: int = 10
    calls: int = 300
    rounds: int = 5
    refit_specs: tuple[str, ...] = ("tree:worker='thread'", "tree")
    refit: bool = True
    seed: int = 0


def p50_us(function, items, repeats: int) -> float:
    """Median wall time of ``function(item)`` in µs over ``repeats`` passes over ``items``."""
    times = []
    for _ in range(repeats):
        for item in items:
            t = time.perf_counter_ns()
            function(item)
            times.append(time.perf_counter_ns() - t)
    return float(np.median(times)) / 1e3


def p50_pair_us(first, second, items, repeats: int) -> tuple[float, float]:
    """:func:`p50_us` of two functions, timed alternately item by item (the same machine noise)."""
    return p50_interleaved_us((first, second), items, repeats)  # type: ignore[return-value]


def p50_interleaved_us(functions, items, repeats: int) -> tuple[float, ...]:
    """:func:`p50_us` of each of ``functions``, timed in turn item by item (the same machine noise)."""
    times: list[list[int]] = [[] for _ in functions]
    for _ in range(repeats):
        for item in items:
            for function, out in zip(functions, times, strict=True):
                t = time.perf_counter_ns()
                function(item)
                out.append(time.perf_counter_ns() - t)
    return tuple(float(np.median(t)) / 1e3 for t in times)


def rls_dict_path(rls):
    """``rls``'s one-row prediction through the feature dict (the path before the row fast path)."""

    def predict(record):
        model = rls._models.get(rls._key(record))
        value = 1.0 if model is None else math.exp(min(model.predict_one(rls._extract(record)), 10.0))
        return rls._to_latency(record, value)

    return predict


def tree_row_path(tree):
    """``tree``'s one-row prediction (:meth:`~predictor.predictors.tree.TreePredictor.predict_one`), its
    features computed anew each call (not taken from its cache of the last record's)."""

    def predict(record):
        tree._last = None
        return tree.predict_one(record)

    return predict


def _prepared(index, names, fixed):
    """The previous row plan's half: ``index``'s vector of ``fixed`` and where ``names``' values go."""
    template = index.vector_of(tuple(fixed), np.array(list(fixed.values()), dtype=float), grow=False)
    positions, known = index.positions(names)
    return (template, positions, None) if known is None else (template, positions[known], np.flatnonzero(known))


def tree_previous_row_path(tree):
    """``tree``'s one-row path before the fused kernel (the same answers, checked): per call a model-version
    check, a copy of each prepared vector (the corrector's unscaled), two numpy scatters, the packed walk,
    the corrector's scaling and its dot product by ``@``, each a call of its own; layouts planned once."""
    regressor = tree.regressor
    plans: dict = {}

    def plan_of(numeric, categories):
        key = (tuple(numeric), tuple(categories.items()))
        plan = plans.get(key)
        if plan is None:
            codes = {k: regressor._code(k, v, grow=False) for k, v in categories.items()}
            onehot = {f"{k}={v}": 1.0 for k, v in categories.items()}
            plan = plans[key] = (_prepared(regressor._index, key[0], codes),
                                 _prepared(regressor._corrector.index, key[0], onehot))
        return plan

    def predict(record):
        numeric, categories = tree.parts(record, tree.work)
        corrector = regressor._corrector
        version = (regressor._count, len(regressor._index.columns), corrector, len(corrector.index.columns),
                   sum(map(len, regressor._codes.values())))
        if version != plans.setdefault("version", version):
            raise RuntimeError("the model changed during the benchmark")
        (x0, x_columns, x_take), (z0, z_columns, z_take) = plan_of(numeric, categories)
        values = np.fromiter(numeric.values(), dtype=float, count=len(numeric))
        x = x0.copy()
        x[x_columns] = values if x_take is None else values[x_take]
        value = regressor.trees.packed.predict_vector(x)
        z = z0.copy()
        z[z_columns] = values if z_take is None else values[z_take]
        value = tree._clamp(value + corrector.predict_vector(corrector.scaled(z)))
        return math.exp(tree._offset(record) + value)

    return predict


def tree_dict_path(tree):
    """``tree``'s one-row prediction through the feature dicts and the node-array walk (the path before the
    row path: the regressor's dict views, the index vector by name, the corrector's dict)."""
    regressor = tree.regressor

    def predict(record):
        coded, numeric = regressor._views(*tree.parts(record, tree.work), grow=False)
        trees = regressor.trees
        value = trees.walk_nodes(regressor._index.vector(coded, grow=False)) if trees is not None else regressor._mean
        value = tree._clamp(value + regressor._corrector.predict_one(numeric))
        return math.exp(tree._offset(record) + value)

    return predict


def hot_path(config: Config, records) -> dict[str, float]:
    """One-row prediction costs."""
    train, pool = records[: config.train], records[config.train : config.train + config.pool]
    tree = create("tree", seed=config.seed)
    for r in train:
        tree.learn_one(r)
    regressor = tree.regressor
    while regressor.refit_pending:  # let the last refit land, so the trees are the latest
        tree.learn_one(train[-1])
    rls = create("rls", seed=config.seed).fit(train)
    for r in pool[:20]:  # warm caches, compile the walk
        tree.predict_one(r), rls.predict_one(r)
    old_rls = rls_dict_path(rls)
    assert all(rls.predict_one(r) == old_rls(r) for r in pool)
    new_tree, previous_tree, old_tree = tree_row_path(tree), tree_previous_row_path(tree), tree_dict_path(tree)
    assert all(new_tree(r) == old_tree(r) == previous_tree(r) for r in pool)
    out = {}
    out["tree_predict_one_us"], out["tree_previous_row_path_us"], out["tree_dict_path_us"] = p50_interleaved_us(
        (new_tree, previous_tree, old_tree), pool, config.repeats)
    out["tree_speedup"] = out["tree_dict_path_us"] / out["tree_predict_one_us"]
    out["tree_speedup_over_previous_row_path"] = out["tree_previous_row_path_us"] / out["tree_predict_one_us"]
    out["rls_predict_one_us"], out["rls_dict_path_us"] = p50_pair_us(rls.predict_one, old_rls, pool,
                                                                      config.repeats)
    out["rls_speedup"] = out["rls_dict_path_us"] / out["rls_predict_one_us"]
    out["tree_features_us"] = p50_us(tree.features, pool, config.repeats)
    names, X, y = regressor.window_rows()
    trees, booster = fit_trees(X, y, names=names, monotone=None, n_estimators=tree.n_estimators,
                               num_leaves=tree.num_leaves, learning_rate=tree.learning_rate,
                               min_child_samples=tree.min_child_samples, seed=config.seed, return_booster=True)
    rows = [X[i].copy() for i in range(0, len(X), max(1, len(X) // config.pool))][: config.pool]
    assert all(trees.predict_vector(x) == booster.predict(x[None, :])[0] for x in rows[:50])
    assert all(trees.predict_vector(x) == trees.walk_nodes(x) for x in rows)
    out["walk_numba_us"], out["walk_nodes_us"] = p50_pair_us(trees.predict_vector, trees.walk_nodes, rows,
                                                             config.repeats)
    out["lightgbm_predict_us"] = p50_us(lambda x: booster.predict(x[None, :], num_threads=1), rows,
                                        max(1, config.repeats // 5))
    out["n_trees"] = trees.n_trees
    out["n_columns"] = len(names)
    return out


class _Served:
    """One service behind a real gRPC server, warmed up, with a client and the queries it sends."""

    def __init__(self, spec: str, config: Config, records):
        from predictor.rpc.client import InterferenceClient
        from predictor.rpc.server import create_server
        from predictor.service import Service, ServiceConfig
        from predictor.service.errors import OutlierRejected
        from predictor.service.types import CoRunnerSource, PlannedCoRunner, Query

        self.service = Service(ServiceConfig(predictor=spec, snapshot_every_s=0))
        self.server, port = create_server("127.0.0.1:0", self.service)
        self.server.start()
        self.service.open()
        for r in records[: config.train]:
            try:
                self.service.observe(r)
            except OutlierRejected:
                pass
        self.regressor = self.service.state.predictor.regressor
        self.queries = [Query(r.device, r.batch,
                              co_runners=tuple(PlannedCoRunner(c.model, c.batch_size, dict(c.attrs), overlap=c.overlap)
                                               for c in r.co_runners),
                              co_runner_source=CoRunnerSource.EXPLICIT, signals=dict(r.signals),
                              solo_latency_ms=r.solo_latency_ms)
                        for r in records[config.train : config.train + 200]]
        self.client = InterferenceClient(f"127.0.0.1:{port}").__enter__()
        self.client.wait_ready(10)
        for q in self.queries[:50]:
            self.client.predict(q)
        self.idle: list[float] = []
        self.busy: list[float] = []
        self.refit_seconds: list[float] = []

    def idle_block(self, calls: int) -> None:
        """``calls`` requests with no refit running."""
        while self.regressor.refit_running:
            time.sleep(0.01)
        for i in range(calls):
            t = time.perf_counter()
            self.client.predict(self.queries[i % len(self.queries)])
            self.idle.append(time.perf_counter() - t)

    def busy_block(self, calls: int) -> None:
        """``calls`` requests, a refit started whenever the last has finished; timed while one runs."""
        started = None
        for i in range(calls):
            if not self.regressor.refit_running:
                if started is not None:
                    self.refit_seconds.append(time.perf_counter() - started)
                with self.service.state.lock:
                    self.regressor._pending = None  # a benchmark: discard the last refit's trees, start another
                    self.regressor.start_refit()
                started = time.perf_counter()
            t = time.perf_counter()
            self.client.predict(self.queries[i % len(self.queries)])
            elapsed = time.perf_counter() - t
            if self.regressor.refit_running:
                self.busy.append(elapsed)
        while self.regressor.refit_running:  # the last refit's duration (no calls timed meanwhile)
            time.sleep(0.005)
        if started is not None:
            self.refit_seconds.append(time.perf_counter() - started)

    def close(self) -> dict[str, float]:
        """Stop the server; the figures."""
        from predictor.rpc.server import stop_server

        self.client.__exit__(None, None, None)
        stop_server(self.server, self.service, grace=0.5)
        ms = 1e3
        idle, busy = self.idle, self.busy
        out = {"idle_p50_ms": float(np.median(idle)) * ms, "idle_p99_ms": float(np.percentile(idle, 99)) * ms,
               "refit_p50_ms": float(np.median(busy)) * ms, "refit_p99_ms": float(np.percentile(busy, 99)) * ms,
               "calls_idle": len(idle), "calls_during_refit": len(busy),
               "refit_seconds_median": float(np.median(self.refit_seconds)) if self.refit_seconds else float("nan")}
        out["p99_ratio"] = out["refit_p99_ms"] / out["idle_p99_ms"]
        out["p50_ratio"] = out["refit_p50_ms"] / out["idle_p50_ms"]
        return out


def refit_impact(config: Config, records) -> dict[str, dict[str, float]]:
    """PredictLatency p50/p99 with and without a refit running, over real gRPC, for each of
    ``config.refit_specs``: one service each, their blocks interleaved round by round."""
    served = {spec: _Served(spec, config, records) for spec in config.refit_specs}
    for _ in range(config.rounds):
        for target in served.values():
            target.idle_block(config.calls)
            target.busy_block(config.calls)
    return {f"refit {spec}": target.close() for spec, target in served.items()}


def main() -> None:
    """Run both parts and print them."""
    config, out = start("bench_tree", Config(), __doc__.splitlines()[0])
    records, _ = read_records(DEFAULT_DATASET)
    results = {"hot_path": hot_path(config, records), **(refit_impact(config, records) if config.refit else {})}
    for part, values in results.items():
        print(part)
        for key, value in values.items():
            print(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")
    finish(out, results)


if __name__ == "__main__":
    main()
