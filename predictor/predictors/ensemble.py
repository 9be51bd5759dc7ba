"""``ensemble``: per-key model selection by Hedge (exponential weights) over expert predictors.

Runs several registered predictors side by side (by default ``rls``, ``sgd`` and a ``tree`` whose
refits cost about a sixth of the default ``tree``'s: 63 histogram bins, 100 trees at learning rate
0.3, refits 2,000 observations apart; see :data:`DEFAULT_EXPERTS`) and,
separately for each key (by default the batch's model; or its device kind), weights them by
their recent prequential accuracy: each expert's decayed mean absolute log error, measured on
its prediction *before* it learns the record, gives it the weight ``exp(-eta * error)``
(multiplicative weights, "Hedge", with forgetting so that the weights follow whichever expert
is best *now*). With a large ``eta`` a key follows its recent leader; with a small one it
averages. Predictions are combined in log space (a weighted geometric mean of latencies). A
key seen for the first time starts from the weights over all keys.

Every expert learns every record, so each key can change its choice at any time.
"""

from __future__ import annotations

import copy
import math
import pickle
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from predictor.features.extract import fine_features
from predictor.features.window import WeightedWindowForms, WindowForm, at_window, moving_program
from predictor.predictors.base import (
    LatencyPredictor,
    QuadraticLatencies,
    WeightedLatencies,
    restores_in_place,
)
from predictor.predictors.hedge_kernel import hedge_steps
from predictor.predictors.registry import create
from predictor.predictors.rls import RlsPredictor
from predictor.predictors.sgd import SgdPredictor
from predictor.records.colocations import CoLocations
from predictor.records.record import Record
from predictor.runtime.version_memo import memoised

DEFAULT_EXPERTS = ("rls", "tree:max_bin=63,n_estimators=100,learning_rate=0.3,refit_every=2000", "sgd")
"""The default experts. Within the ensemble the tree expert's cheaper refits cost no accuracy that the
weights do not make up (measured in ``docs/performance.md``), where ``tree`` alone loses some."""


def expert_specs(experts: str) -> list[str]:
    """The expert specifications of a comma-separated list: a piece without ``:`` that holds ``=``
    is a further setting of the expert before it.

    >>> expert_specs("rls, tree:max_bin=63,refit_every=2000, sgd")
    ['rls', 'tree:max_bin=63,refit_every=2000', 'sgd']
    """
    specs: list[str] = []
    for piece in (p.strip() for p in experts.split(",")):
        if not piece:
            continue
        if specs and ":" not in piece and "=" in piece:
            specs[-1] = f"{specs[-1]},{piece}"
        else:
            specs.append(piece)
    return specs
SPLIT_KEYS = (None, "model", "device_kind")


