"""``sgd``: online linear regression by SGD (river's pipeline, :mod:`~predictor.predictors.sgd_model`) on
fine-grained features."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import numpy as np

from predictor.features.contention import is_contention
from predictor.features.extract import Features, feature_form, feature_matrix, fine_features
from predictor.features.window import WindowForm, at_window, moving_program, overlap_at
from predictor.predictors import sgd_kernel
from predictor.predictors.base import LatencyPredictor, QuadraticLatencies, clipped_latencies, slowdowns_of
from predictor.predictors.sgd_model import SgdModel
from predictor.records.colocations import CoLocations
from predictor.records.record import Record
from predictor.runtime.version_memo import memoised


class SgdPredictor(LatencyPredictor):
    """river's ``MaxAbsScaler | LinearRegression`` (:class:`~predictor.predictors.sgd_model.SgdModel`)
    learning the (log) slowdown.

    Parameters
    ----------
    learning_rate
        SGD step size for the weights.
    intercept_lr
        Step size for the intercept.
    l2
        L2 penalty.
    log_target
        Learn ``log(slowdown)`` (relative errors) rather than the slowdown.
    non_negative
        Project the weights of contention features (:mod:`predictor.features.contention`) onto
        ``w >= 0`` after every step: the prediction never falls as the device gets more crowded.
    """

    name = "sgd"
    reads_rows = True

    def __init__(
        self,
        learning_rate: float = 0.01,
        intercept_lr: float = 0.05,
        l2: float = 0.0,
        log_target: bool = True,
        non_negative: bool = True,
        seed: int = 0,
    ):
        super().__init__(seed=seed)
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")
        if not intercept_lr >= 0:
            raise ValueError(f"intercept_lr must be >= 0, got {intercept_lr!r}")
        if not l2 >= 0:
            raise ValueError(f"l2 must be >= 0, got {l2!r}")
        self.learning_rate = learning_rate
        self.intercept_lr = intercept_lr
        self.l2 = l2
        self.log_target = log_target
        self.non_negative = non_negative
        self._model = SgdModel(learning_rate=learning_rate, intercept_init=0.0 if log_target else 1.0,
                               intercept_lr=intercept_lr, l2=l2)

    def __setstate__(self, state: dict) -> None:
        # a state pickled before SgdModel holds river's pipeline (which brings river in itself): converted
        if not isinstance(state.get("_model"), SgdModel):
            state = {**state, "_model": SgdModel.from_pipeline(state["_model"])}
        self.__dict__.update(state)

    def predict_slowdown(self, record: Record, fine: Features | None = None) -> float:
        """The linear model's slowdown (``exp`` of it, capped at ``e**10``, with ``log_target``). ``fine``:
        the record's fine features, where already computed (an ensemble's, once for its experts)."""
        value = self.raw_prediction(fine_features(record) if fine is None else fine)
        return math.exp(min(value, 10.0)) if self.log_target else value

    def raw_prediction(self, features: dict[str, float]) -> float:
        """The model's raw prediction (:meth:`SgdModel.predict_one
        <predictor.predictors.sgd_model.SgdModel.predict_one>`: river's ``predict_one`` to the bit, without
        the scaler's entry river adds for a name it has not seen). An answer reads the model; answering
        threads share it."""
        return self._model.predict_one(features)

    def window_form(self, record: Record, remaining_ms: Sequence[float | None],
                    program: tuple | None = None) -> WindowForm | None:
        """See the base class: the record's :class:`~predictor.features.window.FineProgram` with each
        feature's weight over its column's largest magnitude seen (0 where either is missing)."""
        found = self._window_program(record, remaining_ms, program)
        if found is None:
            return None
        moving, overlaps, program = found
        scaled = self._scaled_weights(program.names)
        if scaled is None:
            return None
        low, high = self._slowdown_range
        return WindowForm(program, None, float(self._model.intercept), scaled, tuple(overlaps), tuple(i for i, _ in moving), tuple(ms for _, ms in moving),
                          self.solo_latency(record), low, high, self.log_target)

    def _window_program(self, record: Record, remaining_ms: Sequence[float | None],
                        program: tuple | None = None) -> tuple | None:
        """The record's :func:`~predictor.features.window.moving_program` (``program`` where given); ``None``
        where nothing moves, or where this class does not answer as :class:`SgdPredictor` does (a subclass
        that changes an answer gets no window paths)."""
        if (type(self).predict_slowdown is not SgdPredictor.predict_slowdown
                or type(self).predict_many is not LatencyPredictor.predict_many
                or type(self).predict_one is not LatencyPredictor.predict_one):
            return None
        return program if program is not None else moving_program(record, remaining_ms)

    def window_latency(self, record: Record, remaining_ms: Sequence[float | None]) -> Callable[[float], float] | None:
        """See the base class: the record's fine features as a function of the overlaps
        (:func:`~predictor.features.window.fine_program`), each feature's weight and scale looked up
        once, summed in :meth:`raw_prediction`'s order."""
        found = self._window_program(record, remaining_ms)
        if found is None:
            return None
        moving, overlaps, program = found
        model = self._model
        maxima, weights = model.abs_max, model.weights
        terms = []  # (slot, weight, column's largest magnitude) of the names with a weight, in order
        for slot, name in enumerate(program.names):
            weight = weights.get(name)
            if weight is not None:
                terms.append((slot, weight, maxima.get(name, 0.0)))
        intercept, solo, log_target = model.intercept, self.solo_latency(record), self.log_target

        def latency(window: float) -> float:
            for i, ms in moving:
                overlaps[i] = overlap_at(ms, window)
            values = program.values(overlaps)
            if values is None:  # an overlap fell to 0: the names change, the record's own path
                return self.predict_many([at_window(record, remaining_ms, window)])[0]
            total = 0.0
            for slot, weight, largest in terms:
                total += weight * (values[slot] / largest if largest else 0.0)
            value = total + intercept
            return self._latency_of(solo, math.exp(min(value, 10.0)) if log_target else value)

        return latency

    def predict_colocations(self, rows: CoLocations) -> np.ndarray:
        """All rows at once: one matrix of their fine features, each value scaled and weighted as
        :meth:`predict_slowdown` scales and weights a record's (the same numbers up to the order of the
        sum, as in :mod:`predictor.predictors.sgd_kernel`)."""
        matrix = feature_matrix(rows, "fine") if len(rows) else None
        if matrix is None:
            return super().predict_colocations(rows)
        return self._to_latencies(rows, slowdowns_of(self._matrix_predictor(matrix.names)(matrix.values), self.log_target))

    def colocation_form(self, rows: CoLocations, subset: np.ndarray) -> Callable[[np.ndarray], np.ndarray] | None:
        """:meth:`predict_colocations` of rows ``subset`` as a function of the overlaps: the features'
        constant part, each column's maximum and weight found once (what a fixed point over windows asks
        a dozen times)."""
        form = feature_form(rows, "fine", subset) if len(rows) else None
        if form is None:
            return None
        predict = self._matrix_predictor(form.names)
        solo = self.solo_latency(rows.alone())
        low, high = self._slowdown_range
        return lambda overlaps: clipped_latencies(solo, slowdowns_of(predict(form.values(overlaps)), self.log_target), low, high)

    def colocation_quadratic(self, rows: CoLocations, subset: np.ndarray,
                             moving: np.ndarray) -> QuadraticLatencies | None:
        """:meth:`colocation_form` as a quadratic of the ``moving`` co-runners' overlaps, the others at
        theirs (:meth:`FeatureForm.quadratic <predictor.features.extract.FeatureForm.quadratic>`, each
        column's weight over its largest magnitude seen: the same numbers up to rounding). ``None``
        where the rows have no form."""
        form = feature_form(rows, "fine", subset) if len(rows) else None
        if form is None:
            return None
        scaled = self._scaled_weights(form.names)
        if scaled is None:
            return None
        gather = form.gather
        quadratic = form.quadratic(scaled, float(self._model.intercept), np.append(rows.overlaps, 0.0)[gather],
                                   np.append(moving, False)[gather])
        low, high = self._slowdown_range
        return QuadraticLatencies(quadratic, self.solo_latency(rows.alone()), low, high, self.log_target)

    def _scaled_weights(self, names: Sequence[str]) -> np.ndarray | None:
        """Each feature's weight over its column's largest magnitude seen (0 where either is missing): the
        linear model as weights on the raw features, for the quadratic forms. ``None`` where a largest
        magnitude is subnormal (the quotient may overflow, and the model's own order, the value over its
        largest magnitude first, then differs from the form's by more than rounding) or a quotient is not
        finite: no form, the caller's per-window path."""
        return memoised(self._memo, ("scaled", names), lambda: self._scaled_of(names))

    def _scaled_of(self, names: Sequence[str]) -> np.ndarray | None:
        model = self._model
        largest = np.array([model.abs_max.get(name, 0.0) for name in names])
        if ((largest != 0.0) & (np.abs(largest) < np.finfo(float).tiny)).any():
            return None
        weight = np.array([model.weights.get(name, 0.0) for name in names])
        with np.errstate(over="ignore"):
            scaled = np.divide(weight, largest, out=np.zeros(len(names)), where=largest != 0.0)
        return scaled if np.isfinite(scaled).all() else None

    def _matrix_predictor(self, names: Sequence[str]) -> Callable[[np.ndarray], np.ndarray]:
        """The linear model's raw answer of each row of a matrix of the features ``names``: each value over
        its column's largest magnitude seen (0 where that is 0, as river's ``MaxAbsScaler``), times its
        weight, summed, plus the intercept. Nothing is added to the model."""
        known, divisor, weight, intercept = memoised(self._memo, ("matrix", names), lambda: self._matrix_of(names))

        def predict(values: np.ndarray) -> np.ndarray:
            return np.where(known, values / divisor, 0.0) @ weight + intercept

        return predict

    def _matrix_of(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """What :meth:`_matrix_predictor` applies: which columns have a largest magnitude, the divisor
        of each, each weight, the intercept."""
        model = self._model
        maxima, weights = model.abs_max, model.weights
        largest = np.array([maxima.get(name, 0.0) for name in names])
        weight = np.array([weights.get(name, 0.0) for name in names])
        known, divisor = largest != 0.0, np.where(largest != 0.0, largest, 1.0)
        return known, divisor, weight, float(model.intercept)

    def learn_slowdown(self, record: Record, slowdown: float) -> None:
        """One SGD step towards the (log) slowdown."""
        features = fine_features(record)
        self._model.learn_one(features, math.log(slowdown) if self.log_target else slowdown)
        if self.non_negative:
            self._project(features)

    def _project(self, features: dict[str, float]) -> None:
        """Clip to 0 the negative weights of the contention features just updated (journaled as
        :meth:`SgdModel.learn_one <predictor.predictors.sgd_model.SgdModel.learn_one>` just wrote them)."""
        weights = self._model.weights
        for name in features:
            if is_contention(name) and weights[name] < 0:
                weights[name] = 0.0

    def restore_point(self) -> dict:
        """The predictor's learned state now, for :meth:`restore` to bring it back to after more
        learning (what a refused record undoes, :mod:`predictor.service.ingest`): its attributes and
        solo profile copied, the model's intercept and step count, and a journal of the names its
        learning writes from now on (:meth:`SgdModel.journal <predictor.predictors.sgd_model.SgdModel.journal>`:
        only what a few records write is kept, not the model's dicts). A restore point can be used while
        it is held; using it ends those taken after it."""
        state = dict(self.__dict__)
        state["_solo"] = self._solo.copy()
        model = self._model
        return {"predictor": state, "intercept": model.intercept, "n_iterations": model.n_iterations,
                "undo": model.journal()}

    def restore(self, point: dict) -> None:
        """Bring the predictor back to the state of ``point`` (from :meth:`restore_point`; used once),
        its model rewound in place."""
        self.__dict__.clear()
        self.__dict__.update(point["predictor"])
        self._model.rewind(point["undo"], point["intercept"], point["n_iterations"])

    def frozen(self) -> SgdPredictor:
        """An independent copy for predicting only (see the base class): a model of its own holding the
        scaler's maxima and the weights as they are now."""
        twin = copy.copy(self)
        twin._solo = self._solo.copy()
        twin._model = self._model.copy()
        twin._memo = {}
        return twin

    def learns_in_blocks(self) -> bool:
        """Whether the compiled block step (:class:`~predictor.predictors.sgd_kernel.SgdRun`) learns this
        predictor as it would learn itself: no L2 penalty."""
        return type(self) is SgdPredictor and sgd_kernel.supports(self)

    def block_rows(self) -> sgd_kernel.SgdRows:
        """The pending rows of a blockwise prequential replay of this predictor
        (:func:`~predictor.prequential.blocks.prequential_blocks`)."""
        return sgd_kernel.SgdRows(self)

    def monotone_in_crowding(self) -> bool:
        """Whether contention weights are kept non-negative (see ``non_negative``)."""
        return self.non_negative
