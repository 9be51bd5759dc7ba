"""The cheapest plan whose composed end-to-end bound meets the deadline.

A plan picks one :class:`~predictor.pipeline.compose.StageOption` (a device) per stage; it is
*feasible* when its composed bound (:class:`~predictor.pipeline.compose.Composer`) is within
the deadline, and costs the sum of its options' costs. The search starts from the SLO split
(:func:`~predictor.pipeline.graph.split_deadline`, weighted by each stage's fastest expected
time): each stage takes the cheapest device whose own bound fits its share; when that plan is
feasible its cost bounds the search from the start. Then :func:`plan` runs dynamic programming
over a chain of stages, A* over a DAG.

Both are exact for the composed bound (the draws are common to all plans, and the end-to-end
time is non-decreasing in each stage's draw, so the fastest completion is a true lower bound);
:func:`brute_force` enumerates every plan for tests. Beyond ``max_evaluations`` partial plans
the search stops and answers the best plan found (``optimal`` false).

Examples
--------
>>> import numpy as np
>>> from predictor.pipeline.graph import Dag
>>> def option(k, ms, cost):
...     return StageOption(k, f"d{k}", np.full(100, ms), ms, ms, cost)
>>> stages = [[option(0, 10.0, 1.0), option(1, 5.0, 3.0)]] * 3
>>> problem = Problem(Dag.of(3, []), stages, deadline_ms=20.0, confidence=0.99, n_samples=100)
>>> result = plan(problem)
>>> result.choice, result.cost, result.feasible, result.search
((0, 1, 1), 7.0, True, 'dp')
>>> brute_force(problem).cost
7.0
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from predictor.pipeline.compose import N_SAMPLES, Composer, StageOption
from predictor.pipeline.graph import Dag, split_deadline

MAX_EVALUATIONS = 20_000
MAX_LABELS = 256


@dataclass
class Problem:
    """A planning problem: the DAG, each stage's options, the deadline and the confidence."""

    dag: Dag
    options: Sequence[Sequence[StageOption]]
    deadline_ms: float
    confidence: float
    n_samples: int = N_SAMPLES
    seed: int = 0
    max_evaluations: int = MAX_EVALUATIONS
    composer: Composer = field(init=False)
    draws: list[list[np.ndarray]] = field(init=False)
    fastest: list[np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        if any(not stage for stage in self.options):
            raise ValueError("every stage needs at least one option")
        self.composer = Composer(self.dag, self.n_samples, self.seed)
        self.draws = [[self.composer.draw(s, o) for o in stage] for s, stage in enumerate(self.options)]
        self.fastest = [np.min(np.stack(d), axis=0) for d in self.draws]

    def min_cost(self, stage: int) -> float:
        """The cheapest option's cost of a stage."""
        return min(o.cost for o in self.options[stage])

    def min_bound(self, stage: int) -> float:
        """The smallest own bound among a stage's options."""
        return min(o.bound_ms for o in self.options[stage])


@dataclass(frozen=True)
class PlanResult:
    """A plan and how it composes.

    Attributes
    ----------
    choice
        Per stage, the index of its option.
    cost, bound_ms, probability, expected_ms
        The plan's cost, composed bound, probability of meeting the deadline, mean end-to-end time.
    feasible
        Whether ``bound_ms`` is within the deadline.
    optimal
        Whether the search ran to its end (an infeasible answer is then proven so).
    evaluated
        Partial and complete plans evaluated.
    search
        ``"dp"``, ``"astar"`` or ``"brute"``.
    """

    choice: tuple[int, ...]
    cost: float
    bound_ms: float
    probability: float
    expected_ms: float
    feasible: bool
    optimal: bool
    evaluated: int
    search: str


def evaluate(problem: Problem, choice: Sequence[int], evaluated: int = 1, optimal: bool = True,
             search: str = "brute") -> PlanResult:
    """The composed bound, probability and cost of a complete plan."""
    draws = [problem.draws[s][k] for s, k in enumerate(choice)]
    ends = problem.composer.end_to_end(draws)
    guard = max(problem.options[s][k].bound_ms for s, k in enumerate(choice))
    bound = problem.composer.bound(ends, problem.confidence, guard)
    cost = math.fsum(problem.options[s][k].cost for s, k in enumerate(choice))
    return PlanResult(tuple(choice), cost, bound, problem.composer.probability(ends, problem.deadline_ms),
                      float(ends.mean()), bound <= problem.deadline_ms, optimal, evaluated, search)


def _better(a: PlanResult | None, b: PlanResult) -> bool:
    """Whether ``b`` is a better answer than ``a``: feasible first, then cheaper, then tighter."""
    if a is None:
        return True
    if a.feasible != b.feasible:
        return b.feasible
    if not b.feasible:
        return (b.bound_ms, b.cost, b.choice) < (a.bound_ms, a.cost, a.choice)
    return (b.cost, b.bound_ms, b.choice) < (a.cost, a.bound_ms, a.choice)


def _over(cost: float, best: PlanResult | None) -> bool:
    """Whether a (partial) cost cannot beat the best feasible plan known (ties kept)."""
    return best is not None and best.feasible and cost > best.cost + 1e-9 * max(1.0, abs(best.cost))


def split_start(problem: Problem) -> PlanResult:
    """The plan of the SLO split: per stage the cheapest device whose own bound fits its share of
    the deadline (weights: the stage's fastest expected time), else its tightest device."""
    weights = [min(o.expected_ms for o in stage) for stage in problem.options]
    budgets = split_deadline(problem.dag, weights, problem.deadline_ms)
    choice = []
    for stage, budget in zip(problem.options, budgets, strict=True):
        fitting = [k for k, o in enumerate(stage) if o.bound_ms <= budget]
        if fitting:
            choice.append(min(fitting, key=lambda k: (stage[k].cost, stage[k].bound_ms, k)))
        else:
            choice.append(min(range(len(stage)), key=lambda k: (stage[k].bound_ms, stage[k].cost, k)))
    return evaluate(problem, choice, search="split")


def tightest(problem: Problem) -> PlanResult:
    """Per stage the device with the smallest own bound (the answer when nothing is feasible)."""
    choice = [min(range(len(stage)), key=lambda k: (stage[k].bound_ms, stage[k].cost, k)) for stage in problem.options]
    return evaluate(problem, choice, search="tightest")


def plan(problem: Problem) -> PlanResult:
    """The cheapest feasible plan (dynamic programming over a chain, A* over a DAG); when none
    is, the best infeasible plan found (the least composed bound).

    * **a chain** — dynamic programming over the stages in order. A label is a partial plan: its
      cost, its partial sum per draw and the largest stage bound so far. A label is dropped when
      another costs no more and is no slower on any draw (it can be completed no worse), when its
      cost plus the cheapest completion exceeds the best plan known, or when even the fastest
      completion (each later stage at the per-draw minimum over its devices) misses the deadline;
    * **a DAG** — A* over the stages in topological order, ``f = cost so far + cheapest
      completion`` (admissible), with the same two prunings: the first complete plan taken off
      the queue is the cheapest feasible one.
    """
    start = split_start(problem)
    result = _chain_dp(problem, start) if problem.dag.is_chain else _astar(problem, start)
    if not result.feasible:
        fallback = tightest(problem)
        if _better(result, fallback):
            result = fallback
    return _as(result, result.optimal, result.evaluated, "dp" if problem.dag.is_chain else "astar")


def _as(result: PlanResult, optimal: bool, evaluated: int, search: str) -> PlanResult:
    return PlanResult(result.choice, result.cost, result.bound_ms, result.probability, result.expected_ms,
                      result.feasible, optimal, evaluated, search)


def _lower_bound(problem: Problem, draws: list[np.ndarray], guard: float) -> float:
    ends = problem.composer.end_to_end(draws)
    return problem.composer.bound(ends, problem.confidence, guard)


def _chain_dp(problem: Problem, start: PlanResult) -> PlanResult:
    order = problem.dag.order
    n, deadline = len(order), problem.deadline_ms
    best: PlanResult | None = start if start.feasible else None
    # suffix lower bounds (per position: what the stages after it add at least)
    rest_draws = [np.zeros(problem.n_samples) for _ in range(n + 1)]
    rest_cost = [0.0] * (n + 1)
    rest_guard = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        s = order[i]
        rest_draws[i] = rest_draws[i + 1] + problem.fastest[s]
        rest_cost[i] = rest_cost[i + 1] + problem.min_cost(s)
        rest_guard[i] = max(rest_guard[i + 1], problem.min_bound(s))
    labels: list[tuple[float, float, np.ndarray, tuple[int, ...]]] = [(0.0, 0.0, np.zeros(problem.n_samples), ())]
    evaluated, exact = 1, True
    composer = problem.composer
    for i, s in enumerate(order):
        grown = []
        for cost, guard, partial, choice in labels:
            for k, option in enumerate(problem.options[s]):
                new_cost = cost + option.cost
                if _over(new_cost + rest_cost[i + 1], best):
                    continue
                total = partial + problem.draws[s][k]
                new_guard = max(guard, option.bound_ms)
                evaluated += 1
                if composer.bound(total + rest_draws[i + 1], problem.confidence,
                                  max(new_guard, rest_guard[i + 1])) > deadline:
                    continue
                grown.append((new_cost, new_guard, total, choice + (k,)))
        labels = _pareto(grown)
        if len(labels) > MAX_LABELS or evaluated > problem.max_evaluations:
            exact = False
            labels = labels[:MAX_LABELS]
        if not labels:
            break
    for _, _, _, choice in labels:
        by_stage = [0] * n
        for position, k in enumerate(choice):
            by_stage[order[position]] = k
        candidate = evaluate(problem, by_stage)
        if _better(best, candidate):
            best = candidate
    if best is None:
        best = start
    return _as(best, exact, evaluated, "dp")


def _pareto(labels: list[tuple[float, float, np.ndarray, tuple[int, ...]]]) -> list:
    """The labels no other dominates (no costlier, no larger guard, no slower on any draw)."""
    labels.sort(key=lambda label: (label[0], label[1], label[3]))
    kept: list = []
    stack: list[np.ndarray] = []
    for label in labels:
        if stack:
            matrix = np.stack(stack)
            guards = np.array([k[1] for k in kept])
            if np.any((guards <= label[1]) & np.all(matrix <= label[2], axis=1)):
                continue
        kept.append(label)
        stack.append(label[2])
    return kept


def _astar(problem: Problem, start: PlanResult) -> PlanResult:
    dag, order = problem.dag, problem.dag.order
    n, deadline = dag.n, problem.deadline_ms
    best: PlanResult | None = start if start.feasible else None
    rest_cost = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        rest_cost[i] = rest_cost[i + 1] + problem.min_cost(order[i])
    min_bounds = [problem.min_bound(s) for s in range(n)]
    queue: list[tuple[float, int, tuple[int, ...], float, float]] = [(rest_cost[0], 0, (), 0.0, 0.0)]
    evaluated = 0
    while queue:
        f, neg_depth, prefix, cost, guard = heapq.heappop(queue)
        depth = -neg_depth
        if _over(f, best):
            break  # every plan left costs more than the best feasible one
        if depth == n:
            by_stage = [0] * n
            for position, k in enumerate(prefix):
                by_stage[order[position]] = k
            candidate = evaluate(problem, by_stage)
            if candidate.feasible and _better(best, candidate):
                best = candidate
            if candidate.feasible:
                break  # the cheapest completion: f is admissible
            continue
        if evaluated > problem.max_evaluations:
            return _as(best if best is not None else start, False, evaluated, "astar")
        s = order[depth]
        draws = list(problem.fastest)
        for position, k in enumerate(prefix):
            draws[order[position]] = problem.draws[order[position]][k]
        later_guard = max((min_bounds[order[j]] for j in range(depth + 1, n)), default=0.0)
        for k, option in enumerate(problem.options[s]):
            new_cost = cost + option.cost
            if _over(new_cost + rest_cost[depth + 1], best):
                continue
            draws[s] = problem.draws[s][k]
            new_guard = max(guard, option.bound_ms)
            evaluated += 1
            if _lower_bound(problem, draws, max(new_guard, later_guard)) > deadline:
                continue
            heapq.heappush(queue, (new_cost + rest_cost[depth + 1], -(depth + 1), prefix + (k,), new_cost, new_guard))
    return _as(best if best is not None else start, True, evaluated, "astar")


def brute_force(problem: Problem) -> PlanResult:
    """Every plan evaluated: the cheapest feasible one, else the least composed bound (for tests)."""
    best: PlanResult | None = None
    count = 0
    for choice in itertools.product(*(range(len(stage)) for stage in problem.options)):
        count += 1
        candidate = evaluate(problem, choice)
        if _better(best, candidate):
            best = candidate
    assert best is not None
    return _as(best, True, count, "brute")
