"""Gradient-boosted trees fitted by LightGBM, evaluated by a compiled walk over the exported trees.

:func:`fit_trees` fits a LightGBM regressor (monotone constraints where asked) and exports its
trees as flat arrays (:class:`TreeArrays`); :meth:`TreeArrays.predict_vector` walks them, packed
(:class:`PackedTrees`: the internal nodes alone, 32-bit), with a numba-compiled loop, which
spares a single row the checks of LightGBM's Python wrapper; the walk gives LightGBM's numbers
exactly (tested).

LightGBM loads on first use; the walks are compiled at their first call and kept in numba's on-disk cache.

Examples
--------
>>> import numpy as np
>>> X = np.random.default_rng(0).random((500, 2))
>>> trees, booster = fit_trees(X, 2.0 * X[:, 0], names=("a", "b"), n_estimators=50, return_booster=True)
>>> bool(trees.predict_vector(X[3]) == booster.predict(X[3:4])[0]), round(float(trees.predict_vector(X[3]) / (2 * X[3, 0])), 1)
(True, 1.0)
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _walk_one(x, feature, threshold, left, right, value, roots):  # pragma: no cover - compiled
    total = 0.0
    for root in roots:
        node = root
        while feature[node] >= 0:
            node = left[node] if x[feature[node]] <= threshold[node] else right[node]
        total += value[node]
    return total


@njit(cache=True, nogil=True, inline="always")
def _step(x, nodes, threshold, node):  # pragma: no cover - compiled
    at = 3 * node
    return nodes[at + 1] if x[nodes[at]] <= threshold[node] else nodes[at + 2]


@njit(cache=True, nogil=True)
def _walk_packed(x, nodes, threshold, leaves, roots):  # pragma: no cover - compiled
    # eight trees walked side by side (their loads overlap), their leaves added in tree order
    total = 0.0
    n = roots.size
    t = 0
    while t + 8 <= n:
        a, b, c, d = roots[t], roots[t + 1], roots[t + 2], roots[t + 3]
        e, f, g, h = roots[t + 4], roots[t + 5], roots[t + 6], roots[t + 7]
        while a >= 0 or b >= 0 or c >= 0 or d >= 0 or e >= 0 or f >= 0 or g >= 0 or h >= 0:
            if a >= 0:
                a = _step(x, nodes, threshold, a)
            if b >= 0:
                b = _step(x, nodes, threshold, b)
            if c >= 0:
                c = _step(x, nodes, threshold, c)
            if d >= 0:
                d = _step(x, nodes, threshold, d)
            if e >= 0:
                e = _step(x, nodes, threshold, e)
            if f >= 0:
                f = _step(x, nodes, threshold, f)
            if g >= 0:
                g = _step(x, nodes, threshold, g)
            if h >= 0:
                h = _step(x, nodes, threshold, h)
        total += leaves[~a]
        total += leaves[~b]
        total += leaves[~c]
        total += leaves[~d]
        total += leaves[~e]
        total += leaves[~f]
        total += leaves[~g]
        total += leaves[~h]
        t += 8
    for rest in range(t, n):
        node = roots[rest]
        while node >= 0:
            node = _step(x, nodes, threshold, node)
        total += leaves[~node]
    return total


@njit(cache=True, nogil=True)
def _walk_many(xs, nodes, threshold, leaves, roots):  # pragma: no cover - compiled
    out = np.zeros(xs.shape[0])
    for i in range(xs.shape[0]):
        out[i] = _walk_packed(xs[i], nodes, threshold, leaves, roots)
    return out


@njit(cache=True, nogil=True)
def _walk_scattered(values, x, x_at, z, z_at, divisors, nodes, threshold, leaves, roots
                    ):  # pragma: no cover - compiled
    # one row, planned: a copy of the template x with values[x_at[1]] at x_at[0] walked;
    # values[z_at[1]] / divisors (0 where a divisor is 0) put at z_at[0] of z, in place
    row = x.copy()
    for j in range(x_at.shape[1]):
        row[x_at[0, j]] = values[x_at[1, j]]
    for j in range(z_at.shape[1]):
        divisor = divisors[j]
        z[z_at[0, j]] = values[z_at[1, j]] / divisor if divisor > 0 else 0.0
    return _walk_packed(row, nodes, threshold, leaves, roots)


@dataclass(frozen=True, eq=False)
class TreeArrays:
    """A fitted tree ensemble as flat node arrays (all trees' nodes in one set of arrays).

    Node ``i`` is internal when ``feature[i] >= 0``: a row goes to ``left[i]`` when
    ``x[feature[i]] <= threshold[i]``, else to ``right[i]``; a leaf adds ``value[i]``.
    ``roots`` holds each tree's first node; ``names`` the columns the features index.
    """

    names: tuple[str, ...]
    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    roots: np.ndarray

    @property
    def n_trees(self) -> int:
        """Number of trees."""
        return int(self.roots.size)

    @functools.cached_property
    def packed(self) -> PackedTrees:
        """The same trees as :class:`PackedTrees` (built on first use, kept with these arrays, not pickled)."""
        return PackedTrees.of(self)

    def __getstate__(self) -> dict:
        # the packed form is a cache of the arrays: a pickle does not depend on whether it was built
        return {k: v for k, v in self.__dict__.items() if k != "packed"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __deepcopy__(self, memo: dict) -> TreeArrays:
        # a deep copy (a published model version) keeps the packed form: packing anew costs more
        twin = object.__new__(TreeArrays)
        twin.__dict__.update({k: copy.deepcopy(v, memo) for k, v in self.__dict__.items()})
        return twin

    def predict_vector(self, x: np.ndarray) -> float:
        """The ensemble's value for one row (``x[j]`` is column ``names[j]``), by the packed walk."""
        return self.packed.predict_vector(x)

    def predict_matrix(self, xs: np.ndarray) -> np.ndarray:
        """The ensemble's value for each row of ``xs``."""
        return self.packed.predict_matrix(xs)

    def walk_nodes(self, x: np.ndarray) -> float:
        """:meth:`predict_vector` by a walk over these node arrays (the reference the packed walk equals)."""
        return float(_walk_one(x, self.feature, self.threshold, self.left, self.right, self.value, self.roots))


@dataclass(frozen=True, eq=False)
class PackedTrees:
    """:class:`TreeArrays` with the internal nodes alone, their fields side by side, for a faster walk.

    Internal node ``i`` splits on column ``nodes[3 * i]`` at ``threshold[i]``; its children are
    ``nodes[3 * i + 1]`` (``x <= threshold``) and ``nodes[3 * i + 2]``: an internal node when
    ``>= 0``, else leaf ``~child``, worth ``leaves[~child]``; ``roots`` likewise (a tree of one leaf
    has a negative root). A walk touches a third of the memory the node arrays take (no leaf
    visits, 32-bit indices, one cache line for a node's split and children) and goes down eight
    trees side by side (their memory loads overlap), and adds the trees' leaves in the same
    order: the same sum, bit for bit (tested).
    """

    nodes: np.ndarray
    threshold: np.ndarray
    leaves: np.ndarray
    roots: np.ndarray

    @classmethod
    def of(cls, trees: TreeArrays) -> PackedTrees:
        """The packed form of ``trees``."""
        internal = trees.feature >= 0
        if trees.feature.size >= 2**31:
            raise ValueError("trees: too many nodes to pack")
        # each node's new number: its rank among the internal nodes, or ~(its rank among the leaves)
        renumber = np.where(internal, np.cumsum(internal) - 1, ~(np.cumsum(~internal) - 1)).astype(np.int32)
        nodes = np.empty((int(internal.sum()), 3), dtype=np.int32)
        nodes[:, 0] = trees.feature[internal]
        nodes[:, 1] = renumber[trees.left[internal]]
        nodes[:, 2] = renumber[trees.right[internal]]
        return cls(nodes.ravel(), np.ascontiguousarray(trees.threshold[internal]),
                   np.ascontiguousarray(trees.value[~internal]), renumber[trees.roots])

    def predict_vector(self, x: np.ndarray) -> float:
        """The ensemble's value for one row (a contiguous float64 row is walked as it is)."""
        return float(_walk_packed(x, self.nodes, self.threshold, self.leaves, self.roots))

    def scattered_walk(self) -> tuple[Callable[..., float], tuple[np.ndarray, ...]]:
        """The compiled one-row kernel of a planned row and these trees' arrays (its last arguments).

        ``kernel(values, x, x_at, z, z_at, divisors, *arrays)`` walks a copy of the template ``x``
        holding ``values[x_at[1]]`` at columns ``x_at[0]`` (the same value as :meth:`predict_vector`
        of that row, bit for bit), and puts ``values[z_at[1]] / divisors`` at ``z_at[0]`` of ``z``
        (in place; ``0`` where a divisor is ``0``): a second vector filled in the same call.
        """
        return _walk_scattered, (self.nodes, self.threshold, self.leaves, self.roots)

    def predict_matrix(self, xs: np.ndarray) -> np.ndarray:
        """The ensemble's value for each row of ``xs``."""
        return _walk_many(np.ascontiguousarray(xs, dtype=float), self.nodes, self.threshold, self.leaves, self.roots)


def export_trees(booster, names: Sequence[str]) -> TreeArrays:
    """Flatten a LightGBM ``Booster``'s trees (numerical ``<=`` splits only) into :class:`TreeArrays`.

    Reads LightGBM's text model (``model_to_string``: per tree, arrays of the internal nodes'
    split features, thresholds, children, and of the leaves' values), with numpy rather than a
    walk over a parsed JSON dump: a refit in a worker thread then holds the GIL for little
    time, which answers in other threads would wait on. Node ``i < n_internal`` of a tree is
    its internal node ``i``; leaf ``j`` becomes node ``n_internal + j``.

    Raises
    ------
    ValueError
        For a split this walk does not evaluate (categorical, or one that routes missing values).
    """
    feature, threshold, left, right, value, roots = [], [], [], [], [], []
    offset = 0
    for block in booster.model_to_string().split("\nTree=")[1:]:
        fields = dict(line.split("=", 1) for line in block.split("\n")[1:] if "=" in line)
        leaves = np.array(fields["leaf_value"].split(), dtype=float)
        n_internal = int(fields["num_leaves"]) - 1
        roots.append(offset)
        if n_internal == 0:
            feature.append(np.array([-1]))
            threshold.append(np.zeros(1))
            left.append(np.array([-1]))
            right.append(np.array([-1]))
            value.append(leaves[:1])
            offset += 1
            continue
        decision = np.array(fields["decision_type"].split(), dtype=np.int64)
        if np.any(decision & 1) or np.any((decision >> 2) & 3):
            raise ValueError("trees: categorical splits and splits routing missing values are not supported")
        children = [np.array(fields[k].split(), dtype=np.int64) for k in ("left_child", "right_child")]
        # a child >= 0 is an internal node; a negative one is leaf ~child
        lc, rc = (np.where(c >= 0, c, n_internal + ~c) + offset for c in children)
        feature.append(np.concatenate([np.array(fields["split_feature"].split(), dtype=np.int64),
                                       np.full(leaves.size, -1)]))
        threshold.append(np.concatenate([np.array(fields["threshold"].split(), dtype=float),
                                         np.zeros(leaves.size)]))
        left.append(np.concatenate([lc, np.full(leaves.size, -1)]))
        right.append(np.concatenate([rc, np.full(leaves.size, -1)]))
        value.append(np.concatenate([np.zeros(n_internal), leaves]))
        offset += n_internal + leaves.size
    return TreeArrays(
        names=tuple(names),
        feature=np.concatenate(feature).astype(np.int64),
        threshold=np.concatenate(threshold),
        left=np.concatenate(left).astype(np.int64),
        right=np.concatenate(right).astype(np.int64),
        value=np.concatenate(value),
        roots=np.asarray(roots, dtype=np.int64),
    )


def load_lightgbm() -> None:
    """Import LightGBM now (seconds: it loads scikit-learn), so that the first :func:`fit_trees` does not wait for it."""
    import lightgbm  # noqa: F401 - imported for its side effect: loaded once per process


def fit_trees(
    X: np.ndarray,
    y: np.ndarray,
    *,
    names: Sequence[str],
    monotone: Sequence[int] | None = None,
    n_estimators: int = 100,
    num_leaves: int = 15,
    learning_rate: float = 0.1,
    min_child_samples: int = 10,
    max_bin: int = 255,
    seed: int = 0,
    return_booster: bool = False,
):
    """Fit LightGBM (L2 loss, one thread, deterministic) and export the trees.

    Parameters
    ----------
    X, y
        Training rows (no missing values: absent features are 0) and targets.
    names
        Column names of ``X``.
    monotone
        Per column: ``1`` (the prediction never decreases as it grows), ``0`` or ``-1``.
    max_bin
        Most bins of a column's histogram (fewer: a faster fit, coarser thresholds).
    return_booster
        Also return LightGBM's ``Booster`` (for comparisons).
    """
    import lightgbm

    params = {
        "objective": "regression",
        "num_leaves": num_leaves,
        "learning_rate": learning_rate,
        "min_data_in_leaf": min(min_child_samples, max(1, len(y) // 2)),
        "min_data_in_bin": 1,
        "max_bin": max_bin,
        "num_threads": 1,
        "deterministic": True,
        "force_row_wise": True,
        "seed": seed,
        "verbose": -1,
        "use_missing": False,
        "zero_as_missing": False,
    }
    if monotone is not None and any(monotone):
        params["monotone_constraints"] = list(monotone)
        params["monotone_constraints_method"] = "intermediate"
    data = lightgbm.Dataset(np.ascontiguousarray(X, dtype=float), np.asarray(y, dtype=float),
                            params={"verbose": -1, "min_data_in_bin": 1, "max_bin": max_bin}, free_raw_data=True)
    booster = lightgbm.train(params, data, num_boost_round=n_estimators)
    trees = export_trees(booster, names)
    return (trees, booster) if return_booster else trees
