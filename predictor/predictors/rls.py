"""``rls``: recursive least squares with forgetting on fine-grained features.

Adds, around :class:`~predictor.regressors.least_squares.RLS`:

* optional separate models per key (``split_by="device_kind"`` or ``"model"``);
* a drift detector (ADWIN) on the absolute residuals per model; on an
  alarm the covariance is re-opened so the model re-learns quickly;
* robust learning: residuals beyond ``clip`` times a running scale of recent
  absolute residuals are clipped (Huber-style), so a burst of absurd
  latencies moves the weights only boundedly.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import numpy as np

from predictor.features.extract import (
    FEATURE_SETS,
    Features,
    feature_form,
    feature_matrix,
    feature_row,
    interaction_values,
    planned_parts,
    row_layout,
)
from predictor.features.window import WindowForm, at_window, moving_program, overlap_at
from predictor.predictors.base import LatencyPredictor, QuadraticLatencies, clipped_latencies, slowdowns_of
from predictor.records.colocations import CoLocations
from predictor.records.record import Record
from predictor.regressors.drift_detector import Adwin
from predictor.regressors.least_squares import RLS

SPLIT_KEYS = (None, "device_kind", "model", "device")
WARMUP = 30


class RlsPredictor(LatencyPredictor):
    """Recursive least squares on the slowdown, numerically guarded.

    Parameters
    ----------
    forgetting
        Forgetting factor in (0, 1].
    delta
        Initial covariance scale.
    max_trace
        Bound on the covariance trace (anti-windup).
    split_by
        ``None`` for one model, or a record attribute keying separate models.
    drift_reset
        Re-open the covariance when ADWIN flags a rise of the absolute residuals.
        Off by default: on noisy data the alarms fire on noise and re-opening
        costs accuracy, while forgetting alone tracks the changes (the drift
        study compares both).
    drift_delta
        ADWIN's confidence parameter (smaller: fewer, surer alarms).
    clip
        Clip residuals beyond ``clip`` times the running mean absolute
        residual (after a warm-up); ``0`` disables clipping.
    features
        Feature set: ``"interactions"`` (default), ``"fine"`` or ``"coarse"``.
    log_target
        Learn ``log(slowdown)`` rather than the slowdown: errors become
        relative, which is what latency predictions are judged by.
    non_negative
        Keep the weights of contention features (:mod:`predictor.features.contention`) non-negative
        (projected after every step), so that the prediction never falls when a co-runner is
        added, an overlap or a co-runner's batch size raised (for non-negative attributes).
    """

    name = "rls"
    reads_rows = True

    def __init__(
        self,
        forgetting: float = 0.998,
        delta: float = 1.0,
        max_trace: float | None = None,
        split_by: str | None = None,
        drift_reset: bool = False,
        drift_delta: float = 0.002,
        clip: float = 0.0,
        features: str = "interactions",
        log_target: bool = True,
        non_negative: bool = True,
        seed: int = 0,
    ):
        super().__init__(seed=seed)
        if split_by not in SPLIT_KEYS:
            raise ValueError(f"split_by must be one of {SPLIT_KEYS}, got {split_by!r}")
        if clip < 0:
            raise ValueError(f"clip must be >= 0, got {clip!r}")
        if features not in FEATURE_SETS:
            raise ValueError(f"features must be one of {sorted(FEATURE_SETS)}, got {features!r}")
        RLS(forgetting, delta, max_trace)  # validates the regressor's arguments
        self.features = features
        self.log_target = log_target
        self._extract = FEATURE_SETS[features]
        self.forgetting = forgetting
        self.delta = delta
        self.max_trace = max_trace
        self.split_by = split_by
        self.drift_reset = drift_reset
        if not 0 < drift_delta < 1:
            raise ValueError(f"drift_delta must lie in (0, 1), got {drift_delta!r}")
        self.drift_delta = drift_delta
        self.clip = clip
        self.non_negative = non_negative
        self._models: dict[str, RLS] = {}
        self._detectors: dict[str, Adwin] = {}
        self._scale: dict[str, float] = {}
        self._seen: dict[str, int] = {}
        self.n_drifts = 0
        self.n_clipped = 0

    def _key(self, record: Record) -> str:
        if self.split_by is None:
            return ""
        if self.split_by == "model":
            return record.batch.model
        return getattr(record, self.split_by)

    def _model(self, key: str) -> RLS:
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = RLS(
                self.forgetting, self.delta, self.max_trace, non_negative_contention=self.non_negative
            )
            if self.drift_reset:
                self._detectors[key] = Adwin(delta=self.drift_delta)
        return model

    def restore_point(self) -> dict:
        """The predictor's learned state now, for :meth:`restore` to bring it back to after more
        learning (what a refused record undoes, :mod:`predictor.service.ingest`): each model's
        :meth:`RLS.restore_point <predictor.regressors.least_squares.RLS.restore_point>`, the
        tables learning changes in place copied, the rest shared (learning rebinds it)."""
        state = dict(self.__dict__)
        state["_solo"] = self._solo.copy()
        state["_models"] = {key: (model, model.restore_point()) for key, model in self._models.items()}
        state["_detectors"] = copy.deepcopy(self._detectors) if self._detectors else {}
        state["_scale"] = dict(self._scale)
        state["_seen"] = dict(self._seen)
        return state

    def restore(self, point: dict) -> None:
        """Bring the predictor back to the state of ``point`` (from :meth:`restore_point`; used once)."""
        models = {}
        for key, (model, saved) in point["_models"].items():
            model.restore(saved)
            models[key] = model
        self.__dict__.clear()
        self.__dict__.update(point)
        self._models = models

    def frozen(self) -> RlsPredictor:
        """An independent copy for predicting only (see the base class): each key's model without
        its covariance, no drift detectors."""
        twin = copy.copy(self)
        twin._solo = self._solo.copy()
        twin._models = {key: model.frozen() for key, model in self._models.items()}
        twin._detectors = {}
        twin._scale = dict(self._scale)
        twin._seen = dict(self._seen)
        return twin

    def monotone_in_crowding(self) -> bool:
        """Whether contention weights are kept non-negative (see ``non_negative``)."""
        return self.non_negative

    def predict_slowdown(self, record: Record, fine: Features | None = None) -> float:
        """The key's model on ``record``'s features; 1 while that key has no model yet. ``fine``: the
        record's fine features, where already computed (an ensemble's, once for its experts)."""
        model = self._models.get(self._key(record))
        if model is None:
            return 1.0
        value = model.predict_vector(self._vector(model, record, fine))
        return math.exp(min(value, 10.0)) if self.log_target else value

    def _vector(self, model: RLS, record: Record, fine: Features | None = None) -> np.ndarray:
        """``model.vectorize_row(*feature_row(record, self.features), grow=False)``, the same numbers, from
        the record's :func:`~predictor.features.extract.planned_parts`: the layout's positions are
        cached by the feature index however many models the co-runners name (their identity features
        are placed one by one), where the whole row's names would be a new layout at almost every row
        of a fleet of many models. The vector is dense, so the order the names come in does not matter.
        ``fine``: the record's fine features, where already computed."""
        layout, base, identity = planned_parts(record, self.features, fine)
        index = model.index
        vector = index.vector_of(layout.names, interaction_values(
            layout, np.fromiter(base.values(), dtype=float, count=len(base))), grow=False)
        if identity:
            columns = index.columns
            for name, value in identity.items():
                at = columns.get(name)
                if at is not None:
                    vector[at] = value
        return model.scaled(vector)

    def _window_program(self, record: Record, remaining_ms: Sequence[float | None],
                        program: tuple | None = None) -> tuple | None:
        """What :meth:`window_latency` and :meth:`window_form` follow the record by: its model, the
        moving co-runners ``(index, remaining ms)``, the overlaps (the moving ones at their
        remaining ms: zero exactly where every window's overlap is), its :class:`FineProgram`
        (these three: ``program`` where given, else :func:`~predictor.features.window.moving_program`),
        the interaction layout (``None`` for the fine features) and the feature names; ``None``
        where the predictor has no such path."""
        if (self.features not in ("fine", "interactions") or type(self).predict_slowdown is not RlsPredictor.predict_slowdown
                or type(self).predict_many is not LatencyPredictor.predict_many
                or type(self).predict_one is not LatencyPredictor.predict_one):
            return None
        model = self._models.get(self._key(record))
        found = None if model is None else program if program is not None else moving_program(record, remaining_ms)
        if found is None:
            return None
        moving, overlaps, program = found
        layout = row_layout(program.names, record.batch.model) if self.features == "interactions" else None
        if self.features == "interactions" and layout is None:
            return None
        return model, moving, overlaps, program, layout, program.names if layout is None else layout.names

    def window_form(self, record: Record, remaining_ms: Sequence[float | None],
                    program: tuple | None = None) -> WindowForm | None:
        """See the base class: the record's :class:`FineProgram` with its model's weight per
        feature (:meth:`RLS.row_coefficients <predictor.regressors.least_squares.RLS.row_coefficients>`)."""
        found = self._window_program(record, remaining_ms, program)
        if found is None:
            return None
        model, moving, overlaps, program, layout, names = found
        coefficients = model.row_coefficients(names)
        if coefficients is None:
            return None
        low, high = self._slowdown_range
        return WindowForm(program, layout, coefficients[0], coefficients[1], tuple(overlaps),
                          tuple(i for i, _ in moving), tuple(ms for _, ms in moving), self.solo_latency(record),
                          low, high, self.log_target)

    def window_latency(self, record: Record, remaining_ms: Sequence[float | None]) -> Callable[[float], float] | None:
        """See the base class: the record's fine features as a function of the overlaps
        (:func:`~predictor.features.window.fine_program`), its model's columns looked up once."""
        found = self._window_program(record, remaining_ms)
        if found is None:
            return None
        model, moving, overlaps, program, layout, names = found
        solo, log_target = self.solo_latency(record), self.log_target
        predict = model.row_predictor(names) or (
            lambda values: model.predict_vector(model.vectorize_row(names, values, grow=False)))

        known: dict[tuple[float, ...], float] = {}  # by overlaps: windows where every one is 1 repeat

        def latency(window: float) -> float:
            for i, ms in moving:
                overlaps[i] = overlap_at(ms, window)
            key = tuple(overlaps)
            answer = known.get(key)
            if answer is not None:
                return answer
            fine = program.values(overlaps)
            if fine is None:  # an overlap fell to 0: the names change, the record's own path
                return self.predict_many([at_window(record, remaining_ms, window)])[0]
            values = np.array(fine, dtype=float)
            if layout is not None:
                values = interaction_values(layout, values)
            value = predict(values)
            answer = known[key] = self._latency_of(solo, math.exp(min(value, 10.0)) if log_target else value)
            return answer

        return latency

    def predict_colocations(self, rows: CoLocations) -> np.ndarray:
        """All rows at once: one feature matrix, one matrix-vector product per model."""
        matrix = feature_matrix(rows, self.features) if len(rows) else None
        if matrix is None:
            return super().predict_colocations(rows)
        slowdowns = np.ones(len(rows))
        for key, where in self._row_groups(rows):
            model = self._models.get(key)
            if model is None:
                continue  # nothing learned for this key: slowdown 1, as predict_slowdown says
            values = matrix.values if where is None else matrix.values[where]
            raw = model.predict_matrix(matrix.names, values)
            slowdowns[slice(None) if where is None else where] = slowdowns_of(raw, self.log_target)
        return self._to_latencies(rows, slowdowns)

    def colocation_form(self, rows: CoLocations, subset: np.ndarray) -> Callable[[np.ndarray], np.ndarray] | None:
        """:meth:`predict_colocations` of rows ``subset`` as a function of the overlaps: the
        feature matrix's constant part built once (:func:`~predictor.features.extract.feature_form`),
        then per call the overlap-weighted sums, their products and one matrix-vector product;
        the same numbers. ``None`` with a model per device or device kind, or where the rows
        have no matrix."""
        if self.split_by not in (None, "model") or not len(rows):
            return None
        form = feature_form(rows, self.features, subset)
        if form is None:
            return None
        model = self._models.get(self._row_groups(rows)[0][0])
        solo = self.solo_latency(rows.alone())
        low, high = self._slowdown_range
        predict = None if model is None else model.matrix_predictor(form.names)

        def latencies(overlaps: np.ndarray) -> np.ndarray:
            if predict is None:
                return np.full(len(form), solo * min(max(1.0, low), high))
            return clipped_latencies(solo, slowdowns_of(predict(form.values(overlaps)), self.log_target), low, high)

        return latencies

    def colocation_quadratic(self, rows: CoLocations, subset: np.ndarray,
                             moving: np.ndarray) -> QuadraticLatencies | None:
        """:meth:`colocation_form` as a quadratic of the ``moving`` co-runners' overlaps, the others
        at theirs (:meth:`FeatureForm.quadratic <predictor.features.extract.FeatureForm.quadratic>`; the
        same numbers up to rounding). ``None`` with a model per device or device kind, where the
        rows have no form, or nothing is learned for the batch's model."""
        if self.split_by not in (None, "model") or not len(rows):
            return None
        model = self._models.get(self._row_groups(rows)[0][0])
        form = None if model is None else feature_form(rows, self.features, subset)
        if form is None:
            return None
        gather = form.gather
        quadratic = form.quadratic(*model.matrix_weights(form.names), np.append(rows.overlaps, 0.0)[gather],
                                   np.append(moving, False)[gather])
        low, high = self._slowdown_range
        return QuadraticLatencies(quadratic, self.solo_latency(rows.alone()), low, high, self.log_target)

    def _row_groups(self, rows: CoLocations) -> list[tuple[str, list[int] | None]]:
        """The model key of the rows, and which rows (``None``: all) have it."""
        if self.split_by is None:
            return [("", None)]
        if self.split_by == "model":
            return [(rows.batch.model, None)]
        keys = rows.device_kinds if self.split_by == "device_kind" else rows.devices
        groups: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        return list(groups.items())

    def predict_learn_one(self, record: Record) -> float:
        """Predict, then learn, extracting ``record``'s features once (see the base class)."""
        key = self._key(record)
        fresh = key not in self._models
        model = self._model(key)
        vector = model.vectorize_row(*feature_row(record, self.features), grow=True)
        raw = 1.0 if fresh else model.predict_vector(vector)
        if self.log_target and not fresh:
            raw = math.exp(min(raw, 10.0))
        predicted = self._to_latency(record, raw)
        self._learn_vector(record, key, model, vector)
        return predicted

    def learn_slowdown(self, record: Record, slowdown: float) -> None:
        """One RLS update of the key's model (clipped and drift-checked as configured)."""
        key = self._key(record)
        model = self._model(key)
        self._learn_vector(record, key, model, model.vectorize_row(*feature_row(record, self.features), grow=True), slowdown)

    def _learn_vector(self, record: Record, key: str, model: RLS, vector, slowdown: float | None = None) -> None:
        if slowdown is None:
            slowdown = record.latency_ms / self.solo_latency(record)  # type: ignore[operator]
            self._observed(record, slowdown)
        if self.log_target:
            slowdown = math.log(slowdown)
        residual = slowdown - float(vector @ model._weights[: vector.size])  # the unconstrained fit's
        seen = self._seen.get(key, 0)
        scale = self._scale.get(key, abs(residual))
        target = slowdown
        if self.clip and seen >= WARMUP and abs(residual) > self.clip * scale:
            # Huber-style: move toward the observation by at most clip * scale,
            # and keep the scale estimate from the unclipped residuals only.
            bound = self.clip * scale
            target = slowdown - residual + math.copysign(bound, residual)
            self.n_clipped += 1
        else:
            self._scale[key] = 0.98 * scale + 0.02 * abs(residual)
        self._seen[key] = seen + 1
        model.learn_vector(vector, target)
        if self.drift_reset:
            detector = self._detectors[key]
            level = detector.estimation
            detector.update(abs(residual))
            # ADWIN flags any change of the mean; only a rise of the error calls for re-learning.
            if detector.drift_detected and detector.estimation > level and seen >= WARMUP:
                model.reset_covariance()
                self.n_drifts += 1
