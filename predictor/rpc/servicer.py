"""The ``interference.v1.InterferenceService`` servicer: convert, call the service, convert back.

Every handler is a few lines; errors are mapped by :func:`~predictor.rpc.errors.grpc_errors`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from predictor.records.record import RecordError
from predictor.rpc import columns, convert
from predictor.rpc.errors import grpc_errors
from predictor.rpc.protos import pb2
from predictor.rpc.security import current_caller
from predictor.service.core import Service


class InterferenceServicer:
    """Implements the RPCs of ``interference.v1.InterferenceService`` over a :class:`Service`."""

    def __init__(self, service: Service):
        self.service = service

    @grpc_errors
    def PredictLatency(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Predicted latency and upper bound of one planned batch (written from its one-row answer,
        :func:`~predictor.rpc.convert.answer_row_to_pb`)."""
        answer = self.service.answers.predict_columns(
            convert.query_from_pb(request.query), convert.confidence_from_pb(request.confidence)
        )
        response = pb2().PredictLatencyResponse()
        convert.answer_row_to_pb(answer, response.prediction)
        return response

    @grpc_errors
    def CheckDeadline(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Whether one planned batch meets its deadline."""
        answer = self.service.check_deadline(
            convert.query_from_pb(request.query),
            convert.deadline_from_pb(request),
            convert.confidence_from_pb(request.confidence),
        )
        return convert.deadline_answer_to_pb(answer)

    @grpc_errors
    def RankPlacements(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Candidate devices for one batch, most slack first (answered column-wise)."""
        candidates = _ranking_candidates(request)
        ranking = self.service.rank_columns(
            convert.batch_from_pb(request.batch),
            candidates,
            convert.deadline_from_pb(request),
            convert.confidence_from_pb(request.confidence),
            request.solo_latency_ms if request.HasField("solo_latency_ms") else None,
            batch_id=request.batch_id,
            learned_only=request.learned_only,
            where=convert.input_from_pb(request),
        )
        if request.omit_detail:
            return columns.ranking_packed_to_pb(ranking)
        return columns.ranking_columns_to_pb(ranking)

    @grpc_errors
    def ReportObservations(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Any:
        """Learn from a stream of observed batches, attributed to the authenticated caller."""
        caller = current_caller(context)
        report = self.service.report_observations(
            convert.keyed_observation_messages_from_pb(request_iterator), client=caller.identity, peer=caller.peer
        )
        return convert.observation_report_to_pb(report)

    @grpc_errors
    def ReportBatchStart(self, request: Any, context: grpc.ServicerContext) -> Any:
        """A batch started on a device (live view); returns its predicted latency and the running count."""
        predicted, running = self.service.batch_start(
            request.device,
            request.device_kind,
            request.batch_id,
            convert.batch_from_pb(request.batch),
            request.elapsed_ms if request.HasField("elapsed_ms") else None,
            memory=convert.start_memory_from_pb(request),
            client_time_s=convert.client_time_from_pb(request),
            **dict(zip(("where", "transfer_ms"), convert.start_transfer_from_pb(request), strict=True)),
        )
        return pb2().ReportBatchStartResponse(predicted_latency_ms=predicted, running=running)

    @grpc_errors
    def ReportBatchEnd(self, request: Any, context: grpc.ServicerContext) -> Any:
        """A batch ended on a device (live view); returns whether it was running and the running count."""
        found, running = self.service.batch_end(
            request.device, request.batch_id, memory=convert.end_memory_from_pb(request),
            client_time_s=convert.client_time_from_pb(request),
        )
        return pb2().ReportBatchEndResponse(found=found, running=running)

    @grpc_errors
    def ReportBatchQueued(self, request: Any, context: grpc.ServicerContext) -> Any:
        """A batch joined a device's queue; returns the queue length, its wait and its predicted latency."""
        queued, wait, predicted = self.service.batch_queued(
            request.device, request.device_kind, request.batch_id, convert.batch_from_pb(request.batch),
            client_time_s=convert.client_time_from_pb(request),
        )
        return pb2().ReportBatchQueuedResponse(queued=queued, queue_wait_ms=wait, predicted_latency_ms=predicted)

    @grpc_errors
    def PlanPipeline(self, request: Any, context: grpc.ServicerContext) -> Any:
        """A device and a latency budget per stage of a pipeline, meeting one end-to-end deadline."""
        answer = self.service.plan_pipeline(
            [convert.stage_from_pb(s) for s in request.stages],
            convert.edges_from_pb(request.edges),
            [convert.candidate_from_pb(c) for c in request.candidates],
            convert.deadline_from_pb(request),
            convert.confidence_from_pb(request.confidence),
            convert.pipeline_cost_from_pb(request.cost),
            list(request.price_per_s),
        )
        return convert.pipeline_plan_to_pb(answer)

    @grpc_errors
    def GetStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        """The service's status."""
        return convert.status_to_pb(self.service.status())


def _ranking_candidates(request: Any) -> Any:
    """The candidates of a ``RankPlacementsRequest``, column-wise, from either form (not both)."""
    if not request.HasField("packed_candidates"):
        return columns.request_columns_from_pb(request)
    if len(request.candidates):
        raise RecordError("packed_candidates", "give candidates or packed_candidates, not both")
    return columns.packed_columns_from_pb(request.packed_candidates)
