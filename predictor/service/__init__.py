"""The gRPC-free service core: the service object, its live view, monitoring and snapshots.

Import :class:`Service` from :mod:`predictor.service.core`; this package
re-exports the names a caller needs.
"""

from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    OutlierRejected,
    RateLimited,
    ResourceExhausted,
    ServiceError,
    Unavailable,
)
from predictor.service.pipeline_types import PipelineCost, PipelinePlan, PipelineStage, StagePlan
from predictor.service.types import (
    Candidate,
    CoRunnerSource,
    Deadline,
    DeadlineAnswer,
    PlacementAnswer,
    PlannedCoRunner,
    Prediction,
    Query,
    Ranking,
    Status,
)
from predictor.snapshot import SnapshotError

__all__ = [
    "Candidate",
    "CoRunnerSource",
    "Deadline",
    "DeadlineAnswer",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "OutlierRejected",
    "PipelineCost",
    "PipelinePlan",
    "PipelineStage",
    "PlacementAnswer",
    "PlannedCoRunner",
    "Prediction",
    "Query",
    "Ranking",
    "RateLimited",
    "ResourceExhausted",
    "Service",
    "ServiceConfig",
    "ServiceError",
    "SnapshotError",
    "StagePlan",
    "Status",
    "Unavailable",
]
