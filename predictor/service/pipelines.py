"""PlanPipeline: a device and a latency budget per stage of a DAG of batches, at least cost,
such that the composed end-to-end bound meets one deadline.

Every stage is answered on every candidate it may use as RankPlacements answers a batch
(:meth:`~predictor.service.answering.Answering.plan_candidates`, then
:meth:`~predictor.service.answering.Answering.answer`: the live view, the query-shape
calibration, the queue wait and the model load). Each answer becomes a completion-time
distribution (:mod:`predictor.pipeline.distributions`); candidates that cannot take the
stage (memory lacks, the queue is saturated) are left out. The search
(:mod:`predictor.pipeline.search`) composes the distributions along the DAG
(:mod:`predictor.pipeline.compose`) and returns the cheapest plan whose composed bound is
within the deadline; the budgets split the deadline by dominators, weighted by each stage's
own bound on its device (:func:`~predictor.pipeline.graph.split_deadline`).

A stage's distribution is its latency's, shifted by its expected queue wait and model load;
the wait's own tail enters through the composed bound's floor, the largest single stage's
completion bound (wait bound + load + latency bound).

The stages of one pipeline are not taken as each other's co-runners (a stage runs after its
upstream stages; parallel branches on one device are the scheduler's to avoid).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from predictor.calibration.shapes import QueryShape
from predictor.pipeline.compose import N_SAMPLES, StageOption
from predictor.pipeline.distributions import stage_factors
from predictor.pipeline.graph import Dag, GraphError, split_deadline
from predictor.pipeline.search import PlanResult, Problem, plan
from predictor.records import rules
from predictor.service.answering import Answering, Plan
from predictor.service.errors import FailedPrecondition, InvalidArgument, ResourceExhausted, ServiceError
from predictor.service.estimates.placements import CandidateColumns, RankingColumns
from predictor.service.pipeline_types import PipelineCost, PipelinePlan, PipelineStage, StagePlan
from predictor.service.types import Candidate, Deadline

MAX_STAGES = 64
MAX_PIPELINE_CANDIDATES = 256
_CANDIDATE = re.compile(r"^candidates\[(\d+)\]")


class PipelinePlanner:
    """Answers PlanPipeline from the service's answering path (see the module documentation)."""

    def __init__(self, answers: Answering, n_samples: int = N_SAMPLES):
        self.answers = answers
        self.n_samples = n_samples
        self.counts = {"feasible": 0, "infeasible": 0, "searches_cut": 0}
        """Plans answered, by outcome, and of them those whose search stopped at its limit (metrics)."""

    def plan(
        self,
        stages: Sequence[PipelineStage],
        edges: Sequence[tuple[int, int]],
        candidates: Sequence[Candidate],
        deadline: Deadline,
        confidence: float | None = None,
        cost: PipelineCost = PipelineCost.BUSY_TIME,
        price_per_s: Sequence[float] = (),
    ) -> PipelinePlan:
        """The cheapest plan meeting ``deadline`` at ``confidence`` (or, when none does, the one
        with the least composed bound, ``feasible`` false). Errors name the request's fields."""
        state = self.answers.state
        state.require_ready()
        confidence = self.answers.confidence(confidence)
        if not stages:
            raise InvalidArgument("stages", "give at least one stage")
        if len(stages) > MAX_STAGES:
            raise ResourceExhausted("stages", f"{len(stages)} stages, at most {MAX_STAGES} allowed")
        if not candidates:
            raise InvalidArgument("candidates", "give at least one candidate device")
        limit = min(MAX_PIPELINE_CANDIDATES, state.config.max_candidates)
        if len(candidates) > limit:
            raise ResourceExhausted("candidates", f"{len(candidates)} candidates, at most {limit} allowed")
        prices = _prices(price_per_s, len(candidates), cost, state.config.max_value)
        deadline_ms = deadline.relative_ms(limit=state.config.max_value)
        try:
            dag = Dag.of(len(stages), list(edges))
        except GraphError as exc:
            raise InvalidArgument(exc.field, exc.message) from None
        # every stage validated and planned before any is answered: a rejected request changes nothing
        planned = []
        for s, stage in enumerate(stages):
            indices = _stage_candidates(stage, s, len(candidates))
            planned.append((indices, self._plan(stage, s, [candidates[i] for i in indices], indices)))
        options, answers = [], []
        for s, (stage, (indices, rows)) in enumerate(zip(stages, planned, strict=True)):
            columns = self._answer(rows, s, indices, confidence)
            answers.append(columns)
            options.append(self._options(stage, s, columns, indices, confidence, prices))
        problem = Problem(dag, options, deadline_ms, confidence, n_samples=self.n_samples)
        result = plan(problem)
        with state.lock:
            self.counts["feasible" if result.feasible else "infeasible"] += 1
            self.counts["searches_cut"] += not result.optimal
        return _answer(dag, stages, problem, result, answers, deadline_ms, confidence)

    def _plan(self, stage: PipelineStage, s: int, candidates: list[Candidate], indices: list[int]) -> Plan:
        """Stage ``s`` validated and planned on its candidates (errors renamed to the request's fields)."""
        try:
            columns = CandidateColumns.from_candidates(candidates)
            return self.answers.plan_candidates(stage.batch, columns, stage.solo_latency_ms)
        except ServiceError as exc:
            raise _renamed(exc, s, indices) from None

    def _answer(self, planned: Plan, s: int, indices: list[int], confidence: float) -> RankingColumns:
        """Stage ``s`` answered on its planned candidates (errors renamed to the request's fields)."""
        try:
            return self.answers.answer(planned, confidence)
        except ServiceError as exc:
            raise _renamed(exc, s, indices) from None

    def _options(self, stage: PipelineStage, s: int, columns: RankingColumns, indices: list[int],
                 confidence: float, prices: list[float] | None) -> list[StageOption]:
        """The stage's completion-time distribution and cost on each candidate that can take it."""
        state = self.answers.state
        rows = columns.rows
        raw = columns.latency_ms if columns.raw_latency_ms is None else columns.raw_latency_ms
        counts = np.diff(rows.offsets).tolist()
        terms = columns.terms
        options: list[StageOption] = []
        reasons: list[str] = []
        with state.lock:
            calibrator = state.admission.calibrator
            for i in range(len(rows)):
                if terms is not None and (not terms.fits[i] or not math.isfinite(float(terms.wait_ms[i]))):
                    reasons.append(f"{rows.devices[i]}: {terms.reasons[i] or 'queue saturated'}")
                    continue
                shape = QueryShape.parse(columns.shapes[i]) if columns.shapes is not None else None
                log_values = None
                if shape is not None and not (columns.fallback is not None and columns.fallback[i]):
                    log_values = calibrator.log_distribution(shape, rows.device_kinds[i], counts[i],
                                                             rows.batch.model, confidence)
                r, upper = float(raw[i]), float(columns.upper_bound_ms[i])
                factors = stage_factors(log_values, math.log(upper / r), confidence, self.n_samples)
                wait = float(terms.wait_ms[i]) if terms is not None else 0.0
                wait_bound = float(terms.wait_bound_ms[i]) if terms is not None else 0.0
                load = float(terms.load_ms[i]) if terms is not None else 0.0
                latency = float(columns.latency_ms[i])
                price = 1.0 if prices is None else prices[indices[i]] / 1000.0
                options.append(StageOption(
                    candidate=indices[i], device=rows.devices[i], samples=r * factors + (wait + load),
                    expected_ms=latency + wait + load, bound_ms=upper + wait_bound + load,
                    cost=price * latency, row=i,
                ))
        if not options:
            raise FailedPrecondition(f"stages[{s}]", "no candidate can take the stage: " + "; ".join(reasons))
        return options


