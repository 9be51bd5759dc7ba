"""``tree``: boosted trees of the log latency, refitted in the background, with a fast RLS corrector.

The learner is :class:`~predictor.regressors.boosted.BoostedResidual` on the fine features
(:func:`~predictor.features.extract.fine_features`: the batch's own attributes and log batch size, its
co-runners' overlap-weighted attributes, counts, models and the device signals) plus the
batch's model and device kind (categories) and its solo latency where the record carries one.
The target is the log latency, less the log of the record's solo latency when it has one: with
a solo latency the trees learn the log slowdown, without one the latency itself, from the
batch's attributes (where other predictors fall back on a per-(model, batch size) profile that
averages unlike batches together).

The contention features (``co:*``, ``co_model:*``, ``pair:*``, ``x:*``) carry monotone
constraints (``monotone=True``): more co-runners, more overlap, or busier co-runners never
lower the trees' answer.

Refits run in a worker process (or thread) every ``refit_every`` observations on the last ``window`` and
never hold up an answer; the RLS corrector tracks the trees' residual in between (see the
regressor's docstring for how the swap stays deterministic).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from predictor.features.extract import CO, OWN, feature_matrix, fine_features
from predictor.predictors.base import LatencyPredictor
from predictor.records.colocations import CoLocations
from predictor.records.record import Record
from predictor.regressors.boosted import BoostedResidual

CONTENTION_PREFIXES = ("co:", "co_model:", "pair:", "x:")
"""Feature-name prefixes of the contention features (monotone non-decreasing with ``monotone``)."""
WORK = "*batch"
"""Suffix of the work features: an attribute times the batch size (own ``own:K*batch``, co-runners'
overlap-weighted ``co:K*batch``, monotone like the other ``co:`` features)."""
MARGIN = math.log(2.0)
"""Answers stay within a factor 2 of the range of targets seen."""


def work_features(record: Record) -> dict[str, float]:
    """Each attribute times the batch size: the batch's own (``own:K*batch``) and the co-runners',
    overlap-weighted and summed (``co:K*batch``; a co-runner of overlap 0 adds nothing).

    The work a batch does grows with its attributes (a sequence length, an input size) and its
    size together; the fine features carry them apart (attributes, log batch sizes), which a
    tree can only combine with many splits.
    """
    batch = record.batch
    size = batch.batch_size
    own, co = _OWN_WORK, _CO_WORK
    out = {own.get(key) or _work_name(own, OWN, key): value * size for key, value in batch.attrs.items()}
    get = out.get
    for runner in record.co_runners:
        if runner.overlap == 0.0:
            continue
        weight = runner.overlap * runner.batch_size
        for key, value in runner.attrs.items():
            name = co.get(key) or _work_name(co, CO, key)
            out[name] = get(name, 0.0) + weight * value
    return out


_OWN_WORK: dict[str, str] = {}
_CO_WORK: dict[str, str] = {}
"""The work features' names by attribute (made once: the one-row hot path builds no string)."""
MAX_NAMES = 4096
"""Names kept by attribute (then forgotten at once: clients may send any attributes)."""


def _work_name(names: dict[str, str], prefix: str, key: str) -> str:
    """``prefix + key + WORK``, kept in ``names``."""
    if len(names) >= MAX_NAMES:
        names.clear()
    name = names[key] = f"{prefix}{key}{WORK}"
    return name


def work_columns(rows: CoLocations) -> tuple[tuple[str, ...], np.ndarray]:
    """:func:`work_features` of every row as columns (a row without a feature has 0 there)."""
    n = len(rows)
    batch = rows.batch
    names = [f"{OWN}{key}{WORK}" for key in batch.attrs]
    columns = [np.full(n, value * batch.batch_size) for value in batch.attrs.values()]
    owner = rows.rows_of_runners()
    weights = np.asarray(rows.overlaps, dtype=float) * np.asarray(rows.batch_sizes, dtype=float)
    for key in sorted({key for attrs in rows.attrs for key in attrs}):
        values = np.array([attrs.get(key, 0.0) for attrs in rows.attrs], dtype=float)
        names.append(f"{CO}{key}{WORK}")
        columns.append(np.bincount(owner, weights=weights * values, minlength=n))
    return tuple(names), np.column_stack(columns) if columns else np.zeros((n, 0))


def clamp(value: float, low: float, high: float) -> float:
    """A regressor's ``value`` kept within :data:`MARGIN` of the targets seen, ``low`` to ``high``
    (within ``[-20, 20]`` before any; a value that is not finite: the middle, or 0)."""
    if low > high:
        return min(max(value, -20.0), 20.0) if math.isfinite(value) else 0.0
    if not math.isfinite(value):
        return (low + high) / 2
    return min(max(value, low - MARGIN), high + MARGIN)


