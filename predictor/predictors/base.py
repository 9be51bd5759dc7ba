"""The predictor interface: latency of a batch given its co-location.

A predictor learns the *slowdown* over solo latency (``latency / solo``), so
that one model transfers across batch sizes; the solo latency comes from the
record or, when absent, from an online :class:`~predictor.features.solo_profile.SoloProfile`.
Subclasses implement :meth:`predict_slowdown` and :meth:`learn_slowdown`.
"""

from __future__ import annotations

import copy
import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from predictor.features.extract import OverlapQuadratic
from predictor.features.solo_profile import SoloProfile
from predictor.records.colocations import CoLocations
from predictor.records.record import Record
from predictor.runtime.version_memo import pickled

if TYPE_CHECKING:
    from predictor.features.window import WeightedWindowForms, WindowForm

MIN_SLOWDOWN = 0.05
MAX_SLOWDOWN = 100.0


def clipped_latencies(solo: float, slowdowns: np.ndarray, low: float, high: float) -> np.ndarray:
    """``solo`` times each slowdown within ``[low, high]``, a non-finite one taken as 1."""
    slowdowns = np.where(np.isfinite(slowdowns), slowdowns, 1.0)
    return solo * np.minimum(np.maximum(slowdowns, low), high)


def restores_in_place(predictor: object) -> bool:
    """Whether ``predictor``'s own class defines ``restore_point`` and ``restore`` (``rls``, ``sgd``,
    ``ensemble``: learning undone without a pickle, :mod:`predictor.service.ingest`; a subclass that adds
    state of its own does not inherit the claim)."""
    own = vars(type(predictor))
    return "restore_point" in own and "restore" in own


def slowdowns_of(raw: np.ndarray, log_target: bool) -> np.ndarray:
    """The slowdowns a linear model's raw answers stand for: ``exp(min(raw, 10))`` for a log target,
    ``raw`` otherwise."""
    return np.exp(np.minimum(raw, 10.0)) if log_target else raw


