"""One query into one prediction: the answering path of PredictLatency, CheckDeadline and RankPlacements.

Every answer goes the same way:

1. **plan** — :meth:`Answering.plan_query` validates a query by the ``coloc/v1`` rules
   and the magnitude limits (naming the first offending field) and resolves its
   co-runners (given, or from the live view). A ranking's candidates are checked all at
   once column-wise (:func:`~predictor.service.estimates.column_checks.valid_columns`, the same rules);
   where that cannot vouch for every one, each is planned by :meth:`Answering.plan_query`.
   Either way the plan is a set of rows (:class:`~predictor.records.colocations.CoLocations`)
   with each co-runner's remaining time (NaN: its overlap is given);
2. **answer** — :meth:`Answering.answer` predicts every row at once (co-runners given by
   remaining time get their overlap from the predicted window, iterated), bounds the
   predictions by the calibrator, and computes the slack and probability for a deadline.

A single query is the one-row case: :meth:`Answering.predict` and
:meth:`Answering.check_deadline` read row 0 of the same answer a ranking reads.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from statistics import NormalDist
from typing import Any, TypeVar

import numpy as np

from predictor.calibration import cell_kernel
from predictor.calibration.conformal import Bound, BoundSource
from predictor.calibration.shape import log_ratios, normal_quantile
from predictor.calibration.shapes import MAX_COUNT, QueryShape
from predictor.features.window import at_window
from predictor.predictors import LatencyPredictor
from predictor.predictors.base import MAX_SLOWDOWN, MIN_SLOWDOWN
from predictor.records import rules
from predictor.records.colocations import CoLocations
from predictor.records.keyed import KeyedMaps
from predictor.records.record import (
    SCHEMA,
    BatchSpec,
    CoRunner,
    Record,
    RecordError,
    parse_record,
    record_numbers,
    record_within_limits,
)
from predictor.service.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from predictor.service.estimates import fixed_point_kernel, monotone
from predictor.service.estimates.column_checks import valid_columns
from predictor.service.estimates.delay import decide
from predictor.service.estimates.filling import Filling
from predictor.service.estimates.placements import (
    CandidateColumns,
    EstimatedPaths,
    RankingColumns,
    RowShapes,
    distinct_maps,
    rank_order,
)
from predictor.service.estimates.terms import terms_of
from predictor.service.live.liveview import RunningBatch
from predictor.service.live.queues import QueueWhatIf
from predictor.service.live.transfers import NOWHERE
from predictor.service.published import ModelVersion
from predictor.service.state import ServiceState
from predictor.service.typed_query import typed_batch_ok, typed_record
from predictor.service.types import (
    Candidate,
    CoRunnerSource,
    Deadline,
    DeadlineAnswer,
    DelayDecision,
    InputPlace,
    Prediction,
    Query,
    Ranking,
)

T = TypeVar("T")
_NONE = np.zeros(0, dtype=np.intp)
ONE_QUADRATIC_ROWS = 512
"""A ranking of at most this many candidates, some with co-runners given by remaining time, answers
every candidate from one quadratic of the moving overlaps, in one compiled pass (the others'
quadratics are constants); a larger one predicts the others by the predictor's form of them, whose
fixed cost is higher and cost per row lower."""


@dataclasses.dataclass
class Planned:
    """A validated planned batch: the record to predict and each co-runner's remaining time.

    A single query is answered from it directly, as the one-row case of a :class:`Plan`
    (see :meth:`Answering.answer`).
    """

    record: Record
    remaining_ms: list[float | None]
    shape: QueryShape | None = None  # what the query knew (None: as an observation, every overlap known)
    estimated: tuple[str, ...] = ()

    @property
    def moving(self) -> bool:
        """Whether some co-runner is given by remaining time (its overlap follows the prediction)."""
        return any(ms is not None for ms in self.remaining_ms)

    def at_window(self, window: float) -> Record:
        """The record with each remaining-time co-runner's overlap for the predicted ``window``:
        ``min(remaining / window, 1)``, or 1 for an idle window (<= 0), as :meth:`Plan.at_window`."""
        return at_window(self.record, self.remaining_ms, window)


@dataclasses.dataclass
class Plan:
    """Rows to predict, and each co-runner's remaining time (NaN: its overlap is given).

    ``given`` indexes the co-runners given by remaining time.
    """

    rows: CoLocations
    remaining: np.ndarray
    given: np.ndarray
    shapes: Sequence[QueryShape] | None = None  # per row, what its query knew (None: every overlap known)
    estimated: Sequence[tuple[str, ...]] | None = None

    @classmethod
    def of(cls, planned: list[Planned]) -> Plan:
        """The rows of planned batches that share one batch and solo latency."""
        first = planned[0].record
        plan = cls.from_runners(
            first.batch,
            first.solo_latency_ms,
            [p.record.device for p in planned],
            [p.record.device_kind for p in planned],
            [p.record.signals for p in planned],
            [
                [(c, math.nan if ms is None else ms) for c, ms in zip(p.record.co_runners, p.remaining_ms, strict=True)]
                for p in planned
            ],
        )
        plan.shapes = [p.shape or _record_shape(p.record) for p in planned]
        if any(p.estimated for p in planned):
            plan.estimated = [p.estimated for p in planned]
        return plan

    @classmethod
    def from_runners(
        cls,
        batch: BatchSpec,
        solo_latency_ms: float | None,
        devices: Sequence[str],
        kinds: Sequence[str],
        signals: Sequence[Mapping[str, float]],
        runners: Sequence[Sequence[tuple[CoRunner, float]]],
        estimated: list[tuple[str, ...]] | None = None,
    ) -> Plan:
        """From per-row lists of ``(co-runner, remaining ms or NaN)``."""
        flat = [runner for row in runners for runner, _ in row]
        remaining = [ms for row in runners for _, ms in row]
        rows = CoLocations(
            batch,
            list(devices),
            list(kinds),
            list(signals),
            np.fromiter(itertools.accumulate(map(len, runners), initial=0), dtype=np.int64, count=len(runners) + 1),
            [r.model for r in flat],
            [r.batch_size for r in flat],
            [r.attrs for r in flat],
            np.array([r.overlap for r in flat], dtype=float),
            solo_latency_ms,
        )
        given = [j for j, ms in enumerate(remaining) if not math.isnan(ms)]
        return cls(rows, np.array(remaining, dtype=float), np.array(given, dtype=np.intp) if given else _NONE,
                   estimated=estimated)

    @property
    def moving(self) -> bool:
        """Whether some co-runner is given by remaining time (its overlap follows the prediction)."""
        return bool(self.given.size)

    def overlaps_at(self, window: np.ndarray, at: np.ndarray) -> np.ndarray:
        """The co-runners' overlaps of :meth:`at_window` where ``window[at[k]]`` is the window of
        the row of remaining-time co-runner ``given[k]`` (windows of some rows only)."""
        w = window[at]
        fraction = np.ones(w.size)
        np.divide(self.remaining[self.given], w, out=fraction, where=~(w <= 0))
        overlaps = self.rows.overlaps.copy()
        overlaps[self.given] = np.minimum(fraction, 1.0)
        return overlaps

    def remaining_of(self, gather: np.ndarray) -> np.ndarray:
        """The remaining times laid out by ``gather`` (``gather[k, r]``: the ``k``-th co-runner of some
        row ``r``; padding: one past the last), 0 where the overlap is given."""
        padded = np.append(self.remaining, 0.0)
        padded[np.isnan(padded)] = 0.0
        return padded[gather]

    def at_window(self, window: np.ndarray) -> CoLocations:
        """The rows with each remaining-time co-runner's overlap for its row's predicted window
        (``window``, per row): ``min(remaining / window, 1)``, or 1 for an idle window (<= 0).

        """
        return self.rows.with_overlaps(self.overlaps_at(window, self.rows.rows_of_runners()[self.given]))


class Answering:
    """Answers about planned batches from the service's :class:`~predictor.service.state.ServiceState`."""

    def __init__(self, state: ServiceState):
        self.state = state

    # ------------------------------------------------------------------ the requests
    def predict(self, query: Query, confidence: float | None = None, *, prefix: str = "query.") -> Prediction:
        """Predicted latency and calibrated upper bound of a planned batch."""
        return self.predict_columns(query, confidence, prefix=prefix).prediction(0)

    def predict_columns(self, query: Query, confidence: float | None = None, *,
                        prefix: str = "query.") -> RankingColumns:
        """:meth:`predict`'s answer as its one row (what the RPC layer writes its response from,
        :func:`~predictor.rpc.convert.answer_row_to_pb`): ``.prediction(0)`` is :meth:`predict`."""
        self.state.require_ready()
        confidence = self.confidence(confidence)
        planned = self.plan_query(query, prefix)
        if query.learned_only:
            self.check_learned(query, planned, prefix)
        answer = self.answer(planned, confidence, where=self.input_place(query.input, prefix),
                             what_if=self.what_if(query.what_if))
        self.remember(query.batch_id, answer)
        return answer

    def check_deadline(self, query: Query, deadline: Deadline, confidence: float | None = None) -> DeadlineAnswer:
        """Whether a planned batch finishes within ``deadline`` at ``confidence``."""
        self.state.require_ready()
        confidence = self.confidence(confidence)
        deadline_ms = deadline.relative_ms(limit=self.state.config.max_value)
        planned = self.plan_query(query, "query.")
        if query.learned_only:
            self.check_learned(query, planned)
        answer = self.answer(planned, confidence, deadline_ms, where=self.input_place(query.input, "query."),
                             what_if=self.what_if(query.what_if))
        self.remember(query.batch_id, answer)
        slack = float(answer.slack_ms[0])
        return DeadlineAnswer(answer.feasible(0), slack, float(answer.probability[0]), deadline_ms, answer.prediction(0))

    def rank_placements(
        self,
        batch: BatchSpec,
        candidates: list[Candidate] | CandidateColumns,
        deadline: Deadline,
        confidence: float | None = None,
        solo_latency_ms: float | None = None,
        *,
        batch_id: str = "",
        learned_only: bool = False,
        where: InputPlace | None = None,
    ) -> Ranking:
        """Answers for one batch on many candidate devices, most slack first."""
        if not isinstance(candidates, CandidateColumns):
            candidates = CandidateColumns.from_candidates(candidates)
        return self.rank_columns(batch, candidates, deadline, confidence, solo_latency_ms,
                                 batch_id=batch_id, learned_only=learned_only, where=where).to_ranking()

    def rank_columns(
        self,
        batch: BatchSpec,
        candidates: CandidateColumns,
        deadline: Deadline,
        confidence: float | None = None,
        solo_latency_ms: float | None = None,
        *,
        batch_id: str = "",
        learned_only: bool = False,
        where: InputPlace | None = None,
    ) -> RankingColumns:
        """:meth:`rank_placements`, answered column-wise: features and predictions of all
        candidates at once (what the RPC layer turns into its response).

        With a ``batch_id``, every candidate's answer is remembered: the observation of the batch
        (on whichever device it ran) calibrates the answer given for that device. With
        ``learned_only``, an unseen model or device kind is refused (:class:`FailedPrecondition`).
        With ``where`` (the input's place and size), every answer adds the input's transfer, and
        the ranking says whether to wait for a device holding the input (:mod:`predictor.service.estimates.delay`)."""
        self.state.require_ready()
        confidence = self.confidence(confidence)
        if not len(candidates):
            raise InvalidArgument("candidates", "give at least one candidate device")
        limit = self.state.config.max_candidates
        if len(candidates) > limit:
            raise ResourceExhausted("candidates", f"{len(candidates)} candidates, at most {limit} allowed")
        deadline_ms = deadline.relative_ms(limit=self.state.config.max_value)
        where = self.input_place(where, "")
        plan = self.plan_candidates(batch, candidates, solo_latency_ms)
        ranking = self.answer(plan, confidence, deadline_ms, where=where)
        if learned_only and ranking.fallback is not None and ranking.fallback.any():
            i = int(np.flatnonzero(ranking.fallback)[0])
            query = Query(candidates.devices[i], batch, solo_latency_ms=solo_latency_ms)
            self.check_learned(query, Planned(ranking.rows.record(i), []), f"candidates[{i}].")
        self.remember(batch_id, ranking)
        ranking.delay = self.delay_decision(ranking)
        return ranking

    def what_if(self, what_if: QueueWhatIf | None) -> QueueWhatIf | None:
        """A query's what-if on its device's queue, validated (``None``: none asked)."""
        if what_if is not None:
            what_if.validate(self.state.config.max_value)
        return what_if

    def input_place(self, where: InputPlace | None, prefix: str) -> InputPlace | None:
        """The input's place and size of a query, validated (fields named with ``prefix``)."""
        if where is None or where == NOWHERE:
            return None
        where.validate(prefix, self.state.config.max_value)
        return where if where.given else None

    def delay_decision(self, ranking: RankingColumns) -> DelayDecision | None:
        """Wait for a device holding the input, or go remote now (``None``: no input given)."""
        terms = ranking.terms
        if terms is None or terms.transfers is None or terms.transfer_ms is None:
            return None
        local = np.array([t.local for t in terms.transfers], dtype=bool)
        completion = terms.extra_mean_ms + ranking.latency_ms
        return decide(ranking.rows.devices, local, terms.fits, terms.wait_ms, terms.transfer_ms, completion,
                      ranking.slack_ms, self.state.queues.observed_wait, self.state.config.delay_quantile)

    def confidence(self, confidence: float | None) -> float:
        """The confidence asked for (``None`` or 0: the configured default), validated."""
        if confidence is None or confidence == 0:
            return self.state.config.default_confidence
        try:
            return rules.check_confidence(confidence)
        except ValueError as exc:
            raise InvalidArgument("confidence", str(exc).removeprefix("confidence ")) from None

    # ------------------------------------------------------------------ planning
    def plan_query(self, query: Query, prefix: str, *, batch_prefix: str | None = None,
                   filling: Filling | None = None) -> Planned:
        """Validate a query and resolve its co-runners (explicit or from the live view).

        Fields are named with ``prefix`` (``query.``, ``candidates[3].``), the batch's and the
        solo latency's with ``batch_prefix`` (default: ``prefix``). ``filling``: what fills in
        what the query leaves out (default: the service's, as it stands).
        """
        batch_prefix = prefix if batch_prefix is None else batch_prefix
        remaining: list[float | None] = []
        limit = self.state.config.max_value
        for i, runner in enumerate(query.co_runners):
            ms = runner.remaining_ms
            if runner.overlap is not None and ms is not None:
                raise InvalidArgument(f"{prefix}co_runners[{i}]", "give overlap or remaining_ms, not both")
            if ms is not None and not (type(ms) is float and rules.non_negative_ok(ms) and rules.magnitude_ok(ms, limit)):
                path = f"{prefix}co_runners[{i}].remaining_ms"  # the rules name what is wrong
                invalid_argument(rules.non_negative, ms, path)
                invalid_argument(lambda v, p: rules.magnitude(v, p, limit), ms, path)
            remaining.append(ms)
        record = typed_record(query)  # typed and valid as it is: the parser's record, without parsing
        if record is None or not record_within_limits(record, limit):
            try:
                record = parse_record(_record_object(query), require_latency=False)
                if not record_within_limits(record, limit):
                    rules.check_magnitudes(record_numbers(record), limit)
            except RecordError as exc:
                where = batch_prefix if exc.field.startswith("batch") or exc.field == "solo_latency_ms" else prefix
                raise InvalidArgument(f"{where}{exc.field}", exc.message) from None
        live = self.state.live
        source = query.co_runner_source
        if source is CoRunnerSource.LIVE_VIEW and query.co_runners:
            raise InvalidArgument(f"{prefix}co_runners", "must be empty when co_runner_source is LIVE_VIEW")
        if source is CoRunnerSource.LIVE_VIEW or (source is CoRunnerSource.AUTO and not query.co_runners):
            if not live.knows(query.device):
                raise NotFound(
                    f"{prefix}device",
                    f"unknown device {query.device!r}: nothing was reported on it; "
                    "give its co-runners with co_runner_source EXPLICIT",
                )
            running = live.running(query.device)
            record = dataclasses.replace(record, co_runners=tuple(_runner_of(r) for r, _ in running))
            remaining = [ms for _, ms in running]
            shape = QueryShape.of(len(running), 0, len(running), signals=bool(query.signals), live=True)
        else:
            shape = _shape_of(
                len(query.co_runners),
                sum(r.overlap is not None for r in query.co_runners),
                len(query.co_runners) - remaining.count(None),
                bool(query.signals),
            )
        kind = record.device_kind or live.kind_of(query.device)
        if kind != record.device_kind:
            record = dataclasses.replace(record, device_kind=kind)
        estimated = [f"co_runners[{i}].overlap" for i, ms in enumerate(remaining) if ms is not None]
        if self.state.config.fill_missing:
            filling = filling or self.state.filling
            signals, filled = filling.fill_signals(record.device, kind, record.signals)
            missing = [
                i for i, (runner, ms) in enumerate(zip(query.co_runners, remaining, strict=False))
                if runner.overlap is None and ms is None
            ] if len(query.co_runners) == len(record.co_runners) else []
            if missing:
                overlap = filling.overlap(kind, len(record.co_runners))
                runners = list(record.co_runners)
                for i in missing:
                    runners[i] = dataclasses.replace(runners[i], overlap=overlap)
                record = dataclasses.replace(record, co_runners=tuple(runners))
                estimated += [f"co_runners[{i}].overlap" for i in missing]
            if filled:
                record = dataclasses.replace(record, signals=signals)
                estimated += filled
        return Planned(record, remaining, shape, tuple(estimated))

    def plan_candidates(self, batch: BatchSpec, candidates: CandidateColumns, solo_latency_ms: float | None) -> Plan:
        """Validated rows of a ranking's candidates.

        All candidates are checked at once; where that cannot vouch for every one, each goes
        through :meth:`plan_query`, which raises for the first offending field.
        """
        live_view = self.state.live
        live = candidates.uses_live_view()
        limit = self.state.config.max_value
        if not (
            valid_columns(candidates, batch, solo_latency_ms, limit)
            and self._valid_batch(batch, limit)
            and all(live_view.knows(candidates.devices[i]) for i in live)
        ):
            return Plan.of([
                self.plan_query(Query.for_candidate(batch, candidates.candidate(i), solo_latency_ms),
                                f"candidates[{i}].", batch_prefix="")
                for i in range(len(candidates))
            ])
        devices = candidates.devices
        kinds = candidates.device_kinds
        if "" in kinds:  # the device's kind from the live view
            kinds = [k or live_view.kind_of(d) for k, d in zip(kinds, devices, strict=True)]
        remaining = np.where(candidates.has_remaining, candidates.remaining, math.nan)
        overlaps, signals, estimated = self._fill_columns(candidates, kinds)
        rows = CoLocations(batch, devices, kinds, signals, candidates.offsets, candidates.models,
                           candidates.batch_sizes, candidates.attrs, overlaps, solo_latency_ms)
        shapes = _shapes_of(candidates.offsets, candidates.has_overlap, candidates.has_remaining,
                            _has_signals(candidates.signals))
        if not live:
            return Plan(rows, remaining, np.flatnonzero(candidates.has_remaining), shapes=shapes, estimated=estimated)
        running = {i: live_view.running(devices[i]) for i in live}
        shapes = list(shapes)
        for i, batches in running.items():
            shapes[i] = QueryShape.of(len(batches), 0, len(batches), signals=bool(candidates.signals[i]), live=True)
        runners = [
            [(_runner_of(r), ms) for r, ms in running[i]]
            if i in running
            else list(zip(rows.co_runners(i), remaining[rows.offsets[i]:rows.offsets[i + 1]].tolist(), strict=True))
            for i in range(len(rows))
        ]
        plan = Plan.from_runners(batch, solo_latency_ms, list(devices), kinds, signals, runners)
        estimated = estimated or [()] * len(rows)
        for i, batches in running.items():
            estimated[i] = tuple(f"co_runners[{j}].overlap" for j in range(len(batches))) + tuple(
                e for e in estimated[i] if e.startswith("signals.")
            )
        plan.estimated = estimated
        plan.shapes = shapes
        return plan

    def _fill_columns(
        self, candidates: CandidateColumns, kinds: Sequence[str]
    ) -> tuple[np.ndarray, Sequence[Mapping[str, float]], Sequence[tuple[str, ...]] | None]:
        """The candidates' overlaps and signals with what they leave out estimated
        (:mod:`predictor.service.estimates.filling`), and per candidate the paths estimated (``None``: none)."""
        given = candidates.has_overlap
        overlaps = np.where(given, candidates.overlaps, 1.0)
        offsets = candidates.offsets
        estimated = EstimatedPaths(offsets, candidates.has_remaining)
        if not self.state.config.fill_missing:
            return overlaps, candidates.signals, estimated if estimated.any() else None
        filling = self.state.filling
        missing = ~given & ~candidates.has_remaining
        if missing.any():
            rows = np.searchsorted(offsets, np.flatnonzero(missing), "right") - 1
            for i in np.unique(rows).tolist():
                start, stop = int(offsets[i]), int(offsets[i + 1])
                value = filling.overlap(kinds[i], stop - start)
                positions = np.flatnonzero(missing[start:stop])
                overlaps[start + positions] = value
            estimated.filled = missing
        signals = candidates.signals
        if not filling.has_signals():
            return overlaps, signals, estimated if estimated.any() else None
        views: dict[tuple[str, str], tuple[Mapping[str, float], tuple[str, ...]]] = {}
        for i, (device, kind, given_signals) in enumerate(zip(candidates.devices, kinds, signals, strict=True)):
            shared = views.get((device, kind))
            if shared is None:  # what a candidate without signals gets on this device (one dict for all)
                shared = views[(device, kind)] = filling.fill_signals(device, kind, {})
            if not shared[1]:
                continue
            fill = shared if not given_signals else filling.fill_signals(device, kind, given_signals)
            if fill[1]:
                if signals is candidates.signals:
                    signals = list(signals)
                signals[i] = fill[0]
                estimated.add(i, fill[1])
        return overlaps, signals, estimated if estimated.any() else None

    @staticmethod
    def _valid_batch(batch: BatchSpec, limit: float) -> bool:
        """Whether the batch passes ``coloc/v1`` as it is, within the magnitude limit."""
        if typed_batch_ok(batch, limit):  # typed and valid as it is: the parser's verdict, without parsing
            return True
        try:
            parsed = parse_record(
                {"schema": SCHEMA, "device": "-", "batch": {"model": batch.model, "batch_size": batch.batch_size,
                                                             "attrs": dict(batch.attrs)}},
                require_latency=False,
            )
            rules.check_magnitudes(record_numbers(parsed), limit)
        except RecordError:
            return False
        return parsed.batch == batch

    # ------------------------------------------------------------------ answering
    def _latencies(
        self, predictor: LatencyPredictor, plan: Plan | Planned, solo: float
    ) -> tuple[Record | CoLocations, np.ndarray]:
        """The rows as predicted (co-runners at their effective overlaps) and their latencies,
        monotone in crowding (:mod:`predictor.service.estimates.monotone`).

        A single query of a predictor that is monotone itself, with nothing to clip, goes the
        per-record way, which costs less than columns for one row. Co-runners given by remaining
        time get their overlap from the predicted window (:func:`monotone.fixed_point`).
        """
        if isinstance(plan, Planned):
            record = plan.record
            per_record = monotone.direct(predictor, record.batch.attrs) and not monotone.needs_clipping(record)
            if plan.moving:
                return self._moving_one(predictor, plan, solo, per_record)
            if per_record:
                return record, _predict(predictor, record)
            plan = Plan.of([plan])
        if not plan.moving:
            return plan.rows, monotone.latencies(predictor, plan.rows)
        # Rows are independent: the fixed point runs over the moving rows alone, each asking the
        # predictor's quadratic (or form) of those rows, built once; the others are predicted once,
        # in a small ranking from the same quadratic (ONE_QUADRATIC_ROWS).
        rows = plan.rows
        row_of = rows.rows_of_runners()
        is_moving = np.zeros(len(rows), dtype=bool)
        is_moving[row_of[plan.given]] = True
        moving, still = np.flatnonzero(is_moving), np.flatnonzero(~is_moving)  # ascending, as np.unique gives
        low, high = getattr(predictor, "_slowdown_range", (MIN_SLOWDOWN, MAX_SLOWDOWN))
        one = bool(still.size) and len(rows) <= ONE_QUADRATIC_ROWS
        quadratic = monotone.overlap_quadratic(predictor, rows, np.arange(len(rows)) if one else moving,
                                               ~np.isnan(plan.remaining))
        if quadratic is not None and one:  # every row in one compiled pass: the still ones are constants
            window = fixed_point_kernel.fixed_points(quadratic, plan.remaining_of(quadratic.gather), solo, high, low,
                                                     ~is_moving)
            return plan.at_window(window), window
        window = np.empty(len(rows))
        if quadratic is not None:  # each row's search, compiled
            window[moving] = fixed_point_kernel.fixed_points(quadratic, plan.remaining_of(quadratic.gather), solo,
                                                             high, low)
        else:
            evaluate = monotone.overlap_latencies(predictor, rows, moving)
            at = np.searchsorted(moving, row_of[plan.given])
            window[moving] = monotone.fixed_point(lambda w: evaluate(plan.overlaps_at(w, at)),
                                                  np.ones(moving.size, dtype=bool), solo, high, low)
        if still.size:
            window[still] = monotone.overlap_latencies(predictor, rows, still)(rows.overlaps)
        return plan.at_window(window), window

    @staticmethod
    def _moving_one(
        predictor: LatencyPredictor, planned: Planned, solo: float, per_record: bool
    ) -> tuple[CoLocations, np.ndarray]:
        """:meth:`_latencies` of a single query with co-runners given by remaining time: the same
        fixed point (:func:`monotone.fixed_point_one`, on floats), each window's prediction by the
        per-record path where the predictor answers directly (``per_record``), else by its
        monotone construction over the one row (whose terms are computed once)."""
        low, high = getattr(predictor, "_slowdown_range", (MIN_SLOWDOWN, MAX_SLOWDOWN))
        if per_record:
            form = predictor.window_form(planned.record, planned.remaining_ms)
            if form is not None:  # the answer a quadratic of the moving overlaps, its search compiled

                found = fixed_point_kernel.window_of(form)  # over the same grid: the form's solo and range
            else:
                # the record's features as a function of the window where the predictor has one
                # (the same numbers), else each window's record predicted
                predict_record = predictor.window_latency(planned.record, planned.remaining_ms) or (
                    lambda window: float(predictor.predict_many([planned.at_window(window)])[0]))
                found = monotone.fixed_point_one(predict_record, solo, high, low)
            # the one row at the window found: the overlaps Plan.at_window gives, on floats
            return _row_of(planned.at_window(found)), np.array([found])
        plan = Plan.of([planned])

        def predict(window: float) -> float:
            return float(monotone.latencies(predictor, plan.at_window(np.array([window])))[0])

        window = np.array([monotone.fixed_point_one(predict, solo, high, low)])
        return plan.at_window(window), window

    def answer(self, plan: Plan | Planned, confidence: float, deadline_ms: float | None = None,
               where: InputPlace | None = None, model: ModelVersion | None = None,
               what_if: QueueWhatIf | None = None) -> RankingColumns:
        """Predictions, bounds (and, for a deadline, slack and probability) of every row, ranked.

        Latencies are monotone in crowding (:meth:`_latencies`); co-runners given by remaining
        time get their overlap from the predicted window, ``min(1, remaining / window)``, at its
        fixed point. Ties of slack go to the less crowded device (:func:`rank_order`).

        A single query (a :class:`Planned`) is the one-row case; it gives the numbers its
        one-row :class:`Plan` would. ``where``: the input's place and size (its transfer is a term);
        ``what_if``: the queue waits at its rates rather than the learned ones.
        ``model``: the version to answer from (default: the latest
        published, :meth:`ServiceState.model <predictor.service.state.ServiceState.model>`).
        """
        state = self.state
        model = model or state.model()  # no lock held while answering
        latencies, rows, solo = self.predict_plan(plan, model)
        n = len(rows)
        shapes = plan.shapes if isinstance(plan, Plan) else None
        if shapes is None:
            shapes = [plan.shape or _record_shape(plan.record)] if isinstance(plan, Planned) else [
                _record_shape(rows.record(i)) for i in range(n)]
        terms = terms_of(state.queues, state.memory, state.live, rows, confidence,
                         functools.partial(model.calibrator.bound_factors, rows.device_kinds, confidence),
                         state.transfers, where, what_if)
        uppers, probabilities, row_bounds, fallback, corrections, row_cells = self._bounds(
            plan, rows, latencies, shapes, confidence, deadline_ms,
            None if terms is None else terms.extra_mean_ms, model,
        )
        if terms is not None and deadline_ms is not None:
            probabilities = terms.probabilities(probabilities)
        raw = latencies
        if state.config.point_correction:
            latencies = latencies * corrections
        learned = model.observations_learned
        if deadline_ms is None:
            deadline_ms, slack, order = math.nan, _filled(n, math.nan), np.arange(n)
        elif terms is None:
            slack = deadline_ms - uppers
            order = rank_order(slack, rows) if n > 1 else np.zeros(1, dtype=np.intp)
        else:
            # a saturated queue never lets the batch start: the most negative slack answered (finite)
            slack = np.maximum(deadline_ms - uppers - terms.extra_bound_ms, -state.config.max_value)
            order = terms.order(slack)
        return RankingColumns(
            rows=rows,
            order=order,
            latency_ms=latencies,
            solo_latency_ms=_filled(n, solo),
            upper_bound_ms=uppers,
            slack_ms=slack,
            probability=probabilities,
            bounds={},
            confidence=confidence,
            predictor=state.config.predictor,
            observations_learned=learned,
            sequence=model.sequence,
            deadline_ms=deadline_ms,
            row_bounds=row_bounds,
            shapes=_keys_of(shapes),
            fallback=fallback,
            row_cells=row_cells,
            raw_latency_ms=raw,
            estimated=[plan.estimated] if isinstance(plan, Planned) else plan.estimated,
            terms=terms,
        )

    def predict_plan(self, plan: Plan | Planned, model: ModelVersion | None = None) -> tuple[np.ndarray, CoLocations, float]:
        """The predicted latency of every row (the latency half of :meth:`answer`), the rows as
        predicted (co-runners with their effective overlaps), and the solo latency used.

        Latencies are monotone in crowding (:meth:`_latencies`); co-runners given by remaining
        time get their overlap from the predicted window at its fixed point. ``model``: the
        version to predict by (default: the latest published, :meth:`ServiceState.model
        <predictor.service.state.ServiceState.model>`).
        """
        predictor = (model or self.state.model()).predictor
        first = plan.record if isinstance(plan, Planned) else plan.rows.alone()
        solo = predictor.solo_latency(first)
        predicted, latencies = self._latencies(predictor, plan, solo)
        rows = _row_of(predicted) if isinstance(predicted, Record) else predicted
        return latencies, rows, solo

    def _bounds(
        self,
        plan: Plan | Planned,
        rows: CoLocations,
        latencies: np.ndarray,
        shapes: Sequence[QueryShape],
        confidence: float,
        deadline_ms: float | None,
        extra_ms: np.ndarray | None = None,
        model: ModelVersion | None = None,
    ) -> tuple[np.ndarray, np.ndarray, list[Bound], np.ndarray, np.ndarray, np.ndarray]:
        """Upper bounds, probabilities of meeting the deadline, how each bound was calibrated,
        which answers are fallbacks, the calibrated corrections of the predictions, and the number
        of the calibration cell (in order of first row), per row.
        ``extra_ms``: per row, time spent before the batch runs (queue wait, model load): its
        probability is that of finishing within the deadline less that time.

        Each row is calibrated on the residuals of answers of its own query shape, device kind
        and co-runner count (:class:`~predictor.calibration.shape.ShapeCalibrator`); one look-up
        per distinct cell. A batch whose solo latency is neither given nor profiled and whose model
        and batch size were never observed, or a device kind never seen, gets a wide log-normal fallback (``unseen_sigma``) that says so.
        """
        state = self.state
        config = state.config
        version = model or state.model()
        calibrator = version.shapes
        n = len(rows)
        model = rows.batch.model
        first = plan.record if isinstance(plan, Planned) else rows.alone()
        unseen_model = not version.predictor.knows_key(first)
        guessed_solo = not version.predictor.knows_solo(first)
        if unseen_model and version.observations_learned == 0:
            raise FailedPrecondition(
                "solo_latency_ms",
                "nothing learned yet and no solo latency given: no basis for an answer "
                "(give solo_latency_ms, or report observations first)",
            )
        probabilities = _filled(n, math.nan)
        bound_of: list[Bound] = []  # per cell
        correction_of: list[float] = []  # per cell
        unseen_of: list[bool] = []  # per cell
        groups = _cells(shapes, rows)
        z = normal_quantile(confidence) * config.unseen_sigma
        x = None  # every row's log of the deadline over its prediction, once a cell needs it

        def within(cell: tuple[QueryShape, str, int, bool], predicted: np.ndarray, limit: float) -> np.ndarray:
            shape, kind, count, unseen = cell
            p = calibrator.probabilities(shape, kind, count, model, predicted, limit, confidence)
            if unseen:
                x = np.log(max(limit, 1e-300) / predicted) / config.unseen_sigma
                # rounded: a ranking and a single check of the same row agree to the last bit
                p = np.minimum(p, [NormalDist().cdf(round(v, 9)) for v in x.tolist()]) if limit > 0 else p * 0
            return p

        for (shape, kind, count), at in groups:
            correction, factor = calibrator.factors(shape, kind, count, model, confidence)
            unseen = unseen_model or not calibrator.knows_kind(kind)
            correction_of.append(1.0 if unseen or guessed_solo else correction)
            unseen_of.append(unseen)
            if unseen:
                factor = Bound(max(factor.upper_ms, math.exp(z)), BoundSource.FALLBACK, factor.n)
            bound_of.append(factor)
            if deadline_ms is None:
                continue

            cell = (shape, kind, count, unseen)
            if extra_ms is None and not unseen and deadline_ms > 0:  # (as within, with x taken once)
                if x is None:
                    x = log_ratios(deadline_ms, latencies)
                calibrator.probabilities_at(shape, kind, count, model, x, at, confidence, probabilities)
            elif extra_ms is None:
                probabilities[at] = within(cell, latencies[at], deadline_ms)
            else:
                # one call per distinct time left (rows of one device share it), each row's as alone
                limits = np.nan_to_num(deadline_ms - extra_ms[at], nan=0.0, neginf=0.0)
                distinct, which = np.unique(limits, return_inverse=True)
                for j, limit in enumerate(distinct.tolist()):
                    rows_at = at[which == j]
                    probabilities[rows_at] = within(cell, latencies[rows_at], limit)
        if n == 1:
            return (latencies * bound_of[0].upper_ms, probabilities, bound_of, np.array(unseen_of),
                    np.array(correction_of), _ROW0)
        # each row's from its cell's: the same products and values as cell by cell
        cell_of = np.empty(n, dtype=np.intp)
        for c, (_, at) in enumerate(groups):
            cell_of[at] = c
        cells = np.empty(len(groups), dtype=object)
        cells[:] = bound_of
        uppers = latencies * np.array([b.upper_ms for b in bound_of])[cell_of]
        fallback = np.array(unseen_of)[cell_of]
        corrections = np.array(correction_of)[cell_of]
        return uppers, probabilities, cells[cell_of].tolist(), fallback, corrections, cell_of

    def check_learned(self, query: Query, planned: Planned, prefix: str = "query.") -> None:
        """For a query asking for a learned answer only: :class:`FailedPrecondition` when the
        model's batch is unknown (no solo latency given or profiled, never observed) or its device kind unseen."""
        model = self.state.model()
        if not model.predictor.knows_key(planned.record):
            raise FailedPrecondition(
                f"{prefix}batch.model",
                f"no learned answer for {query.batch.model!r} at batch size {query.batch.batch_size}: "
                "never observed and no solo_latency_ms given",
            )
        kind = planned.record.device_kind
        if not model.shapes.knows_kind(kind):
            raise FailedPrecondition(f"{prefix}device_kind", f"no learned answer for device kind {kind!r}: never observed")

    def remember(self, batch_id: str, columns: RankingColumns, indices: Sequence[int] | None = None) -> None:
        """Keep the answers of rows ``indices`` (default: all) for ``batch_id``, to calibrate their
        shape on the observation that names it (:mod:`predictor.service.admission`)."""
        if not batch_id:
            return
        invalid_argument(rules.name, batch_id, "batch_id")
        rows = columns.rows
        offsets = rows.offsets.tolist()
        raw = (columns.latency_ms if columns.raw_latency_ms is None else columns.raw_latency_ms).tolist()
        answered = columns.latency_ms.tolist()
        admission = self.state.admission
        shapes = self.state.model().shapes  # bounds of the version answered from; no lock (the memory has its own)
        for i in range(len(rows)) if indices is None else indices:
            if columns.fallback is not None and columns.fallback[i]:
                continue  # a guess is not calibrated on
            admission.remember(batch_id, rows.devices[i], _parsed_shape(columns.shapes[i]), rows.device_kinds[i],
                               offsets[i + 1] - offsets[i], rows.batch.model, raw[i], answered[i], calibrator=shapes)


