"""Published versions across processes (in one process here): version files, shards, a worker's state."""

from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import pytest

from predictor.calibration.conformal import ResidualWindow
from predictor.records.record import BatchSpec
from predictor.service import CoRunnerSource, Query, Service, ServiceConfig
from predictor.service.replicas.file_publisher import FilePublisher
from predictor.service.replicas.shards import ShardMap
from predictor.service.replicas.version_file import VersionFile, VersionReader
from predictor.service.replicas.version_pickle import PackedWindow, PartWriter
from predictor.service.replicas.workers import worker_service
from predictor.service.synthetic import synthetic_records


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


def window_of(values: list[float], size: int = 50) -> ResidualWindow:
    window = ResidualWindow(size)
    for value in values:
        window.add(value)
    return window


def test_a_window_read_back_is_the_same_window_unpacked_on_first_use(tmp_path):
    window = window_of([0.3, -0.1, 0.7, 0.2])
    writer, reader = VersionFile(tmp_path, "v"), VersionReader(tmp_path, "v")
    writer.write({"w": window})
    copy = reader.latest()["w"]
    assert type(copy) is PackedWindow and "_sorted" not in vars(copy)  # not unpacked yet
    assert len(copy) == 4 and type(copy) is ResidualWindow  # unpacked: a plain window
    assert copy.values() == window.values() and copy._sorted == window._sorted
    assert copy.quantile(0.5) == window.quantile(0.5) and copy.cdf(0.25) == window.cdf(0.25)
    # an unread one pickles as the plain window it stands for
    writer.write({"w": window})
    unread = VersionReader(tmp_path, "v").latest()["w"]
    assert type(unread) is PackedWindow
    assert pickle.dumps(unread) == pickle.dumps(pickle.loads(pickle.dumps(window)))


def test_unchanged_windows_are_neither_written_nor_read_again(tmp_path):
    kept, changed = window_of([1.0, 2.0]), window_of([3.0])
    writer, reader = VersionFile(tmp_path, "v"), VersionReader(tmp_path, "v")
    writer.write({"kept": kept, "changed": changed, "again": kept})
    first = reader.latest()
    assert first["kept"] is first["again"] and reader.parts.unpickled == 2
    for value in (4.0, 5.0):  # two generations; the reader skips the first
        changed = window_of([3.0, value])
        writer.write({"kept": kept, "changed": changed, "again": kept})
    assert writer.parts.pickled == 4
    second = reader.latest()
    assert second["kept"] is first["kept"] and reader.parts.unpickled == 3  # only the changed one read
    assert second["changed"].values() == [3.0, 5.0] and second["kept"].values() == [1.0, 2.0]
    # a window changed in place (a live one, not a copy) is written again
    kept.add(9.0)
    writer.write({"kept": kept})
    assert reader.latest()["kept"].values() == [1.0, 2.0, 9.0]


def test_an_object_that_does_not_pickle_leaves_the_parts_of_the_last_version_written():
    kept, other = window_of([1.0, 2.0]), window_of([3.0])
    parts = PartWriter()
    main, first = parts.encode({"kept": kept})
    with pytest.raises(TypeError, match="generator"):  # after both windows are keyed
        parts.encode({"kept": kept, "other": other, "bad": (x for x in ())})
    again_main, again = parts.encode({"kept": kept})
    assert again == first and again_main == main  # kept's part reused, the failed object's forgotten
    assert parts.pickled == 2


def test_a_learner_started_again_never_reuses_a_part_a_reader_holds(tmp_path):
    writer, reader = VersionFile(tmp_path, "v"), VersionReader(tmp_path, "v")
    writer.write({"w": window_of([1.0])})
    assert reader.latest()["w"].values() == [1.0]
    writer.close()
    again = VersionFile(tmp_path, "v")  # counts its parts from 1 again
    again.write({"w": window_of([2.0])})
    assert reader.latest()["w"].values() == [2.0]


def test_readers_never_see_a_torn_version_of_shared_parts(tmp_path):
    writer, reader = VersionFile(tmp_path, "v"), VersionReader(tmp_path, "v")
    fixed = window_of([0.5] * 40)
    writer.write({"fixed": fixed, "moving": [window_of([0.0] * 40) for _ in range(8)]})
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            moving = [window_of([float(i)] * 40) for _ in range(8)]
            writer.write({"fixed": fixed, "moving": moving})

    thread = threading.Thread(target=write)
    thread.start()
    seen = set()
    try:
        for _ in range(300):
            version = reader.latest()
            values = {v for window in version["moving"] for v in window.values()}
            assert len(values) == 1  # whole: one write's windows throughout
            assert version["fixed"].values() == [0.5] * 40
            seen |= values
            time.sleep(0.0005)  # let the writer in
    finally:
        stop.set()
        thread.join()
    assert len(seen) > 1


def test_a_version_not_required_is_loaded_in_the_background_and_a_required_one_at_once(tmp_path):
    writer, reader = VersionFile(tmp_path, "v"), VersionReader(tmp_path, "v")
    try:
        writer.write({"n": 1})
        assert reader.latest() == {"n": 1}
        for n in (2, 3):  # published while learning: answers go on from the version held meanwhile
            writer.write({"n": n}, required=False)
        assert reader.latest() in ({"n": 1}, {"n": 3})
        deadline = time.monotonic() + 10
        while reader.generation != 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert reader.latest() == {"n": 3} and reader.loads_in_background == 1  # generation 2 skipped
        writer.write({"n": 4}, required=False)
        writer.require()  # what the learner does before it acknowledges a write: seen at once
        assert reader.latest() == {"n": 4}
        writer.write({"n": 5})
        assert reader.latest() == {"n": 5}
    finally:
        reader.close()
