"""Prequential replay with the RLS or SGD updates compiled over blocks of records.

For the ``rls`` predictor at its defaults (one model, no clipping, no drift reset) and the ``sgd``
model (river's ``MaxAbsScaler | LinearRegression`` arithmetic, :mod:`~predictor.predictors.sgd_model`), :func:`prequential_blocks` does what
:func:`~predictor.prequential.evaluation.run_prequential` does record by record
(:meth:`~predictor.predictors.base.LatencyPredictor.predict_learn_one`) in another order of work,
not of arithmetic. ``predictor replay --prequential`` and ``predictor evaluate --prequential`` run
it for such a predictor (``--reference``: record by record):

1. per record, in stream order, what depends only on the stream: the features before their
   products, the model-identity ones apart (:func:`~predictor.features.extract.planned_parts`, so that
   a fleet of many models shares few plans), the solo latency and plausible
   slowdown range, and per distinct row layout the features' columns;
2. per block of records that fit the model, every step in one compiled call
   (:class:`~predictor.regressors.rls_kernel.PlannedRun`, :class:`~predictor.predictors.sgd_kernel.SgdRun`),
   giving each record's prediction before its own step;
3. under ``rls``, a record that grows the model (a new feature name while the feature index has
   room, a column's first non-zero value), and the first record, through the reference once the
   block before it is learned (a name the full index has no room for is dropped, in a block as by
   the reference)
   (under ``sgd`` every record fits: a new name is a new column).

The predictions and the learned state equal the reference's within rounding
(``tests/prequential/test_fastreplay.py``: 1e-9; ``sgd``: the reference's state to the bit). Lines are decoded into
rows read like records (:mod:`predictor.records.typed_decoding`; no record built per line). With
``overlap`` (:func:`fast_prequential`'s default; ``--serial`` turns it off) three threads share the
work: this one decodes and computes the features, a second learns each block while the next is
read (:class:`~predictor.runtime.kernel_thread.KernelThread`; the compiled call releases the GIL),
a third inflates a ``.gz`` log ahead (:mod:`predictor.records.inflate_ahead`).

The split replay learns its training part so, and predicts its scored part with
:func:`predict_rows`: the model's answers per row layout at once, in NumPy.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import IO, TYPE_CHECKING

import numpy as np

from predictor.features.extract import (
    Features,
    RowLayout,
    fine_features,
    planned_parts,
)
from predictor.predictors import create
from predictor.predictors.base import LatencyPredictor, clipped_latencies, slowdowns_of
from predictor.predictors.ensemble import EnsemblePredictor
from predictor.predictors.rls import RlsPredictor
from predictor.prequential.evaluation import Scored, read_by, run_prequential
from predictor.records.logio import ReadReport, iter_rows
from predictor.records.record import Record
from predictor.records.typed_decoding import ColocRow, record_of
from predictor.regressors.rls_kernel import PlannedRun, RowPlans
from predictor.runtime.kernel_thread import KernelThread

if TYPE_CHECKING:
    from predictor.predictors.sgd_kernel import SgdBlock, SgdRows
    from predictor.regressors.least_squares import RLS
    from predictor.regressors.rls_kernel import PlannedBlock, PlannedRun

BLOCK = 1024
MAX_PLANS = 4096
"""The most row layouts the replay keeps plans for; past it, it starts them afresh (a row layout is
cached by :func:`~predictor.features.extract.row_layout` and known to the replay by identity, so a stream of
more distinct layouts than that cache holds would add a plan per row)."""


def supports(predictor: LatencyPredictor) -> bool:
    """Whether :func:`prequential_blocks` applies: ``rls`` with one model, no clipping and no drift reset
    (its defaults; the non-negative projection of the contention weights is compiled too), or ``sgd``
    with the pipeline it builds (:meth:`SgdPredictor.learns_in_blocks
    <predictor.predictors.sgd.SgdPredictor.learns_in_blocks>`; ``sgd`` is imported only by an ``sgd``
    predictor, never here)."""
    if predictor.name == "sgd":
        return predictor.learns_in_blocks()  # type: ignore[attr-defined]
    return (type(predictor) is RlsPredictor and predictor.split_by is None and not predictor.clip
            and not predictor.drift_reset)


def prequential_blocks(predictor: LatencyPredictor, records: Iterable[Record | ColocRow], block: int = BLOCK,
                       knows: list[bool] | None = None, overlap: bool = False,
                       kept: KeptPlans | None = None) -> Scored:
    """:func:`~predictor.prequential.evaluation.run_prequential` of ``predictor`` (see :func:`supports`), blockwise.

    ``records``: records, or decoded rows read like them (:func:`~predictor.records.logio.iter_rows`; a row
    becomes a record only where the reference step takes it).

    ``knows``: when given, whether each record's solo latency was known (given or profiled,
    :meth:`~predictor.predictors.base.LatencyPredictor.knows_solo`) just before it was learned is
    appended to it, in stream order (what the service's outlier gate asks).

    ``overlap``: learn each block on a second thread (:class:`~predictor.runtime.kernel_thread.KernelThread`)
    while this one reads the next: the same arithmetic in the same order, so the same results to the
    bit; faster where a second core is free. A block in flight when the records stop (an error
    included) is learned whole before this returns or raises.

    ``kept``: where an ``rls`` predictor's row plans are kept from call to call (:class:`KeptPlans`):
    the same results, with each row layout planned once over the calls.
    """
    if not supports(predictor):
        raise ValueError("the blockwise replay takes rls with split_by=None, clip=0 and drift_reset=False, "
                         "or sgd with its own pipeline")
    rows = _rows_of(predictor, kept)
    worker = KernelThread("replay-kernel") if overlap else None
    try:
        return _prequential_blocks(predictor, rows, records, block, knows, worker)
    finally:
        if worker is not None:
            worker.close()
        if kept is not None:
            kept.keep(rows)


BOOKS_FROM = 512
"""The fewest records over which learners that keep their books alike keep them once (below, comparing
their books costs more than keeping them each): :func:`prequential_experts`, and an ensemble's own
(:mod:`predictor.prequential.tree_blocks`)."""


def reads_fine_features(predictor: LatencyPredictor) -> bool:
    """Whether :func:`prequential_blocks` of ``predictor`` reads each record's fine features (``sgd``,
    ``rls`` over the ``fine`` or ``interactions`` features)."""
    return predictor.name == "sgd" or getattr(predictor, "features", "coarse") != "coarse"


def prequential_experts(experts: Sequence[LatencyPredictor], records: Sequence[Record | ColocRow], *,
                        overlap: bool = False, kept: KeptPlans | None = None) -> list[list[float]]:
    """:func:`prequential_blocks` of each of ``experts`` (each one :func:`supports` takes) over the same
    ``records``, in one pass: the experts step through the records together, each record's fine
    features computed once for all that read them (:func:`reads_fine_features`; ``rls`` derives its
    planned parts from them, :func:`~predictor.features.extract.planned_parts`), and, over
    at least :data:`BOOKS_FROM` records where every expert keeps its books as the last one does
    (:meth:`~predictor.predictors.base.LatencyPredictor.keeps_books_as`), the book-keeping kept once, by
    the last expert: the others take a copy of its books before a reference step of theirs, and at the
    end. Each expert's predictions, in ``experts``' order; the same predictions and learned state, to
    the bit, as :func:`prequential_blocks` of each alone (``overlap``, ``kept``: as there)."""
    loops: list[_BlockLoop] = []
    keeper = experts[-1]
    learned = [expert.n_learned for expert in experts]
    shared_books = len(records) >= BOOKS_FROM and all(expert.keeps_books_as(keeper) for expert in experts[:-1])
    fine = sum(map(reads_fine_features, experts)) > 1
    taken = 0
    try:
        for expert in experts:
            loops.append(_BlockLoop(expert, _rows_of(expert, kept), BLOCK, None,
                                    KernelThread("replay-kernel") if overlap else None))
            if shared_books and expert is not keeper:
                loops[-1].before_reference = functools.partial(expert.take_books, keeper, 0)
        followers, last = loops[:-1], loops[-1]
        for record in records:
            features = fine_features(record) if fine else None  # type: ignore[arg-type]
            if shared_books:
                solo = keeper.solo_latency(record)  # type: ignore[arg-type]
                low, high = keeper._slowdown_range
                slowdown = record.latency_ms / solo  # type: ignore[operator]
                books = (solo, low, high, slowdown)
                for loop in followers:
                    loop.step(record, features, books)
                if last.step(record, features, books):
                    keeper._observed(record, slowdown)  # type: ignore[arg-type]
            else:
                for loop in loops:
                    loop.step(record, features)
            taken += 1
        for loop in loops:
            loop.flush()
    finally:
        _settle_all(loops, kept)
        if shared_books:
            for expert, before in zip(experts[:-1], learned, strict=False):
                expert.take_books(keeper, 0)
                expert.n_learned = before + taken
    return [loop.scored.predicted for loop in loops]


def _rows_of(predictor: LatencyPredictor, kept: KeptPlans | None) -> _RlsRows | SgdRows:
    """``predictor``'s pending rows for :func:`prequential_blocks`: kept ones (:class:`KeptPlans`) where they fit."""
    if predictor.name == "sgd":
        return kept.sgd_rows(predictor) if kept is not None else predictor.block_rows()  # type: ignore[attr-defined]
    return kept.rows(predictor) if kept is not None else _RlsRows(predictor)  # type: ignore[arg-type]


