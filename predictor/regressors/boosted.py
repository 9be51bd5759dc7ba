"""A slow learner and a fast corrector: boosted trees refitted in the background, RLS on their residual.

:class:`BoostedResidual` is a river regressor over feature dicts (numbers, and strings taken
as categories). It keeps the last ``window`` observations as rows of a matrix and, every
``refit_every`` observations, fits LightGBM gradient-boosted trees on them
(:mod:`predictor.regressors.trees`) in a persistent worker process
(:mod:`predictor.regressors.refit_worker`; or a worker thread, ``worker="thread"``), so
answers go on meanwhile without sharing the GIL with the refit; if the worker process dies,
the refit is redone in the learning call and a fresh worker takes the next one. The fitted trees replace the current ones exactly ``swap_after`` observations
after the refit started (waiting for it there only if it has not finished by then), so the
same stream always gives the same model, whatever the timing: clones, pickles and snapshots
stay exact. On top, a recursive-least-squares corrector (:class:`~predictor.regressors.least_squares.RLS`)
learns the residual of the current trees online, so a drift between refits is tracked at
once; at a swap a fresh corrector learns the residuals of the new trees on the observations
they were not fitted on (those since the refit started).

Columns whose names start with one of ``increasing`` get a monotone constraint: the trees'
answer never decreases as such a column grows (the contention features of a latency model).

Examples
--------
>>> model = BoostedResidual(refit_every=20, first_fit=20, swap_after=5, n_estimators=10)
>>> for i in range(60):
...     model.learn_one({"size": float(i % 10), "kind": "ab"[i % 2]}, 3.0 * (i % 10))
>>> model.n_refits, round(model.predict_one({"size": 4.0, "kind": "a"}))
(2, 12)
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import BrokenExecutor, CancelledError, Future
from dataclasses import dataclass

import numpy as np
from river import base

from predictor.regressors import refit_worker
from predictor.regressors.feature_index import FeatureIndex
from predictor.regressors.least_squares import RLS
from predictor.regressors.rls_kernel import learn_rows_fits, scaled_row
from predictor.regressors.trees import PackedTrees, TreeArrays, fit_trees, load_lightgbm

Features = Mapping[str, object]
WORKERS = ("process", "thread")
"""Where a background refit may run."""


class _Refit:
    """One refit: its inputs (kept until the swap, so a pickle can redo it) and, once done, its trees."""

    def __init__(self, launched_at: int, X: np.ndarray, y: np.ndarray, names: tuple[str, ...],
                 columns: np.ndarray, monotone: list[int]):
        self.launched_at = launched_at
        self.X, self.y, self.names, self.columns, self.monotone = X, y, names, columns, monotone
        self.trees: TreeArrays | None = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.future: Future | None = None

    def same_inputs(self, other: _Refit) -> bool:
        """Whether ``other`` fits the same rows, targets, columns and constraints (then it gives the same trees)."""
        return (self.launched_at == other.launched_at and self.names == other.names
                and self.monotone == other.monotone and np.array_equal(self.columns, other.columns)
                and np.array_equal(self.y, other.y) and np.array_equal(self.X, other.X))

    def _indexed(self, trees: TreeArrays) -> TreeArrays:
        """``trees`` with their splits pointing at index columns (the walk reads the whole index vector)."""
        internal = trees.feature >= 0
        feature = trees.feature.copy()
        feature[internal] = self.columns[trees.feature[internal]]
        return TreeArrays(self.names, feature, trees.threshold, trees.left, trees.right, trees.value, trees.roots)

    def run(self, params: dict) -> None:
        """Fit the trees (in whichever thread calls this); an error is kept, not raised."""
        try:
            self.trees = self._indexed(fit_trees(self.X, self.y, names=self.names, monotone=self.monotone, **params))
        except Exception as exc:  # noqa: BLE001 - a failed refit keeps the old trees; counted by the owner
            self.error = exc

    def start(self, params: dict, where: str) -> None:
        """Run now (``"call"``), in a daemon thread (``"thread"``) or in the worker process (``"process"``;
        in a thread if no worker process can be started here)."""
        if where == "process":
            for _ in range(2):  # a worker that died idle broke the pool: once more with a fresh one
                try:
                    self.future = refit_worker.submit(fit_trees, self.X, self.y, names=self.names,
                                                      monotone=self.monotone, **params)
                    return
                except BrokenExecutor:
                    refit_worker.restart()
                except Exception:  # noqa: BLE001 - no worker process here (a sandbox, shutdown): a thread
                    break
            where = "thread"
        if where == "thread":
            self.thread = threading.Thread(target=self.run, args=(params,), name="tree-refit", daemon=True)
            self.thread.start()
            return
        self.run(params)

    @property
    def running(self) -> bool:
        """Whether the thread or the worker process is still fitting."""
        if self.future is not None:
            return not self.future.done()
        return self.thread is not None and self.thread.is_alive()

    def result(self, params: dict) -> TreeArrays | None:
        """The fitted trees (waiting for the thread or the worker; fitting here if none ran, e.g. after
        unpickling, or if the worker process died)."""
        if self.future is not None:
            future, self.future = self.future, None
            try:
                self.trees = self._indexed(refit_worker.result(future))
            except (BrokenExecutor, CancelledError):
                refit_worker.restart()  # the worker died: a fresh one for the next refit, this one here
                self.run(params)
            except Exception as exc:  # noqa: BLE001 - as in run
                self.error = exc
        elif self.thread is not None:
            self.thread.join()
        elif self.trees is None and self.error is None:
            self.run(params)
        return self.trees

    def __getstate__(self) -> dict:
        # The inputs only: whether the fit has finished must not change a pickle.
        return {k: v for k, v in self.__dict__.items() if k not in ("trees", "error", "thread", "future")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.trees, self.error, self.thread, self.future = None, None, None, None


def _warm_worker() -> None:
    """Start the worker process and load LightGBM there now, while the first observations are learned
    (its first refit would otherwise wait for both); nothing happens where no worker can start."""
    try:
        refit_worker.submit(load_lightgbm)
    except Exception:  # noqa: BLE001 - no worker process here: the refit falls back to a thread then
        pass


MAX_ROW_PLANS = 4096
"""Row plans kept per model version (then forgotten at once, like the feature index's layouts)."""
_UNSEEN, _SEEN = object(), object()
"""A layout not seen in this model version, and one seen once (its plan is made the next time)."""
_NO_TREES = PackedTrees(np.zeros(0, dtype=np.int32), np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int32))
"""No trees (before the first fit): the kernel's walk adds nothing, the window's mean answers."""