def _predict(predictor: LatencyPredictor, rows: Record | CoLocations) -> np.ndarray:
    """Predicted latencies of the rows: all at once, or, for a single row (a query), by the
    per-record path, which costs less than building a feature matrix for it."""
    if isinstance(rows, Record):
        return np.asarray(predictor.predict_many([rows]), dtype=float)
    if len(rows) == 1:
        return np.asarray(predictor.predict_many([rows.record(0)]), dtype=float)
    return predictor.predict_colocations(rows)


def _cells(shapes: Sequence[QueryShape], rows: CoLocations) -> list[tuple[tuple[QueryShape, str, int], np.ndarray]]:
    """The rows of each calibration cell (shape, device kind, count bucket), cells in order of
    first row, rows ascending (a single row's without arrays). Shapes are told apart by identity
    (equal shapes are mostly one cached object; two equal ones only make two cells with the same
    answers)."""
    offsets, kinds = rows.offsets, rows.device_kinds
    if len(shapes) == 1:
        return [((shapes[0], kinds[0], min(int(offsets[1] - offsets[0]), MAX_COUNT)), _ROW0)]
    if isinstance(shapes, RowShapes):
        return _coded_cells(shapes, kinds, np.minimum(np.diff(offsets), MAX_COUNT))
    buckets = np.minimum(np.diff(offsets), MAX_COUNT).tolist()  # count_bucket of every row
    firsts: dict[tuple[int, str, int], int] = {}
    keys = list(zip(map(id, shapes), kinds, buckets, strict=True))
    codes = np.fromiter(map(firsts.setdefault, keys, range(len(keys))), dtype=np.intp, count=len(keys))
    if len(firsts) == 1:
        return [((shapes[0], kinds[0], buckets[0]), np.arange(len(keys)))]
    return _grouped(codes, len(keys) - 1, shapes, kinds, buckets)


