"""The learner process of one shard in ``predictor serve --workers N``.

It is the single-process service (snapshot, observation log, exactly-once learning, live view),
reachable only by the answering workers through a Unix socket in the run's private folder. Its
servicer (:class:`LearnerServicer`) takes the caller the worker names (:mod:`predictor.rpc.processes.forwarding`)
and, before it answers a write (observations, batch starts, ends and queued batches), publishes the
model and the books to the version files (:class:`~predictor.service.replicas.file_publisher.FilePublisher`):
what an acknowledgement covers is in every worker's answers after it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

from predictor.rpc.model_gauges import ModelGauges
from predictor.rpc.processes.forwarding import adopt_forwarded_caller
from predictor.rpc.server import create_server, stop_server
from predictor.rpc.servicer import InterferenceServicer
from predictor.runtime.cpu_priority import lower_priority, pin_to_cpus
from predictor.runtime.gc_tuning import freeze_startup, set_young_threshold
from predictor.runtime.threads import log_blas_threads, pin_blas_threads
from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.replicas.answer_forwarding import AnswerReceiver
from predictor.service.replicas.file_publisher import FilePublisher
from predictor.service.replicas.shards import ShardMap
from predictor.service.warm import warm_ingest
from predictor.snapshot import SnapshotError

log = logging.getLogger("predictor.serve")
PR_SET_PDEATHSIG = 1


def learner_socket(folder: str | Path, shard: int) -> Path:
    """The Unix socket of ``shard``'s learner in the run's folder."""
    return Path(folder) / f"learner-{shard}.sock"


class LearnerServicer(InterferenceServicer):
    """The service's servicer, publishing to the version files before it acknowledges a write."""

    def __init__(self, service: Service, publisher: FilePublisher):
        super().__init__(service)
        self.publisher = publisher

    def _published(self, handler: Callable[..., Any], request: Any, context: grpc.ServicerContext) -> Any:
        adopt_forwarded_caller(context)
        try:
            return handler(request, context)
        finally:
            self.publisher.flush(books=True)

    def ReportObservations(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Any:
        """Learn the stream as one process does; published before it is acknowledged."""
        return self._published(super().ReportObservations, request_iterator, context)

    def ReportBatchStart(self, request: Any, context: grpc.ServicerContext) -> Any:
        """A batch started (live view); published before it is answered."""
        return self._published(super().ReportBatchStart, request, context)

    def ReportBatchEnd(self, request: Any, context: grpc.ServicerContext) -> Any:
        """A batch ended (live view); published before it is answered."""
        return self._published(super().ReportBatchEnd, request, context)

    def ReportBatchQueued(self, request: Any, context: grpc.ServicerContext) -> Any:
        """A batch joined a queue; published before it is answered."""
        return self._published(super().ReportBatchQueued, request, context)


def start_child(stop: threading.Event) -> None:
    """How a child of the supervisor starts. It stops on SIGTERM (sent by it, in order, or by the kernel when the supervisor
    dies) and ignores SIGINT (a terminal's ^C reaches the whole process group; the supervisor stops the
    children itself). It also limits BLAS as the command line did in the supervisor
    (:func:`~predictor.runtime.threads.pin_blas_threads`: a child is a new interpreter, and OpenBLAS would
    otherwise start a thread per core that spins beside every small update)."""
    pin_blas_threads()
    log_blas_threads(log)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(OSError, AttributeError):  # Linux: SIGTERM when the parent dies
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the parent died before the line above
        stop.set()


def run_learner(config: ServiceConfig, options: Any, shard: int, shards: ShardMap, folder: str,
                state_dir: str | None, warm_start: str | None, answers: Any = None) -> int:
    """Entry of a learner process: serve ``shard``'s learning on its socket until SIGTERM."""

    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s learner-{shard} %(levelname)s %(message)s")
    stop = threading.Event()
    start_child(stop)
    # answers first when the CPUs are short (the workers keep niceness 0 and the normal class)
    lower_priority(options.learner_nice, options.learner_policy)
    pin_to_cpus(options.learner_cpus)  # and, if given, on cores of their own
    warm_ingest(config)  # the first observation sent does not wait for the kernels to load
    service = Service(config)
    publisher = FilePublisher(service.state, folder, shard, shards, config.publish_every_s)
    server, _ = create_server(
        f"unix:{learner_socket(folder, shard)}",
        service,
        max_workers=options.max_workers,
        max_message_bytes=options.max_message_bytes,
        metrics=None,  # its calls are the workers' forwards, counted once, where they arrived
        servicer=LearnerServicer(service, publisher),
    )
    server.start()
    try:
        said = service.open(state_dir, warm_start, ready=False)  # ready once started up, below
    except (SnapshotError, OSError, ValueError) as exc:
        print(f"predictor serve: learner {shard}: error: {exc}", file=sys.stderr, flush=True)
        server.stop(0).wait()
        return 2
    set_young_threshold(options.gc_young_threshold)  # for the process's life (predictor.runtime.gc_tuning)
    freeze_startup(options.gc_young_threshold, log)
    service.mark_ready()  # after the freeze, and before the first version: a worker ready finds its learner ready
    publisher.start()
    receiver = AnswerReceiver(answers, lambda: service.state.admission.memory) if answers is not None else None
    if receiver is not None:  # the answers the workers remembered (admission linking)
        receiver.start()
    gauges = ModelGauges(service, shard)
    gauges.start()
    # not "SERVING": the port answers once the workers have started up (the supervisor's line says so)
    print(f"predictor serve: learner {shard} (pid {os.getpid()}): {said}; learning", flush=True)
    stop.wait()
    stop_server(server, service, options.grace_s)
    publisher.stop()
    log.info("model versions written: %d (residual windows pickled: %d)", publisher.writes,
             publisher.models.parts.pickled)
    gauges.stop()
    if receiver is not None:
        receiver.stop()
    return 0
