"""Features of many co-locations at once: a matrix with named columns.

:func:`feature_matrix` computes, for every row of a
:class:`~predictor.colocations.CoLocations`, the same features as the
per-record functions of :mod:`predictor.features` (``fine`` and
``interactions``), as one ``rows x names`` matrix: a name absent from a
row's feature dict is a 0 in its column, which is what a linear model makes
of an absent feature. Per-row sums run over the co-runners in the same order
as the per-record code, so the values are the same numbers.

It answers ``None`` where a vectorised answer could differ from the dict one,
so the caller falls back to the per-record path: a co-runner attribute named
like a reserved feature (``count``, ``overlap``, ``log_batch``, whose keys
would merge in the dict), or a ``*`` in a key of an interaction term (whose
names could collide).

Examples
--------
>>> from predictor.colocations import CoLocations
>>> from predictor.features import fine_features
>>> from predictor.records import BatchSpec
>>> rows = CoLocations.build(BatchSpec("a", 2, {"l2_util": 0.5}), ["gpu0", "gpu1"],
...                          [[("b", 1, {"l2_util": 0.2}, 0.5)], []])
>>> matrix = feature_matrix(rows, "fine")
>>> row = dict(zip(matrix.names, matrix.values[0].tolist()))
>>> {k: v for k, v in row.items() if v} == fine_features(rows.record(0))
True
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from predictor.colocations import CoLocations
from predictor.features import _interaction_layout, crossed_keys

RESERVED = frozenset({"count", "overlap", "log_batch"})
_LOG1P = [math.log1p(b) for b in range(1025)]


@dataclass(frozen=True, eq=False)
class FeatureMatrix:
    """``values[i, j]`` is feature ``names[j]`` of row ``i``."""

    names: tuple[str, ...]
    values: np.ndarray


def _log1p(batch_size: int) -> float:
    return _LOG1P[batch_size] if batch_size < len(_LOG1P) else math.log1p(batch_size)


@dataclass(frozen=True, eq=False)
class _Layout:
    """What the features of some rows owe to everything but the overlaps (computed once per rows)."""

    row_of: np.ndarray  # per co-runner
    log_batch: np.ndarray  # per co-runner: log1p(batch size)
    by_model: dict[str, np.ndarray]  # co-runner model -> its co-runners' positions
    by_key: dict[str, tuple[np.ndarray, np.ndarray]]  # attribute -> positions and values
    fixed: dict[str, np.ndarray]  # columns independent of the overlaps: own, log_batch, count, signals


def _by_key(maps: Sequence[Mapping[str, float]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """For each key of ``maps``: the positions of the maps that have it (ascending) and its values there.

    Maps are grouped by their tuple of keys (few distinct ones in practice), so the work per map is
    done by builtins, not by Python code.
    """
    key_tuples = list(map(tuple, maps))
    firsts: dict[tuple[str, ...], int] = {}
    first_of = np.fromiter(map(firsts.setdefault, key_tuples, range(len(key_tuples))), dtype=np.intp,
                           count=len(key_tuples))
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for keys, first in firsts.items():
        if not keys:
            continue
        positions = np.flatnonzero(first_of == first) if len(firsts) > 1 else np.arange(len(key_tuples))
        values = np.fromiter(
            itertools.chain.from_iterable(map(dict.values, map(maps.__getitem__, positions.tolist()))),
            dtype=float,
            count=positions.size * len(keys),
        ).reshape(positions.size, len(keys))
        for k, key in enumerate(keys):
            parts.setdefault(key, []).append((positions, values[:, k]))
    out = {}
    for key, pieces in parts.items():
        if len(pieces) == 1:
            out[key] = pieces[0]
        else:
            positions = np.concatenate([p for p, _ in pieces])
            order = np.argsort(positions, kind="stable")
            out[key] = (positions[order], np.concatenate([v for _, v in pieces])[order])
    return out


def _layout(rows: CoLocations) -> _Layout | None:
    cached = rows.cache.get("feature_layout", False)
    if cached is not False:
        return cached
    n = len(rows)
    batch = rows.batch
    fixed: dict[str, np.ndarray] = {f"own:{k}": np.full(n, v) for k, v in batch.attrs.items()}
    fixed["log_batch"] = np.full(n, math.log(batch.batch_size))
    if rows.overlaps.size:
        fixed["co:count"] = np.diff(rows.offsets).astype(float)
    for key, (where, values) in _by_key(rows.signals).items():
        column = np.zeros(n)
        column[where] = values
        fixed[f"sig:{key}"] = column
    by_key = _by_key(rows.attrs)
    layout = None
    if RESERVED.isdisjoint(by_key):
        firsts: dict[str, int] = {}
        first_of = np.fromiter(map(firsts.setdefault, rows.models, range(len(rows.models))), dtype=np.intp,
                               count=len(rows.models))
        layout = _Layout(
            row_of=rows.rows_of_runners(),
            log_batch=np.fromiter(map(_log1p, rows.batch_sizes), dtype=float, count=len(rows.batch_sizes)),
            by_model={m: np.flatnonzero(first_of == first) for m, first in firsts.items()},
            by_key=by_key,
            fixed=fixed,
        )
    rows.cache["feature_layout"] = layout
    return layout


def _fine_columns(rows: CoLocations) -> dict[str, np.ndarray] | None:
    """The ``fine`` features as columns by name, or ``None``.

    Co-runners with overlap 0 are summed in too: they add exact zeros, where the dict
    path skips them, which leaves every sum the same number.
    """
    layout = _layout(rows)
    if layout is None:
        return None
    n = len(rows)
    columns = dict(layout.fixed)
    if rows.overlaps.size:
        w, row_of = rows.overlaps, layout.row_of
        columns["co:overlap"] = np.bincount(row_of, w, minlength=n)
        columns["co:log_batch"] = np.bincount(row_of, w * layout.log_batch, minlength=n)
        own_model = rows.batch.model
        for model, positions in layout.by_model.items():
            total = np.bincount(row_of[positions], w[positions], minlength=n)
            columns[f"co_model:{model}"] = total
            columns[f"pair:{own_model}|{model}"] = total
        for key, (positions, values) in layout.by_key.items():
            columns[f"co:{key}"] = np.bincount(row_of[positions], w[positions] * values, minlength=n)
        for key, own in rows.batch.attrs.items():
            co = columns.get(f"co:{key}")
            if co is not None:
                columns[f"x:{key}"] = own * co
    return columns


@functools.lru_cache(maxsize=1024)
def _quantity_keys(names: tuple[str, ...]) -> tuple[str, ...] | None:
    """The sorted keys crossed by ``interactions`` among ``names`` (``None``: a ``*`` in one)."""
    keys = crossed_keys(names)
    return None if any("*" in k for k in keys) else keys


def feature_matrix(rows: CoLocations, features: str = "interactions") -> FeatureMatrix | None:
    """The ``features`` set (``"fine"`` or ``"interactions"``) of every row; ``None``: use the per-record path."""
    if features not in ("fine", "interactions"):
        return None
    columns = _fine_columns(rows)
    if columns is None:
        return None
    names = tuple(columns)
    blocks = [np.column_stack(list(columns.values()))]
    if features == "interactions":
        keys = _quantity_keys(names)
        if keys is None:
            return None
        extra, first, second = _interaction_layout(keys, rows.batch.model)
        quantities = np.column_stack([columns[k] for k in keys])
        blocks += [quantities[:, first] * quantities[:, second], quantities]
        names += tuple(extra)
    return FeatureMatrix(names, np.hstack(blocks) if len(blocks) > 1 else blocks[0])