def _settle_all(loops: list[_BlockLoop], kept: KeptPlans | None) -> None:
    """Each loop's block in flight learned whole and its state written back (whatever ended the records),
    its worker closed and its rows kept (``kept``)."""
    try:
        for loop in loops:
            loop.settle()
    finally:
        for loop in loops:
            if loop.worker is not None:
                loop.worker.close()
            if kept is not None:
                kept.keep(loop.rows)


class KeptPlans:
    """The ``rls`` row plans of :func:`prequential_blocks`, kept from one call to the next on the same
    predictor (a learner that takes its records a few at a time, as the service's ingest does), so that
    each row layout is planned once rather than once per call; and an ``sgd`` predictor's run, so that
    its arrays are read from the model once rather than once per call (:meth:`sgd_rows`).

    A plan holds the model's columns and scales as they were when it was made; the kept plans are
    used only while the model is the one they were made for and nothing has changed it since the
    last call but that call (its learned counts, columns, scales and arrays as they were left):
    anything else (a reference step between calls, a restore, another model) starts them afresh.
    :meth:`forget` drops them at once.

    >>> kept = KeptPlans()
    >>> scored = prequential_blocks(predictor, first_records, kept=kept)  # doctest: +SKIP
    >>> scored = prequential_blocks(predictor, next_records, kept=kept)  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._kept: dict[int, tuple[_RlsRows | SgdRows, tuple | None]] = {}  # by the predictor's id (the rows hold it)

    def rows(self, predictor: RlsPredictor) -> _RlsRows:
        """The kept rows of ``predictor`` where their plans still fit its model, else fresh ones."""
        found = self._kept.pop(id(predictor), None)
        if found is not None and isinstance(found[0], _RlsRows) and found[0].predictor is predictor \
                and found[1] == _fingerprint(predictor):
            return found[0]
        return _RlsRows(predictor)

    def sgd_rows(self, predictor: LatencyPredictor) -> SgdRows:
        """The kept rows of an ``sgd`` ``predictor`` (their run taken up where the model is as it left it,
        :meth:`SgdRun.reopen <predictor.predictors.sgd_kernel.SgdRun.reopen>`), else fresh ones."""
        found = self._kept.pop(id(predictor), None)
        if found is not None and found[0].predictor is predictor and found[1] is None:
            return found[0]
        return predictor.block_rows()  # type: ignore[attr-defined]

    def keep(self, rows: _RlsRows | SgdRows) -> None:
        """Keep ``rows`` (their run finished) for the next call on their predictor."""
        if isinstance(rows, _RlsRows):
            if rows.run is not None or rows.plan_of_row:
                return
            fingerprint: tuple | None = _fingerprint(rows.predictor)
        elif rows.offsets[1:]:  # rows queued and never learned
            return
        else:
            fingerprint = None  # the run checks the model itself
        while len(self._kept) >= MAX_KEPT:  # the longest kept first (a predictor since replaced)
            del self._kept[next(iter(self._kept))]
        self._kept[id(rows.predictor)] = (rows, fingerprint)

    def forget(self) -> None:
        """Drop every kept plan."""
        self._kept.clear()


MAX_KEPT = 8
"""The most predictors :class:`KeptPlans` keeps plans for (an ensemble's experts, one each)."""


def _fingerprint(predictor: RlsPredictor) -> tuple:
    """What a kept plan depends on, as the model stands: which model, index and column scales (by
    identity: a restore or a reference step's growth rebinds them), and the counts learning moves."""
    model = predictor._models.get("")
    if model is None:
        return (None,)
    index = model.index
    return (model, index, index.columns, model._column_scale, model._weights.size, index.size,
            len(index.columns), index.dropped, model.n_updates, model.n_refused, model.n_resets,
            model._all_scaled)


class _RlsRows:
    """The ``rls`` replay's pending rows: per record the number of a plan (one per distinct row layout:
    where its values go, which pairs are multiplied, :class:`~predictor.regressors.rls_kernel.RowPlans`)
    and the values its features are made from; learned by a
    :class:`~predictor.regressors.rls_kernel.PlannedRun`."""

    def __init__(self, predictor: RlsPredictor):

        self.predictor = predictor
        self.plans = RowPlans()
        self.plan_of_row: list[int] = []
        self.bases: list[float] = []
        self.extra_offsets: list[int] = [0]  # the rows' model-identity values, apart from their plans
        self.extra_columns: list[int] = []
        self.extra_values: list[float] = []
        # per row layout (by identity: shared by the rows of the same names): its plan, the terms of
        # its values that have no scale yet (_unscaled_terms), and how many of its names the full index drops
        self.layouts: dict[RowLayout, tuple[int, tuple[int, ...], tuple[tuple[int, int], ...], int]] = {}
        self.run: PlannedRun | None = None  # the model's state, held by the compiled kernel from block to block
        self._finished: PlannedRun | None = None  # the last run, taken up again where the model is as it left it

    def add(self, record: Record | ColocRow, flush: Callable[[], None], fine: Features | None = None) -> bool:
        """Queue ``record``'s row; ``False`` where it does not fit the model as it is (the first record,
        a new name, a non-zero value in a column without its scale: the reference step takes it).
        ``flush``: learn the rows queued so far (before the plans are started afresh); ``fine``: the
        record's fine features where they are already computed."""
        predictor = self.predictor
        model = predictor._models.get("")
        if model is None:
            return False
        # the predictor's own row, before products
        row, base, identity = planned_parts(record, predictor.features, fine)
        layout = self.layouts.get(row)
        if layout is None:
            index = model.index
            positions, partly = index.positions(row.names)  # None: every name known (no growth)
            # an unknown name grows the model, unless the index is full: then the reference drops it
            # (and counts it in ``index.dropped``), as the plan does (position -1)
            full = len(index.columns) >= index.max_features
            if (partly is None or full) and index.size == model._weights.size:
                if len(self.plans) >= MAX_PLANS:  # layouts are keyed by identity: bounded however many
                    flush()  # (the pending rows' block takes the plans it was made with)
                    self.restart()
                known = positions >= 0
                unscaled = np.flatnonzero(known & (model._column_scale[positions] <= 0))
                layout = self.layouts[row] = (self.plans.add(positions, row.left, row.right, row.keys),
                                              *_unscaled_terms(row, unscaled), int(known.size - known.sum()))
        if layout is None:
            return False
        values = list(base.values())
        # a non-zero value in a column without its scale would set the scale: not here (a column always 0
        # in the stream, e.g. a signal, never gets its scale: most rows have one)
        if (layout[1] and any(map(values.__getitem__, layout[1]))) or \
                (layout[2] and any(values[a] * values[b] for a, b in layout[2])):
            return False  # (a NaN counts as non-zero)
        dropped = layout[3]
        extra: list[tuple[int, float]] = []  # the row's model-identity (column, value), taken once it fits
        if identity:
            index = model.index
            columns = list(map(index.columns.get, identity))
            if None in columns:
                if len(index.columns) < index.max_features:
                    return False  # a new name, which the reference step gives a column
                dropped += columns.count(None)
            scale = model._column_scale
            for column, value in zip(columns, identity.values(), strict=True):
                if column is not None:
                    if value and not scale[column] > 0:
                        return False  # a column's first non-zero value: the reference step scales it
                    extra.append((column, value))
        for column, value in extra:
            self.extra_columns.append(column)
            self.extra_values.append(value)
        self.extra_offsets.append(len(self.extra_columns))
        self.plan_of_row.append(layout[0])
        self.bases.extend(values)
        if dropped:
            model.index.dropped += dropped
        return True

    def block(self, targets: np.ndarray) -> PlannedBlock:
        """The queued rows as the run's next block (the queue emptied)."""

        if self.run is None:
            model, finished = self.predictor._models[""], self._finished
            self._finished = None
            self.run = finished if finished is not None and finished.model is model and finished.reopen() \
                else PlannedRun(model)
        block = self.run.block(self.plans, np.array(self.plan_of_row), np.array(self.bases), targets,
                               (np.array(self.extra_offsets), np.array(self.extra_columns, dtype=np.int64),
                                np.array(self.extra_values, dtype=float)))
        self.plan_of_row.clear()
        self.bases.clear()
        self.extra_offsets[1:] = []
        self.extra_columns.clear()
        self.extra_values.clear()
        return block

    def learned(self, block: PlannedBlock, targets: np.ndarray) -> None:
        """A learned block's running residual scale (of the unconstrained fit's residuals, as ``_learn_vector``)."""
        predictor = self.predictor
        scale = predictor._scale.get("")
        for residual in np.abs(targets - block.fits).tolist():
            scale = 0.98 * (residual if scale is None else scale) + 0.02 * residual
        predictor._scale[""] = scale  # type: ignore[assignment]
        predictor._seen[""] = predictor._seen.get("", 0) + targets.size

    def restart(self) -> None:
        """Plans afresh (after a reference step, columns and scales may have changed; a block in flight
        holds the arrays of the plans before)."""

        self.layouts.clear()
        self.plans = RowPlans()

    def finish(self) -> None:
        """Write the learned state back into the model (the last block learned)."""
        if self.run is not None:
            self.run.finish()
            self.run, self._finished = None, self.run


Books = tuple[float, float, float, float]
"""A record's book-keeping as its learner found it: the solo latency, the plausible slowdown range
(low, high) and the record's slowdown over that solo latency."""


class _BlockLoop:
    """:func:`prequential_blocks`'s loop over one learner's records (:meth:`step` each, then
    :meth:`settle`): each block learned by ``worker`` when given, else here."""

    def __init__(self, predictor: LatencyPredictor, rows: _RlsRows | SgdRows, block: int,
                 knows: list[bool] | None, worker: KernelThread | None):
        self.predictor, self.rows, self.block, self.knows, self.worker = predictor, rows, block, knows, worker
        self.scored = Scored()
        self.targets: list[float] = []
        self.bounds: list[tuple[float, float, float]] = []  # solo latency, slowdown range at the time
        # the block being learned, with its targets and bounds (one at most: the next one starts from its state)
        self.learning: tuple[PlannedBlock | SgdBlock, np.ndarray, np.ndarray] | None = None
        self.before_reference: Callable[[], None] | None = None  # called before a reference step

    def step(self, record: Record | ColocRow, fine: Features | None = None, books: Books | None = None) -> bool:
        """Take ``record`` in (``fine``: its fine features, where already computed); ``books``: its
        book-keeping as kept elsewhere (this learner's own left as they are), else kept here.
        ``False`` where the reference step took it (which kept this learner's books itself)."""
        predictor = self.predictor
        self.scored.measured.append(record.latency_ms)  # type: ignore[arg-type]
        if self.knows is not None:
            self.knows.append(predictor.knows_solo(record))  # type: ignore[arg-type]
        if not self.rows.add(record, self.flush, fine):
            self.flush()
            self.settle()
            if self.before_reference is not None:
                self.before_reference()
            self.scored.predicted.append(predictor.predict_learn_one(
                record_of(record) if isinstance(record, ColocRow) else record))
            self.rows.restart()  # columns and scales may have changed
            return False
        if books is None:
            solo = predictor.solo_latency(record)  # type: ignore[arg-type]
            low, high = predictor._slowdown_range
            slowdown = record.latency_ms / solo  # type: ignore[operator]
            predictor._observed(record, slowdown)  # type: ignore[arg-type]
        else:
            solo, low, high, slowdown = books
        self.targets.append(math.log(slowdown) if predictor.log_target else slowdown)  # type: ignore[attr-defined]
        self.bounds.append((solo, low, high))
        if len(self.targets) >= self.block:
            self.flush()
        return True

    def _take_in(self, learned: PlannedBlock | SgdBlock, learned_targets: np.ndarray, learned_bounds: np.ndarray) -> None:
        """A learned block's predictions (as ``predict_one`` makes them of the raw ones)."""
        solo, low, high = learned_bounds.T
        slowdowns = slowdowns_of(learned.predictions, self.predictor.log_target)  # type: ignore[attr-defined]
        self.scored.predicted.extend(clipped_latencies(solo, slowdowns, low, high).tolist())  # type: ignore[arg-type]
        self.rows.learned(learned, learned_targets)  # type: ignore[arg-type]

    def flush(self) -> None:
        """Start learning the pending records, then take in the block learned before them (which the
        compiled call had to finish first: the blocks share the model's state)."""
        if not self.targets:
            return
        pending_targets = np.asarray(self.targets)
        current = (self.rows.block(pending_targets), pending_targets, np.asarray(self.bounds))
        self.targets.clear()
        self.bounds.clear()
        worker = self.worker
        if worker is None:
            current[0].compute()
            self._take_in(*current)
            return
        before, self.learning = self.learning, None
        if before is not None:
            worker.wait()
        worker.start(current[0].compute)
        self.learning = current
        if before is not None:
            self._take_in(*before)  # while the next block is learned

    def settle(self) -> None:
        """Take in the block being learned, and write the learned state back into the model."""
        if self.learning is not None:
            before, self.learning = self.learning, None
            if self.worker is not None:
                self.worker.wait()
            self._take_in(*before)
        self.rows.finish()


def _prequential_blocks(predictor: LatencyPredictor, rows: _RlsRows | SgdRows, records: Iterable[Record | ColocRow],
                        block: int, knows: list[bool] | None, worker: KernelThread | None) -> Scored:
    """:func:`prequential_blocks`'s loop; each block learned by ``worker`` when given, else here."""
    loop = _BlockLoop(predictor, rows, block, knows, worker)
    try:
        for record in records:
            loop.step(record)
        loop.flush()
    finally:
        loop.settle()  # a block in flight is learned whole, whatever ended the records
    return loop.scored


def _unscaled_terms(row: RowLayout, unscaled: np.ndarray) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """The base values (by position) and the pairs of them multiplied that make the values of ``row``
    at ``unscaled`` (positions among its names): a row fits the model only where all are 0."""
    count = len(row.names) - row.left.size - row.keys.size
    singles: list[int] = []
    pairs: list[tuple[int, int]] = []
    for u in unscaled.tolist():
        if u < count:
            singles.append(u)
        elif u < count + row.left.size:
            pairs.append((int(row.left[u - count]), int(row.right[u - count])))
        else:
            singles.append(int(row.keys[u - count - row.left.size]))
    return tuple(singles), tuple(pairs)


def predict_rows(predictor: LatencyPredictor, records: Sequence[Record | ColocRow]) -> list[float]:
    """What :meth:`~predictor.predictors.base.LatencyPredictor.predict_one` answers for each of ``records``
    (or rows read like them), the predictor learning nothing meanwhile: the split replay's scored part.

    For ``rls`` and ``sgd`` as :func:`supports` takes them, the rows are computed per row layout at once
    (per record its features, for ``rls`` before their products,
    :func:`~predictor.features.extract.planned_parts`; their products, scaling and the model's weights
    per layout in NumPy): the same numbers within rounding (the sum's terms added in another order);
    an ``ensemble``, each expert's so, combined per record with the weights as they stand; any other
    predictor record by record.
    """
    if isinstance(predictor, EnsemblePredictor):
        return predictor.combine_many(records, [predict_rows(expert, records) for expert in predictor.expert_predictors])  # type: ignore[arg-type]
    if not supports(predictor):
        return list(map(predictor.predict_one, read_by(predictor, records)))  # type: ignore[arg-type]
    n = len(records)
    solo = np.fromiter(map(predictor.solo_latency, records), dtype=float, count=n)  # type: ignore[arg-type]
    log_target = predictor.log_target  # type: ignore[attr-defined]
    if predictor.name == "sgd":
        slowdowns = slowdowns_of(_sgd_raw_predictions(predictor, records), log_target)
    elif (model := predictor._models.get("")) is None:  # type: ignore[attr-defined]
        slowdowns = np.ones(n)  # nothing learned yet: slowdown 1, as predict_slowdown says
    else:
        slowdowns = slowdowns_of(_raw_predictions(model, predictor.features, records), log_target)  # type: ignore[attr-defined]
    return clipped_latencies(solo, slowdowns, *predictor._slowdown_range).tolist()  # type: ignore[arg-type]


def _sgd_raw_predictions(predictor: LatencyPredictor, records: Sequence[Record | ColocRow]) -> np.ndarray:
    """The ``sgd`` pipeline's raw answer of each record's fine features, per set of names at once
    (:meth:`SgdPredictor._matrix_predictor <predictor.predictors.sgd.SgdPredictor._matrix_predictor>`)."""
    groups: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}
    for i, record in enumerate(records):
        features = fine_features(record)  # type: ignore[arg-type]
        group = groups.setdefault(tuple(features), ([], []))
        group[0].append(i)
        group[1].extend(features.values())
    raw = np.zeros(len(records))
    for names, (rows, values) in groups.items():
        predict = predictor._matrix_predictor(names)  # type: ignore[attr-defined]
        raw[rows] = predict(np.array(values, dtype=float).reshape(len(rows), len(names)))
    return raw


