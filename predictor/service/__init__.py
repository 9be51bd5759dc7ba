"""The gRPC-free service core: the service object, its live view, monitoring and snapshots.

Import :class:`Service` from :mod:`predictor.service.core`; this package
re-exports the names a caller needs, each loaded on first use (:pep:`562`): a
module of the package (the types a client speaks in, :mod:`predictor.service.types`)
is imported without the service's learners and compiled kernels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from predictor.runtime.lazy_exports import lazy_exports

# Exported name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "ServiceConfig": "predictor.service.config",
    "Service": "predictor.service.core",
    **dict.fromkeys(("FailedPrecondition", "InvalidArgument", "NotFound", "OutlierRejected", "RateLimited",
                     "ResourceExhausted", "ServiceError", "Unavailable"), "predictor.service.errors"),
    **dict.fromkeys(("PipelineCost", "PipelinePlan", "PipelineStage", "StagePlan"), "predictor.service.pipeline_types"),
    **dict.fromkeys(("Candidate", "CoRunnerSource", "Deadline", "DeadlineAnswer", "PlacementAnswer", "PlannedCoRunner",
                     "Prediction", "Query", "Ranking", "Status"), "predictor.service.types"),
    "SnapshotError": "predictor.runtime.durable",  # (predictor.snapshot exports it too, with the learners)
}

__all__ = [  # the keys of _EXPORTS, spelt out for linters and type checkers
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

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from predictor.runtime.durable import SnapshotError
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


__getattr__, __dir__ = lazy_exports(globals(), {name: (module, name) for name, module in _EXPORTS.items()})
