"""The ``sgd`` predictor's model: river's ``MaxAbsScaler | LinearRegression(optimizer=SGD)`` pipeline, to
the bit, without river.

:class:`SgdModel` holds what the pipeline learns (each feature's largest magnitude seen, the weights, the
intercept) in plain dicts and floats, and steps them with river's arithmetic in river's order:

1. the scaler learns the row: each name's largest ``|x|`` (a name seen for the first time gets ``0.0``
   first, as river's ``defaultdict(AbsMax)`` does);
2. the row is scaled with the new maxima (``x / m``, ``0.0`` where ``m`` is ``0``);
3. the raw prediction ``w . x' + b`` sums, from ``0.0``, the weighted values of the names that have a
   weight, in the row's order (``VectorDict.dot``);
4. the squared loss's gradient ``g = 2 ((w . x' + b) - y)`` is clamped, ``max(min(g, clip), -clip)``;
5. the intercept moves by ``intercept_lr * g``; each weight of the row (``0.0`` for a new name) by
   ``learning_rate * (x'_i g + l2 w_i)`` (the L2 term only with ``l2``).

``tests/predictors/test_sgd_model.py`` checks predictions and state against river's own pipeline, to the
bit. :meth:`SgdModel.from_pipeline` converts a river pipeline (what snapshots written before this model
hold) by reading its attributes, without importing river.

Examples
--------
>>> model = SgdModel(learning_rate=0.1, intercept_lr=0.05)
>>> model.learn_one({"a": 2.0, "b": -1.0}, 1.0)
>>> model.abs_max, model.weights
({'a': 2.0, 'b': 1.0}, {'a': 0.2, 'b': -0.2})
>>> model.intercept, model.predict_one({"a": 1.0, "c": 5.0})
(0.1, 0.2)
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any


class SgdModel:
    """A linear regression learned by plain SGD on max-abs scaled features (river's pipeline's state).

    Parameters
    ----------
    learning_rate
        Step size of the weights.
    intercept_init
        The intercept before learning.
    intercept_lr
        Step size of the intercept (``0``: the intercept stays).
    l2
        L2 penalty.
    clip_gradient
        The loss gradient is clamped to ``[-clip_gradient, clip_gradient]``.

    Attributes
    ----------
    abs_max : dict[str, float]
        Each name's largest magnitude seen, in the order names came.
    weights : dict[str, float]
        Each learned name's weight, in the order names came.
    intercept : float
    n_iterations : int
        Steps learned.
    """

    _journals: list[weakref.ref[_Journal]] | None = None
    """The journals started by :meth:`journal`, oldest first (a journal ends when its holder drops it)."""

    def __init__(self, learning_rate: float = 0.01, intercept_init: float = 0.0, intercept_lr: float = 0.01,
                 l2: float = 0.0, clip_gradient: float = 1e12):
        self.learning_rate = learning_rate
        self.intercept_lr = intercept_lr
        self.l2 = l2
        self.clip_gradient = clip_gradient
        self.intercept = intercept_init
        self.abs_max: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.n_iterations = 0

    def predict_one(self, x: dict[str, float]) -> float:
        """The raw prediction ``w . (x / m) + b`` of the row ``x`` (river's ``predict_one``), writing
        nothing: a name without a weight adds nothing; a value whose maximum is ``0`` counts ``0``."""
        maxima, weights = self.abs_max, self.weights
        total = 0.0
        for name, value in x.items():
            weight = weights.get(name)
            if weight is not None:
                largest = maxima.get(name, 0.0)
                total += weight * (value / largest if largest else 0.0)
        return total + self.intercept

    def learn_one(self, x: dict[str, float], y: float) -> None:
        """One step towards ``y`` on the row ``x`` (see the module's steps)."""
        if self._journals:
            self.note(x)
        maxima, weights = self.abs_max, self.weights
        for name, value in x.items():
            largest = maxima.setdefault(name, 0.0)
            if abs(value) > largest:
                maxima[name] = abs(value)
        scaled = {}
        for name, value in x.items():
            largest = maxima[name]
            scaled[name] = value / largest if largest else 0.0
        total = 0.0
        for name, value in scaled.items():
            weight = weights.get(name)
            if weight is not None:
                total += weight * value
        gradient = 2 * ((total + self.intercept) - y)
        clip = self.clip_gradient
        gradient = float(max(min(gradient, clip), -clip))
        self.intercept -= self.intercept_lr * gradient
        lr, l2 = self.learning_rate, self.l2
        for name, value in scaled.items():
            step = value * gradient
            if l2:
                step += l2 * weights.get(name, 0.0)
            weights[name] = weights.get(name, 0.0) - lr * step
        self.n_iterations += 1

    def copy(self) -> SgdModel:
        """An independent copy (its own dicts, no journal)."""
        twin = object.__new__(SgdModel)
        twin.__dict__.update(self.__dict__)
        twin.__dict__.pop("_journals", None)
        twin.abs_max, twin.weights = dict(self.abs_max), dict(self.weights)
        return twin

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_journals", None)
        return state

    # ------------------------------------------------------------------ undoing learning
    def journal(self) -> _Journal:
        """Start a journal of the names written from now on, for :meth:`rewind` to bring the dicts back
        to where they are now without copying them (a restore point of
        :class:`~predictor.predictors.sgd.SgdPredictor`). It is kept while its holder holds it."""
        undo = _Journal()
        self._journals = [*self._live_journals(), weakref.ref(undo)]
        return undo

    def _live_journals(self) -> list[weakref.ref[_Journal]]:
        return [ref for ref in self._journals or () if ref() is not None]

    def note(self, names: Iterable[str]) -> None:
        """Journal ``names`` before they are written (in each journal, those it has not yet; nothing
        without a journal). Whatever writes the dicts (:meth:`learn_one`, a compiled run's write-back)
        calls this first."""
        if not self._journals:
            return
        journals = [undo for undo in (ref() for ref in self._journals) if undo is not None]
        if not journals:
            self._journals = None
            return
        maxima, weights = self.abs_max, self.weights
        for name in names:
            for undo in journals:
                if name not in undo:
                    undo[name] = (maxima.get(name), weights.get(name))

    def rewind(self, undo: _Journal, intercept: float, n_iterations: int) -> None:
        """Bring the model back to where it was when :meth:`journal` returned ``undo`` (with that
        ``intercept`` and step count). The dicts are rebound (a compiled run kept on them reads the model
        afresh); ``undo`` and the journals started after it end."""
        refs = self._live_journals()
        at = next((i for i, ref in enumerate(refs) if ref() is undo), None)
        if at is None:
            raise RuntimeError("rewind: not a journal of this model (or one that ended)")
        maxima, weights = self.abs_max, self.weights
        for name, (largest, weight) in undo.items():
            if largest is None:
                maxima.pop(name, None)
            else:
                maxima[name] = largest
            if weight is None:
                weights.pop(name, None)
            else:
                weights[name] = weight
        self.abs_max, self.weights = dict(maxima), dict(weights)
        self.intercept, self.n_iterations = intercept, n_iterations
        self._journals = refs[:at] or None


    @classmethod
    def from_pipeline(cls, pipeline: Any) -> SgdModel:
        """The model of a river ``MaxAbsScaler | LinearRegression(optimizer=SGD)`` pipeline with a
        constant step size and no L1 penalty (what :class:`~predictor.predictors.sgd.SgdPredictor` built
        before this model; read by attribute, river not imported here)."""
        scaler, linear = pipeline["MaxAbsScaler"], pipeline["LinearRegression"]
        if getattr(scaler, "window_size", None) is not None or linear.l1:
            raise ValueError("an sgd pipeline takes a scaler over the whole stream and no L1 penalty")
        optimizer = linear.optimizer
        model = cls(learning_rate=optimizer.learning_rate, intercept_init=linear.intercept_init,
                    intercept_lr=linear.intercept_lr.get(optimizer.n_iterations), l2=linear.l2,
                    clip_gradient=linear.clip_gradient)
        model.intercept = linear.intercept
        model.abs_max = {name: found.get() for name, found in scaler.abs_max.items()}
        model.weights = linear._weights.to_dict()
        model.n_iterations = optimizer.n_iterations
        return model


class _Journal(dict):
    """Each name's largest magnitude and weight before its first write since the journal started
    (``None`` where it had none): what :meth:`SgdModel.rewind` puts back."""

