"""A Python client of the prediction service for schedulers and collectors.

Calls take and return the service's domain objects (:class:`Query`,
:class:`Prediction`, ...); a failed call raises the domain error it stands
for (:class:`InvalidArgument` naming the field, :class:`NotFound`,
:class:`Unavailable`, :class:`ResourceExhausted`), or the
:class:`grpc.RpcError` itself for anything else.

Examples
--------
>>> from predictor.records.record import BatchSpec
>>> from predictor.service import Query
>>> with InterferenceClient("localhost:50051") as client:       # doctest: +SKIP
...     client.wait_ready(10)
...     answer = client.check_deadline(Query("gpu0", BatchSpec("resnet50", 8)), deadline_ms=30)
...     answer.feasible, answer.prediction.upper_bound_ms
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from predictor.records.record import BatchSpec, Record
from predictor.rpc import convert
from predictor.rpc.at_hand import at_hand
from predictor.rpc.errors import from_rpc_error
from predictor.rpc.protos import SERVICE_NAME, load
from predictor.rpc.security import open_channel
from predictor.service.estimates.placements import CandidateColumns
from predictor.service.pipeline_types import PipelineCost, PipelinePlan, PipelineStage
from predictor.service.types import (
    Candidate,
    DeadlineAnswer,
    InputPlace,
    ObservationReport,
    Prediction,
    Query,
    Ranking,
    Status,
)

DEFAULT_TIMEOUT_S = 10.0
RECORDS_PER_MESSAGE = 256
"""The most records :meth:`InterferenceClient.report_observations` sends in one message."""
MESSAGE_BYTES = 1 << 20
"""The most bytes of records it packs into one message (a record larger goes alone): a quarter of
the server's default limit on a message (``predictor serve --max-message-bytes``, 4 MiB)."""


