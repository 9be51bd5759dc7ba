"""The ``sgd`` predictor's steps (river's ``MaxAbsScaler | LinearRegression`` with plain SGD,
:class:`~predictor.predictors.sgd_model.SgdModel`), compiled (numba) over a block of rows.

Over a block of rows the arithmetic the model does per observation (three dicts, a loop over each) runs
here in one compiled loop, each row given as its columns and values
(sparse: the names it has):

1. the prediction before learning, from the scaler's maxima as they stand: ``w . (x / m) + b``
   (``0`` for a column whose maximum is ``0``), summed in the row's order from ``0.0``, as
   river's ``VectorDict.dot`` sums over the row's items;
2. the scaler learns the row (each column's maximum of ``|x|``), the row is scaled again with the new
   maxima, and the squared loss's gradient ``g = 2 (w . x' + b - y)``, clamped to
   ``clip_gradient``, moves the intercept by ``intercept_lr g`` and each weight of the row by
   ``lr (x'_i g)``;
3. with ``non_negative``, the row's contention weights (:func:`~predictor.features.contention.is_contention`)
   that came out negative are set to 0 (:meth:`SgdPredictor._project
   <predictor.predictors.sgd.SgdPredictor._project>`).

Every sum and product is the reference's in the reference's order, so the raw predictions and the
learned state are river's to the bit (``tests/predictors/test_sgd_kernel.py``: hypothesis, warm models, blocks
cut anywhere, extreme values included). The model stays the definition: :class:`SgdRun` reads its state
into arrays and writes it back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from predictor.features.contention import is_contention
from predictor.features.extract import Features, fine_features
from predictor.predictors.sgd_model import SgdModel
from predictor.records.record import Record
from predictor.records.typed_decoding import ColocRow

if TYPE_CHECKING:
    from predictor.predictors.sgd import SgdPredictor

MAX_LAYOUTS = 4096
"""Distinct row layouts (tuples of feature names) an :class:`SgdRows` keeps columns for."""


@njit(cache=True, nogil=True)
def _sgd_rows(offsets, positions, values, targets, weights, abs_max, contention, state, lr, intercept_lr,
              clip, project, predictions):  # pragma: no cover (compiled)
    intercept = state[0]
    scaled = np.empty(max(1, int(np.max(np.diff(offsets))) if offsets.size > 1 else 1))
    for r in range(targets.size):
        start, stop = offsets[r], offsets[r + 1]
        dot = 0.0
        for k in range(start, stop):
            p = positions[k]
            m = abs_max[p]
            dot += weights[p] * (values[k] / m if m != 0.0 else 0.0)
        predictions[r] = dot + intercept
        for k in range(start, stop):
            p = positions[k]
            v = abs(values[k])
            if v > abs_max[p]:
                abs_max[p] = v
        dot = 0.0
        for k in range(start, stop):
            p = positions[k]
            m = abs_max[p]
            x = values[k] / m if m != 0.0 else 0.0
            scaled[k - start] = x
            dot += weights[p] * x
        gradient = 2.0 * ((dot + intercept) - targets[r])
        # river's clamp, max(min(g, clip), -clip): Python's min and max keep their first argument unless the
        # other is strictly less (greater), so a NaN passes through
        if clip < gradient:
            gradient = clip
        if -clip > gradient:
            gradient = -clip
        intercept -= intercept_lr * gradient
        for k in range(start, stop):
            p = positions[k]
            weights[p] -= lr * (scaled[k - start] * gradient)
        if project:
            for k in range(start, stop):
                p = positions[k]
                if contention[p] and weights[p] < 0.0:
                    weights[p] = 0.0
    state[0] = intercept


def supports(predictor: object) -> bool:
    """Whether :class:`SgdRun` learns ``predictor`` as it would learn itself: an ``sgd`` predictor whose
    model is an :class:`~predictor.predictors.sgd_model.SgdModel` without L2 penalty."""
    if getattr(predictor, "name", None) != "sgd":
        return False
    model = getattr(predictor, "_model", None)
    return type(model) is SgdModel and model.l2 == 0


class SgdRun:
    """An ``sgd`` predictor's model learned over successive blocks of rows (:meth:`block`), each in one
    compiled call (:meth:`SgdBlock.compute`, which releases the GIL and may run on another thread).

    The state is read from the model once, held by the run, and written back by :meth:`finish`;
    until then the model is the run's. Columns are numbered as names come (:meth:`columns`, on the
    caller's thread); the arrays grow when a block is computed, after the block before it (blocks are
    computed one at a time, in the order they are made).
    """

    def __init__(self, predictor: SgdPredictor):
        if not supports(predictor):
            raise ValueError("SgdRun takes an sgd predictor with its own model (no L2 penalty)")
        self.predictor = predictor
        model = predictor._model
        learned, maxima = model.weights, model.abs_max
        # the scaler's names, then the weights' names it lacks, numbered in that order
        self._names: list[str] = list(maxima)
        self._index: dict[str, int] = dict(zip(self._names, range(len(self._names)), strict=True))
        scaled = len(self._names)
        for name in learned:
            if name not in self._index:
                self._index[name] = len(self._names)
                self._names.append(name)
        d = len(self._names)
        # whether the model's weights hold the column (learned, or from the start)
        self._learned: list[bool] = list(map(learned.__contains__, self._names))
        # whether the column's weight is kept non-negative
        self._contention: list[bool] = list(map(is_contention, self._names))
        # the columns finish() writes back (besides those numbered since): those blocks learned, those
        # marked learned by columns(), those the scaler lacks
        self._written: list[np.ndarray] = [np.arange(scaled, d, dtype=np.int64)]
        self._listed: list[int] = []  # and those of columns()
        self._numbered = d
        self.weights = np.zeros(max(d, 16))
        self.abs_max = np.zeros(max(d, 16))
        self.contention = np.zeros(max(d, 16), dtype=np.bool_)
        self.contention[:d] = self._contention
        self._flagged = d  # the columns whose flags are in the array
        self.weights[:d] = list(map(learned.get, self._names, repeat(0.0)))
        self.abs_max[:scaled] = list(maxima.values())
        self.state = np.array([float(model.intercept)])
        self.steps = 0
        self.constants = (float(model.learning_rate), float(model.intercept_lr), float(model.clip_gradient),
                          bool(predictor.non_negative))
        self._finished = False
        self._left: tuple | None = None  # the model as finish() left it (see reopen)

    def _column(self, name: str) -> int:
        at = self._index.get(name)
        if at is None:
            at = self._index[name] = len(self._names)
            self._names.append(name)
            self._learned.append(False)
            self._contention.append(is_contention(name))
        return at

    def columns(self, names: Sequence[str]) -> list[int]:
        """The columns of ``names`` (new names get the next ones), marked as learned: a row of these
        names is about to be learned."""
        index = self._index
        at = [index.get(name, -1) for name in names]
        if -1 in at:  # new names: numbered in order
            at = [self._column(name) if column < 0 else column for name, column in zip(names, at, strict=True)]
        learned = self._learned
        for column in at:
            learned[column] = True
        self._listed += at
        return at

    def block(self, offsets: np.ndarray, positions: np.ndarray, values: np.ndarray,
              targets: np.ndarray) -> SgdBlock:
        """The next block: row ``t`` has the values ``values[offsets[t]:offsets[t + 1]]`` at the columns
        ``positions[...]`` (from :meth:`columns`), in its features' order, and the target ``targets[t]``."""
        if self._finished:
            raise RuntimeError("the run is finished")
        offsets = np.asarray(offsets, dtype=np.int64)
        positions, values = np.asarray(positions, dtype=np.int64), np.asarray(values, dtype=float)
        targets = np.asarray(targets, dtype=float)
        if offsets.size != targets.size + 1 or offsets[0] != 0 or offsets[-1] != values.size:
            raise ValueError(f"{offsets.size} offsets for {targets.size} rows of {values.size} values")
        if positions.shape != values.shape or (positions.size and not 0 <= positions.min() <= positions.max()
                                               < len(self._names)):
            raise ValueError("each value needs a column numbered by columns()")
        self.steps += targets.size
        self._written.append(positions)
        return SgdBlock(self, (offsets, positions, values, targets), len(self._names))

    def _grow(self, columns: int) -> None:
        """Arrays for the first ``columns`` columns (new ones: weight and maximum 0)."""
        size = self.weights.size
        if columns > size:
            grown = max(columns, 2 * size)
            self.weights = np.concatenate([self.weights, np.zeros(grown - size)])
            self.abs_max = np.concatenate([self.abs_max, np.zeros(grown - size)])
            self.contention = np.concatenate([self.contention, np.zeros(grown - size, dtype=np.bool_)])
        if columns > self._flagged:
            self.contention[self._flagged:columns] = self._contention[self._flagged:columns]
            self._flagged = columns

    def finish(self) -> None:
        """Write the learned state back into the model (after the last block's :meth:`~SgdBlock.compute`)."""
        if self._finished:
            return
        self._finished = True
        self._grow(len(self._names))  # columns numbered after the last block: unlearned, but the scaler has them
        model = self.predictor._model
        # only these columns can differ from the model's state (new names inserted in their columns' order)
        written = np.unique(np.concatenate([*self._written, np.array(self._listed, dtype=np.int64),
                                            np.arange(self._numbered, len(self._names))]))
        weights, maxima = self.weights[written].tolist(), self.abs_max[written].tolist()
        names, learned, columns = self._names, self._learned, written.tolist()
        model.note(map(names.__getitem__, columns))
        model_maxima, model_weights = model.abs_max, model.weights
        for at, weight, largest in zip(columns, weights, maxima, strict=True):
            name = names[at]
            model_maxima[name] = largest
            if learned[at]:
                model_weights[name] = weight
        model.intercept = float(self.state[0])
        model.n_iterations += self.steps
        self._left = _fingerprint(self.predictor)

    def reopen(self) -> bool:
        """Take up a finished run for more blocks, its arrays as they were left, where the model is
        still as :meth:`finish` left it (nothing else learned, restored or rebound it since); returns
        whether it could (else the run stays finished, and a fresh one reads the model)."""
        left, now = self._left, _fingerprint(self.predictor)
        if not self._finished or left is None or any(a is not b for a, b in zip(left[:3], now[:3], strict=True)) \
                or left[3:] != now[3:]:
            return False
        self._finished = False
        self._written = []
        self._listed = []
        self._numbered = len(self._names)
        self.steps = 0
        return True