@dataclass(frozen=True, eq=False)
class _RowPlan:
    """Where one row layout's values go in the trees' vector and in the corrector's (one model version).

    ``tree`` is the trees' vector with everything but the row's numbers in place (the intercept,
    the category codes); ``corrector`` the corrector's, scaled (the intercept, the one-hot
    columns). A row's value ``values[tree_at[1, j]]`` goes to column ``tree_at[0, j]`` of the
    first, ``values[corrector_at[1, j]] / divisors[j]`` (``0`` where the divisor is ``0``: a
    column without a scale) to column ``corrector_at[0, j]`` of the second; ``weights`` are the
    corrector's. ``kernel(values, tree, tree_at, z, corrector_at, divisors, *arrays)`` does both
    and walks the trees (:meth:`~predictor.regressors.trees.PackedTrees.scattered_walk`);
    ``mean`` answers for the trees where there are none (``None``: there are).
    """

    tree: np.ndarray
    tree_at: np.ndarray
    corrector: np.ndarray
    corrector_at: np.ndarray
    divisors: np.ndarray
    weights: np.ndarray
    kernel: Callable[..., float]
    arrays: tuple[np.ndarray, ...]
    mean: float | None

    def predict(self, values: np.ndarray) -> float:
        """The regressor's answer for the row of ``values`` (the trees' value plus the corrector's)."""
        z = self.corrector.copy()  # a vector per call: concurrent answers stay apart
        tree = self.kernel(values, self.tree, self.tree_at, z, self.corrector_at, self.divisors, *self.arrays)
        if self.mean is not None:
            tree = self.mean
        return tree + float(z.dot(self.weights))  # RLS.predict_vector's ``@``: the same BLAS dot, called for less