def _coded_cells(shapes: RowShapes, kinds: Sequence[str], buckets: np.ndarray
                 ) -> list[tuple[tuple[QueryShape, str, int], np.ndarray]]:
    """:func:`_cells` of rows whose shapes are indexed: each row's cell as one integer."""
    n = len(shapes)
    if kinds.count(kinds[0]) == n:  # one kind (as usual)
        kind_codes, distinct_kinds = np.zeros(n, dtype=np.intp), 1
    else:
        number = {kind: i for i, kind in enumerate(dict.fromkeys(kinds))}  # each kind's, in order of first row
        kind_codes = np.fromiter(map(number.__getitem__, kinds), dtype=np.intp, count=n)
        distinct_kinds = len(number)
    codes = (shapes.index * distinct_kinds + kind_codes) * (MAX_COUNT + 1) + buckets
    return _grouped(codes, len(shapes.distinct) * distinct_kinds * (MAX_COUNT + 1) - 1, shapes, kinds, buckets)


def _grouped(codes: np.ndarray, most: int, shapes: Sequence[QueryShape], kinds: Sequence[str],
             buckets: Sequence[int] | np.ndarray) -> list[tuple[tuple[QueryShape, str, int], np.ndarray]]:
    """The rows of each cell of :func:`_cells`, given each row's cell as one integer in
    ``[0, most]``: a cell's key from its first row, its rows ascending, cells in order of first
    row (compiled: :func:`predictor.calibration.cell_kernel.grouped`)."""
    order, bounds, firsts = cell_kernel.grouped(codes.astype(np.intp, copy=False), most)
    if firsts.size == 1:
        return [((shapes[0], kinds[0], int(buckets[0])), order)]
    bounds, firsts = bounds.tolist(), firsts.tolist()
    return [((shapes[first], kinds[first], int(buckets[first])), order[bounds[c]:bounds[c + 1]])
            for c, first in enumerate(firsts)]