def _raw_predictions(model: RLS, features: str, records: Sequence[Record | ColocRow]) -> np.ndarray:
    """``model.predict_vector(model.vectorize_row(..., grow=False))`` of each record's features: each
    value scaled by its column's scale (0 where the column has none) times the predicting weight, a
    name the model does not know ignored."""
    size = model.index.size
    scale = model._column_scale[:size]
    weights = model.predicting_weights()[:size]

    def terms(values: np.ndarray, columns: np.ndarray) -> np.ndarray:
        at = scale[columns]
        return np.divide(values, at, out=np.zeros(values.shape), where=at > 0) * weights[columns]

    groups: dict[RowLayout, tuple[list[int], list[float]]] = {}
    extra_rows: list[int] = []
    extra_columns: list[int] = []
    extra_values: list[float] = []
    columns = model.index.columns
    for i, record in enumerate(records):
        layout, base, identity = planned_parts(record, features)
        group = groups.get(layout)
        if group is None:
            group = groups[layout] = ([], [])
        group[0].append(i)
        group[1].extend(base.values())
        for name, value in identity.items():
            column = columns.get(name)
            if column is not None:
                extra_rows.append(i)
                extra_columns.append(column)
                extra_values.append(value)
    raw = np.full(len(records), float(terms(np.ones(1), np.zeros(1, dtype=np.intp))[0]))  # the intercept's
    for layout, (rows, bases) in groups.items():
        count = len(layout.names) - layout.left.size - layout.keys.size
        base = np.array(bases, dtype=float).reshape(len(rows), count)
        values = np.concatenate((base, base[:, layout.left] * base[:, layout.right], base[:, layout.keys]), axis=1)
        positions, known = model.index.positions(layout.names)
        if known is not None:
            values, positions = values[:, known], positions[known]
        raw[rows] += terms(values, positions).sum(axis=1)
    np.add.at(raw, extra_rows, terms(np.array(extra_values, dtype=float), np.array(extra_columns, dtype=np.intp)))
    return raw