@dataclass(frozen=True, eq=False)
class QuadraticLatencies:
    """Latencies ``solo * min(max(s, low), high)`` of the rows of a quadratic of their overlaps,
    ``s`` the slowdown of a row's raw answer: ``exp(min(raw, 10))`` for a log target, ``raw``
    otherwise, 1 where it is not finite (what a fixed point can run compiled,
    :mod:`predictor.service.estimates.fixed_point_kernel`)."""

    quadratic: OverlapQuadratic
    solo: float
    low: float
    high: float
    log_target: bool

    @property
    def gather(self) -> np.ndarray:
        """The co-runner of each (k, row) (:attr:`OverlapQuadratic.gather <predictor.features.extract.OverlapQuadratic.gather>`)."""
        return self.quadratic.gather

    def latencies(self, o: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """The latencies of rows ``rows`` (``None``: all) at their overlaps ``o`` (most co-runners x
        rows; see :meth:`OverlapQuadratic.raw <predictor.features.extract.OverlapQuadratic.raw>`): the
        definition the compiled fixed point follows."""
        return clipped_latencies(self.solo, slowdowns_of(self.quadratic.raw(o, rows), self.log_target), self.low,
                                 self.high)


@dataclass(frozen=True, eq=False)
class WeightedLatencies:
    """Latencies ``exp(sum(w * log(latency)))`` of the rows: a weighted geometric mean of several
    :class:`QuadraticLatencies` of the same rows and co-runners (an ensemble's experts'; what the
    compiled fixed point can run, :mod:`predictor.service.estimates.fixed_point_kernel`)."""

    weights: tuple[float, ...]
    parts: tuple[QuadraticLatencies, ...]

    @property
    def gather(self) -> np.ndarray:
        """The co-runner of each (k, row), the parts' (all alike)."""
        return self.parts[0].gather

    def latencies(self, o: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """The latencies of rows ``rows`` (``None``: all) at their overlaps ``o``: each part's, combined
        in the parts' order with the C library's ``log`` and ``exp``, as the compiled fixed point
        combines them (NumPy's may differ in the last bit)."""
        total: np.ndarray | float = 0.0
        for weight, part in zip(self.weights, self.parts, strict=True):
            total = total + weight * _libm_log(part.latencies(o, rows))
        return _libm_exp(total)


_libm_log = np.vectorize(math.log, otypes=[float])
_libm_exp = np.vectorize(math.exp, otypes=[float])


class LatencyPredictor(ABC):
    """Base class of every registered predictor.

    Hyperparameters are constructor arguments, validated there; learned state
    lives in private attributes. ``seed`` makes any randomness reproducible.
    """

    name: ClassVar[str] = ""

    reads_rows: ClassVar[bool] = False
    """Whether this predictor learns from and answers a decoded row
    (:class:`~predictor.records.typed_decoding.ColocRow`) as it does the record of the same line (it
    reads only the record's fields): a replay then builds no record per line."""

    _memo: dict | None = None
    """A frozen copy's :func:`~predictor.runtime.version_memo.memoised` look-ups (``None``: a learning
    predictor's, none)."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._solo = SoloProfile()
        self._slowdown_range = (MIN_SLOWDOWN, MAX_SLOWDOWN)
        self._range_seen = (1.0, 1.0)
        self.n_learned = 0

    def __getstate__(self) -> dict:
        return pickled(dict(self.__dict__))

    # -- what subclasses provide ---------------------------------------------
    @abstractmethod
    def predict_slowdown(self, record: Record) -> float:
        """Expected ``latency / solo`` for ``record``."""

    @abstractmethod
    def learn_slowdown(self, record: Record, slowdown: float) -> None:
        """Learn from an observed slowdown."""

    # -- the interface ---------------------------------------------------------
    def monotone_in_crowding(self) -> bool:
        """Whether the predicted latency never falls when a co-runner is added, an overlap or a
        co-runner's batch size raised, for non-negative attributes (the model's own guarantee).

        ``False`` (the default) makes the answering path use its monotone construction over
        this predictor's answers (:mod:`predictor.service.estimates.monotone`) instead.
        """
        return False

    def solo_latency(self, record: Record) -> float:
        """Solo latency (ms) used for ``record``."""
        return self._solo.estimate(record)

    def knows_solo(self, record: Record) -> bool:
        """Whether ``record``'s solo latency is given or profiled (not extrapolated or guessed)."""
        return self._solo.knows(record)

    def learned_key(self, record: Record) -> bool:
        """Whether a record of ``record``'s model and batch size has been learned (alone or not)."""
        return self._solo.seen(record)

    def knows_key(self, record: Record) -> bool:
        """Whether ``record``'s solo latency is known (:meth:`knows_solo`) or its model and batch size
        have been learned (:meth:`learned_key`): whether an answer about it is learned, not a guess."""
        return self._solo.knows(record) or self._solo.seen(record)

    def predict_one(self, record: Record) -> float:
        """Predicted latency in ms (always finite and > 0)."""
        return self._to_latency(record, self.predict_slowdown(record))

    def _to_latency(self, record: Record, slowdown: float) -> float:
        """Latency in ms from a predicted slowdown, clamped to a sane range."""
        return self._latency_of(self.solo_latency(record), slowdown)

    def _latency_of(self, solo: float, slowdown: float) -> float:
        """:meth:`_to_latency` for a record of solo latency ``solo``."""
        if not math.isfinite(slowdown):
            slowdown = 1.0
        low, high = self._slowdown_range
        slowdown = min(max(slowdown, low), high)
        return solo * slowdown

    def window_latency(self, record: Record, remaining_ms: Sequence[float | None]) -> Callable[[float], float] | None:
        """A function of a window ``w`` answering ``predict_many([r])[0]``, where ``r`` is ``record``
        with each co-runner ``i`` of ``remaining_ms[i]`` not ``None`` at overlap
        ``min(remaining_ms[i] / w, 1)`` (1 for ``w <= 0``), to the last bit, at less cost per window
        (what a fixed point over the window asks, :func:`~predictor.service.estimates.monotone.fixed_point_one`).

        ``None`` (the default): the predictor has no such path; the caller predicts each window's record.
        """
        return None

    def window_form(self, record: Record, remaining_ms: Sequence[float | None],
                    program: tuple | None = None) -> WindowForm | WeightedWindowForms | None:
        """:meth:`window_latency` as data a compiled fixed point reads
        (:class:`~predictor.features.window.WindowForm`: the answer a quadratic of the moving
        co-runners' overlaps; the same numbers up to rounding). ``None`` (the default): the
        predictor has none; the caller asks :meth:`window_latency`. ``program``:
        :func:`~predictor.features.window.moving_program` of the record, where the caller made it
        (an ensemble, once for its experts)."""
        return None

    def predict_many(self, records: list[Record]) -> list[float]:
        """Predicted latencies for many records (subclasses may vectorise)."""
        return [self.predict_one(r) for r in records]

    def predict_colocations(self, rows: CoLocations) -> np.ndarray:
        """Predicted latencies (ms) of one batch on many devices: :meth:`predict_many` of
        ``rows.records()``, which subclasses may compute for all rows at once."""
        return np.asarray(self.predict_many(rows.records()), dtype=float)

    def colocation_form(self, rows: CoLocations, subset: np.ndarray) -> Callable[[np.ndarray], np.ndarray] | None:
        """:meth:`predict_colocations` of rows ``subset`` as a function of the co-runners' overlaps
        (``overlaps -> latencies``), with what does not depend on them computed once; ``None``
        where this predictor has none (the caller predicts ``rows.with_overlaps(overlaps)``)."""
        return None

    def colocation_quadratic(self, rows: CoLocations, subset: np.ndarray,
                             moving: np.ndarray) -> QuadraticLatencies | WeightedLatencies | None:
        """:meth:`predict_colocations` of rows ``subset`` as a quadratic of the overlaps of the
        co-runners flagged ``moving`` (the others at ``rows.overlaps``), where the predictor's answer
        is one (a linear model of the features); ``None`` where it is not."""
        return None

    def _to_latencies(self, rows: CoLocations, slowdowns: np.ndarray) -> np.ndarray:
        """:meth:`_to_latency` of every row (they share one batch, hence one solo latency)."""
        return clipped_latencies(self.solo_latency(rows.alone()), slowdowns, *self._slowdown_range)

    def learn_one(self, record: Record) -> None:
        """Learn from an observed record (``latency_ms`` set)."""
        if record.latency_ms is None:
            raise ValueError("latency_ms: required to learn from a record")
        slowdown = record.latency_ms / self.solo_latency(record)
        self.learn_slowdown(record, slowdown)
        self._observed(record, slowdown)

    def _observed(self, record: Record, slowdown: float) -> None:
        """Book-keeping after learning: solo profile, count, plausible slowdown range.

        Predictions are kept within half the smallest and twice the largest
        slowdown observed so far (1 always included), so an extrapolating
        model cannot answer something no observation came near. Only
        slowdowns over a known solo latency (given or profiled, not guessed)
        widen the range.
        """
        if self._solo.knows(record):
            low, high = self._range_seen
            self._range_seen = (min(low, slowdown), max(high, slowdown))
            low, high = self._range_seen
            self._slowdown_range = (max(low / 2, MIN_SLOWDOWN), min(high * 2, MAX_SLOWDOWN))
        self._solo.learn(record)
        self.n_learned += 1

    def keeps_books_as(self, other: LatencyPredictor) -> bool:
        """Whether this predictor's book-keeping (:meth:`_observed`: its solo profile and plausible
        slowdown range) is ``other``'s, value for value: learning the same records next keeps them so
        (what lets a replay copy the one's, :meth:`take_books`, instead of keeping both)."""
        return (self._range_seen == other._range_seen and self._slowdown_range == other._slowdown_range
                and self._solo.same_as(other._solo))

    def take_books(self, other: LatencyPredictor, learned: int) -> None:
        """Take ``other``'s book-keeping (a copy) as this predictor's after it ``learned`` records more:
        where the two kept their books alike (:meth:`keeps_books_as`) and both learned the same records since."""
        self._solo = other._solo.copy()
        self._range_seen, self._slowdown_range = other._range_seen, other._slowdown_range
        self.n_learned += learned

    def predict_learn_one(self, record: Record) -> float:
        """Predict ``record``'s latency, then learn from it (one prequential step).

        Subclasses may share work between the two halves; the prediction is
        always the one made before learning.
        """
        predicted = self.predict_one(record)
        self.learn_one(record)
        return predicted

    def fit(self, records: Iterable[Record]) -> LatencyPredictor:
        """Learn from a training set: the solo profiles first (:meth:`learn_solo`), so that every
        slowdown is learned over a solo latency the whole set informs (where records carry none,
        a profile's early guesses would teach the learner slowdowns over other baselines than
        the ones it answers over), then each record one by one, as online."""
        records = list(records)
        self.learn_solo(records)
        for record in records:
            self.learn_one(record)
        return self

    def learn_solo(self, records: Sequence[Record]) -> None:
        """Take the ``records`` that carry no solo latency into the solo profile, ahead of learning them
        (:meth:`fit`, and the training part of every split replay; a predictor made of others takes them
        into theirs too). Learning them afterwards takes each in again: the profile's means and lowest
        values end as they would with each record taken in once (its shifts about so). Records with a
        solo latency are left to learning: the profile answers theirs as given."""
        for record in records:
            if record.solo_latency_ms is None:
                self._solo.learn(record)

    def params(self) -> dict[str, object]:
        """Constructor arguments, for cloning and reporting."""
        return {k: getattr(self, k) for k in self._param_names()}

    @classmethod
    def _param_names(cls) -> list[str]:
        names: list[str] = []
        for klass in cls.__mro__:
            if issubclass(klass, LatencyPredictor) and "__init__" in vars(klass):
                signature = inspect.signature(klass.__init__)
                names += [p for p in signature.parameters if p != "self" and p not in names]
        names.sort(key=lambda n: n == "seed")
        return names

    def clone(self) -> LatencyPredictor:
        """A fresh, unfitted predictor with the same hyperparameters."""
        return type(self)(**self.params())

    def frozen(self) -> LatencyPredictor:
        """An independent copy that predicts what this one predicts now, to answer from while
        this one goes on learning (the service's published model version).

        The copy is for predicting only: subclasses may leave out what learning alone needs.
        The default is a deep copy.
        """
        return copy.deepcopy(self)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"