def _shapes_of(offsets: np.ndarray, has_overlap: np.ndarray, has_remaining: np.ndarray, signals: np.ndarray
               ) -> RowShapes:
    """:func:`_shape_of` of every candidate (co-runners ``offsets[i]:offsets[i + 1]``, each flagged as
    given by overlap or by remaining time), once per distinct combination, spread by index (the
    combinations coded in one compiled pass, :func:`~predictor.calibration.cell_kernel.row_shape_codes`)."""
    distinct, inverse, base = cell_kernel.row_shape_codes(offsets, has_overlap, has_remaining, signals)
    found = []
    for code in distinct.tolist():
        rest, s = divmod(code, 2)
        rest, r = divmod(rest, base)
        n, o = divmod(rest, base)
        found.append(_shape_of(n, o, r, bool(s)))
    return RowShapes(found, inverse)


def _has_signals(signals: Sequence[Mapping[str, float]]) -> np.ndarray:
    """Whether each candidate gives signals."""
    if isinstance(signals, KeyedMaps):
        return signals.nonempty()
    if len(distinct_maps(signals)) == 1:
        return np.full(len(signals), bool(signals[0]))
    return np.fromiter(map(bool, signals), dtype=bool, count=len(signals))


def _keys_of(shapes: Sequence[QueryShape]) -> list[str]:
    """``shape.key`` of every shape, computed once per distinct shape object."""
    if isinstance(shapes, RowShapes):
        return shapes.keys()
    keys: dict[int, str] = {}
    return [keys.get(id(s)) or keys.setdefault(id(s), s.key) for s in shapes]