def fast_prequential(source: str | os.PathLike | IO[str], spec: str = "rls", *, seed: int = 0,
                     limit: int | None = None, tolerant: bool = False,
                     report: ReadReport | None = None, overlap: bool = True) -> Scored:
    """Replay the log ``source`` prequentially through ``create(spec)``, blockwise where it applies.

    Parameters
    ----------
    source
        A ``coloc/v1`` log (path or text stream).
    spec
        Predictor specification (``name:key=value,...``); other than the supported ``rls``
        configurations it is replayed by :func:`~predictor.prequential.evaluation.run_prequential`.
    limit
        Replay only the first ``limit`` records.
    tolerant
        Skip bad lines instead of raising.
    report
        Filled in as the read progresses (records accepted, lines skipped).
    overlap
        Learn each block on a second thread while the next is read (:func:`prequential_blocks`), and
        inflate a ``.gz`` log on a third (:mod:`predictor.records.inflate_ahead`): the same results to the
        bit; ``False``: everything on this thread.
    """
    predictor = create(spec, seed=seed)
    rows: Iterable[ColocRow | Record] = iter_rows(source, tolerant=tolerant, report=report, inflate_ahead=overlap)
    if limit is not None:
        rows = itertools.islice(rows, limit)
    if supports(predictor):
        return prequential_blocks(predictor, rows, overlap=overlap)
    return run_prequential(predictor, read_by(predictor, rows))
