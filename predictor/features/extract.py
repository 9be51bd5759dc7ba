"""Features of co-locations, defined once, computed per record or for many rows at once.

Per record, as ``dict[str, float]``: :func:`coarse_features` (the GPUlet view: plain sums of the
co-runners' attributes), :func:`fine_features` (overlap-weighted sums, per co-runner model and
pair, crosses with the batch's own attributes, counts, device signals but
:data:`~predictor.records.rules.OUTCOME_SIGNALS`), :func:`interaction_features` (plus second-order
terms) and :class:`EwmaCoLocation` (the coarse view smoothed per device). For many rows at once,
:func:`feature_matrix` computes the ``fine`` and ``interactions`` features of every row of a
:class:`~predictor.records.colocations.CoLocations` as a ``rows x names`` matrix (an absent name is
a 0, as a linear model reads it).

Both paths read one table of the fine features (:data:`OWN`, :data:`CO`, :data:`SIGNAL`, ...) and
sum the same terms in the same order: the same numbers (tested on random records). All are
deterministic; a record without co-runners yields the solo case (every co-runner feature zero).

Examples
--------
>>> from predictor.records.colocations import CoLocations
>>> from predictor.records.record import BatchSpec, CoRunner, Record
>>> r = Record(device="gpu0", latency_ms=None,
...            batch=BatchSpec("a", 2, {"l2_util": 0.5}),
...            co_runners=(CoRunner("b", 1, {"l2_util": 0.2}, overlap=0.5),))
>>> coarse_features(r)
{'own:l2_util': 0.5, 'co:l2_util': 0.2, 'co:count': 1.0}
>>> fine_features(r)["co:l2_util"], fine_features(r)["pair:a|b"]
(0.1, 0.5)
>>> matrix = feature_matrix(CoLocations.from_records([r, r]), "fine")
>>> dict(zip(matrix.names, matrix.values[1].tolist())) == fine_features(r)
True
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from predictor.features import quadratic_kernel
from predictor.records.colocations import CoLocations
from predictor.records.keyed import KeyedMaps
from predictor.records.record import BatchSpec, Record
from predictor.records.rules import OUTCOME_SIGNALS

Features = dict[str, float]

_LOG1P = [math.log1p(b) for b in range(1025)]


def _log1p(batch_size: int) -> float:
    """``math.log1p(batch_size)``, looked up for the usual sizes."""
    return _LOG1P[batch_size] if batch_size < len(_LOG1P) else math.log1p(batch_size)


# -- the fine features, defined once: both paths read this table -----------------------------------
OWN = "own:"
"""``own:K``: the batch's own attribute ``K``."""
LOG_BATCH = "log_batch"
"""The log of the batch's size."""
COUNT = "co:count"
"""How many co-runners the batch has, whatever their overlap."""
RUNNER_SUMS: dict[str, Callable[[int], float] | None] = {"co:overlap": None, "co:log_batch": _log1p}
"""Sums over the co-runners of ``overlap * value(co-runner batch size)`` (``None``: the overlap itself)."""
MODEL_SUMS = ("co_model:", "pair:{own}|")
"""The total overlap of the co-runners of each model ``M``, under each of these prefixes followed by ``M``
(``own``: the batch's model)."""
CO = "co:"
"""``co:K``: the sum over the co-runners of ``overlap * attribute K``."""
CROSS = "x:"
"""``x:K``: own attribute ``K`` times ``co:K``, where both are present."""
SIGNAL = "sig:"
"""``sig:S``: the device signal ``S``."""
RESERVED = frozenset(name.removeprefix(CO) for name in (COUNT, *RUNNER_SUMS))
"""Co-runner attributes whose ``co:K`` would merge into another feature (the matrix declines them)."""


def _add(features: Features, key: str, value: float) -> None:
    features[key] = features.get(key, 0.0) + value


def own_features(record: Record) -> Features:
    """The batch's own attributes."""
    return {OWN + k: v for k, v in record.batch.attrs.items()}


def _batch_features(batch: BatchSpec) -> Features:
    """The fine features every row of ``batch`` shares: own attributes and :data:`LOG_BATCH`."""
    features = {OWN + k: v for k, v in batch.attrs.items()}
    features[LOG_BATCH] = math.log(batch.batch_size)
    return features


def _add_crosses(features: MutableMapping[str, Any], own_attrs: Mapping[str, float]) -> None:
    """Add :data:`CROSS` terms to ``features`` (floats or columns alike)."""
    for key, own_value in own_attrs.items():
        co_value = features.get(CO + key)
        if co_value is not None:
            features[CROSS + key] = own_value * co_value