class TreePredictor(LatencyPredictor):
    """Gradient-boosted trees (LightGBM) of the log latency plus an online RLS corrector.

    Parameters
    ----------
    window
        Observations the trees are fitted on (the most recent).
    refit_every
        Observations between refits.
    first_fit
        Observations before the first fit.
    swap_after
        Observations between a refit's start and its trees taking over.
    n_estimators, num_leaves, learning_rate, min_child_samples, max_bin
        LightGBM's settings (``max_bin``: most histogram bins per column).
    monotone
        Constrain the trees to be non-decreasing in the contention features.
    work
        Add the :func:`work_features` (attributes times batch sizes) to the fine features.
    corrector_forgetting, corrector_delta
        The RLS corrector's forgetting factor and prior scale.
    background
        Refit away from the learning call (``False``: inside it).
    worker
        Where a background refit runs: ``"process"`` (a persistent worker process, off this
        process's GIL) or ``"thread"``; both give the same trees.
    """

    name = "tree"

    def __init__(
        self,
        window: int = 8000,
        refit_every: int = 1000,
        first_fit: int = 200,
        swap_after: int = 100,
        n_estimators: int = 300,
        num_leaves: int = 31,
        learning_rate: float = 0.1,
        min_child_samples: int = 10,
        max_bin: int = 255,
        monotone: bool = True,
        work: bool = True,
        corrector_forgetting: float = 0.995,
        corrector_delta: float = 0.1,
        background: bool = True,
        worker: str = "process",
        seed: int = 0,
    ):
        super().__init__(seed=seed)
        self.window = window
        self.refit_every = refit_every
        self.first_fit = first_fit
        self.swap_after = swap_after
        self.n_estimators = n_estimators
        self.num_leaves = num_leaves
        self.learning_rate = learning_rate
        self.min_child_samples = min_child_samples
        self.max_bin = max_bin
        self.monotone = monotone
        self.work = work
        self.corrector_forgetting = corrector_forgetting
        self.corrector_delta = corrector_delta
        self.background = background
        self.worker = worker
        self._model = BoostedResidual(
            window=window, refit_every=refit_every, first_fit=first_fit, swap_after=swap_after,
            n_estimators=n_estimators, num_leaves=num_leaves, learning_rate=learning_rate,
            min_child_samples=min_child_samples, max_bin=max_bin, increasing=",".join(CONTENTION_PREFIXES) if monotone else "",
            corrector_forgetting=corrector_forgetting, corrector_delta=corrector_delta,
            background=background, worker=worker, seed=seed,
        )
        self._target_range = (math.inf, -math.inf)
        self._last: tuple[Record, tuple[dict[str, float], dict[str, str]]] | None = None  # see _parts; not state

    @property
    def regressor(self) -> BoostedResidual:
        """The underlying river regressor (trees and corrector)."""
        return self._model

    # ------------------------------------------------------------------ features
    @staticmethod
    def parts(record: Record, work: bool = True) -> tuple[dict[str, float], dict[str, str]]:
        """The regressor's input for ``record``: numbers (the fine features, the :func:`work_features`
        unless ``work`` is false, whether the record has a solo latency and its log) and categories
        (the model, the device kind)."""
        numeric = fine_features(record)
        if work:
            numeric.update(work_features(record))
        solo = record.solo_latency_ms
        numeric["has_solo"] = 1.0 if solo else 0.0
        numeric["log_solo"] = math.log(solo) if solo else 0.0
        return numeric, {"model": record.batch.model, "kind": record.device_kind}

    @classmethod
    def features(cls, record: Record, work: bool = True) -> dict[str, object]:
        """:meth:`parts` as one dict (the regressor's river-style input)."""
        numeric, categories = cls.parts(record, work)
        return {**numeric, **categories}

    @staticmethod
    def _offset(record: Record) -> float:
        solo = record.solo_latency_ms
        return math.log(solo) if solo else 0.0

    def _parts(self, record: Record) -> tuple[dict[str, float], dict[str, str]]:
        last = self._last
        if last is not None and last[0] is record:
            return last[1]
        parts = self.parts(record, self.work)
        self._last = (record, parts)
        return parts

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_last", None)
        return state

    def __setstate__(self, state: dict) -> None:
        state.setdefault("max_bin", 255)  # a snapshot from before max_bin was a setting: LightGBM's default
        self.__dict__.update(state)
        self._last = None

    def _clamp(self, value: float) -> float:
        return clamp(value, *self._target_range)

    def answer(self, record: Record, value: float, target_range: tuple[float, float]) -> float:
        """The latency :meth:`predict_one` answers for ``record`` where the regressor's value is ``value``
        and the targets seen span ``target_range`` (a blockwise replay's last step)."""
        low, high = target_range
        if not low - MARGIN <= value <= high + MARGIN:
            value = clamp(value, low, high)
        return math.exp(self._offset(record) + value)

    @property
    def target_range(self) -> tuple[float, float]:
        """The smallest and largest target learned (``(inf, -inf)`` before any)."""
        return self._target_range

    def observe_learned(self, record: Record, target: float) -> None:
        """The book-keeping of :meth:`learn_one` once the regressor has learned ``record``'s ``target``
        (for a replay that steps the regressor itself)."""
        low, high = self._target_range
        self._target_range = (min(low, target), max(high, target))
        self._observed(record, record.latency_ms / self.solo_latency(record))  # type: ignore[operator]

    # ------------------------------------------------------------------ the interface
    def predict_one(self, record: Record) -> float:
        """``exp(offset + trees + corrector)``, within a factor 2 of the targets seen (the regressor's
        planned one-row path, :meth:`~predictor.regressors.boosted.BoostedResidual.predict_row`)."""
        numeric, categories = self._parts(record)
        value = self._model.predict_parts(numeric, categories)
        low, high = self._target_range
        if not low - MARGIN <= value <= high + MARGIN:  # within: what _clamp answers, bit for bit
            value = self._clamp(value)
        return math.exp(numeric["log_solo"] + value)  # log_solo: the offset

    def predict_one_by_dicts(self, record: Record) -> float:
        """:meth:`predict_one` through the regressor's dict views (the reference the planned path equals, bit for bit)."""
        value = self._clamp(self._model.predict_dicts(*self._parts(record)))
        return math.exp(self._offset(record) + value)

    def predict_slowdown(self, record: Record) -> float:
        """The predicted latency over the solo latency used for ``record``."""
        return self.predict_one(record) / self.solo_latency(record)

    def learn_slowdown(self, record: Record, slowdown: float) -> None:
        """Learn ``record`` (the latency itself is learned; ``slowdown`` is not needed)."""
        self._learn(record)

    def learn_one(self, record: Record) -> None:
        """Learn the record's log latency (less its log solo latency, when it has one)."""
        if record.latency_ms is None:
            raise ValueError("latency_ms: required to learn from a record")
        self._learn(record)
        self._observed(record, record.latency_ms / self.solo_latency(record))

    def predict_learn_parts(self, record: Record, parts: tuple[dict[str, float], dict[str, str]]) -> float:
        """:meth:`predict_learn_one` of ``record`` whose regressor input ``parts`` (:meth:`parts` of it, with
        this predictor's ``work``) is already made."""
        self._last = (record, parts)
        return self.predict_learn_one(record)

    @classmethod
    def target(cls, record: Record) -> float:
        """What the regressor learns of ``record``: its log latency, less its log solo latency where it has one."""
        if record.latency_ms is None:
            raise ValueError("latency_ms: required to learn from a record")
        return math.log(record.latency_ms) - cls._offset(record)

    def _learn(self, record: Record) -> None:
        target = self.target(record)
        self._model.learn_parts(*self._parts(record), target)
        low, high = self._target_range
        self._target_range = (min(low, target), max(high, target))

    def fit(self, records: Iterable[Record]) -> TreePredictor:
        """Learn a training set one record at a time, then refit on the window at once (:meth:`settle`)."""
        super().fit(records)
        self.settle()
        return self

    def settle(self) -> None:
        """Refit the trees now on the window (the end of a batch fit or of a warm start)."""
        self._model.settle()

    def predict_colocations(self, rows: CoLocations) -> np.ndarray:
        """All rows at once: one fine-feature matrix, the trees walked over every row."""
        matrix = feature_matrix(rows, "fine") if len(rows) else None
        if matrix is None:
            return super().predict_colocations(rows)
        n = len(rows)
        solo = rows.solo_latency_ms
        offset = math.log(solo) if solo else 0.0
        work_names, work = work_columns(rows) if self.work else ((), np.zeros((n, 0)))
        names = (*matrix.names, *work_names, "has_solo", "log_solo")
        values = np.hstack([matrix.values, work, np.tile([1.0 if solo else 0.0, offset], (n, 1))])
        raw = self._model.predict_matrix(
            names, values, {"model": [rows.batch.model] * n, "kind": list(rows.device_kinds)}
        )
        clamped = np.array([self._clamp(v) for v in raw.tolist()])
        return np.exp(offset + clamped)
