"""Published versions across processes (in one process here): version files, shards, a worker's state."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from predictor.records import BatchSpec
from predictor.service import CoRunnerSource, Query, Service, ServiceConfig
from predictor.service.file_publisher import FilePublisher
from predictor.service.shards import ShardMap
from predictor.service.synthetic import synthetic_records
from predictor.service.version_file import VersionFile, VersionReader
from predictor.service.workers import worker_service


def test_reader_sees_each_new_generation_and_loads_only_then(tmp_path):
    writer, reader = VersionFile(tmp_path, "v"), VersionReader(tmp_path, "v")
    assert not reader.available()
    with pytest.raises(LookupError):
        reader.latest()
    assert writer.write({"n": 1}) == 1
    assert reader.latest() == {"n": 1} and reader.generation == 1
    assert reader.latest() == {"n": 1} and reader.loads == 1  # unchanged: not read again
    writer.write({"n": 2})
    assert reader.latest() == {"n": 2} and reader.loads == 2
    # a learner started again goes on from the generation reached; a reader's map still sees it
    writer.close()
    again = VersionFile(tmp_path, "v")
    assert again.write({"n": 3}) == 3
    assert reader.latest() == {"n": 3}


def test_readers_never_see_a_torn_version(tmp_path):
    writer, reader = VersionFile(tmp_path, "v"), VersionReader(tmp_path, "v")
    writer.write(np.zeros(200_000))
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            writer.write(np.full(200_000, float(i)))

    thread = threading.Thread(target=write)
    thread.start()
    seen = set()
    try:
        for _ in range(300):
            version = reader.latest()
            assert version.min() == version.max()  # whole: one write's values throughout
            seen.add(float(version[0]))
    finally:
        stop.set()
        thread.join()
    assert len(seen) > 1


class Book:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items = {"a": 1}


def still_clock() -> float:
    """A clock that does not move: live-view answers then do not depend on when they are asked."""
    return 100.0


def test_locks_are_copied_fresh_even_while_held(tmp_path):
    book = Book()
    writer, reader = VersionFile(tmp_path, "b"), VersionReader(tmp_path, "b")
    with book._lock:
        writer.write(book)
    copy = reader.latest()
    assert copy.items == {"a": 1}
    assert copy._lock.acquire(blocking=False)


def test_shard_map():
    shards = ShardMap.parse(["a100,h100", "cpu"])
    assert len(shards) == 2
    assert (shards.shard_of("h100"), shards.shard_of("cpu"), shards.shard_of("unnamed")) == (0, 1, 0)
    assert len(ShardMap.parse([])) == 1
    with pytest.raises(ValueError, match="'cpu' is named by shards 0 and 1"):
        ShardMap.parse(["cpu", "cpu,gpu"])
    with pytest.raises(ValueError, match="names no device kind"):
        ShardMap.parse([" , "])


def test_a_worker_answers_as_the_learner_from_the_files(tmp_path):
    config = ServiceConfig()
    learner = Service(config, clock=still_clock)
    learner.open()
    for record in synthetic_records(150, seed=2):
        learner.observe(record)
    publisher = FilePublisher(learner.state, tmp_path, 0, ShardMap())
    publisher.start()
    worker = worker_service(config, tmp_path, ShardMap())
    worker.mark_ready()
    queries = [Query("sim0", BatchSpec(m, b, {"l2_util": 0.4}), co_runner_source=CoRunnerSource.EXPLICIT)
               for m, b in (("bert", 4), ("mlp", 2), ("resnet", 8))]
    try:
        assert [worker.predict(q, 0.9) for q in queries] == [learner.predict(q, 0.9) for q in queries]
        for record in synthetic_records(20, seed=3):
            learner.observe(record)
        learner.batch_start("sim0", "SimGPU", "b1", BatchSpec("bert", 4, {"l2_util": 0.5}))
        publisher.flush(books=True)  # what the learner does before it acknowledges
        live = Query("sim0", BatchSpec("mlp", 2, {"l2_util": 0.1}), co_runner_source=CoRunnerSource.LIVE_VIEW)
        assert worker.predict(live, 0.9) == learner.predict(live, 0.9)
        assert worker.predict(live, 0.9).observations_learned == 170
        assert len(worker.predict(live, 0.9).co_runners) == 1  # the batch started, from the published books
    finally:
        publisher.stop()


def test_a_write_after_close_publishes_nothing_and_close_is_idempotent(tmp_path):
    # a learner stopping closes its version file while a publisher thread may still write
    writer, reader = VersionFile(tmp_path, "v"), VersionReader(tmp_path, "v")
    writer.write({"n": 1})
    writer.close()
    writer.close()
    assert writer.write({"n": 2}) == 1
    assert reader.latest() == {"n": 1} and reader.generation == 1
