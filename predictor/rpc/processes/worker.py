"""An answering worker process of ``predictor serve --workers N``.

N workers listen on one port (gRPC binds with ``SO_REUSEPORT``: the kernel spreads connections
over them). Each answers the read RPCs (PredictLatency, CheckDeadline, RankPlacements,
PlanPipeline) itself, from the latest versions its shard's learner published
(:class:`~predictor.service.replicas.workers.WorkerState`), and forwards the writes (ReportObservations,
ReportBatchStart/End/Queued) and GetStatus to the learner of their shard over its Unix socket,
answering with the learner's answer: an observation is acknowledged only once the learner has
logged and learned it, and published it (:class:`~predictor.rpc.processes.learner.LearnerServicer`).

A stream of observations whose records belong to one shard is forwarded as it arrives; one that
spans shards is read whole, split record by record (each keeping its producer, sequence number and
record id) and sent to each shard; the reports are summed and the rejections renumbered to the
positions of the stream the client sent.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import grpc

from predictor.rpc.metrics import ServerMetrics
from predictor.rpc.model_gauges import PipelineCounts
from predictor.rpc.processes.forwarding import caller_metadata
from predictor.rpc.processes.learner import learner_socket, start_child
from predictor.rpc.protos import load
from predictor.rpc.security import security_from_options
from predictor.rpc.server import bind, public_server, stop_server
from predictor.rpc.servicer import InterferenceServicer
from predictor.rpc.tracing import tracing_from_option
from predictor.runtime.cpu_priority import pin_to_cpus, worker_cpus
from predictor.runtime.gc_tuning import freeze_startup, set_young_threshold
from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.estimates import fixed_point_kernel
from predictor.service.replicas.answer_forwarding import ForwardedMemory
from predictor.service.replicas.shards import SHARD, ShardMap
from predictor.service.replicas.workers import WorkerState, worker_service

log = logging.getLogger("predictor.serve")

LEARNER_RECONNECT_MS = 500
"""The longest wait between tries to reach a learner that is starting again (gRPC's default grows to 2 min)."""
NO_DEADLINE_S = 365 * 86400.0
"""A call's time remaining beyond this means it has no deadline (gRPC's infinite future)."""
MAX_REJECTIONS = 100
"""Rejections a ReportObservations answer lists (as one process answers)."""
_STATUS_SUMS = ("observations_learned", "observations_rejected", "devices", "batches_running",
                "observations_outliers", "observations_rate_limited", "answers_linked", "answers_remembered",
                "observations_duplicates", "live_restored", "live_expired")


class CrossShard(ValueError):
    """A read names devices of more than one shard."""


class WorkerServicer(InterferenceServicer):
    """Reads answered from the published versions, writes forwarded to the learners.

    Parameters
    ----------
    service
        The worker's service (its state a :class:`WorkerState`).
    folder
        The run's folder (the learners' sockets).
    max_message_bytes
        Largest message to and from a learner.
    """

    def __init__(self, service: Service, folder: str, max_message_bytes: int):
        super().__init__(service)
        state = service.state
        assert isinstance(state, WorkerState)
        self.state = state
        _, pb2_grpc = load()
        options = [("grpc.max_receive_message_length", max_message_bytes),
                   ("grpc.max_send_message_length", max_message_bytes),
                   ("grpc.max_reconnect_backoff_ms", LEARNER_RECONNECT_MS)]
        self.channels = [grpc.insecure_channel(f"unix:{learner_socket(folder, i)}", options=options)
                         for i in range(len(state.shards))]
        self.stubs = [pb2_grpc.InterferenceServiceStub(channel) for channel in self.channels]

    def close(self) -> None:
        """Close the channels to the learners."""
        for channel in self.channels:
            channel.close()

    # ------------------------------------------------------------------ reads: answered here
    def _shard_of(self, named: Iterable[tuple[str, str]], field: str) -> int:
        shards = {self.state.shard_of(kind, device) for kind, device in named}
        if len(shards) > 1:
            raise CrossShard(f"{field}: devices of more than one shard ({sorted(shards)}); ask each shard apart")
        return shards.pop() if shards else 0

    def _answer(self, handler: Any, request: Any, context: grpc.ServicerContext, named: Iterable[tuple[str, str]],
                field: str) -> Any:
        if len(self.state.shards) > 1:
            try:
                SHARD.set(self._shard_of(named, field))
            except CrossShard as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return handler(request, context)

    def PredictLatency(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Answered from the latest version of the query's shard."""
        q = request.query
        return self._answer(super().PredictLatency, request, context, [(q.device_kind, q.device)], "query")

    def CheckDeadline(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Answered from the latest version of the query's shard."""
        q = request.query
        return self._answer(super().CheckDeadline, request, context, [(q.device_kind, q.device)], "query")

    def RankPlacements(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Answered from the latest version of the candidates' shard (one shard per request)."""
        packed = request.packed_candidates
        named = [(c.device_kind, c.device) for c in request.candidates]
        named += [(packed.device_kind[i] if i < len(packed.device_kind) else "", d) for i, d in enumerate(packed.device)]
        return self._answer(super().RankPlacements, request, context, named, "candidates")

    def PlanPipeline(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Answered from the latest version of the candidates' shard (one shard per request)."""
        named = [(c.device_kind, c.device) for c in request.candidates]
        return self._answer(super().PlanPipeline, request, context, named, "candidates")

    # ------------------------------------------------------------------ writes: forwarded
    def _forward(self, shard: int, method: str, request: Any, context: grpc.ServicerContext) -> Any:
        remaining = context.time_remaining()  # the client's deadline, passed on (none: a date far ahead)
        timeout = remaining if remaining is not None and remaining < NO_DEADLINE_S else None
        try:
            return getattr(self.stubs[shard], method)(request, metadata=caller_metadata(context), timeout=timeout)
        except grpc.RpcError as exc:
            context.abort(exc.code(), exc.details() or "")

    def ReportBatchStart(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Forwarded to the learner of the device's shard."""
        shard = self.state.shard_of(request.device_kind, request.device)
        return self._forward(shard, "ReportBatchStart", request, context)

    def ReportBatchQueued(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Forwarded to the learner of the device's shard."""
        shard = self.state.shard_of(request.device_kind, request.device)
        return self._forward(shard, "ReportBatchQueued", request, context)

    def ReportBatchEnd(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Forwarded to the learner of the shard the device was reported in."""
        return self._forward(self.state.shard_of("", request.device), "ReportBatchEnd", request, context)

    def GetStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        """The learner's status (with shards: the counts summed, the per-kind lists joined); ready only
        when every learner and this worker are (a worker answers once it has read a first version)."""
        statuses = [self._forward(i, "GetStatus", request, context) for i in range(len(self.stubs))]
        merged = statuses[0]
        merged.ready = merged.ready and self.service.ready
        for other in statuses[1:]:
            merged.ready = merged.ready and other.ready
            for name in _STATUS_SUMS:
                setattr(merged, name, getattr(merged, name) + getattr(other, name))
            merged.device_kinds.extend(other.device_kinds)
            merged.drift_alarms.extend(other.drift_alarms)
            merged.admission.extend(other.admission)
        if len(statuses) > 1:
            for name in ("rolling_mape", "coverage", "admission_coverage", "admission_mape"):
                merged.ClearField(name)  # per shard only (the per-kind figures are in device_kinds)
        return merged

    def ReportObservations(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Any:
        """Forwarded to the learner of the records' shard (split by record when they span shards)."""
        if len(self.stubs) == 1:
            return self._forward(0, "ReportObservations", request_iterator, context)
        pb2, _ = load()
        parts: list[list[Any]] = [[] for _ in self.stubs]
        positions: list[list[int]] = [[] for _ in self.stubs]
        index = 0
        for message in request_iterator:
            for one in _split(pb2, message):
                shard = self.state.shards.shard_of(one.record.device_kind)
                parts[shard].append(one)
                positions[shard].append(index)
                index += 1
        merged = pb2.ReportObservationsResponse()
        rejections = []
        for shard, messages in enumerate(parts):
            if not messages:
                continue
            report = self._forward(shard, "ReportObservations", iter(messages), context)
            for name in ("accepted", "rejected", "outliers", "rate_limited", "duplicates", "observations_learned"):
                setattr(merged, name, getattr(merged, name) + getattr(report, name))
            merged.log_sequence = max(merged.log_sequence, report.log_sequence)
            for rejection in report.rejections:
                rejection.index = positions[shard][rejection.index]
                rejections.append(rejection)
        rejections.sort(key=lambda r: r.index)
        merged.rejections.extend(rejections[:MAX_REJECTIONS])
        return merged


def _split(pb2: Any, message: Any) -> Iterator[Any]:
    """One message per record of ``message``, each with its batch id, producer, sequence and record id."""
    records = ([message.record] if message.HasField("record") else []) + list(message.records)
    batch_ids = ([message.batch_id] if message.HasField("record") else []) + list(message.batch_ids)
    record_ids = ([message.record_id] if message.HasField("record") else []) + list(message.record_ids)
    for j, record in enumerate(records):
        one = pb2.ReportObservationsRequest(record=record, producer_id=message.producer_id)
        if j < len(batch_ids):
            one.batch_id = batch_ids[j]
        if j < len(record_ids):
            one.record_id = record_ids[j]
        if message.sequence:
            one.sequence = message.sequence + j
        yield one


def run_worker(config: ServiceConfig, options: Any, index: int, shards: ShardMap, folder: str, port: int,
               listening: Any, serving: Any, answers: Sequence[Any] | None = None, bind_at_once: bool = True,
               own_port: int | None = None) -> int:
    """Entry of an answering worker: serve on ``options.host:port`` (shared), and on ``own_port`` (its own,
    for balanced clients) when given, until SIGTERM; its index is put on ``listening`` once it listens,
    and on ``serving`` once it has started up (health SERVING).

    ``bind_at_once``: listen from the start, health ``NOT_SERVING`` until started up (the first start of
    the workers: the port answers health checks while the service starts); ``False`` (a worker started
    again while its siblings answer): bind the port only once started up, so that the kernel hands it no
    connection before it can answer (a socket in the port's ``SO_REUSEPORT`` group gets its share of the
    new connections from the moment it is bound).
    """

    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s worker-{index} %(levelname)s %(message)s")
    stop = threading.Event()
    start_child(stop)
    # answers against the background loading of versions: a short GIL switch interval (predictor.runtime.gil)
    sys.setswitchinterval(options.switch_interval_ms / 1e3)
    pin_to_cpus(worker_cpus(index, options.worker_cpus, options.learner_cpus, options.pin_workers))
    fixed_point_kernel.warm()  # before the first ranking or moving query, not during it
    credentials, policy = security_from_options(options)
    tracing = tracing_from_option(options.trace, options.trace_endpoint)
    service = worker_service(config, folder, shards, answers)  # answers: the learners' queues (admission linking)
    servicer = WorkerServicer(service, folder, options.max_message_bytes)

    def listen() -> tuple[Any, int]:
        server, bound = public_server(options, f"{options.host}:{port}", service, ServerMetrics(service),
                                      credentials, policy, tracing, servicer, reuse_port=True)
        if own_port is not None:
            bind(server, f"{options.host}:{own_port}", credentials)
        server.start()
        listening.put(index)
        return server, bound

    server, bound = listen() if bind_at_once else (None, port)
    counts = PipelineCounts(service, index)  # its PlanPipeline counts, for the supervisor's /metrics
    state = service.state
    assert isinstance(state, WorkerState)
    memory = state.admission.memory
    if isinstance(memory, ForwardedMemory):
        memory.start()
    while not stop.is_set() and not state.wait_published(timeout=0.5):
        pass
    if not stop.is_set():
        set_young_threshold(options.gc_young_threshold)  # for the process's life (predictor.runtime.gc_tuning)
        freeze_startup(options.gc_young_threshold, log)  # what it loaded to answer
        service.mark_ready()
        if server is None:
            server, bound = listen()  # health SERVING from its first connection
        counts.start()
        print(f"predictor serve: worker {index} (pid {os.getpid()}) answering on port {bound}", flush=True)
        serving.put(index)
    stop.wait()
    if server is not None:
        stop_server(server, service, options.grace_s)
    else:
        service.close()
    for reader in state.models:
        reader.close()
    log.info("model versions loaded: %d (%d in the background), residual windows read: %d",
             sum(r.loads for r in state.models), sum(r.loads_in_background for r in state.models),
             sum(r.parts.unpickled for r in state.models))
    if isinstance(memory, ForwardedMemory):
        memory.stop()
    counts.stop()
    servicer.close()
    if tracing is not None:
        tracing.shutdown()
    return 0
