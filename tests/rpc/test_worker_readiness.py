"""An answering worker of ``predictor serve --workers N`` says it is ready only when it is.

A real learner service behind its Unix socket and a real worker on a TCP port 0, in one process:
the worker's GetStatus (forwarded to the learner) and its health agree on readiness, which needs
both the learner (opened and started up) and the worker (a first version read, then its own
start-up done).
"""

from __future__ import annotations

from predictor.rpc.client import InterferenceClient
from predictor.rpc.processes.learner import LearnerServicer, learner_socket
from predictor.rpc.processes.worker import WorkerServicer
from predictor.rpc.server import DEFAULT_MAX_MESSAGE_BYTES, create_server
from predictor.service import Service, ServiceConfig
from predictor.service.replicas.file_publisher import FilePublisher
from predictor.service.replicas.shards import ShardMap
from predictor.service.replicas.workers import worker_service


def test_a_worker_is_ready_only_once_its_learner_and_itself_are(tmp_path):
    config = ServiceConfig()
    learner = Service(config)
    publisher = FilePublisher(learner.state, tmp_path, 0, ShardMap())
    learner_server, _ = create_server(f"unix:{learner_socket(tmp_path, 0)}", learner,
                                      servicer=LearnerServicer(learner, publisher))
    learner_server.start()
    worker = worker_service(config, tmp_path, ShardMap())
    servicer = WorkerServicer(worker, str(tmp_path), DEFAULT_MAX_MESSAGE_BYTES)
    worker_server, port = create_server("127.0.0.1:0", worker, servicer=servicer)
    worker_server.start()
    client = InterferenceClient(f"127.0.0.1:{port}")
    try:
        learner.open(ready=False)  # as run_learner: opened, its start-up not yet done
        assert (client.status().ready, client.health()) == (False, "NOT_SERVING")
        learner.mark_ready()
        publisher.start()
        assert worker.state.wait_published(timeout=30)
        # the learner is ready and has published, but this worker has not finished starting up
        assert (client.status().ready, client.health()) == (False, "NOT_SERVING")
        worker.mark_ready()
        assert (client.status().ready, client.health()) == (True, "SERVING")
    finally:
        client.close()
        worker_server.stop(0).wait()
        servicer.close()
        publisher.stop()
        learner_server.stop(0).wait()