class InterferenceClient:
    """Client of ``interference.v1.InterferenceService``.

    Parameters
    ----------
    target
        ``host:port`` of the server (ignored when ``channel`` is given).
    channel
        An existing channel (for example a secure one).
    timeout
        Deadline of each unary call in seconds.
    credentials
        TLS credentials (:func:`~predictor.rpc.security.channel_credentials`; with a client
        certificate for mutual TLS); omitted: plaintext.
    token
        Bearer token sent with every call (``authorization: Bearer <token>``).
    server_name
        Name to check the server's certificate against, when not the target's host.
    """

    def __init__(
        self,
        target: str = "localhost:50051",
        *,
        channel: grpc.Channel | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        credentials: grpc.ChannelCredentials | None = None,
        token: str | None = None,
        server_name: str | None = None,
    ):
        pb2, pb2_grpc = load()
        self._pb2 = pb2
        self._own_channel = channel is None
        if channel is None:
            channel = open_channel(target, credentials=credentials, token=token, server_name=server_name)
        self.channel = channel
        self.stub = pb2_grpc.InterferenceServiceStub(self.channel)
        self.timeout = timeout

    def close(self) -> None:
        """Close the channel, when the client opened it (a channel passed in stays open)."""
        if self._own_channel:
            self.channel.close()

    def __enter__(self) -> InterferenceClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, method: Callable[..., Any], request: Any, timeout: float | None = None) -> Any:
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc

    # ----------------------------------------------------------------- health
    def health(self, timeout: float = 2.0) -> str:
        """``SERVING``, ``NOT_SERVING`` or ``UNKNOWN`` (server unreachable)."""
        stub = health_pb2_grpc.HealthStub(self.channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=timeout)
        except grpc.RpcError:
            return "UNKNOWN"
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def wait_ready(self, timeout: float = 30.0, poll: float = 0.05) -> None:
        """Block until the server reports ``SERVING``; raises ``TimeoutError`` after ``timeout``."""
        end = time.monotonic() + timeout
        while True:
            if self.health(timeout=max(0.1, min(2.0, end - time.monotonic()))) == "SERVING":
                return
            if time.monotonic() >= end:
                raise TimeoutError(f"the prediction service was not ready within {timeout} s")
            time.sleep(poll)

    # ----------------------------------------------------------------- scheduler calls
    def predict(self, query: Query, confidence: float | None = None) -> Prediction:
        """Predicted latency and upper bound of a planned batch."""
        request = self._pb2.PredictLatencyRequest(
            query=convert.query_to_pb(query), confidence=confidence or 0.0
        )
        return convert.prediction_from_pb(self._call(self.stub.PredictLatency, request).prediction)

    def check_deadline(
        self,
        query: Query,
        deadline_ms: float | None = None,
        *,
        deadline_time: float | None = None,
        confidence: float | None = None,
    ) -> DeadlineAnswer:
        """Whether a planned batch meets a deadline (``deadline_ms`` from now, or ``deadline_time``,
        Unix seconds)."""
        request = self._pb2.CheckDeadlineRequest(
            query=convert.query_to_pb(query), confidence=confidence or 0.0
        )
        convert.set_deadline(request, deadline_ms, deadline_time)
        return convert.deadline_answer_from_pb(self._call(self.stub.CheckDeadline, request))

    def rank_placements(
        self,
        batch: BatchSpec,
        candidates: Sequence[Candidate | str],
        deadline_ms: float | None = None,
        *,
        deadline_time: float | None = None,
        confidence: float | None = None,
        solo_latency_ms: float | None = None,
        batch_id: str = "",
        learned_only: bool = False,
        where: InputPlace | None = None,
        packed: bool = True,
    ) -> Ranking:
        """One batch on many candidate devices (names use the live view), most slack first.

        ``batch_id`` names the batch, so that its observation calibrates the answer given;
        ``learned_only`` refuses (``FailedPrecondition``) rather than answer from a fallback;
        ``where`` says where the batch's input is and how large (transfer term, delay decision).
        The candidates travel in the packed form (``PackedCandidates``: columns, which the
        service reads without a message per candidate); ``packed=False`` sends one
        ``PlacementCandidate`` message each. The answer is the same either way."""
        cands = [Candidate(c) if isinstance(c, str) else c for c in candidates]
        request = self._pb2.RankPlacementsRequest(
            batch=convert.batch_to_pb(batch),
            confidence=confidence or 0.0,
            batch_id=batch_id,
            learned_only=learned_only,
        )
        packed_form = convert.packed_candidates_pb(CandidateColumns.from_candidates(cands)) if packed else None
        if packed_form is not None:
            request.packed_candidates.CopyFrom(packed_form)
        else:
            request.candidates.extend(convert.candidate_to_pb(c) for c in cands)
        if solo_latency_ms is not None:
            request.solo_latency_ms = solo_latency_ms
        convert.set_input(request, where)
        convert.set_deadline(request, deadline_ms, deadline_time)
        return convert.ranking_from_pb(self._call(self.stub.RankPlacements, request))

    def plan_pipeline(
        self,
        stages: Sequence[PipelineStage],
        candidates: Sequence[Candidate | str],
        deadline_ms: float | None = None,
        *,
        edges: Sequence[tuple[int, int]] = (),
        deadline_time: float | None = None,
        confidence: float | None = None,
        cost: PipelineCost = PipelineCost.BUSY_TIME,
        price_per_s: Sequence[float] = (),
    ) -> PipelinePlan:
        """A device and a latency budget per stage of a pipeline (``edges``: its DAG, none: a chain
        in order) such that the composed end-to-end bound meets the deadline, at least ``cost``
        (busy time, or ``price_per_s`` per candidate)."""
        cands = [Candidate(c) if isinstance(c, str) else c for c in candidates]
        pb2 = self._pb2
        request = pb2.PlanPipelineRequest(
            stages=[convert.stage_to_pb(s) for s in stages],
            edges=[pb2.PipelineEdge(from_stage=u, to_stage=v) for u, v in edges],
            candidates=[convert.candidate_to_pb(c) for c in cands],
            confidence=confidence or 0.0,
            cost=convert.pipeline_cost_to_pb(cost),
            price_per_s=list(price_per_s),
        )
        convert.set_deadline(request, deadline_ms, deadline_time)
        return convert.pipeline_plan_from_pb(self._call(self.stub.PlanPipeline, request))

    # ----------------------------------------------------------------- collector calls
    def report_observations(
        self,
        records: Iterable[Record | tuple[Record, str]],
        timeout: float | None = None,
        *,
        producer_id: str = "",
        first_sequence: int = 0,
        per_message: int = RECORDS_PER_MESSAGE,
    ) -> ObservationReport:
        """Stream observed records (optionally with the batch id given at start); returns the counts.

        ``timeout`` bounds the whole stream (default: none). With ``producer_id`` and
        ``first_sequence`` (>= 1), the records are numbered ``first_sequence``, ``first_sequence + 1``,
        ...: resending them with the same numbers learns each once (the answer counts the
        ``duplicates`` dropped).

        ``per_message``: the most records one message carries: those at hand when it is sent. The
        service learns a message's records as one block, at a fraction of a one-record message's cost
        each, and learns the same however they are cut into messages. Records read from a file (or
        given as a list) fill every message; a live stream's record (a collector's batch as it ends)
        is sent as it comes, never held back for the next (:func:`~predictor.rpc.at_hand.at_hand`). A
        message holds at most :data:`MESSAGE_BYTES` of records.
        """
        pb2 = self._pb2
        if per_message < 1:
            raise ValueError(f"per_message must be >= 1, got {per_message!r}")

        def chunks() -> Iterator[list[Record | tuple[Record, str]]]:
            if not isinstance(records, Sequence):  # read as they come, on a thread of their own
                yield from at_hand(records, per_message)
                return
            items = iter(records)
            while chunk := list(itertools.islice(items, per_message)):
                yield chunk

        def requests() -> Iterable[Any]:
            sent = 0
            for chunk in chunks():
                pairs = [item if isinstance(item, tuple) else (item, "") for item in chunk]
                for part, encoded in _within_bytes([convert.record_to_pb(r) for r, _ in pairs]):
                    ids = [b for _, b in pairs[part]]
                    message = pb2.ReportObservationsRequest(record=encoded[0], batch_id=ids[0])
                    if len(encoded) > 1:
                        message.records.extend(encoded[1:])
                        if any(ids[1:]):
                            message.batch_ids.extend(ids[1:])
                    if producer_id:
                        message.producer_id = producer_id
                        if first_sequence:
                            message.sequence = first_sequence + sent
                    sent += len(encoded)
                    yield message

        try:
            response = self.stub.ReportObservations(requests(), timeout=timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc
        return convert.observation_report_from_pb(response)

    def batch_start(
        self,
        device: str,
        batch_id: str,
        batch: BatchSpec,
        *,
        device_kind: str = "",
        elapsed_ms: float | None = None,
        memory_total_mb: float | None = None,
        memory_used_mb: float | None = None,
        load_ms: float | None = None,
        resident_models: Sequence[str] = (),
        where: InputPlace | None = None,
        transfer_ms: float | None = None,
        client_time: float | None = None,
    ) -> tuple[float, int]:
        """Report a batch started; returns its predicted latency (ms) and the batches running there.

        Optionally with how long it has run (``elapsed_ms``), the device's memory (capacity, use), the
        time spent loading the model for it, the models loaded on the device, where its input was
        (``where``) with the measured time to move it (``transfer_ms``), and when the report was made
        (``client_time``, Unix seconds of this machine's wall clock).
        """
        request = self._pb2.ReportBatchStartRequest(
            device=device, device_kind=device_kind, batch_id=batch_id, batch=convert.batch_to_pb(batch),
            resident_models=list(resident_models),
        )
        for name, value in (("elapsed_ms", elapsed_ms), ("memory_total_mb", memory_total_mb),
                            ("memory_used_mb", memory_used_mb), ("load_ms", load_ms),
                            ("transfer_ms", transfer_ms)):
            if value is not None:
                setattr(request, name, value)
        convert.set_input(request, where)
        _stamp(request, client_time)
        response = self._call(self.stub.ReportBatchStart, request)
        return response.predicted_latency_ms, response.running

    def batch_end(
        self,
        device: str,
        batch_id: str,
        *,
        peak_memory_mb: float | None = None,
        memory_used_mb: float | None = None,
        resident_models: Sequence[str] = (),
        client_time: float | None = None,
    ) -> tuple[bool, int]:
        """Report a batch ended (or dropped from its queue); returns whether it was running (or queued)
        and the batches still running there. Optionally with its peak memory, the device's use after it,
        the models loaded on the device and when it ended (``client_time``, Unix seconds)."""
        request = self._pb2.ReportBatchEndRequest(device=device, batch_id=batch_id,
                                                  resident_models=list(resident_models))
        if peak_memory_mb is not None:
            request.peak_memory_mb = peak_memory_mb
        if memory_used_mb is not None:
            request.memory_used_mb = memory_used_mb
        _stamp(request, client_time)
        response = self._call(self.stub.ReportBatchEnd, request)
        return response.found, response.running

    def batch_queued(self, device: str, batch_id: str, batch: BatchSpec, *, device_kind: str = "",
                     client_time: float | None = None) -> tuple[int, float]:
        """Report a batch queued on a device (at ``client_time``, Unix seconds; default: when it arrives);
        returns the batches queued there and its expected wait (ms)."""
        request = self._pb2.ReportBatchQueuedRequest(
            device=device, device_kind=device_kind, batch_id=batch_id, batch=convert.batch_to_pb(batch)
        )
        _stamp(request, client_time)
        response = self._call(self.stub.ReportBatchQueued, request)
        return response.queued, response.queue_wait_ms

    def status(self) -> Status:
        """``GetStatus``: the service's learning, error and coverage summary."""
        return convert.status_from_pb(self._call(self.stub.GetStatus, self._pb2.GetStatusRequest()))


def _stamp(request: Any, client_time: float | None) -> None:
    """Set a report's ``client_time`` from Unix seconds (nothing when ``None``)."""
    if client_time is not None:
        seconds = math.floor(client_time)
        request.client_time.seconds = seconds
        request.client_time.nanos = min(int(round((client_time - seconds) * 1e9)), 999_999_999)


def _within_bytes(encoded: list[Any]) -> Iterator[tuple[slice, list[Any]]]:
    """``encoded`` records cut, in order, into runs of at most :data:`MESSAGE_BYTES` (a record larger
    alone): each run's place in the list and its records."""
    start, size = 0, 0
    for at, record in enumerate(encoded):
        own = record.ByteSize()
        size += own
        if size > MESSAGE_BYTES and at > start:
            yield slice(start, at), encoded[start:at]
            start, size = at, own
    if start < len(encoded):
        yield slice(start, len(encoded)), encoded[start:]