def coarse_features(record: Record) -> Features:
    """GPUlet-style features: own attrs and unweighted sums of co-runner attrs."""
    features = own_features(record)
    for runner in record.co_runners:
        for key, value in runner.attrs.items():
            _add(features, CO + key, value)
    if record.co_runners:
        features[COUNT] = float(len(record.co_runners))
    return features


def fine_features(record: Record) -> Features:
    """Overlap-weighted, fine-grained co-location features.

    Keys: ``own:K`` own attributes; ``log_batch``; ``co:K`` overlap-weighted
    sum of co-runner attribute K; ``co:overlap`` total overlap; ``co:count``
    number of co-runners; ``co:log_batch`` overlap-weighted log batch size;
    ``co_model:M`` overlap per co-runner model; ``pair:A|B`` overlap per pair
    of own model and co-runner model; ``x:K`` product of own attribute K and
    ``co:K``; ``sig:S`` device signals. A co-runner of overlap 0 counts in
    ``co:count`` only.
    """
    return _fine_parts(record, None)


def _fine_parts(record: Record, identity: Features | None) -> Features:
    """:func:`fine_features`, the :data:`MODEL_SUMS` put in ``identity`` where given (else among the others)."""
    batch = record.batch
    features = _batch_features(batch)
    runners = record.co_runners
    if runners:
        # The sums of _add, inlined: this is every answer's and every observation's hot path.
        get = features.get
        sums = features if identity is None else identity
        sums_get = sums.get
        model_sums = _model_sums(batch.model)
        for runner in runners:
            weight = runner.overlap
            features[COUNT] = get(COUNT, 0.0) + 1.0
            if weight == 0.0:
                continue
            for name, value_of in _RUNNER_SUMS:
                features[name] = get(name, 0.0) + (weight if value_of is None else weight * value_of(runner.batch_size))
            for prefix in model_sums:
                name = prefix + runner.model
                sums[name] = sums_get(name, 0.0) + weight
            for key, value in runner.attrs.items():
                name = CO + key
                features[name] = get(name, 0.0) + weight * value
        _add_crosses(features, batch.attrs)
    for key, value in record.signals.items():
        if key not in OUTCOME_SIGNALS:
            features[SIGNAL + key] = value
    return features


_RUNNER_SUMS = tuple(RUNNER_SUMS.items())


@functools.lru_cache(maxsize=4096)
def _model_sums(own: str) -> tuple[str, ...]:
    """The :data:`MODEL_SUMS` prefixes of a batch of model ``own``."""
    return tuple(prefix.format(own=own) for prefix in MODEL_SUMS)