class EnsemblePredictor(LatencyPredictor):
    """Hedge over expert predictors, per key.

    Parameters
    ----------
    experts
        Registered predictor specs, comma-separated (``"rls,tree,sgd"``; an expert's further settings
        follow it, ``"rls,tree:max_bin=63,refit_every=2000,sgd"``: :func:`expert_specs`).
    decay
        Weight of the past in each expert's running error, in [0, 1).
    eta
        Learning rate of the weights: ``w_i ∝ exp(-eta * error_i)``.
    split_by
        ``"model"`` (default) or ``"device_kind"``: separate weights per value; ``None``: one set.
    max_keys
        Most keys with weights of their own (further keys use the overall weights).
    """

    name = "ensemble"

    def __init__(self, experts: str = ",".join(DEFAULT_EXPERTS), decay: float = 0.97, eta: float = 50.0,
                 split_by: str | None = "model", max_keys: int = 1024, seed: int = 0):
        super().__init__(seed=seed)

        names = expert_specs(experts)
        if not names or any(name.split(":")[0] == "ensemble" for name in names):
            raise ValueError(f"experts must list registered predictors other than ensemble, got {experts!r}")
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must lie in [0, 1), got {decay!r}")
        if not eta >= 0:
            raise ValueError(f"eta must be >= 0, got {eta!r}")
        if split_by not in SPLIT_KEYS:
            raise ValueError(f"split_by must be one of {SPLIT_KEYS}, got {split_by!r}")
        if max_keys < 0:
            raise ValueError(f"max_keys must be >= 0, got {max_keys!r}")
        self.experts = experts
        self.decay = decay
        self.eta = eta
        self.split_by = split_by
        self.max_keys = max_keys
        self._experts = [create(name, seed=seed) for name in names]
        self._errors = [0.0] * len(names)  # over all keys
        self._key_errors: dict[str, list[float]] = {}

    def _key(self, record: Record) -> str | None:
        if self.split_by is None:
            return None
        return record.batch.model if self.split_by == "model" else record.device_kind

    def _errors_of(self, key: str | None) -> list[float]:
        return self._errors if key is None else self._key_errors.get(key, self._errors)

    @staticmethod
    def _normalised(errors: list[float], eta: float) -> list[float]:
        best = min(errors)
        raw = [math.exp(-eta * (e - best)) for e in errors]
        total = 0.0  # summed left to right (Python's ``sum`` compensates from 3.12 on): as hedge_steps sums
        for w in raw:
            total += w
        return [w / total for w in raw]

    @property
    def weights(self) -> dict[str, float]:
        """Current weight of each expert over all keys."""
        return dict(zip(self._expert_names(), self._normalised(self._errors, self.eta), strict=True))

    def key_weights(self, key: str) -> dict[str, float]:
        """Current weight of each expert for one key (the overall weights for a key not seen)."""
        return dict(zip(self._expert_names(), self._normalised(self._errors_of(key), self.eta), strict=True))

    def _expert_names(self) -> list[str]:
        return expert_specs(self.experts)

    def fit(self, records: Iterable[Record]) -> EnsemblePredictor:
        """Learn a training set one record at a time (weights included), then let each expert that
        has slow parts bring them up to date (``settle``: the tree's refit on its window)."""
        super().fit(records)
        for expert in self._experts:
            settle = getattr(expert, "settle", None)
            if settle is not None:
                settle()
        return self

    def learn_solo(self, records: Sequence[Record]) -> None:
        """See the base class: this ensemble's solo profile and each expert's."""
        super().learn_solo(records)
        for expert in self._experts:
            expert.learn_solo(records)

    def _weights_of(self, key: str | None) -> tuple[float, ...]:
        """Each expert's weight for ``key`` (remembered by a published copy)."""
        return memoised(self._memo, ("weights", key), lambda: tuple(self._normalised(self._errors_of(key), self.eta)))

    def _combine(self, record: Record, predictions: Sequence[float]) -> float:
        return _geometric_mean(self._weights_of(self._key(record)), predictions)

    def combine_many(self, records: Sequence[Record], predictions: Sequence[Sequence[float]]) -> list[float]:
        """Each record's experts' ``predictions`` (one sequence per expert) combined as :meth:`predict_one`
        combines them, the weights as they stand (looked up once per key)."""
        weights: dict[str | None, tuple[float, ...]] = {}
        out = []
        for record, row in zip(records, zip(*predictions, strict=True), strict=True):
            key = self._key(record)
            found = weights.get(key)
            if found is None:
                found = weights[key] = self._weights_of(key)
            out.append(_geometric_mean(found, row))
        return out

    def predict_one(self, record: Record) -> float:
        """Weighted geometric mean of the experts' latencies, with the weights of ``record``'s key (the
        record's fine features computed once for the ``rls`` and ``sgd`` experts that read them)."""
        experts = self._experts
        readers = [type(expert) in (RlsPredictor, SgdPredictor) and getattr(expert, "features", "fine") != "coarse"
                   for expert in experts]
        if sum(readers) < 2:
            return self._combine(record, [expert.predict_one(record) for expert in experts])
        fine = fine_features(record)
        return self._combine(record, [
            expert._to_latency(record, expert.predict_slowdown(record, fine)) if reads  # type: ignore[call-arg]
            else expert.predict_one(record) for expert, reads in zip(experts, readers, strict=True)])

    def predict_colocations(self, rows: CoLocations) -> np.ndarray:
        """All rows at once: each expert's :meth:`~LatencyPredictor.predict_colocations`, combined per row
        with the weights of its key as :meth:`predict_one` combines them (the same sum, term by term)."""
        if not len(rows):
            return np.zeros(0)
        predictions = [expert.predict_colocations(rows) for expert in self._experts]
        # rows share one batch: one key for all, but with the device kind as key
        keys = list(rows.device_kinds) if self.split_by == "device_kind" else [self._key(rows.alone())]
        distinct = list(dict.fromkeys(keys))
        of_row = np.array(keys, dtype=object) if len(distinct) > 1 else None
        out = np.empty(len(rows))
        for key in distinct:
            at = slice(None) if of_row is None else of_row == key
            total: np.ndarray | float = 0.0
            for weight, predicted in zip(self._weights_of(key), predictions, strict=True):
                if weight > 0:
                    total = total + weight * np.log(predicted[at])
            out[at] = np.exp(total)
        return out

    def colocation_form(self, rows: CoLocations, subset: np.ndarray) -> Callable[[np.ndarray], np.ndarray] | None:
        """:meth:`predict_colocations` of rows ``subset`` as a function of the overlaps: each weighted
        expert's own form, combined as :meth:`predict_colocations` combines their answers (the same sum,
        term by term). ``None`` where the rows have several keys (``split_by="device_kind"``) or a
        weighted expert has no form."""
        weighted = self._weighted_experts(rows)
        if weighted is None:
            return None
        forms = [expert.colocation_form(rows, subset) for _, expert in weighted]
        if any(form is None for form in forms):
            return None

        def latencies(overlaps: np.ndarray) -> np.ndarray:
            total: np.ndarray | float = 0.0
            for (weight, _), form in zip(weighted, forms, strict=True):
                total = total + weight * np.log(form(overlaps))  # type: ignore[misc]
            return np.exp(total)

        return latencies

    def colocation_quadratic(self, rows: CoLocations, subset: np.ndarray,
                             moving: np.ndarray) -> WeightedLatencies | None:
        """:meth:`colocation_form` as each weighted expert's quadratic of the ``moving`` co-runners'
        overlaps (:meth:`~predictor.predictors.base.LatencyPredictor.colocation_quadratic`), combined as
        their answers are (:class:`~predictor.predictors.base.WeightedLatencies`: the same numbers up to
        rounding). ``None`` where the rows have several keys or a weighted expert has no quadratic."""
        weighted = self._weighted_experts(rows)
        if weighted is None:
            return None
        parts = [expert.colocation_quadratic(rows, subset, moving) for _, expert in weighted]
        if any(not isinstance(part, QuadraticLatencies) for part in parts):
            return None
        return WeightedLatencies(tuple(weight for weight, _ in weighted), tuple(parts))  # type: ignore[arg-type]

    def _weighted_experts(self, rows: CoLocations) -> tuple[tuple[float, LatencyPredictor], ...] | None:
        """The experts with a weight for the rows' key, and their weights; ``None`` where there are no rows
        or they have several keys (``split_by="device_kind"``)."""
        if not len(rows):
            return None
        if self.split_by == "device_kind":
            if len(set(rows.device_kinds)) > 1:
                return None
            key = rows.device_kinds[0]
        else:
            key = self._key(rows.alone())
        return self._weighted(key)

    def _weighted(self, key: str | None) -> tuple[tuple[float, LatencyPredictor], ...]:
        """The experts with a weight for ``key``, and their weights, in the experts' order."""
        return memoised(self._memo, ("weighted", key), lambda: tuple(
            (weight, expert) for weight, expert in zip(self._weights_of(key), self._experts, strict=True) if weight > 0))

    def window_form(self, record: Record, remaining_ms: Sequence[float | None],
                    program: tuple | None = None) -> WeightedWindowForms | None:
        """See the base class: each weighted expert's own :class:`~predictor.features.window.WindowForm`,
        combined as :meth:`window_latency` combines their answers (the same numbers up to rounding), the
        grid this ensemble's; ``None`` where a weighted expert has none. The record's
        :func:`~predictor.features.window.moving_program` is made once, for every expert."""
        if (type(self).predict_one is not EnsemblePredictor.predict_one
                or type(self).predict_many is not LatencyPredictor.predict_many):
            return None
        if program is None:
            program = moving_program(record, remaining_ms)
            if program is None:  # nothing moves, or the program does not hold: no expert has a form
                return None
        weighted = self._weighted(self._key(record))
        parts = [expert.window_form(record, remaining_ms, program) for _, expert in weighted]
        if not all(isinstance(part, WindowForm) for part in parts):
            return None
        low, high = self._slowdown_range
        return WeightedWindowForms(tuple(weight for weight, _ in weighted), tuple(parts),  # type: ignore[arg-type]
                                   self.solo_latency(record), low, high)

    def window_latency(self, record: Record, remaining_ms: Sequence[float | None]) -> Callable[[float], float] | None:
        """See the base class: each weighted expert's own window path where it has one (else its
        ``predict_one`` of the record at the window), combined as :meth:`predict_one` combines them
        (the same sum, term by term); the weights of ``record``'s key looked up once."""
        if (type(self).predict_one is not EnsemblePredictor.predict_one
                or type(self).predict_many is not LatencyPredictor.predict_many):
            return None
        weighted = self._weighted(self._key(record))
        paths = [expert.window_latency(record, remaining_ms) or _per_record(expert, record, remaining_ms)
                 for _, expert in weighted]
        weights = [weight for weight, _ in weighted]

        def latency(window: float) -> float:
            return math.exp(sum(w * math.log(path(window)) for w, path in zip(weights, paths, strict=True)))

        return latency

    def predict_slowdown(self, record: Record) -> float:
        """The combined latency over the solo latency used for ``record``."""
        return self.predict_one(record) / self.solo_latency(record)

    def predict_learn_one(self, record: Record) -> float:
        """Predict, then learn, in one pass over the experts: each expert's own ``predict_learn_one`` (which
        shares its feature extraction between the two halves), then the weights."""
        if record.latency_ms is None:
            raise ValueError("latency_ms: required to learn from a record")
        return self.combine_learn(record, [expert.predict_learn_one(record) for expert in self._experts])

    def restore_point(self) -> dict:
        """The ensemble's learned state now, for :meth:`restore` to bring it back to after more learning
        (what a refused record undoes, :mod:`predictor.service.ingest`): each expert's own restore point
        where its class has one (``rls``, ``sgd``), a pickle of the expert otherwise; the solo profile and
        the per-key errors copied, the rest shared (learning rebinds it)."""
        state = dict(self.__dict__)
        state["_solo"] = self._solo.copy()
        state["_key_errors"] = dict(self._key_errors)  # each key's errors are rebound, never changed in place
        state["_experts"] = [(expert, expert.restore_point()) if restores_in_place(expert)  # type: ignore[attr-defined]
                             else (None, pickle.dumps(expert, protocol=pickle.HIGHEST_PROTOCOL))
                             for expert in self._experts]
        return state

    def restore(self, point: dict) -> None:
        """Bring the ensemble back to the state of ``point`` (from :meth:`restore_point`; used once), the
        experts that restore themselves in place."""
        experts = []
        for expert, saved in point["_experts"]:
            if expert is None:
                expert = pickle.loads(saved)
            else:
                expert.restore(saved)
            experts.append(expert)
        self.__dict__.clear()
        self.__dict__.update(point)
        self._experts = experts

    def frozen(self) -> EnsemblePredictor:
        """An independent copy for predicting only (see the base class): each expert's own
        :meth:`~predictor.predictors.base.LatencyPredictor.frozen`, the running errors copied."""
        twin = copy.copy(self)
        twin._solo = self._solo.copy()
        twin._experts = [expert.frozen() for expert in self._experts]
        twin._errors = list(self._errors)
        twin._key_errors = {key: list(errors) for key, errors in self._key_errors.items()}
        twin._memo = {}
        return twin

    @property
    def expert_predictors(self) -> tuple[LatencyPredictor, ...]:
        """The experts, in the order of :attr:`experts` (learning on them is this ensemble's learning)."""
        return tuple(self._experts)

    def combine_learn(self, record: Record, predictions: list[float]) -> float:
        """The second half of :meth:`predict_learn_one`: the experts' ``predictions`` of ``record`` (made before
        they learned it) combined with the weights before it, then the weights and this predictor's
        book-keeping updated. For a replay that runs each expert over the stream by itself."""
        if record.latency_ms is None:
            raise ValueError("latency_ms: required to learn from a record")
        combined = self._combine(record, predictions)  # the weights before this record's errors
        self._update(record, predictions)
        self._observed(record, record.latency_ms / self.solo_latency(record))
        return combined

    def combine_learn_many(self, records: Sequence[Record], predictions: Sequence[Sequence[float]],
                           knows: list[bool] | None = None, books: LatencyPredictor | None = None) -> list[float]:
        """:meth:`combine_learn` of each of ``records`` in turn, ``predictions`` each expert's over them
        (one sequence per expert): the Hedge steps compiled (:func:`~predictor.predictors.hedge_kernel.hedge_steps`,
        the same numbers to the bit), the book-keeping record by record. ``knows``: when given, whether
        each record's solo latency was known just before it was learned is appended to it. ``books``: an
        expert that kept its books as this ensemble (:meth:`~predictor.predictors.base.LatencyPredictor.keeps_books_as`)
        before it learned ``records``; its books are taken rather than kept again (``knows`` must be ``None``)."""
        latencies = np.array([r.latency_ms for r in records], dtype=float)
        steps = np.array(predictions, dtype=float).reshape(len(self._experts), len(records)).T.copy()
        if not ((latencies > 0).all() and (steps > 0).all()):  # a missing, NaN or non-positive one: as the reference errs
            return [self._step_one(record, [column[i] for column in predictions], knows) for i, record in enumerate(records)]
        rows, keys = self._key_rows(records)
        per_key = np.array([self._key_errors.get(key, self._errors) for key in keys], dtype=float).reshape(
            len(keys), len(self._experts))
        has_errors = np.array([key in self._key_errors for key in keys], dtype=np.bool_)
        overall = np.array(self._errors, dtype=float)
        combined = np.empty(len(records))
        hedge_steps(rows, steps, latencies, overall, per_key, has_errors, float(self.eta), float(self.decay), combined)
        for key, errors, learned in zip(keys, per_key.tolist(), has_errors.tolist(), strict=True):
            if learned:
                self._key_errors[key] = errors
        self._errors = overall.tolist()
        if books is not None and knows is None:
            self.take_books(books, len(records))
            return combined.tolist()
        for record in records:
            if knows is not None:
                knows.append(self.knows_solo(record))
            self._observed(record, record.latency_ms / self.solo_latency(record))  # type: ignore[operator]
        return combined.tolist()

    def _step_one(self, record: Record, predictions: list[float], knows: list[bool] | None) -> float:
        if knows is not None:
            knows.append(self.knows_solo(record))
        return self.combine_learn(record, predictions)

    def _key_rows(self, records: Sequence[Record]) -> tuple[np.ndarray, list[str]]:
        """Per record, the row of its key among ``keys`` (``-1``: no key, or no room for one: the overall
        errors), the keys numbered in order of appearance, as :meth:`_update` would give them errors."""
        rows = np.empty(len(records), dtype=np.int64)
        numbered: dict[str | None, int] = {}
        keys: list[str] = []
        room = self.max_keys - len(self._key_errors)
        for i, record in enumerate(records):
            key = self._key(record)
            row = numbered.get(key)
            if row is None:
                row = -1
                if key is not None and (key in self._key_errors or room > 0):
                    if key not in self._key_errors:
                        room -= 1
                    row = len(keys)
                    keys.append(key)
                numbered[key] = row
            rows[i] = row
        return rows, keys

    def monotone_in_crowding(self) -> bool:
        """A weighted geometric mean (weights independent of the query) of monotone experts is monotone."""
        return all(expert.monotone_in_crowding() for expert in self._experts)

    def learn_slowdown(self, record: Record, slowdown: float) -> None:
        """Teach each expert (its ``predict_learn_one``: the prediction before learning), then update its decayed
        absolute log error from that prediction."""
        self._update(record, [expert.predict_learn_one(record) for expert in self._experts])

    def _update(self, record: Record, predictions: list[float]) -> None:
        """Update the running errors from the experts' ``predictions`` (made before they learned ``record``)."""
        actual = math.log(record.latency_ms)  # type: ignore[arg-type]
        errors = [abs(math.log(p) - actual) for p in predictions]
        d = self.decay

        def updated(old: list[float]) -> list[float]:
            return [d * o + (1 - d) * e for o, e in zip(old, errors, strict=True)]

        key = self._key(record)
        if key is not None and (key in self._key_errors or len(self._key_errors) < self.max_keys):
            # a key seen for the first time starts from the overall errors
            self._key_errors[key] = updated(self._key_errors.get(key, self._errors))
        self._errors = updated(self._errors)


def _geometric_mean(weights: Sequence[float], predictions: Sequence[float]) -> float:
    """``exp`` of the weighted sum of the predictions' logs, summed left to right (as
    :func:`~predictor.predictors.hedge_kernel.hedge_steps` sums; Python's ``sum`` compensates from 3.12 on)."""
    total = 0.0
    for w, p in zip(weights, predictions, strict=True):
        if w > 0:
            total += w * math.log(p)
    return math.exp(total)


def _per_record(expert: LatencyPredictor, record: Record, remaining_ms: Sequence[float | None]) -> Callable[[float], float]:
    """``expert``'s latency of ``record`` at a window (:func:`~predictor.features.window.at_window`), record by record."""
    return lambda window: expert.predict_many([at_window(record, remaining_ms, window)])[0]
