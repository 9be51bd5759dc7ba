"""A learner's published versions written for the answering processes of its machine.

The learner process of a shard (``predictor serve --workers N``) learns as the single process
does and publishes :class:`~predictor.service.published.ModelVersion` objects in process
(:mod:`predictor.service.published`). :class:`FilePublisher` writes them to a
:class:`~predictor.service.replicas.version_file.VersionFile` for the answering workers:

* a background thread writes the latest in-process version whenever its generation moved, at
  most once per ``every_s`` (and never more often than :data:`~predictor.service.published.COPY_SHARE`
  times the time the last write took);
  (*not required*: a worker answers from the version it holds while it loads this one);
* :meth:`FilePublisher.flush` writes it at once, with the books (the live view, queues, memory,
  transfers and the filling estimates) when asked, and marks it *required*: the learner's RPC
  handlers flush before they answer, so that what an acknowledgement covers is in every worker's
  answers after it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from predictor.service.published import COPY_SHARE, ModelVersion
from predictor.service.replicas.shards import ShardMap
from predictor.service.replicas.version_file import VersionFile
from predictor.service.replicas.version_pickle import dumps
from predictor.service.state import ServiceState

log = logging.getLogger("predictor.service")


@dataclass(frozen=True)
class Books:
    """What answers read besides the model: copies of the learner's live books."""

    live: Any
    queues: Any
    memory: Any
    transfers: Any
    filling: Any


@contextlib.contextmanager
def books_held(state: ServiceState) -> Iterator[Books]:
    """The learner's books, held under the state's lock and each book's own while the block runs:
    copy them within it (a pickle of them is a consistent copy; the copies get fresh locks)."""
    with contextlib.ExitStack() as held:
        held.enter_context(state.lock)
        books = Books(state.live, state.queues, state.memory, state.transfers, state.filling)
        for book in (books.live, books.queues, books.memory, books.transfers, books.filling):
            held.enter_context(book._lock)
        yield books


class FilePublisher:
    """Writes a learner's versions (model and books) to its shard's version files.

    Parameters
    ----------
    state
        The learner's state.
    folder
        Where the version files are (shared with the workers).
    shard
        The learner's shard.
    shards
        The names of the files.
    every_s
        The most often the background thread writes a model version.
    """

    def __init__(self, state: ServiceState, folder: str | Path, shard: int, shards: ShardMap, every_s: float = 0.005):
        self.state = state
        self.models = VersionFile(folder, shards.model_name(shard))
        self.books = VersionFile(folder, shards.books_name(shard))
        self.every_s = every_s
        self.write_s = 0.0
        self.writes = 0
        self._written = -1  # model generation last written
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Write a first version (model and books) and start the background thread."""
        self.flush(books=True)
        self._thread = threading.Thread(target=self._loop, name="version-files", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the background thread, and release the files' counters."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.models.close()
        self.books.close()

    def flush(self, books: bool = False) -> None:
        """Publish what the learner holds now (a fresh in-process version if stale), and ``books`` too."""
        with self._lock:
            self._write_model(self.state.publish(), required=True)
            if books:
                self.books.write_bytes(self._books_payload())

    def _write_model(self, version: ModelVersion, required: bool) -> None:
        if version.generation == self._written:
            if required:
                self.models.require()
            return
        start = time.perf_counter()
        self.models.write(version, required)
        self.write_s = time.perf_counter() - start
        self.writes += 1
        self._written = version.generation

    def _books_payload(self) -> bytes:
        with books_held(self.state) as books:
            return dumps(books)

    def _loop(self) -> None:
        while not self._stop.wait(max(self.every_s, COPY_SHARE * self.write_s)):
            version = self.state.version  # immutable: written without the state's lock
            if version.generation == self._written:
                continue
            try:
                with self._lock:
                    self._write_model(version, required=False)
            except OSError as exc:
                log.error("cannot write the published version: %s", exc)