@functools.lru_cache(maxsize=1024)
def _interaction_layout(keys: tuple[str, ...], model: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Names and index pairs of the second-order terms over ``keys`` (cached per key set)."""
    first, second = np.triu_indices(len(keys))
    names = [f"{keys[i]}*{keys[j]}" for i, j in zip(first, second, strict=True)]
    names += [f"m:{model}*{key}" for key in keys]
    return names, first, second


def interaction_features(record: Record) -> Features:
    """:func:`fine_features` plus second-order terms.

    Adds the products of every pair of numeric co-location quantities (own
    attributes, ``log_batch``, overlap-weighted co-runner attributes and
    log batch sizes) and, per own model, a copy of each of them
    (``m:MODEL*K``), so that a linear learner can fit curvature and
    model-specific sensitivity. Device signals are not crossed.
    """
    features = fine_features(record)
    keys = crossed_keys(tuple(features))
    names, first, second = _interaction_layout(keys, record.batch.model)
    values = np.fromiter(map(features.__getitem__, keys), dtype=float, count=len(keys))
    products = values[first]
    products *= values[second]
    features.update(zip(names, itertools.chain(products.tolist(), values.tolist()), strict=True))
    return features


@dataclass(frozen=True, eq=False)
class RowLayout:
    """Where the interaction features of one row come from, given its fine feature names."""

    names: tuple[str, ...]  # every name, in interaction_features' order
    keys: np.ndarray  # position among the fine features of each crossed key
    left: np.ndarray  # the pairs of crossed keys multiplied: their positions among the fine features
    right: np.ndarray


@functools.lru_cache(maxsize=1024)
def row_layout(fine: tuple[str, ...], model: str) -> RowLayout | None:
    """Where the interaction features of a row of fine feature names ``fine`` (of a batch of
    ``model``) come from (cached; ``None``: a name would repeat, only the dict path answers)."""
    keys = crossed_keys(fine)
    extra, first, second = _interaction_layout(keys, model)
    names = fine + tuple(extra)
    if len(set(names)) != len(names):  # an interaction name equal to another: the dict merges them
        return None
    at = {name: j for j, name in enumerate(fine)}
    positions = np.array([at[k] for k in keys], dtype=np.intp)
    return RowLayout(names, positions, positions[first], positions[second])


def interaction_row(record: Record) -> tuple[tuple[str, ...], np.ndarray]:
    """:func:`interaction_features` of ``record`` as its names and their values, without the dict.

    The same names in the same order, and the same numbers: the products are computed alike
    (the one-row hot path, feeding :meth:`~predictor.regressors.feature_index.FeatureIndex.vector_of`).
    The names tuple is shared by every row of the same fine names and model (cached).
    """
    fine = fine_features(record)
    layout = row_layout(tuple(fine), record.batch.model)
    if layout is None:
        features = interaction_features(record)
        return tuple(features), np.fromiter(features.values(), dtype=float, count=len(features))
    return layout.names, interaction_values(layout, np.fromiter(fine.values(), dtype=float, count=len(fine)))


def interaction_values(layout: RowLayout, values: np.ndarray) -> np.ndarray:
    """The interaction features' values (in ``layout.names``' order) of the fine features ``values``
    (in the order ``layout`` was made for): the values, their pairwise products, the crossed ones."""
    return np.concatenate((values, values[layout.left] * values[layout.right], values[layout.keys]))


_NONE = np.zeros(0, dtype=np.intp)


@functools.lru_cache(maxsize=1024)
def _plain_layout(names: tuple[str, ...]) -> RowLayout:
    """The layout of a row whose features are its values alone (no products, no copies)."""
    return RowLayout(names, _NONE, _NONE, _NONE)


def planned_row(record: Record, features: str) -> tuple[RowLayout, Features]:
    """:func:`feature_row` of ``record`` before its products: the layout saying how the row's values
    come from ``base``, and ``base``.

    The row's values, in ``layout.names``' order, are ``base``'s values (in its order), then the
    products of ``layout.left`` and ``layout.right``'s entries of them, then the entries at
    ``layout.keys`` (:func:`interaction_values`); for ``fine`` and ``coarse`` (and an
    ``interactions`` row whose names would repeat, which the dict merges), ``base``'s values alone.
    The layout is shared by every row of the same names (cached), so a caller can key on it by
    identity and leave the products to compiled code.
    """
    if features == "interactions":
        fine = fine_features(record)
        layout = row_layout(tuple(fine), record.batch.model)
        if layout is not None:
            return layout, fine
        computed = interaction_features(record)
    else:
        computed = FEATURE_SETS[features](record)
    return _plain_layout(tuple(computed)), computed


def planned_parts(record: Record, features: str, fine: Features | None = None) -> tuple[RowLayout, Features, Features]:
    """:func:`planned_row` of ``record`` with its model-identity features (the :data:`MODEL_SUMS`: one
    name per co-runner model, and per pair of models) kept apart: ``layout, base, identity``.

    The row's features are ``layout``'s (as :func:`planned_row` makes them from ``base``) and
    ``identity``'s (no two alike: the identity names are never crossed nor copied), the same numbers as
    :func:`feature_row`'s. ``layout`` depends on the batch's model and the names of ``base``, not on
    which models the co-runners are, so a fleet of many models shares few layouts. For the ``coarse``
    set, or an ``interactions`` row whose names would repeat, ``identity`` is empty.

    ``fine``: the record's :func:`fine_features`, where already computed (for several learners): the
    parts are split out of them, the same names in the same order and numbers. ``fine`` is not
    changed; ``base`` may be ``fine`` itself (a record with no model-identity feature).
    """
    if features == "coarse":
        return (*planned_row(record, features), {})
    identity: Features = {}
    base = _fine_parts(record, identity) if fine is None else _without_identity(record, fine, identity)
    if features == "fine":
        return _plain_layout(tuple(base)), base, identity
    layout = row_layout(tuple(base), record.batch.model)
    if layout is None:
        return (*planned_row(record, features), {})
    return layout, base, identity


def _without_identity(record: Record, fine: Features, identity: Features) -> Features:
    """``fine`` without its model-identity features, which go into ``identity`` in the order
    :func:`_fine_parts` first writes them (a co-runner of overlap 0 writes none); the other names keep their order."""
    prefixes = _model_sums(record.batch.model)
    for runner in record.co_runners:
        if runner.overlap == 0.0:
            continue
        for prefix in prefixes:
            name = prefix + runner.model
            if name not in identity:
                identity[name] = fine[name]
    if not identity:
        return fine
    base = dict(fine)
    for name in identity:
        del base[name]
    return base


def feature_row(record: Record, features: str) -> tuple[tuple[str, ...], np.ndarray]:
    """The ``features`` set (a key of :data:`FEATURE_SETS`) of ``record`` as names and values."""
    if features == "interactions":
        return interaction_row(record)
    computed = FEATURE_SETS[features](record)
    return tuple(computed), np.fromiter(computed.values(), dtype=float, count=len(computed))


@functools.lru_cache(maxsize=4096)
def crossed_keys(names: tuple[str, ...]) -> tuple[str, ...]:
    """The keys among ``names`` that :func:`interaction_features` crosses, sorted (cached per key set)."""
    return tuple(
        sorted(k for k in names if k.startswith(OWN) or (k.startswith(CO) and k != COUNT) or k == LOG_BATCH)
    )


FEATURE_SETS = {"coarse": coarse_features, "fine": fine_features, "interactions": interaction_features}


# -- many rows at once -------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class FeatureMatrix:
    """``values[i, j]`` is feature ``names[j]`` of row ``i``."""

    names: tuple[str, ...]
    values: np.ndarray


@dataclass(frozen=True, eq=False)
class _Layout:
    """What the features of some rows owe to everything but the overlaps (computed once per rows)."""

    row_of: np.ndarray  # per co-runner
    runner_values: dict[str, np.ndarray | None]  # RUNNER_SUMS name -> per co-runner value (None: 1)
    models: tuple[str, ...]  # the co-runners' models, in order of first co-runner
    model_code: np.ndarray  # per co-runner, its model's place in ``models``
    by_key: dict[str, tuple[np.ndarray, np.ndarray]]  # attribute -> positions and values
    fixed_names: tuple[str, ...]  # the columns independent of the overlaps: own, log_batch, count, signals
    fixed_values: np.ndarray  # their values, one row each (names x rows)

    @functools.cached_property
    def by_model(self) -> dict[str, np.ndarray]:
        """Co-runner model -> its co-runners' positions (ascending), models in order of first co-runner
        (made where first asked: a ranking's quadratic forms do without)."""
        return {model: np.flatnonzero(self.model_code == c) for c, model in enumerate(self.models)}


def _by_key(maps: Sequence[Mapping[str, float]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """For each key of ``maps``: the positions of the maps that have it (ascending) and its values there.

    Maps are grouped by their tuple of keys (few distinct ones in practice), so the work per map is
    done by builtins, not by Python code; :class:`~predictor.records.keyed.KeyedMaps` are read as their matrix.
    """
    if isinstance(maps, KeyedMaps):
        return maps.by_key()
    if not any(maps):
        return {}
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


def _each_distinct(value_of: Callable[[int], float], sizes: Sequence[int]) -> np.ndarray:
    """``value_of`` of every batch size, called once per distinct size (a ranking's co-runners
    have a few)."""
    if len(sizes) < 64:
        return np.fromiter(map(value_of, sizes), float, len(sizes))
    values = np.fromiter(sizes, dtype=np.int64, count=len(sizes))
    if values.min() >= 0 and values.max() < 1 << 16:  # a table of the sizes present
        present = np.flatnonzero(np.bincount(values))
        table = np.zeros(int(present[-1]) + 1)
        table[present] = np.fromiter(map(value_of, present.tolist()), float, present.size)
        return table[values]
    distinct, inverse = np.unique(values, return_inverse=True)
    return np.fromiter(map(value_of, distinct.tolist()), float, distinct.size)[inverse]


def _layout(rows: CoLocations) -> _Layout | None:
    cached = rows.cache.get("feature_layout", False)
    if cached is not False:
        return cached
    n = len(rows)
    own = _batch_features(rows.batch)
    signals = [(SIGNAL + key, where, values) for key, (where, values) in _by_key(rows.signals).items()
               if key not in OUTCOME_SIGNALS]
    counted = bool(rows.overlaps.size)
    fixed_names = (*own, *((COUNT,) if counted else ()), *(name for name, _, _ in signals))
    fixed_values = np.zeros((len(fixed_names), n))
    fixed_values[:len(own)] = np.fromiter(own.values(), dtype=float, count=len(own))[:, None]
    if counted:
        np.subtract(rows.offsets[1:], rows.offsets[:-1], out=fixed_values[len(own)])
    for at, (_, where, values) in enumerate(signals, start=len(own) + counted):
        fixed_values[at, where] = values
    by_key = _by_key(rows.attrs)
    layout = None
    if RESERVED.isdisjoint(by_key):
        codes: dict[str, int] = {}
        model_code = np.array([codes.setdefault(m, len(codes)) for m in rows.models], dtype=np.intp)
        layout = _Layout(
            row_of=rows.rows_of_runners(),
            runner_values={
                name: None if value_of is None else _each_distinct(value_of, rows.batch_sizes)
                for name, value_of in RUNNER_SUMS.items()
            },
            models=tuple(codes),
            model_code=model_code,
            by_key=by_key,
            fixed_names=fixed_names,
            fixed_values=fixed_values,
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
    columns = dict(zip(layout.fixed_names, layout.fixed_values, strict=True))  # the constant columns by name
    if rows.overlaps.size:
        w, row_of = rows.overlaps, layout.row_of
        for name, values in layout.runner_values.items():
            columns[name] = np.bincount(row_of, w if values is None else w * values, minlength=n)
        model_sums = _model_sums(rows.batch.model)
        for model, positions in layout.by_model.items():
            total = np.bincount(row_of[positions], w[positions], minlength=n)
            for prefix in model_sums:
                columns[prefix + model] = total
        for key, (positions, values) in layout.by_key.items():
            columns[CO + key] = np.bincount(row_of[positions], w[positions] * values, minlength=n)
    _add_crosses(columns, rows.batch.attrs)
    return columns


@functools.lru_cache(maxsize=1024)
def _quantity_keys(names: tuple[str, ...]) -> tuple[str, ...] | None:
    """The sorted keys crossed by ``interactions`` among ``names`` (``None``: a ``*`` in one)."""
    keys = crossed_keys(names)
    return None if any("*" in k for k in keys) else keys


def feature_matrix(rows: CoLocations, features: str = "interactions") -> FeatureMatrix | None:
    """The ``features`` set (``"fine"`` or ``"interactions"``) of every row of ``rows``.

    Answers ``None`` where a matrix could differ from the per-record dicts, so the caller
    uses the per-record path: another feature set, a co-runner attribute in :data:`RESERVED`
    (whose ``co:K`` would merge with another feature in a dict), or a ``*`` in a crossed key
    (whose interaction names could collide).
    """
    if features not in ("fine", "interactions"):
        return None
    columns = _fine_columns(rows)
    if columns is None:
        return None
    names = tuple(columns)
    if features == "fine":
        return FeatureMatrix(names, np.column_stack(list(columns.values())))
    keys = _quantity_keys(names)
    if keys is None:
        return None
    extra, first, second = _interaction_layout(keys, rows.batch.model)
    at = _quantity_columns(names, keys)
    # one matrix, filled in place: the fine columns, the products of the quantities, the quantities
    fine, pairs = len(names), first.size
    values = np.empty((len(rows), fine + pairs + len(keys)))
    np.stack(list(columns.values()), axis=1, out=values[:, :fine])
    quantities = values[:, fine + pairs:]
    np.take(values, at, axis=1, out=quantities)
    np.multiply(quantities[:, first], quantities[:, second], out=values[:, fine:fine + pairs])
    return FeatureMatrix(names + tuple(extra), values)


@functools.lru_cache(maxsize=1024)
def _quantity_columns(names: tuple[str, ...], keys: tuple[str, ...]) -> np.ndarray:
    """The column of each of ``keys`` among ``names``."""
    where = {name: j for j, name in enumerate(names)}
    return np.array([where[k] for k in keys], dtype=np.intp)


class EwmaCoLocation:
    """Co-location signals smoothed per device with an EWMA.

    ``s_t = alpha * x_t + (1 - alpha) * s_{t-1}``, started at the first value.
    Smoothed keys are the co-runner part of :func:`coarse_features` and the
    device signals; the batch's own attributes are passed through unsmoothed.
    A key absent from a record counts as 0 for that step.

    Parameters
    ----------
    alpha
        Weight of the newest value, in (0, 1].

    Examples
    --------
    >>> from predictor.records.record import BatchSpec, CoRunner, Record
    >>> ewma = EwmaCoLocation(alpha=0.5)
    >>> def rec(l2):
    ...     return Record("gpu0", BatchSpec("a", 1), None,
    ...                   co_runners=(CoRunner("b", 1, {"l2": l2}),))
    >>> ewma.update(rec(1.0))["co:l2"]
    1.0
    >>> ewma.update(rec(0.0))["co:l2"]
    0.5
    >>> ewma.features(rec(0.0))["co:l2"]  # a preview: state not committed
    0.25
    """

    def __init__(self, alpha: float = 0.3):
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1], got {alpha!r}")
        self.alpha = alpha
        self._state: dict[str, Features] = {}

    def _smoothed(self, record: Record) -> tuple[Features, Features]:
        # the co-runner part of coarse_features (its sums in its order, co:count last), then the signals
        shared: Features = {}
        runners = record.co_runners
        if runners:
            get = shared.get
            for runner in runners:
                for key, value in runner.attrs.items():
                    name = CO + key
                    shared[name] = get(name, 0.0) + value
            shared[COUNT] = float(len(runners))
        for key, value in record.signals.items():
            if key not in OUTCOME_SIGNALS:
                shared[SIGNAL + key] = value
        previous = self._state.get(record.device)
        if previous is None:
            smoothed = shared
        else:
            a = self.alpha
            b = 1 - a
            get = previous.get
            smoothed = {k: a * v + b * get(k, 0.0) for k, v in shared.items()}
            if len(smoothed) != len(previous) or not smoothed.keys() >= previous.keys():
                for k, v in previous.items():  # a key absent from this record counts as 0
                    if k not in smoothed:
                        smoothed[k] = a * 0.0 + b * v
        features = own_features(record)
        features.update(smoothed)
        return features, smoothed

    def features(self, record: Record) -> Features:
        """The smoothed features for ``record`` without changing the state."""
        return self._smoothed(record)[0]

    def update(self, record: Record) -> Features:
        """Smooth ``record`` into the device's state and return its features."""
        features, smoothed = self._smoothed(record)
        self._state[record.device] = smoothed
        return features


# -- many rows, many overlaps: the matrix as a function of the overlaps -------------------------------
@dataclass(frozen=True, eq=False)
class FeatureForm:
    """The ``interactions`` or ``fine`` matrix of some rows (``subset`` of a
    :class:`~predictor.records.colocations.CoLocations`) as a function of the co-runners' overlaps.

    What does not depend on the overlaps is computed once: the columns that are constant
    (own attributes, counts, signals), and each row's co-runners' values per overlap-weighted
    column, padded to the most co-runners a row has. :meth:`values` gives
    ``feature_matrix(rows.with_overlaps(overlaps)).values[subset]``: the same names, and
    the same numbers (each sum adds its row's terms in order, as ``np.bincount``; padding
    adds exact zeros). The matrix is built column by column (a transposed array), where
    gathering columns copies contiguous memory.
    """

    names: tuple[str, ...]
    width: int  # fine columns
    fixed_at: np.ndarray  # columns of the constant ones
    fixed: np.ndarray  # len(fixed_at) x subset: their values, transposed
    summed_at: np.ndarray  # columns of the overlap-weighted sums
    gather: np.ndarray  # most co-runners x subset: the k-th co-runner of each row (padding: one past the last)
    weighted: np.ndarray  # len(summed_at) x most co-runners x subset: its value per unit overlap (padding: 0)
    crosses: tuple[np.ndarray, np.ndarray, np.ndarray]  # x:K column, its co:K column, own value
    interactions: tuple[np.ndarray, np.ndarray, np.ndarray] | None  # quantities' columns, pairs

    def __len__(self) -> int:
        return self.fixed.shape[1]

    def values(self, overlaps: np.ndarray) -> np.ndarray:
        """The matrix (subset rows x :attr:`names`) at these overlaps (one per co-runner of the rows)."""
        return self._columns(np.append(overlaps, 0.0)[self.gather] if self.gather.shape[0] else None).T

    def _columns(self, o: np.ndarray | None) -> np.ndarray:
        """The matrix, transposed (:attr:`names` x rows), at the overlaps ``o`` of each row's
        ``k``-th co-runner (:attr:`gather`'s shape, padding 0)."""
        out = np.empty((len(self.names), self.fixed.shape[1]))
        out[self.fixed_at] = self.fixed
        if self.summed_at.size:
            if o is not None:
                sums = o[0] * self.weighted[:, 0]
                for k in range(1, o.shape[0]):
                    sums += o[k] * self.weighted[:, k]
                out[self.summed_at] = sums
            else:
                out[self.summed_at] = 0.0
        cross_at, source, own = self.crosses
        if cross_at.size:
            out[cross_at] = own[:, None] * out[source]
        if self.interactions is not None:
            at, first, second = self.interactions
            fine, pairs = self.width, first.size
            quantities = out[fine + pairs:]
            np.take(out, at, axis=0, out=quantities)
            np.multiply(quantities[first], quantities[second], out=out[fine:fine + pairs])
        return out

    def quadratic(self, weights: np.ndarray, intercept: float, overlaps: np.ndarray | None = None,
                  free: np.ndarray | None = None) -> OverlapQuadratic:
        """``values(overlaps) @ weights + intercept`` (``weights``: one per name) as a quadratic of
        each row's co-runners' overlaps (:class:`OverlapQuadratic`): the same numbers up to
        rounding (the terms summed in another order; all rows' in one compiled call,
        :func:`predictor.features.quadratic_kernel.coefficients`).

        With ``overlaps`` and ``free`` (:attr:`gather`'s shape), a quadratic of the free overlaps
        alone, the others at ``overlaps`` (their coefficients 0, whatever is asked).
        """

        k, n = self.gather.shape[0], len(self)
        if free is None:
            overlaps, free = np.zeros((k, n)), np.ones((k, n), dtype=bool)
        at, first, second = self.interactions if self.interactions is not None else (_NO_COLUMNS,) * 3
        out = np.empty((1 + k + k * k, n))
        quadratic_kernel.coefficients(self.width, self.fixed_at, self.fixed, self.summed_at, self.weighted,
                                      *self.crosses, at, first, second, np.ascontiguousarray(weights, dtype=float),
                                      float(intercept), np.ascontiguousarray(overlaps, dtype=float),
                                      np.ascontiguousarray(free, dtype=bool), out)
        return OverlapQuadratic(self.gather, out)


_NO_COLUMNS = np.zeros(0, dtype=np.intp)


@dataclass(frozen=True, eq=False)
class OverlapQuadratic:
    """A linear model's answer on the rows of a :class:`FeatureForm`, as a quadratic of each row's
    co-runners' overlaps ``o`` (``o[k]``: its ``k``-th co-runner's; padding 0):
    ``constant + linear . o + o . quadratic . o``. Rows are independent: any of them may be
    asked alone (what a fixed point over windows asks, row by row).

    ``coefficients`` stacks, per row, the constant, the ``k`` linear and the ``k * k`` quadratic
    ones (one look-up gives a row's all).
    """

    gather: np.ndarray  # most co-runners x rows: the co-runner of each (k, row) (padding: one past the last)
    coefficients: np.ndarray  # 1 + k + k * k x rows

    @classmethod
    def of(cls, gather: np.ndarray, constant: np.ndarray, linear: np.ndarray, quadratic: np.ndarray
           ) -> OverlapQuadratic:
        """From the constant (rows), linear (k x rows) and quadratic (k x k x rows) coefficients."""
        k, n = linear.shape
        return cls(gather, np.concatenate([constant.reshape(1, n), linear, quadratic.reshape(k * k, n)]))

    def __len__(self) -> int:
        return self.coefficients.shape[1]

    def raw(self, o: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """The answers of rows ``rows`` (``None``: all), ``o`` their overlaps (most co-runners x rows)."""
        c = self.coefficients if rows is None else self.coefficients.take(rows, axis=1)
        k = o.shape[0]
        out = c[0].copy()
        for i in range(k):  # a few co-runners: a loop of whole-row operations
            term = c[1 + i].copy()
            for j in range(k):
                term += c[1 + k + i * k + j] * o[j]
            out += o[i] * term
        return out


@dataclass(frozen=True, eq=False)
class _FormParts:
    """What a :class:`FeatureForm` of any subset of some rows is made from (kept in ``rows.cache``)."""

    names: tuple[str, ...]
    width: int
    fixed_at: np.ndarray
    fixed: np.ndarray  # len(fixed_at) x rows
    summed_at: np.ndarray
    per_runner: np.ndarray  # len(summed_at) x co-runners, then a column of zeros (where padding gathers)
    offsets: np.ndarray
    crosses: tuple[np.ndarray, np.ndarray, np.ndarray]
    interactions: tuple[np.ndarray, np.ndarray, np.ndarray] | None

    def form(self, subset: np.ndarray) -> FeatureForm:
        subset = np.asarray(subset, dtype=np.intp)
        starts = self.offsets[:-1][subset]
        counts = self.offsets[1:][subset] - starts
        most = int(counts.max()) if counts.size else 0
        r = self.per_runner.shape[1] - 1
        k = np.arange(most)[:, None]
        gather = np.where(k < counts, starts + k, r)
        return FeatureForm(
            names=self.names, width=self.width, fixed_at=self.fixed_at,
            fixed=np.take(self.fixed, subset, axis=1), summed_at=self.summed_at, gather=gather,
            weighted=np.take(self.per_runner, gather, axis=1),
            crosses=self.crosses, interactions=self.interactions,
        )


def feature_form(rows: CoLocations, features: str, subset: np.ndarray) -> FeatureForm | None:
    """The :class:`FeatureForm` of rows ``subset`` of ``rows`` (``None`` where :func:`feature_matrix`
    is, or where a column could not be told apart). What serves every subset is kept in ``rows.cache``,
    and so is the last subset's form: the ``fine`` form is the ``interactions`` one's first columns, so
    learners of either features asking for the same rows share one (an ensemble's experts)."""
    if features not in ("fine", "interactions") or not rows.overlaps.size:
        return None
    parts = _form_parts(rows, features)
    if parts is None:
        return None
    subset = np.asarray(subset, dtype=np.intp)
    last = rows.cache.get("feature_form_last")
    if last is None or not np.array_equal(last[0], subset):
        last = rows.cache["feature_form_last"] = (subset, parts.form(subset))
    form = last[1]
    if form.interactions is parts.interactions:
        return form
    twin = object.__new__(FeatureForm)  # dataclasses.replace's copy, without its __init__ (every answer's path)
    twin.__dict__.update(form.__dict__, names=parts.names, interactions=parts.interactions)
    return twin


def _form_parts(rows: CoLocations, features: str) -> _FormParts | None:
    """The :class:`_FormParts` of ``rows`` for ``features`` (kept in ``rows.cache``): the ``interactions``
    parts are the ``fine`` ones and the quantities' products."""
    key = ("feature_form", features)
    parts = rows.cache.get(key, False)
    if parts is not False:
        return parts
    parts = _fine_form(rows) if features == "fine" else _form_parts(rows, "fine")
    if parts is not None and features == "interactions":
        keys = _quantity_keys(parts.names)
        if keys is None:
            parts = None
        else:
            extra, first, second = _interaction_layout(keys, rows.batch.model)
            fine = parts
            parts = object.__new__(_FormParts)  # dataclasses.replace's copy, without its __init__ (every ranking's path)
            parts.__dict__.update(fine.__dict__, names=fine.names + tuple(extra),
                                  interactions=(_quantity_columns(fine.names, keys), first, second))
    rows.cache[key] = parts
    return parts


def _fine_form(rows: CoLocations) -> _FormParts | None:
    """The ``fine`` form of all rows: names in :func:`_fine_columns`' order (constant columns, then the
    overlap-weighted sums, then the crosses), without computing the sums."""
    layout = _layout(rows)
    if layout is None:
        return None
    r = len(rows.batch_sizes)
    prefixes = _model_sums(rows.batch.model)
    runner_names = list(layout.runner_values)
    key_names = [CO + k for k in layout.by_key]
    summed_names = [*runner_names, *(prefix + m for m in layout.models for prefix in prefixes), *key_names]
    summed = set(summed_names)
    fixed = layout.fixed_names
    cross_keys = [k for k in rows.batch.attrs if CO + k in summed or CO + k in fixed]
    listed = [*fixed, *summed_names, *(CROSS + k for k in cross_keys)]
    if len(set(listed)) != len(listed) or any(CO + k not in summed for k in cross_keys):
        return None  # a name met twice merges in the dict path, or a cross of a constant: the general path
    names = tuple(listed)
    index = {name: j for j, name in enumerate(names)}
    # per summed name its value per co-runner: the runner sums', each model's indicator (once per
    # prefix), each attribute's (0 where a co-runner lacks it); then a column of zeros (where padding gathers)
    per_runner = np.zeros((len(summed_names), r + 1))
    for j, value in enumerate(layout.runner_values.values()):
        per_runner[j, :r] = 1.0 if value is None else value
    if r:
        first, each = len(runner_names) + len(prefixes) * layout.model_code, np.arange(r)
        for q in range(len(prefixes)):
            per_runner[first + q, each] = 1.0
    keyed = len(summed_names) - len(key_names)
    for j, (positions, values) in enumerate(layout.by_key.values(), start=keyed):
        per_runner[j, positions] = values
    crosses = [(index[CROSS + k], index[CO + k], rows.batch.attrs[k]) for k in cross_keys]
    n = len(fixed)
    return _FormParts(
        names=names,
        width=len(names),
        fixed_at=np.arange(n, dtype=np.intp),
        fixed=layout.fixed_values,
        summed_at=np.arange(n, n + len(summed_names), dtype=np.intp),
        per_runner=per_runner,
        offsets=rows.offsets,
        crosses=(np.array([c[0] for c in crosses], dtype=np.intp), np.array([c[1] for c in crosses], dtype=np.intp),
                 np.array([c[2] for c in crosses], dtype=float)),
        interactions=None,
    )