def _scatter_plan(index: FeatureIndex, names: tuple[str, ...], fixed: Mapping[str, float]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The vector of ``index`` holding the intercept and ``fixed``, and where the values of ``names``
    go: columns (first row) and positions in ``names`` (second row)."""
    template = index.vector_of(tuple(fixed), np.fromiter(fixed.values(), dtype=float, count=len(fixed)), grow=False)
    positions, known = index.positions(names)
    take = np.arange(len(names)) if known is None else np.flatnonzero(known)
    return template, np.ascontiguousarray(np.vstack([positions[take], take]).astype(np.int64))


def _learn_in_runs(corrector: RLS, observations: Sequence[tuple[Mapping[str, float], float]]) -> None:
    """:meth:`RLS.learn_one <predictor.regressors.least_squares.RLS.learn_one>` of each ``(x, y)`` in turn: the
    rows that fit the model as it is in compiled runs (:func:`~predictor.regressors.rls_kernel.learn_rows_fits`),
    those that grow it one at a time."""
    rows: list[np.ndarray] = []
    targets: list[float] = []

    def flush() -> None:
        if rows:
            learn_rows_fits(corrector, np.stack(rows), np.asarray(targets))
            rows.clear()
            targets.clear()

    for x, y in observations:
        names, values = tuple(x), np.fromiter(x.values(), dtype=float, count=len(x))
        row = scaled_row(corrector, names, values)
        if row is None:
            corrector.index.positions(names)  # a layout of known names not yet seen: cached
            row = scaled_row(corrector, names, values)
        if row is None:
            flush()
            corrector.learn_vector(corrector.vectorize_row(names, values, grow=True), y)
        else:
            rows.append(row)
            targets.append(y)
    flush()


class WindowAhead:
    """The window of a :class:`BoostedResidual` kept ahead of it over observations it is about to learn,
    so that each refit starts as soon as its inputs are known rather than when the model gets there.

    Call :meth:`learn_parts` with each coming observation, in order, before the model learns it.
    Where the model will launch a refit, the refit of the same inputs starts now (in the model's
    worker) and is left with the model, which takes it when it launches (checking that the inputs
    are the same; otherwise it starts its own). A refit depends on its inputs alone, so the model
    learns and answers exactly as without this; its swaps wait less, since their fits started
    earlier. :attr:`pending` counts the refits started ahead and not taken yet. With ``threads``, every
    other refit runs in a thread of this process (LightGBM trains without the GIL) rather than in the
    worker: two fits at once, where cores are free.

    Examples
    --------
    >>> model = BoostedResidual(refit_every=20, first_fit=20, swap_after=5, n_estimators=10, worker="thread")
    >>> rows = [({"size": float(i % 10)}, {"kind": "ab"[i % 2]}, 3.0 * (i % 10)) for i in range(60)]
    >>> ahead = WindowAhead(model)
    >>> for numeric, categories, y in rows[:25]:
    ...     ahead.learn_parts(numeric, categories, y)
    >>> ahead.pending
    1
    >>> for numeric, categories, y in rows:
    ...     model.learn_parts(numeric, categories, y)
    >>> ahead.pending, model.n_refits
    (0, 2)
    """

    def __init__(self, model: BoostedResidual, threads: bool = False):
        self.threads = threads
        self._started = 0
        shadow = object.__new__(BoostedResidual)
        shadow.__dict__.update(model.__dict__)  # settings and counts; what it writes is copied below
        shadow._index = copy.deepcopy(model._index)
        shadow._codes = {key: dict(codes) for key, codes in model._codes.items()}
        shadow._rows, shadow._targets = model._rows.copy(), model._targets.copy()
        shadow._row_plans, shadow._ahead = None, {}
        self._shadow = shadow
        self._model = model

    @property
    def pending(self) -> int:
        """Refits started ahead that the model has not taken yet."""
        return len(self._model._ahead)

    def learn_parts(self, numeric: Mapping[str, float], categories: Mapping[str, str], y: float) -> None:
        """Put the coming observation in the window ahead (what :meth:`BoostedResidual.learn_parts` stores),
        starting the refit the model will launch here, if any."""
        shadow = self._shadow
        coded, _ = shadow._views(numeric, categories, grow=True)
        shadow._store(shadow._index.vector(coded, grow=True), float(y))
        shadow._count += 1
        if shadow._count >= shadow._next_refit:
            shadow._next_refit = shadow._count + min(shadow.refit_every, shadow._count)
            refit = shadow._refit_inputs()
            model = self._model
            if refit is not None and model.background and shadow._count > model._count:
                self._started += 1
                refit.start(model._params(), "thread" if self.threads and self._started % 2 == 0 else model.worker)
                model._ahead[shadow._count] = refit


class ResidualRun:
    """A :class:`BoostedResidual` stepped over runs of observations, the corrector's steps compiled.

    :meth:`step` learns an observation as :meth:`BoostedResidual.learn_parts` does (the window, the
    counts) but leaves its corrector step queued; it declines (``False``) an observation that must be
    learned one at a time by ``learn_parts``, after :meth:`flush`: before the first trees, one whose
    learning launches a refit or swaps the trees, one of a category never learned, one that would
    grow the corrector (a new name, a column's first non-zero value). :meth:`flush` takes the queued
    corrector steps in one compiled call (:func:`~predictor.regressors.rls_kernel.learn_rows_fits`)
    and returns each queued observation's value before it was learned (the trees' plus the
    corrector's): what :meth:`BoostedResidual.predict_parts` answers there, within rounding.
    Nothing else may learn on the model while steps are queued.
    """

    def __init__(self, model: BoostedResidual):
        self.model = model
        self._tree_rows: list[np.ndarray] = []
        self._rows: list[np.ndarray] = []
        self._targets: list[float] = []

    def __len__(self) -> int:
        return len(self._targets)

    def step(self, numeric: Mapping[str, float], categories: Mapping[str, str], y: float) -> bool:
        """Learn the observation, its corrector step queued; ``False`` (nothing done) where it must go through
        :meth:`BoostedResidual.learn_parts`."""
        model = self.model
        count = model._count + 1
        pending = model._pending
        if (model._trees is None or count >= model._next_refit
                or (pending is not None and count - pending.launched_at >= model.swap_after)
                or not math.isfinite(y)):
            return False
        codes = model._codes
        for key, value in categories.items():
            known = codes.get(key)
            if known is None or value not in known:
                return False
        coded, onehot = model._views(numeric, categories, grow=False)
        corrector, names = model._corrector, tuple(onehot)
        values = np.fromiter(onehot.values(), dtype=float, count=len(onehot))
        row = scaled_row(corrector, names, values)
        if row is None:
            corrector.index.positions(names)  # a layout of known names not yet seen by this corrector: cached
            row = scaled_row(corrector, names, values)
            if row is None:
                return False
        vector = model._index.vector(coded, grow=True)
        self._tree_rows.append(vector)
        self._rows.append(row)
        self._targets.append(y)
        model._changed()
        model._store(vector, y)
        model._count = count
        model._mean += (y - model._mean) / min(count, model.window)
        if pending is not None:
            model._corrector_rows.append((onehot, y, vector))
        return True

    def flush(self) -> np.ndarray:
        """The queued corrector steps, learned; each queued observation's value before it was learned."""
        if not self._targets:
            return np.zeros(0)
        model = self.model
        assert model._trees is not None
        tree = model._trees.predict_matrix(model._pad(self._tree_rows))
        targets = np.asarray(self._targets)
        corrector, _ = learn_rows_fits(model._corrector, np.stack(self._rows), targets - tree)
        self._tree_rows.clear()
        self._rows.clear()
        self._targets.clear()
        return tree + corrector


class BoostedResidual(base.Regressor):
    """Gradient-boosted trees refitted in the background, plus an RLS corrector on their residual.

    Parameters
    ----------
    window
        Observations the trees are fitted on (the most recent ones).
    refit_every
        Observations between two refits, once the model has seen ``refit_every`` observations
        (before, refits come each time the count has doubled: ``first_fit``, twice that, ...).
    first_fit
        Observations before the first refit.
    swap_after
        Observations between a refit's start and the moment its trees replace the current
        ones (at most ``refit_every``).
    n_estimators, num_leaves, learning_rate, min_child_samples, max_bin
        LightGBM's boosting rounds, leaves per tree, shrinkage, least rows per leaf and most bins
        per column.
    increasing
        Comma-separated prefixes of the column names on which the trees are constrained to be
        non-decreasing (``"co:,pair:"``).
    corrector_forgetting, corrector_delta
        The RLS corrector's forgetting factor and prior covariance scale.
    max_features
        Most distinct feature names kept (memory bound).
    background
        Fit away from the learning call (``False``: in it, for tests and batch use).
    worker
        Where a background refit runs: ``"process"`` (a persistent worker process,
        :mod:`~predictor.regressors.refit_worker`: the refit never holds this process's GIL) or
        ``"thread"`` (a worker thread). Both give the same trees.
    seed
        LightGBM's seed.
    """

    def __init__(
        self,
        window: int = 4000,
        refit_every: int = 1000,
        first_fit: int = 200,
        swap_after: int = 100,
        n_estimators: int = 150,
        num_leaves: int = 15,
        learning_rate: float = 0.1,
        min_child_samples: int = 10,
        max_bin: int = 255,
        increasing: str = "",
        corrector_forgetting: float = 0.995,
        corrector_delta: float = 0.1,
        max_features: int = 256,
        background: bool = True,
        worker: str = "process",
        seed: int = 0,
    ):
        for name, value, low in (("window", window, 2), ("refit_every", refit_every, 1),
                                 ("first_fit", first_fit, 2), ("swap_after", swap_after, 0),
                                 ("n_estimators", n_estimators, 1), ("num_leaves", num_leaves, 2),
                                 ("min_child_samples", min_child_samples, 1), ("max_features", max_features, 1),
                                 ("max_bin", max_bin, 2)):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if swap_after > refit_every:
            raise ValueError(f"swap_after must be <= refit_every ({refit_every}), got {swap_after!r}")
        if not 0 < learning_rate <= 1:
            raise ValueError(f"learning_rate must lie in (0, 1], got {learning_rate!r}")
        if worker not in WORKERS:
            raise ValueError(f"worker must be one of {', '.join(map(repr, WORKERS))}, got {worker!r}")
        if not isinstance(increasing, str):
            raise ValueError(f"increasing must be a comma-separated string of prefixes, got {increasing!r}")
        RLS(corrector_forgetting, corrector_delta)  # validates the corrector's arguments
        self.window = window
        self.refit_every = refit_every
        self.first_fit = first_fit
        self.swap_after = swap_after
        self.n_estimators = n_estimators
        self.num_leaves = num_leaves
        self.learning_rate = learning_rate
        self.min_child_samples = min_child_samples
        self.max_bin = max_bin
        self.increasing = increasing
        self._prefixes = tuple(p for p in increasing.split(",") if p)
        self.corrector_forgetting = corrector_forgetting
        self.corrector_delta = corrector_delta
        self.max_features = max_features
        self.background = background
        self.worker = worker
        self.seed = seed
        self._index = FeatureIndex(max_features)
        self._codes: dict[str, dict[str, int]] = {}
        self._rows = np.zeros((0, 1))
        self._targets = np.zeros(0)
        self._corrector_rows: list[tuple[dict[str, float], float, np.ndarray]] = []
        self._count = 0
        self._next_refit = first_fit
        self._mean = 0.0
        self._trees: TreeArrays | None = None
        self._corrector = self._new_corrector()
        self._pending: _Refit | None = None
        self.n_refits = 0
        self.n_refit_failures = 0
        self._row_plans: dict | None = None  # this model version's row plans (None: none asked yet), not state
        self._ahead: dict[int, _Refit] = {}  # refits started ahead by a WindowAhead, by launch count; not state
        self._last_prediction: tuple | None = None  # the last dict-path prediction's work (see learn_parts); not state

    # ------------------------------------------------------------------ river's conventions
    @classmethod
    def _unit_test_params(cls):
        yield {"window": 300, "refit_every": 100, "first_fit": 50, "swap_after": 20, "n_estimators": 20}
        yield {"window": 100, "refit_every": 40, "first_fit": 40, "swap_after": 0, "n_estimators": 5,
               "increasing": "ordinal_,co:", "background": False}

    @property
    def _is_stochastic(self) -> bool:
        return False

    # ------------------------------------------------------------------ features
    def _new_corrector(self) -> RLS:
        return RLS(self.corrector_forgetting, self.corrector_delta, max_features=self.max_features)

    def _code(self, key: str, value: str, grow: bool) -> float:
        """The integer code of a category (by first appearance); -1 for one never learned."""
        codes = self._codes.get(key)
        if codes is None:
            if not grow:
                return -1.0
            codes = self._codes[key] = {}
        code = codes.get(value)
        if code is None:
            if not grow:
                return -1.0
            code = codes[value] = len(codes)
            self._changed()
        return float(code)

    def _split(self, x: Features, grow: bool) -> tuple[dict[str, float], dict[str, float]]:
        """The trees' view of ``x`` (categories as codes) and the corrector's (categories one-hot)."""
        numeric: dict[str, float] = {}
        categories: dict[str, str] = {}
        for key, value in x.items():
            if isinstance(value, str):
                categories[key] = value
            else:
                numeric[key] = float(value)  # type: ignore[arg-type]
        return self._views(numeric, categories, grow)

    def _views(self, numeric: Mapping[str, float], categories: Mapping[str, str],
               grow: bool) -> tuple[dict[str, float], dict[str, float]]:
        coded = dict(numeric)
        onehot = dict(numeric)
        for key, value in categories.items():
            coded[key] = self._code(key, value, grow)
            onehot[f"{key}={value}"] = 1.0
        return coded, onehot

    def _tree_value(self, vector: np.ndarray) -> float:
        return self._trees.predict_vector(vector) if self._trees is not None else self._mean

    # ------------------------------------------------------------------ learning
    def learn_one(self, x: Features, y: float) -> None:
        """Learn one observation: the corrector at once, the trees at the next refit."""
        self._learn(*self._split(x, grow=True), y)

    def learn_parts(self, numeric: Mapping[str, float], categories: Mapping[str, str], y: float) -> None:
        """:meth:`learn_one` of the dict of ``numeric`` and ``categories`` (the hot path: no type tests).

        Right after :meth:`predict_parts` of the same two dicts (a prequential step), with nothing
        learned in between, the prediction's views, vectors and trees' value are reused where learning
        would make the same ones (every name and category known, no column's first value)."""
        last, self._last_prediction = self._last_prediction, None
        if last is not None and last[0] is numeric and last[1] is categories:
            self._learn(*last[2:4], y, *last[4:])
            return
        self._learn(*self._views(numeric, categories, grow=True), y)

    def _learn(self, coded: dict[str, float], numeric: dict[str, float], y: float,
               vector: np.ndarray | None = None, tree: float | None = None, scaled: np.ndarray | None = None) -> None:
        """Learn one observation; ``vector``, ``tree`` and ``scaled``: its trees' vector, their value there
        and its corrector's scaled vector where they are known to be what learning makes."""
        self._changed()
        y = float(y)
        if not math.isfinite(y):
            raise ValueError(f"y: must be finite, got {y!r}")
        if self._count == 0 and self.background and self.worker == "process":
            _warm_worker()
        if vector is None:
            vector = self._index.vector(coded, grow=True)
            tree = self._tree_value(vector)
        elif tree is None:
            tree = self._tree_value(vector)
        if scaled is None:
            self._corrector.learn_one(numeric, y - tree)
        else:
            self._corrector.learn_vector(scaled, y - tree)
        self._store(vector, y)
        self._count += 1
        self._mean += (y - self._mean) / min(self._count, self.window)
        if self._pending is not None:
            self._corrector_rows.append((numeric, y, vector))
            if self._count - self._pending.launched_at >= self.swap_after:
                self._swap()
        if self._count >= self._next_refit:
            # refits at first_fit, then twice as many observations, ... until refit_every apart
            self._next_refit = self._count + min(self.refit_every, self._count)
            self._launch()

    def _store(self, vector: np.ndarray, y: float) -> None:
        """Put the row in the window (a ring over the last ``window`` observations)."""
        rows, cols = self._rows.shape
        need_rows = rows if self._count < rows or rows >= self.window else min(self.window, max(16, 2 * rows))
        need_cols = max(cols, vector.size)
        if (need_rows, need_cols) != (rows, cols):
            grown = np.zeros((need_rows, need_cols))
            grown[:rows, :cols] = self._rows
            targets = np.zeros(need_rows)
            targets[:rows] = self._targets
            self._rows, self._targets = grown, targets
        slot = self._count % self.window
        self._rows[slot, : vector.size] = vector
        self._rows[slot, vector.size:] = 0.0
        self._targets[slot] = y

    def _params(self) -> dict:
        return {"n_estimators": self.n_estimators, "num_leaves": self.num_leaves,
                "learning_rate": self.learning_rate, "min_child_samples": self.min_child_samples,
                "max_bin": self.max_bin, "seed": self.seed}

    def _refit_inputs(self) -> _Refit | None:
        """A refit of the window as it is (columns in name order, so that their order of arrival does not
        matter), not started; ``None`` while there is no column."""
        n = min(self._count, self.window)
        names_by_column = {c: name for name, c in self._index.columns.items()}
        columns = np.array(sorted(names_by_column, key=names_by_column.__getitem__), dtype=np.int64)
        names = tuple(names_by_column[c] for c in columns.tolist())
        monotone = [int(bool(self._prefixes) and name.startswith(self._prefixes)) for name in names]
        if columns.size == 0:
            return None
        return _Refit(self._count, self._rows[:n][:, columns], self._targets[:n].copy(), names, columns, monotone)

    def _launch(self) -> None:
        """Start a refit on the window (or take the one :class:`WindowAhead` started on the same inputs)."""
        refit = self._refit_inputs()
        if refit is None:
            return
        ahead = self._ahead.pop(self._count, None) if self._ahead else None
        self._pending = refit
        self._corrector_rows = []
        if ahead is not None and self.background and ahead.same_inputs(refit):
            self._pending = ahead  # the same inputs, hence the same trees: started earlier
        else:
            refit.start(self._params(), self.worker if self.background else "call")
        if self.swap_after == 0:
            self._swap()

    def _swap(self) -> None:
        """Put the pending refit's trees in place, with a corrector of their residuals since the refit began."""
        refit, self._pending = self._pending, None
        assert refit is not None
        self._changed()
        trees = refit.result(self._params())
        rows, self._corrector_rows = self._corrector_rows, []
        if trees is None:
            self.n_refit_failures += 1
            return
        self._trees = trees
        self.n_refits += 1
        self._corrector = self._new_corrector()
        if rows:
            values = trees.predict_matrix(self._pad([v for _, _, v in rows]))
            _learn_in_runs(self._corrector, [(numeric, y - value)
                                             for (numeric, y, _), value in zip(rows, values.tolist(), strict=True)])

    @staticmethod
    def _pad(vectors: Sequence[np.ndarray]) -> np.ndarray:
        width = max(v.size for v in vectors)
        out = np.zeros((len(vectors), width))
        for i, v in enumerate(vectors):
            out[i, : v.size] = v
        return out

    # ------------------------------------------------------------------ predicting
    def predict_one(self, x: Features) -> float:
        """Trees (or the window's mean before the first fit) plus the corrector."""
        return self._predict(*self._split(x, grow=False))

    def predict_parts(self, numeric: Mapping[str, float], categories: Mapping[str, str]) -> float:
        """:meth:`predict_one` of the dict of ``numeric`` and ``categories`` (the hot path: no type tests;
        by the layout's plan where it has one, see :meth:`predict_row`: the same number, bit for bit)."""
        plan = self._row_plan(tuple(numeric), tuple(categories.items()))
        if plan is None:
            return self.predict_dicts(numeric, categories)
        return plan.predict(np.fromiter(numeric.values(), dtype=float, count=len(numeric)))

    def predict_dicts(self, numeric: Mapping[str, float], categories: Mapping[str, str]) -> float:
        """:meth:`predict_parts` through the dict views (the reference the planned path equals)."""
        coded, onehot = self._views(numeric, categories, grow=False)
        vector = self._index.vector(coded, grow=False)
        tree = self._tree_value(vector)
        corrector = self._corrector
        names = tuple(onehot)
        scaled = scaled_row(corrector, names, np.fromiter(onehot.values(), dtype=float, count=len(onehot)))
        if scaled is None:  # learning this row would change the corrector (or its layout is new to it)
            value = tree + corrector.predict_vector(corrector.vectorize_row(
                names, np.fromiter(onehot.values(), dtype=float, count=len(onehot)), grow=False))
        else:  # the vector vectorize gives, with or without grow
            value = tree + corrector.predict_vector(scaled)
        codes_known = all(coded[key] >= 0 for key in categories)
        if codes_known and self._index.positions(tuple(coded))[1] is None:
            # learning would make the same views and trees' vector (and the corrector's row, where scaled)
            self._last_prediction = (numeric, categories, coded, onehot, vector, tree, scaled)
        return value

    def predict_row(self, names: tuple[str, ...], values: np.ndarray,
                    categories: tuple[tuple[str, str], ...]) -> float:
        """:meth:`predict_parts` of the numbers ``values`` of the features ``names`` (distinct) and the
        ``(key, category)`` pairs ``categories``, without a dict: the same number, bit for bit.
        ``ValueError`` unless ``values`` holds one number per name.

        The one-row hot path. Where each name's value goes in the trees' vector and in the
        corrector's is planned once per layout (``names`` and ``categories``) and model version (see
        :meth:`_row_plan`), so a call copies the corrector's prepared vector and makes one compiled
        call that puts the values in place (in a copy of the trees' prepared vector too) and walks
        the packed trees, then takes the corrector's dot product (the copies keep concurrent
        answers apart).
        """
        values = np.ascontiguousarray(values, dtype=float)
        if values.shape != (len(names),):
            raise ValueError(f"values: one number per name expected ({len(names)}), got shape {values.shape}")
        plan = self._row_plan(names, categories)
        if plan is None:
            return self.predict_dicts(dict(zip(names, values.tolist(), strict=True)), dict(categories))
        return plan.predict(values)

    def _changed(self) -> None:
        """A new model version begins (an observation, a swap, a category code): the plans are forgotten,
        and so is the last prediction's work."""
        self._row_plans = None
        self._last_prediction = None

    def _row_plan(self, names: tuple[str, ...], categories: tuple[tuple[str, str], ...]) -> _RowPlan | None:
        """The :class:`_RowPlan` of a layout in this model version (``None``: use the dicts).

        A model version ends with any observation learned (or a swap, or a category added): plans
        serve a model that answers without learning in between (the service's published
        version); a stream that learns after each answer (prequential scoring) takes the dict
        path. A version's first call uses the dicts, and so does a layout's first sighting in it
        (the dicts cost less than making a plan); its plan is made the second time. A layout
        whose names a dict would merge always uses the dicts.
        """
        plans = self._row_plans
        if plans is None or len(plans) >= MAX_ROW_PLANS:
            self._row_plans = {}
            return None
        key = (names, categories)
        plan = plans.get(key, _UNSEEN)
        if plan is _UNSEEN:
            plans[key] = _SEEN
            return None
        if plan is _SEEN:
            plan = plans[key] = self._new_row_plan(names, categories)
        return plan

    def _new_row_plan(self, names: tuple[str, ...], categories: tuple[tuple[str, str], ...]) -> _RowPlan | None:
        onehot = tuple(f"{key}={value}" for key, value in categories)
        every = (*names, *(key for key, _ in categories), *onehot)
        if len(set(every)) != len(every):  # a dict would merge some of these: the dict path decides
            return None
        codes = {key: self._code(key, value, grow=False) for key, value in categories}
        tree, tree_at = _scatter_plan(self._index, names, codes)
        corrector = self._corrector
        z, corrector_at = _scatter_plan(corrector.index, names, dict.fromkeys(onehot, 1.0))
        weights = corrector.predicting_weights()[: z.size]
        scale = corrector._column_scale[: z.size]  # what RLS.scaled divides by (0: no scale yet, the column is 0)
        divisors = np.where(scale > 0, scale, 0.0)[corrector_at[0]]
        kernel, arrays = (self._trees.packed if self._trees is not None else _NO_TREES).scattered_walk()
        return _RowPlan(tree, tree_at, corrector.scaled(z), corrector_at, np.ascontiguousarray(divisors),
                        np.ascontiguousarray(weights), kernel, arrays, None if self._trees is not None else self._mean)

    def _predict(self, coded: dict[str, float], numeric: dict[str, float]) -> float:
        value = self._tree_value(self._index.vector(coded, grow=False))
        return value + self._corrector.predict_one(numeric)

    def predict_matrix(self, names: tuple[str, ...], values: np.ndarray,
                       categories: Mapping[str, Sequence[str]] | None = None) -> np.ndarray:
        """Predictions for many rows: ``values[i, j]`` is feature ``names[j]`` of row ``i``, and
        ``categories[k][i]`` the category ``k`` of row ``i``. Row ``i`` gets what
        :meth:`predict_one` answers for the row's dict (up to rounding)."""
        categories = dict(categories or {})
        n = values.shape[0]
        all_names = list(names)
        blocks = [values]
        onehot_names: list[str] = []
        onehot: list[np.ndarray] = []
        for key, cats in categories.items():
            all_names.append(key)
            blocks.append(np.array([[self._code(key, c, grow=False)] for c in cats], dtype=float).reshape(n, 1))
            for value in sorted(set(cats)):
                onehot_names.append(f"{key}={value}")
                onehot.append(np.array([c == value for c in cats], dtype=float))
        coded = np.hstack(blocks) if len(blocks) > 1 else values
        positions, known = self._index.positions(tuple(all_names))
        matrix = np.zeros((n, self._index.size))
        matrix[:, 0] = 1.0
        if known is None:
            matrix[:, positions] = coded
        else:
            matrix[:, positions[known]] = coded[:, known]
        tree = self._trees.predict_matrix(matrix) if self._trees is not None else np.full(n, self._mean)
        numeric_names = tuple(names) + tuple(onehot_names)
        numeric = np.hstack([values, np.column_stack(onehot)]) if onehot else values
        return tree + self._corrector.predict_matrix(numeric_names, numeric)

    # ------------------------------------------------------------------ state
    @property
    def trees(self) -> TreeArrays | None:
        """The trees in use (``None`` before the first swap)."""
        return self._trees

    def window_rows(self) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
        """The window as the next refit would see it: column names (sorted), rows and targets (copies)."""
        n = min(self._count, self.window)
        names_by_column = {c: name for name, c in self._index.columns.items()}
        columns = sorted(names_by_column, key=names_by_column.__getitem__)
        return tuple(names_by_column[c] for c in columns), self._rows[:n][:, columns], self._targets[:n].copy()

    def settle(self) -> None:
        """Refit now, in this call, on the window, and put the trees in place (the end of a batch fit or a
        warm start: the trees then cover every observation in the window; the corrector starts afresh)."""
        if self._pending is not None:
            self._swap()
        if self._count >= 2 and self._index.size > 1:
            background, self.background = self.background, False
            swap_after, self.swap_after = self.swap_after, 0
            try:
                self._launch()
            finally:
                self.background, self.swap_after = background, swap_after

    def start_refit(self) -> None:
        """Start a refit now, off schedule (benchmarks: what a refit costs the answers meanwhile)."""
        if self._pending is None:
            self._launch()

    @property
    def refit_running(self) -> bool:
        """Whether a refit is running now (in its worker thread or process, or queued for the process)."""
        return self._pending is not None and self._pending.running

    @property
    def refit_pending(self) -> bool:
        """Whether a refit has started and its trees are not in place yet."""
        return self._pending is not None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_row_plans", None)  # a cache of the columns and codes, not state
        state.pop("_ahead", None)  # refits started early on inputs the model will have: not state
        state.pop("_last_prediction", None)  # a cache of one prediction's work
        return state

    def __setstate__(self, state: dict) -> None:
        state.setdefault("max_bin", 255)  # a snapshot from before max_bin was a setting: LightGBM's default
        self.__dict__.update(state)
        self._row_plans = None
        self._ahead = {}
        self._last_prediction = None
        pending = self._pending
        if pending is not None and self.background:
            pending.start(self._params(), self.worker)  # redo the refit a pickle interrupted (same inputs, same trees)
