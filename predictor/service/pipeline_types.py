"""Domain requests and answers of PlanPipeline, free of protobuf (field names follow the contract)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from predictor.records.record import BatchSpec
from predictor.service.types import Prediction


class PipelineCost(enum.Enum):
    """What a pipeline plan minimises."""

    BUSY_TIME = "busy_time"  # sum of the stages' expected latencies, ms
    PRICE = "price"  # sum of price_per_s of the stage's device x its expected latency in s


@dataclass(frozen=True, slots=True)
class PipelineStage:
    """One stage: a batch, optionally its profiled solo latency and the candidates it may use."""

    batch: BatchSpec
    name: str = ""
    solo_latency_ms: float | None = None
    candidates: tuple[int, ...] = ()
    """Indices into the request's candidates; empty: any."""


@dataclass(frozen=True, slots=True)
class StagePlan:
    """The plan of one stage (see ``StagePlan`` in the contract)."""

    stage_index: int
    name: str
    device: str
    candidate_index: int
    budget_ms: float
    expected_ms: float
    upper_bound_ms: float
    cost: float
    prediction: Prediction
    expected_start_ms: float


@dataclass(frozen=True, slots=True)
class PipelinePlan:
    """The answer of PlanPipeline (see ``PlanPipelineResponse`` in the contract)."""

    feasible: bool
    composed_bound_ms: float
    probability: float
    expected_ms: float
    cost: float
    stages: tuple[StagePlan, ...]
    deadline_ms: float
    confidence: float
    critical_path: tuple[int, ...]
    sum_of_stage_bounds_ms: float
    search: str
    optimal: bool
    plans_evaluated: int