@functools.lru_cache(maxsize=64)
def _parsed_shape(key: str) -> QueryShape:
    """:meth:`QueryShape.parse <predictor.calibration.shapes.QueryShape.parse>`, looked up (a few keys exist)."""
    return QueryShape.parse(key)


@functools.lru_cache(maxsize=256)
def _shape_of(co_runners: int, overlaps: int, remaining: int, signals: bool) -> QueryShape:
    """:meth:`QueryShape.of <predictor.calibration.shapes.QueryShape.of>` of a candidate's counts, looked up
    (a ranking has thousands of candidates and a few shapes)."""
    return QueryShape.of(co_runners, overlaps, remaining, signals=signals)


_ROW0 = np.zeros(1, dtype=np.intp)


def _filled(n: int, value: float) -> np.ndarray:
    """``np.full(n, value)``, for one value at a third of the cost."""
    return np.array([value], dtype=float) if n == 1 else np.full(n, value, dtype=float)


def _row_of(record: Record) -> CoLocations:
    """A planned record as one row."""
    runners = record.co_runners
    return CoLocations(
        record.batch,
        [record.device],
        [record.device_kind],
        [record.signals],
        np.array([0, len(runners)], dtype=np.int64),
        [r.model for r in runners],
        [r.batch_size for r in runners],
        [r.attrs for r in runners],
        np.array([r.overlap for r in runners], dtype=float),
        record.solo_latency_ms,
    )