def _fingerprint(predictor: SgdPredictor) -> tuple:
    """What a finished run's arrays mirror, as the model stands: the model and its dicts (compared by
    identity: a restore rebinds them), then what learning moves (sizes, steps, intercept)."""
    model = predictor._model
    return (model, model.weights, model.abs_max, len(model.weights), len(model.abs_max), model.n_iterations,
            model.intercept)


class SgdBlock:
    """A block of :class:`SgdRun`: :meth:`compute` learns it; then ``predictions`` holds each row's raw
    prediction (the linear model's, before its step)."""

    def __init__(self, run: SgdRun, rows: tuple[np.ndarray, ...], columns: int):
        self._run, self._rows, self._columns = run, rows, columns
        self.predictions = np.empty(rows[3].size)

    def compute(self) -> None:
        """Learn the block (the compiled call; the GIL released)."""
        run = self._run
        run._grow(self._columns)
        if self.predictions.size:
            _sgd_rows(*self._rows, run.weights, run.abs_max, run.contention, run.state, *run.constants,
                      self.predictions)


class SgdRows:
    """The ``sgd`` replay's pending rows: per record its ``fine`` features' values and their columns
    (one list of columns per distinct row layout); learned by a
    :class:`SgdRun`, which numbers new names itself (every row fits), and kept from one replay to the
    next while nothing else changes the model (:meth:`SgdRun.reopen`)."""

    def __init__(self, predictor: SgdPredictor):
        self.predictor = predictor
        self.layouts: dict[tuple[str, ...], list[int]] = {}  # columns per row layout (its names)
        self.offsets: list[int] = [0]
        self.positions: list[int] = []
        self.values: list[float] = []
        self.run: SgdRun | None = None

    def add(self, record: Record | ColocRow, flush: Callable[[], None], fine: Features | None = None) -> bool:
        """Queue ``record``'s row (always: a new name is a new column of the run); ``fine``: its fine
        features where they are already computed."""
        if self.run is None or self.run._finished and not self.run.reopen():
            self.run = SgdRun(self.predictor)
            self.layouts.clear()
        base = fine_features(record) if fine is None else fine
        names = tuple(base)
        columns = self.layouts.get(names)
        if columns is None:
            if len(self.layouts) >= MAX_LAYOUTS:  # bounded however many layouts a fleet's rows make
                self.layouts.clear()
            columns = self.layouts[names] = self.run.columns(names)
        self.positions.extend(columns)
        self.values.extend(base.values())
        self.offsets.append(len(self.values))
        return True

    def block(self, targets: np.ndarray) -> SgdBlock:
        """The queued rows as the run's next block (the queue emptied)."""
        assert self.run is not None
        block = self.run.block(np.array(self.offsets), np.array(self.positions), np.array(self.values), targets)
        self.offsets = [0]
        self.positions.clear()
        self.values.clear()
        return block

    def learned(self, block: SgdBlock, targets: np.ndarray) -> None:
        """Nothing beyond the predictions: the model keeps no running scale."""

    def restart(self) -> None:
        """Row layouts afresh (never needed: every row fits)."""
        self.layouts.clear()

    def finish(self) -> None:
        """Write the learned state back into the model (the last block learned). The rows may be used
        again (:class:`~predictor.prequential.blocks.KeptPlans`): the run is taken up where the model is
        as it was left, else a fresh one reads it."""
        if self.run is not None:
            self.run.finish()