def _stage_candidates(stage: PipelineStage, s: int, n: int) -> list[int]:
    """The candidate indices a stage may use, validated, without repeats."""
    if not stage.candidates:
        return list(range(n))
    out: list[int] = []
    for j, i in enumerate(stage.candidates):
        if not 0 <= i < n:
            raise InvalidArgument(f"stages[{s}].candidates[{j}]", f"no candidate {i} (there are {n})")
        if i not in out:
            out.append(i)
    return out


def _prices(prices: Sequence[float], n: int, cost: PipelineCost, limit: float) -> list[float] | None:
    """The validated prices (``None``: the cost is the busy time)."""
    if cost is PipelineCost.PRICE and len(prices) != n:
        raise InvalidArgument("price_per_s", f"give one price per candidate ({n}), got {len(prices)}")
    if prices and len(prices) != n:
        raise InvalidArgument("price_per_s", f"give one price per candidate ({n}) or none, got {len(prices)}")
    for i, price in enumerate(prices):
        if not (math.isfinite(price) and price >= 0):
            raise InvalidArgument(f"price_per_s[{i}]", f"must be finite and >= 0, got {price!r}")
        if not rules.magnitude_ok(price, limit):
            raise InvalidArgument(f"price_per_s[{i}]", f"magnitude {price:g} is beyond the limit of {limit:g}")
    return list(prices) if cost is PipelineCost.PRICE else None


def _renamed(exc: ServiceError, s: int, indices: list[int]) -> ServiceError:
    """``exc`` with its field as the request names it: a candidate's by its index in the request,
    the batch's and the solo latency's under ``stages[s].``."""
    field = exc.field
    match = _CANDIDATE.match(field)
    if match:
        field = f"candidates[{indices[int(match.group(1))]}]" + field[match.end():]
    elif field.startswith("batch") or field == "solo_latency_ms":
        field = f"stages[{s}].{field}"
    renamed = type(exc).__new__(type(exc))
    ServiceError.__init__(renamed, exc.message, field)
    return renamed


def _answer(dag: Dag, stages: Sequence[PipelineStage], problem: Problem, result: PlanResult,
            answers: list[RankingColumns], deadline_ms: float, confidence: float) -> PipelinePlan:
    chosen = [problem.options[s][k] for s, k in enumerate(result.choice)]
    expected = [o.expected_ms for o in chosen]
    bounds = [o.bound_ms for o in chosen]
    budgets = split_deadline(dag, bounds, deadline_ms)
    starts = [to - e for to, e in zip(dag.longest_to(expected), expected, strict=True)]
    plans = tuple(
        StagePlan(
            stage_index=s,
            name=stage.name,
            device=option.device,
            candidate_index=option.candidate,
            budget_ms=budgets[s],
            expected_ms=option.expected_ms,
            upper_bound_ms=option.bound_ms,
            cost=option.cost,
            prediction=answers[s].prediction(option.row),
            expected_start_ms=starts[s],
        )
        for s, (stage, option) in enumerate(zip(stages, chosen, strict=True))
    )
    return PipelinePlan(
        feasible=result.feasible,
        composed_bound_ms=result.bound_ms,
        probability=result.probability,
        expected_ms=result.expected_ms,
        cost=result.cost,
        stages=plans,
        deadline_ms=deadline_ms,
        confidence=confidence,
        critical_path=tuple(dag.critical_path(expected)),
        sum_of_stage_bounds_ms=dag.paths_sum_max(bounds),
        search=result.search,
        optimal=result.optimal,
        plans_evaluated=result.evaluated,
    )