def _record_object(query: Query) -> dict[str, Any]:
    """The ``coloc/v1`` object of a query's planned record (explicit co-runners, for
    :func:`~predictor.records.record.parse_record` to validate)."""
    return {
        "schema": SCHEMA,
        "device": query.device,
        "device_kind": query.device_kind or None,
        "batch": {"model": query.batch.model, "batch_size": query.batch.batch_size,
                  "attrs": dict(query.batch.attrs)},
        "solo_latency_ms": query.solo_latency_ms,
        "co_runners": [
            {"model": runner.model, "batch_size": runner.batch_size, "attrs": dict(runner.attrs),
             "overlap": runner.overlap}
            for runner in query.co_runners
        ],
        "signals": dict(query.signals),
    }


def _record_shape(record: Record) -> QueryShape:
    """The shape of a planned record taken as it is (every overlap known)."""
    n = len(record.co_runners)
    return QueryShape.of(n, n, 0, signals=bool(record.signals))


def _runner_of(running: RunningBatch) -> CoRunner:
    """A batch running on a device (from the live view), as a co-runner overlapping fully."""
    return CoRunner(running.batch.model, running.batch.batch_size, running.batch.attrs)


def invalid_argument(rule: Callable[[Any, str], T], value: Any, path: str) -> T:
    """``rule(value, path)`` of :mod:`predictor.records.rules`, its :class:`RecordError` as :class:`InvalidArgument`."""
    try:
        return rule(value, path)
    except RecordError as exc:
        raise InvalidArgument(exc.field, exc.message) from None
