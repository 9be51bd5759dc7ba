"""Prequential replay with the RLS updates compiled over blocks of records.

:func:`~predictor.evaluation.run_prequential` calls
:meth:`~predictor.predictors.base.LatencyPredictor.predict_learn_one` per
record. For the ``rls`` predictor (one model, no clipping, no drift reset:
its defaults, the non-negative contention weights included) :func:`prequential_rls`
does the same steps in another order of work, not of arithmetic; it is what
``predictor replay --prequential`` and ``predictor evaluate --prequential`` run
for such a predictor (``--reference``: record by record):

1. per record, in stream order, the parts that depend only on the stream
   (the features before their products, :func:`~predictor.features.planned_row`; the solo latency
   and plausible slowdown range at that point, the solo profile's update) and, per distinct row
   layout, the features' column positions, where the model need not grow for them (every name
   known, a non-zero value only in a column that has its scale);
2. per block of such records, every RLS step in one compiled call
   (:class:`~predictor.regressors.rls_kernel.PlannedRun`, which also builds each row, the
   ``interactions`` features' products included, and holds the model's state from block to block),
   giving each record's prediction before its own step (from the projected weights) and its
   unconstrained fit (for the running residual scale); with ``overlap`` (the command line's
   default) the call runs on a second thread (:class:`~predictor.kernel_thread.KernelThread`; it
   releases the GIL) while step 1 goes on with the next block's records; when that block is full it
   is started at once, and the one before taken in while it is learned;
3. a record that grows the model (a new feature name, a column's first
   non-zero value), and the first record, go through the reference
   ``predict_learn_one`` after the block before them is learned.

The predictions and the learned state equal the reference's within rounding
(``tests/test_fastreplay.py``: 1e-9). Lines are decoded by the typed decoder
(:mod:`predictor.typed_decoding`) through :func:`~predictor.logio.iter_rows` into rows read
like records (no record built per line).

With ``overlap`` (:func:`fast_prequential`'s default, ``predictor replay --prequential``'s; ``--serial``
turns it off) the replay runs on three threads of two cores: this one decodes the lines and
computes the features, a second learns each block (the compiled call releases the GIL), a third
inflates a ``.gz`` log ahead (:mod:`predictor.inflate_ahead`). Measured (``python -m experiments.bench``,
50,000 records, 2026-11-24, the fourth session): the default ``rls`` 32,945 rec/s on one thread,
54,668 on three (both cores busy: ~16 µs a record in the kernel at 192 columns, ~13.5 in the
reading thread); ``rls:features='fine'`` 86,265; ``rls:features='coarse'`` 126,579, the fastest
configuration (MAPE 9.0% against the default's 8.2%).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING

import numpy as np

from predictor.evaluation import Scored, run_prequential
from predictor.features import RowLayout, planned_row
from predictor.kernel_thread import KernelThread
from predictor.logio import ReadReport, iter_rows
from predictor.predictors import create
from predictor.predictors.base import LatencyPredictor
from predictor.predictors.rls import RlsPredictor
from predictor.records import Record
from predictor.typed_decoding import ColocRow, record_of

if TYPE_CHECKING:
    from predictor.regressors.rls_kernel import PlannedBlock

BLOCK = 1024
MAX_PLANS = 4096
"""The most row layouts the replay keeps plans for; past it, it starts them afresh (a row layout is
cached by :func:`~predictor.features.row_layout` and known to the replay by identity, so a stream of
more distinct layouts than that cache holds would add a plan per row)."""


def supports(predictor: LatencyPredictor) -> bool:
    """Whether :func:`prequential_rls` applies: ``rls`` with one model, no clipping and no drift reset
    (its defaults; the non-negative projection of the contention weights is compiled too)."""
    return (type(predictor) is RlsPredictor and predictor.split_by is None and not predictor.clip
            and not predictor.drift_reset)


def prequential_rls(predictor: RlsPredictor, records: Iterable[Record | ColocRow], block: int = BLOCK,
                    knows: list[bool] | None = None, overlap: bool = False) -> Scored:
    """:func:`~predictor.evaluation.run_prequential` of ``predictor`` (see :func:`supports`), blockwise.

    ``records``: records, or decoded rows read like them (:func:`~predictor.logio.iter_rows`; a row
    becomes a record only where the reference step takes it).

    ``knows``: when given, whether each record's solo latency was known (given or profiled,
    :meth:`~predictor.predictors.base.LatencyPredictor.knows_solo`) just before it was learned is
    appended to it, in stream order (what the service's outlier gate asks).

    ``overlap``: learn each block on a second thread (:class:`~predictor.kernel_thread.KernelThread`)
    while this one reads the next: the same arithmetic in the same order, so the same results to the
    bit; faster where a second core is free. A block in flight when the records stop (an error
    included) is learned whole before this returns or raises.
    """
    if not supports(predictor):
        raise ValueError("the blockwise replay takes rls with split_by=None, clip=0 and drift_reset=False")
    worker = KernelThread("replay-kernel") if overlap else None
    try:
        return _prequential_blocks(predictor, records, block, knows, worker)
    finally:
        if worker is not None:
            worker.close()


def _prequential_blocks(predictor: RlsPredictor, records: Iterable[Record | ColocRow], block: int,
                        knows: list[bool] | None, worker: KernelThread | None) -> Scored:
    """:func:`prequential_rls`'s loop; each block learned by ``worker`` when given, else here."""
    from predictor.regressors.rls_kernel import PlannedRun, RowPlans  # numba, loaded where it is used

    scored = Scored()
    key = ""
    plans = RowPlans()  # where the values of each row layout go in the model
    plan_of_row: list[int] = []  # each pending record's plan
    bases: list[float] = []  # and the values its features are made from (products in the kernel)
    targets: list[float] = []
    # per row layout (by identity: shared by the rows of the same names): its plan, and the terms of its
    # values that have no scale yet (_unscaled_terms)
    layouts: dict[RowLayout, tuple[int, tuple[int, ...], tuple[tuple[int, int], ...]]] = {}
    bounds: list[tuple[float, float, float]] = []  # solo latency, slowdown range at the time
    run: PlannedRun | None = None  # the model's state, held by the compiled kernel from block to block
    # the block being learned, with its targets and bounds (one at most: the next one starts from its state)
    learning: tuple[PlannedBlock, np.ndarray, np.ndarray] | None = None

    def take_in(learned: PlannedBlock, learned_targets: np.ndarray, learned_bounds: np.ndarray) -> None:
        """A learned block's predictions, and the running residual scale."""
        solo, low, high = learned_bounds.T
        raw = learned.predictions
        slowdown = np.exp(np.minimum(raw, 10.0)) if predictor.log_target else raw
        slowdown = np.where(np.isfinite(slowdown), slowdown, 1.0)
        scored.predicted.extend((solo * np.minimum(np.maximum(slowdown, low), high)).tolist())
        scale = predictor._scale.get(key)
        for residual in np.abs(learned_targets - learned.fits).tolist():  # the unconstrained fit's, as _learn_vector
            scale = 0.98 * (residual if scale is None else scale) + 0.02 * residual
        predictor._scale[key] = scale  # type: ignore[assignment]
        predictor._seen[key] = predictor._seen.get(key, 0) + learned_targets.size

    def flush() -> None:
        """Start learning the pending records, then take in the block learned before them (which the
        compiled call had to finish first: the blocks share the model's state)."""
        nonlocal learning, run
        if not plan_of_row:
            return
        if run is None:
            run = PlannedRun(predictor._models[key])
        pending_targets = np.asarray(targets)
        block = run.block(plans, np.array(plan_of_row), np.array(bases), pending_targets)
        current = (block, pending_targets, np.asarray(bounds))
        plan_of_row.clear()
        bases.clear()
        targets.clear()
        bounds.clear()
        if worker is None:
            block.compute()
            take_in(*current)
            return
        before, learning = learning, None
        if before is not None:
            worker.wait()
        worker.start(block.compute)
        learning = current
        if before is not None:
            take_in(*before)  # while the next block is learned

    def settle() -> None:
        """Take in the block being learned, and write the learned state back into the model."""
        nonlocal learning, run
        if learning is not None:
            before, learning = learning, None
            if worker is not None:
                worker.wait()
            take_in(*before)
        if run is not None:
            run.finish()
            run = None

    try:
        for record in records:
            scored.measured.append(record.latency_ms)  # type: ignore[arg-type]
            if knows is not None:
                knows.append(predictor.knows_solo(record))
            model = predictor._models.get(key)
            fits = False
            if model is not None:
                row, base = planned_row(record, predictor.features)  # the predictor's own row, before products
                layout = layouts.get(row)
                if layout is None:
                    positions, partly = model.index.positions(row.names)  # None: every name known (no growth)
                    if partly is None and model.index.size == model._weights.size:
                        if len(plans) >= MAX_PLANS:  # layouts are keyed by identity: bounded however many
                            flush()  # (the pending rows' block takes the plans it was made with)
                            layouts.clear()
                            plans = RowPlans()
                        unscaled = np.flatnonzero(model._column_scale[positions] <= 0)
                        layout = layouts[row] = (plans.add(positions, row.left, row.right, row.keys),
                                                 *_unscaled_terms(row, unscaled))
                values = list(base.values())
                if layout is not None:
                    # a non-zero value in a column without its scale would set the scale: not here (a column
                    # always 0 in the stream, e.g. a signal, never gets its scale: most rows have one)
                    fits = not (any(map(values.__getitem__, layout[1]))  # (a NaN counts as non-zero)
                                or any(values[a] * values[b] for a, b in layout[2]))
            if not fits:
                flush()
                settle()
                scored.predicted.append(predictor.predict_learn_one(
                    record_of(record) if isinstance(record, ColocRow) else record))
                layouts.clear()  # columns and scales may have changed
                plans = RowPlans()  # (a block in flight holds the arrays of the plans before)
                continue
            solo = predictor.solo_latency(record)
            low, high = predictor._slowdown_range
            slowdown = record.latency_ms / solo  # type: ignore[operator]
            predictor._observed(record, slowdown)
            plan_of_row.append(layout[0])  # type: ignore[index]
            bases.extend(values)
            targets.append(math.log(slowdown) if predictor.log_target else slowdown)
            bounds.append((solo, low, high))
            if len(plan_of_row) >= block:
                flush()
        flush()
    finally:
        settle()  # a block in flight is learned whole, whatever ended the records
    return scored


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
        configurations it is replayed by :func:`~predictor.evaluation.run_prequential`.
    limit
        Replay only the first ``limit`` records.
    tolerant
        Skip bad lines instead of raising.
    report
        Filled in as the read progresses (records accepted, lines skipped).
    overlap
        Learn each block on a second thread while the next is read (:func:`prequential_rls`), and
        inflate a ``.gz`` log on a third (:mod:`predictor.inflate_ahead`): the same results to the
        bit; ``False``: everything on this thread.
    """
    predictor = create(spec, seed=seed)
    rows: Iterable[ColocRow | Record] = iter_rows(source, tolerant=tolerant, report=report, inflate_ahead=overlap)
    if limit is not None:
        rows = itertools.islice(rows, limit)
    if supports(predictor):
        return prequential_rls(predictor, rows, overlap=overlap)  # type: ignore[arg-type]
    return run_prequential(predictor, (record_of(r) if isinstance(r, ColocRow) else r for r in rows))
