"""One query into one prediction: the answering path of PredictLatency, CheckDeadline and RankPlacements.

Every answer goes the same way:

1. **plan** — :meth:`Answering.plan_query` validates a query by the ``coloc/v1`` rules
   and the magnitude limits (naming the first offending field) and resolves its
   co-runners (given, or from the live view). A ranking's candidates are checked all at
   once column-wise (:func:`~predictor.service.placements.valid_columns`, the same rules);
   where that cannot vouch for every one, each is planned by :meth:`Answering.plan_query`.
   Either way the plan is a set of rows (:class:`~predictor.colocations.CoLocations`)
   with each co-runner's remaining time (NaN: its overlap is given);
2. **answer** — :meth:`Answering.answer` predicts every row at once (co-runners given by
   remaining time get their overlap from the predicted window, iterated), bounds the
   predictions by the calibrator, and computes the slack and probability for a deadline.

A single query is the one-row case: :meth:`Answering.predict` and
:meth:`Answering.check_deadline` read row 0 of the same answer a ranking reads.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from predictor import rules
from predictor.calibration import check_confidence
from predictor.colocations import CoLocations
from predictor.predictors import LatencyPredictor
from predictor.records import (
    SCHEMA,
    BatchSpec,
    CoRunner,
    Record,
    RecordError,
    parse_record,
    record_numbers,
    record_within_limits,
)
from predictor.service.errors import InvalidArgument, NotFound, ResourceExhausted
from predictor.service.liveview import RunningBatch
from predictor.service.placements import CandidateColumns, RankingColumns, valid_columns
from predictor.service.state import ServiceState
from predictor.service.terms import terms_of
from predictor.service.types import (
    Candidate,
    CoRunnerSource,
    Deadline,
    DeadlineAnswer,
    Prediction,
    Query,
    Ranking,
)

T = TypeVar("T")
_NONE = np.zeros(0, dtype=np.intp)


@dataclasses.dataclass
class Planned:
    """A validated planned batch: the record to predict and each co-runner's remaining time.

    A single query is answered from it directly, as the one-row case of a :class:`Plan`
    (see :meth:`Answering.answer`).
    """

    record: Record
    remaining_ms: list[float | None]

    @property
    def moving(self) -> bool:
        """Whether some co-runner is given by remaining time (its overlap follows the prediction)."""
        return any(ms is not None for ms in self.remaining_ms)

    def at_window(self, window_ms: float) -> Record:
        """The record with each remaining-time co-runner's overlap for a predicted window of
        ``window_ms``: ``min(remaining / window, 1)``, or 1 for an idle window (<= 0).

        The scalar twin of :meth:`Plan.at_window`, with the same arithmetic.
        """
        record = self.record
        runners = tuple(
            runner if ms is None
            else CoRunner(runner.model, runner.batch_size, runner.attrs,
                          1.0 if window_ms <= 0 else min(ms / window_ms, 1.0))
            for runner, ms in zip(record.co_runners, self.remaining_ms, strict=True)
        )
        return dataclasses.replace(record, co_runners=runners)


@dataclasses.dataclass
class Plan:
    """Rows to predict, and each co-runner's remaining time (NaN: its overlap is given).

    ``given`` indexes the co-runners given by remaining time.
    """

    rows: CoLocations
    remaining: np.ndarray
    given: np.ndarray

    @classmethod
    def of(cls, planned: list[Planned]) -> Plan:
        """The rows of planned batches that share one batch and solo latency."""
        first = planned[0].record
        return cls.from_runners(
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

    @classmethod
    def from_runners(
        cls,
        batch: BatchSpec,
        solo_latency_ms: float | None,
        devices: Sequence[str],
        kinds: Sequence[str],
        signals: Sequence[Mapping[str, float]],
        runners: Sequence[Sequence[tuple[CoRunner, float]]],
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
        return cls(rows, np.array(remaining, dtype=float), np.array(given, dtype=np.intp) if given else _NONE)

    @property
    def moving(self) -> bool:
        """Whether some co-runner is given by remaining time (its overlap follows the prediction)."""
        return bool(self.given.size)

    def at_window(self, window: np.ndarray) -> CoLocations:
        """The rows with each remaining-time co-runner's overlap for its row's predicted window
        (``window``, per row): ``min(remaining / window, 1)``, or 1 for an idle window (<= 0).

        The column twin of :meth:`Planned.at_window`, with the same arithmetic.
        """
        rows, given = self.rows, self.given
        w = window[rows.rows_of_runners()[given]]
        fraction = np.ones(given.size)
        np.divide(self.remaining[given], w, out=fraction, where=~(w <= 0))
        overlaps = rows.overlaps.copy()
        overlaps[given] = np.minimum(fraction, 1.0)
        return rows.with_overlaps(overlaps)


class Answering:
    """Answers about planned batches from the service's :class:`~predictor.service.state.ServiceState`."""

    def __init__(self, state: ServiceState):
        self.state = state

    # ------------------------------------------------------------------ the requests
    def predict(self, query: Query, confidence: float | None = None, *, prefix: str = "query.") -> Prediction:
        """Predicted latency and calibrated upper bound of a planned batch."""
        self.state.require_ready()
        confidence = self.confidence(confidence)
        return self.answer(self.plan_query(query, prefix), confidence).prediction(0)

    def check_deadline(self, query: Query, deadline: Deadline, confidence: float | None = None) -> DeadlineAnswer:
        """Whether a planned batch finishes within ``deadline`` at ``confidence``."""
        self.state.require_ready()
        confidence = self.confidence(confidence)
        deadline_ms = deadline.relative_ms()
        answer = self.answer(self.plan_query(query, "query."), confidence, deadline_ms)
        slack = float(answer.slack_ms[0])
        return DeadlineAnswer(answer.feasible(0), slack, float(answer.probability[0]), deadline_ms, answer.prediction(0))

    def rank_placements(
        self,
        batch: BatchSpec,
        candidates: list[Candidate] | CandidateColumns,
        deadline: Deadline,
        confidence: float | None = None,
        solo_latency_ms: float | None = None,
    ) -> Ranking:
        """Answers for one batch on many candidate devices, most slack first."""
        if not isinstance(candidates, CandidateColumns):
            candidates = CandidateColumns.from_candidates(candidates)
        return self.rank_columns(batch, candidates, deadline, confidence, solo_latency_ms).to_ranking()

    def rank_columns(
        self,
        batch: BatchSpec,
        candidates: CandidateColumns,
        deadline: Deadline,
        confidence: float | None = None,
        solo_latency_ms: float | None = None,
    ) -> RankingColumns:
        """:meth:`rank_placements`, answered column-wise: features and predictions of all
        candidates at once (what the RPC layer turns into its response)."""
        self.state.require_ready()
        confidence = self.confidence(confidence)
        if not len(candidates):
            raise InvalidArgument("candidates", "give at least one candidate device")
        limit = self.state.config.max_candidates
        if len(candidates) > limit:
            raise ResourceExhausted("candidates", f"{len(candidates)} candidates, at most {limit} allowed")
        deadline_ms = deadline.relative_ms()
        plan = self.plan_candidates(batch, candidates, solo_latency_ms)
        ranking = self.answer(plan, confidence, deadline_ms)
        # The rows hold the candidates' own co-runners exactly when they were built on the same
        # columns (no live view, no per-candidate path).
        return dataclasses.replace(ranking, runners_as_given=plan.rows.models is candidates.models)

    def confidence(self, confidence: float | None) -> float:
        """The confidence asked for (``None`` or 0: the configured default), validated."""
        if confidence is None or confidence == 0:
            return self.state.config.default_confidence
        try:
            return check_confidence(confidence)
        except ValueError as exc:
            raise InvalidArgument("confidence", str(exc).removeprefix("confidence ")) from None

    # ------------------------------------------------------------------ planning
    def plan_query(self, query: Query, prefix: str, *, batch_prefix: str | None = None) -> Planned:
        """Validate a query and resolve its co-runners (explicit or from the live view).

        Fields are named with ``prefix`` (``query.``, ``candidates[3].``), the batch's and the
        solo latency's with ``batch_prefix`` (default: ``prefix``).
        """
        batch_prefix = prefix if batch_prefix is None else batch_prefix
        runners: list[dict[str, Any]] = []
        remaining: list[float | None] = []
        for i, runner in enumerate(query.co_runners):
            path = f"{prefix}co_runners[{i}]"
            if runner.overlap is not None and runner.remaining_ms is not None:
                raise InvalidArgument(path, "give overlap or remaining_ms, not both")
            if runner.remaining_ms is not None:
                invalid_argument(rules.non_negative, runner.remaining_ms, f"{path}.remaining_ms")
            runners.append(
                {"model": runner.model, "batch_size": runner.batch_size, "attrs": dict(runner.attrs),
                 "overlap": runner.overlap}
            )
            remaining.append(runner.remaining_ms)
        obj = {
            "schema": SCHEMA,
            "device": query.device,
            "device_kind": query.device_kind or None,
            "batch": {"model": query.batch.model, "batch_size": query.batch.batch_size,
                      "attrs": dict(query.batch.attrs)},
            "solo_latency_ms": query.solo_latency_ms,
            "co_runners": runners,
            "signals": dict(query.signals),
        }
        try:
            record = parse_record(obj, require_latency=False)
            limit = self.state.config.max_value
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
        kind = record.device_kind or live.kind_of(query.device)
        if kind != record.device_kind:
            record = dataclasses.replace(record, device_kind=kind)
        return Planned(record, remaining)

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
        kinds = [k or live_view.kind_of(d) for k, d in zip(candidates.device_kinds, devices, strict=True)]
        overlaps = np.where(candidates.has_overlap, candidates.overlaps, 1.0)
        remaining = np.where(candidates.has_remaining, candidates.remaining, math.nan)
        rows = CoLocations(batch, devices, kinds, candidates.signals, candidates.offsets, candidates.models,
                           candidates.batch_sizes, candidates.attrs, overlaps, solo_latency_ms)
        if not live:
            return Plan(rows, remaining, np.flatnonzero(candidates.has_remaining))
        running = {i: live_view.running(devices[i]) for i in live}
        runners = [
            [(_runner_of(r), ms) for r, ms in running[i]]
            if i in running
            else list(zip(rows.co_runners(i), remaining[rows.offsets[i]:rows.offsets[i + 1]].tolist(), strict=True))
            for i in range(len(rows))
        ]
        return Plan.from_runners(batch, solo_latency_ms, list(devices), kinds, candidates.signals, runners)

    @staticmethod
    def _valid_batch(batch: BatchSpec, limit: float) -> bool:
        """Whether the batch passes ``coloc/v1`` as it is, within the magnitude limit."""
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
    def answer(self, plan: Plan | Planned, confidence: float, deadline_ms: float | None = None) -> RankingColumns:
        """Predictions, bounds (and, for a deadline, slack and probability) of every row, ranked.

        Co-runners given by remaining time get their overlap from the predicted window:
        ``min(1, remaining / window)``, starting from the solo latency, iterated
        ``overlap_iterations`` times.

        A single query (a :class:`Planned`) is the one-row case, predicted from its record and
        iterated in scalars (:meth:`Planned.at_window`), which costs less than columns for one
        row; it gives the numbers its one-row :class:`Plan` would.
        """
        state = self.state
        one = isinstance(plan, Planned)
        with state.lock:
            predictor = state.predictor
            first = plan.record if one else plan.rows.record(0)
            solo = predictor.solo_latency(first)
            predicted: Record | CoLocations = first if one else plan.rows
            if not plan.moving:
                latencies = _predict(predictor, predicted)
            else:
                # Every row is predicted at each step; rows without such co-runners get the same answer each time.
                window = _filled(1 if one else len(plan.rows), solo)
                for _ in range(state.config.overlap_iterations):
                    predicted = plan.at_window(float(window[0]) if one else window)
                    window = _predict(predictor, predicted)
                latencies = window
            rows = _row_of(predicted) if isinstance(predicted, Record) else predicted
            n = len(rows)
            kinds = rows.device_kinds
            bounds = state.calibrator.bound_factors(kinds, confidence)
            if len(bounds) == 1:
                uppers = latencies * next(iter(bounds.values())).upper_ms
            else:
                uppers = latencies * np.array([bounds[k].upper_ms for k in kinds])
            terms = terms_of(state.queues, state.memory, state.live, rows, confidence, bounds)
            if deadline_ms is None:
                probabilities = _filled(n, math.nan)
            elif terms is None:
                probabilities = state.calibrator.probabilities_within(
                    latencies, _filled(n, deadline_ms), kinds, confidence
                )
            else:  # the time left for the batch itself: the deadline less the mean wait and the load
                limits = np.nan_to_num(deadline_ms - terms.extra_mean_ms, neginf=0.0)
                probabilities = terms.probabilities(
                    state.calibrator.probabilities_within(latencies, limits, kinds, confidence))
            learned = predictor.n_learned
        if deadline_ms is None:
            deadline_ms, slack, order = math.nan, _filled(n, math.nan), np.arange(n)
        elif terms is None:
            slack = deadline_ms - uppers
            order = np.argsort(-slack, kind="stable") if n > 1 else np.zeros(1, dtype=np.intp)
        else:
            slack = deadline_ms - uppers - terms.extra_bound_ms
            order = terms.order(slack)
        return RankingColumns(
            rows=rows,
            order=order,
            latency_ms=latencies,
            solo_latency_ms=_filled(n, solo),
            upper_bound_ms=uppers,
            slack_ms=slack,
            probability=probabilities,
            bounds=bounds,
            confidence=confidence,
            predictor=state.config.predictor,
            observations_learned=learned,
            deadline_ms=deadline_ms,
            terms=terms,
        )


def _predict(predictor: LatencyPredictor, rows: Record | CoLocations) -> np.ndarray:
    """Predicted latencies of the rows: all at once, or, for a single row (a query), by the
    per-record path, which costs less than building a feature matrix for it."""
    if isinstance(rows, Record):
        return np.asarray(predictor.predict_many([rows]), dtype=float)
    if len(rows) == 1:
        return np.asarray(predictor.predict_many([rows.record(0)]), dtype=float)
    return predictor.predict_colocations(rows)


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


def _runner_of(running: RunningBatch) -> CoRunner:
    """A batch running on a device (from the live view), as a co-runner overlapping fully."""
    return CoRunner(running.batch.model, running.batch.batch_size, running.batch.attrs)


def invalid_argument(rule: Callable[[Any, str], T], value: Any, path: str) -> T:
    """``rule(value, path)`` of :mod:`predictor.rules`, its :class:`RecordError` as :class:`InvalidArgument`."""
    try:
        return rule(value, path)
    except RecordError as exc:
        raise InvalidArgument(exc.field, exc.message) from None
