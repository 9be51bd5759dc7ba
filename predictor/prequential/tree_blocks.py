"""Prequential replay of the ``tree`` and ``ensemble`` learners, their refits started ahead.

:func:`prequential_tree_blocks` does what :func:`~predictor.prequential.evaluation.run_prequential`
does record by record (:meth:`~predictor.predictors.base.LatencyPredictor.predict_learn_one`) for a
``tree`` or an ``ensemble`` predictor, in another order of work:

1. ``tree``: each record's regressor input (:meth:`TreePredictor.parts
   <predictor.predictors.tree.TreePredictor.parts>`) is made once, first for a
   :class:`~predictor.regressors.boosted.WindowAhead` that keeps the trees' window up to
   ``refits_ahead`` refits ahead of the learner and starts each refit as soon as its rows are
   known, then for the learner's own step. The learner takes those refits at its own record counts
   (checking their inputs), so its swaps wait for fits that began up to two refits earlier
   instead of ``swap_after`` records earlier: what is learned is the same, record for record.
2. ``ensemble``: the experts' predictions before each record first. Where every expert learns by
   compiled blocks (``rls``, ``sgd``), they step through the stream together
   (:func:`~predictor.prequential.blocks.prequential_experts`: each record's features computed once,
   the book-keeping kept once); else each runs over the whole stream alone, by its fastest exact
   path (``tree`` as above, others record by record). The experts are independent, so their
   predictions are those the ensemble's step would get. Then the Hedge weights are stepped over the
   stream with the ensemble's own arithmetic, compiled
   (:meth:`EnsemblePredictor.combine_learn_many <predictor.predictors.ensemble.EnsemblePredictor.combine_learn_many>`),
   its book-keeping taken from an expert that kept it alike.

The predictions and the learned state equal the reference's (``tests/prequential/test_tree_blocks.py``:
1e-9 on the embedded data and a synthetic stream).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable

from predictor.predictors import create
from predictor.predictors.base import LatencyPredictor
from predictor.predictors.ensemble import EnsemblePredictor
from predictor.predictors.tree import TreePredictor
from predictor.prequential import blocks
from predictor.prequential.evaluation import Scored, run_prequential
from predictor.records.logio import ReadReport, iter_rows
from predictor.records.record import Record
from predictor.records.typed_decoding import ColocRow, record_of
from predictor.regressors.boosted import ResidualRun, WindowAhead

BLOCK = 1024
"""Most corrector steps queued for one compiled call."""
REFITS_AHEAD = 2
"""Refits a ``tree`` learner's window is kept ahead by (each holds its window's rows until taken)."""
STREAM_CHUNK = 65536
"""Records an ensemble of compiled experts takes at a time (what the replay holds in memory)."""


def supports(predictor: LatencyPredictor) -> bool:
    """Whether :func:`prequential_tree_blocks` applies: a ``tree`` or an ``ensemble`` predictor (any settings)."""
    return type(predictor) in (TreePredictor, EnsemblePredictor)


def fastest_prequential(predictor: LatencyPredictor, records: list[Record], *,
                        refits_ahead: int = REFITS_AHEAD, kept: blocks.KeptPlans | None = None,
                        overlap: bool = False) -> Scored:
    """:func:`~predictor.prequential.evaluation.run_prequential` of any ``predictor`` by its fastest exact
    path: compiled blocks (:func:`~predictor.prequential.blocks.supports`), the replay of this module
    (:func:`supports`), else record by record. ``kept``: the ``rls`` row plans kept from call to call
    (:class:`~predictor.prequential.blocks.KeptPlans`); ``overlap``: compiled blocks learned on a second
    thread while the next are made (the same results to the bit; for long streams)."""
    if blocks.supports(predictor):
        return blocks.prequential_blocks(predictor, records, kept=kept, overlap=overlap)
    if supports(predictor):
        return prequential_tree_blocks(predictor, records, refits_ahead=refits_ahead, kept=kept, overlap=overlap)
    return run_prequential(predictor, records)


def replay_log(source: str | os.PathLike, spec: str, *, seed: int = 0, tolerant: bool = False,
               report: ReadReport | None = None, overlap: bool = True) -> Scored:
    """``predictor replay LOG --prequential``: the log ``source`` replayed prequentially through
    ``create(spec)`` by its fastest exact path: :func:`prequential_tree_blocks` for a ``tree`` or an
    ``ensemble`` (the default learner), else :func:`~predictor.prequential.blocks.fast_prequential`.
    ``tolerant``: skip bad lines; ``report``: filled in as the read progresses; ``overlap``: learn on a
    second thread and inflate on a third (the same results to the bit)."""
    predictor = create(spec, seed=seed)
    if supports(predictor):
        rows = iter_rows(source, tolerant=tolerant, report=report, inflate_ahead=overlap)
        return prequential_tree_blocks(predictor, rows, overlap=overlap)
    return blocks.fast_prequential(source, spec, seed=seed, tolerant=tolerant, report=report, overlap=overlap)


def prequential_tree_blocks(predictor: LatencyPredictor, records: Iterable[Record | ColocRow], *,
                            refits_ahead: int = REFITS_AHEAD, knows: list[bool] | None = None,
                            kept: blocks.KeptPlans | None = None, overlap: bool = False) -> Scored:
    """:func:`~predictor.prequential.evaluation.run_prequential` of a ``tree`` or ``ensemble`` ``predictor``
    (see :func:`supports`), its refits started ahead.

    ``records``: records, or decoded rows read like them (:func:`~predictor.records.logio.iter_rows`):
    an ensemble of compiled experts reads them :data:`STREAM_CHUNK` at a time, others whole first
    (the experts go over them one after another).
    ``refits_ahead``: most refits started before the learner gets to them (``0``: none, the reference's timing).
    ``knows``: when given, of an ``ensemble``, whether each record's solo latency was known just before it
    was learned is appended to it (as :func:`~predictor.prequential.blocks.prequential_blocks` does).
    ``kept``: an ``ensemble``'s ``rls`` experts' row plans kept from call to call
    (:class:`~predictor.prequential.blocks.KeptPlans`).
    ``overlap``: an ``ensemble``'s compiled experts learn each block on a second thread while the next is
    made (:func:`~predictor.prequential.blocks.prequential_blocks`; the same results to the bit).
    """
    if not supports(predictor):
        raise ValueError(f"the tree replay takes a tree or an ensemble predictor, got {predictor.name!r}")
    if refits_ahead < 0:
        raise ValueError(f"refits_ahead must be >= 0, got {refits_ahead!r}")
    if knows is not None and not isinstance(predictor, EnsemblePredictor):
        raise ValueError("knows is filled for an ensemble only")
    scored = Scored()
    if isinstance(predictor, EnsemblePredictor) and all(map(blocks.supports, predictor.expert_predictors)):
        # the experts step through the records together: a chunk at a time, rows read as records
        kept = kept if kept is not None else blocks.KeptPlans()
        stream = iter(records)
        while chunk := list(itertools.islice(stream, STREAM_CHUNK)):
            books = _books_alike(predictor, len(chunk), knows)
            columns = blocks.prequential_experts(predictor.expert_predictors, chunk, overlap=overlap, kept=kept)
            _ensemble_steps(predictor, chunk, columns, scored, knows, books)
        return scored
    stream = [record_of(r) if isinstance(r, ColocRow) else r for r in records]  # type: ignore[assignment]
    if isinstance(predictor, EnsemblePredictor):
        books = _books_alike(predictor, len(stream), knows)
        columns = [fastest_prequential(expert, stream, refits_ahead=refits_ahead, kept=kept, overlap=overlap).predicted
                   for expert in predictor.expert_predictors]
        _ensemble_steps(predictor, stream, columns, scored, knows, books)  # type: ignore[arg-type]
        return scored
    scored.predicted = _tree_predictions(predictor, stream, refits_ahead)  # type: ignore[arg-type]
    scored.measured = [record.latency_ms for record in stream]  # type: ignore[misc]
    return scored


def _ensemble_steps(predictor: EnsemblePredictor, records: list, columns: list[list[float]], scored: Scored,
                    knows: list[bool] | None, books: LatencyPredictor | None) -> None:
    """The ensemble's own steps over ``records`` into ``scored``, its experts' predictions of them
    ``columns`` (each made before the expert learned the record), its books taken from ``books``
    (:func:`_books_alike`, asked before the experts learned ``records``)."""
    scored.predicted += predictor.combine_learn_many(records, columns, knows, books)
    scored.measured += [record.latency_ms for record in records]


def _books_alike(predictor: EnsemblePredictor, records: int, knows: list[bool] | None) -> LatencyPredictor | None:
    """An expert replayed by compiled blocks (whose book-keeping is the base class's) that keeps its books
    as ``predictor`` does, for a stream of at least :data:`~predictor.prequential.blocks.BOOKS_FROM`
    ``records`` whose ``knows`` is not asked (those come from the ensemble's own books); ``None``: none."""
    if records < blocks.BOOKS_FROM or knows is not None:
        return None
    for expert in predictor.expert_predictors:
        if blocks.supports(expert) and expert.keeps_books_as(predictor):
            return expert
    return None


def _tree_predictions(predictor: TreePredictor, stream: list[Record], refits_ahead: int) -> list[float]:
    """The ``tree`` learner's prequential predictions over ``stream``: its window kept ahead, its steps
    taken in runs (:class:`~predictor.regressors.boosted.ResidualRun`) where they can be, else one by one."""
    model = predictor.regressor
    ahead = WindowAhead(model) if refits_ahead and model.background else None
    run = ResidualRun(model)
    parts: list[tuple[dict[str, float], dict[str, str]] | None] = []
    predicted = [0.0] * len(stream)
    queued: list[tuple[int, Record, tuple[float, float]]] = []  # position, record, targets' range before it

    def flush() -> None:
        for (i, record, before), value in zip(queued, run.flush().tolist(), strict=True):
            predicted[i] = predictor.answer(record, value, before)
        queued.clear()

    n = len(stream)
    made = 0  # records whose parts are made (and, with ``ahead``, put in the window ahead)
    for i, record in enumerate(stream):
        while made < n and (made <= i or (ahead is not None and ahead.pending < refits_ahead)):
            coming = stream[made]
            parts.append(predictor.parts(coming, predictor.work))
            if ahead is not None:
                if coming.latency_ms is None:
                    ahead = None  # the learner's step raises there; nothing to start beyond it
                else:
                    ahead.learn_parts(*parts[-1], predictor.target(coming))  # type: ignore[misc]
            made += 1
        numeric, categories = parts[i]  # type: ignore[misc]
        parts[i] = None
        if record.latency_ms is not None:
            target = predictor.target(record)
            before = predictor.target_range
            if run.step(numeric, categories, target):
                predictor.observe_learned(record, target)
                queued.append((i, record, before))
                if len(queued) >= BLOCK:
                    flush()
                continue
        flush()
        predicted[i] = predictor.predict_learn_parts(record, (numeric, categories))
    flush()
    return predicted
