"""Answers given by answering workers, sent in batches to their shard's learner for admission linking.

In one process, an answer naming a ``batch_id`` is remembered
(:class:`~predictor.service.admission.AnswerMemory`) until the observation of that batch arrives,
and then calibrated on (``answers_linked``). In ``predictor serve --workers N`` the answers are
given by the workers and the observations learned by the learners: a worker's memory is a
:class:`ForwardedMemory`, which keeps each answer for the learner of the RPC's shard and sends
what it holds every ``every_s`` seconds, in one message per shard, on a queue (a
:class:`multiprocessing.Queue` per shard, made by the supervisor); the learner's
:class:`AnswerReceiver` puts them into its own memory. Remembering costs an answer a list append;
an answer reaches the learner some milliseconds later (an observation that arrives before it is
not linked). ``Answered.at`` is ``time.monotonic()``, one clock for all processes of a machine,
so the learner's expiry (``--answer-ttl-s``) counts from the answer.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from predictor.service.admission import Answered, AnswerMemory
from predictor.service.replicas.shards import SHARD

Forwarded = list[tuple[str, str, Answered]]
"""One message on a shard's queue: ``(batch id, device, answer)`` rows."""


class ForwardedMemory(AnswerMemory):
    """A worker's answer memory: remembered answers go to their shard's learner, batched.

    Parameters
    ----------
    outboxes
        One queue per shard (``put`` of a :data:`Forwarded` list).
    capacity
        Answers held per shard between two sends at most (the oldest are dropped, counted in
        ``expired``).
    every_s
        Seconds between two sends.
    """

    def __init__(self, outboxes: Sequence[Any], capacity: int = 100_000, every_s: float = 0.005):
        super().__init__(capacity)
        self.outboxes = list(outboxes)
        self.every_s = every_s
        self.sent = 0
        self._pending: list[Forwarded] = [[] for _ in self.outboxes]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        return sum(len(p) for p in self._pending)

    def remember(self, batch_id: str, device: str, answered: Answered) -> None:
        """Keep ``answered`` for the learner of the RPC's shard (sent with the next batch)."""
        with self._lock:
            pending = self._pending[SHARD.get()]
            pending.append((batch_id, device, answered))
            if len(pending) > self.capacity:
                del pending[0]
                self.expired += 1

    def take(self, batch_id: str, device: str) -> Answered | None:
        """Nothing: a worker learns no observation (its learner links them)."""
        return None

    def flush(self) -> None:
        """Send what is held now, one list per shard."""
        with self._lock:
            pending, self._pending = self._pending, [[] for _ in self.outboxes]
        for outbox, rows in zip(self.outboxes, pending, strict=True):
            if rows:
                outbox.put(rows)
                self.sent += len(rows)

    def start(self) -> None:
        """Send every ``every_s`` seconds in a background thread."""
        self._thread = threading.Thread(target=self._loop, name="answer-forwarding", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread after a last send."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.flush()


class AnswerReceiver:
    """A learner's side: the answers its workers forwarded, put into its current answer memory.

    Parameters
    ----------
    inbox
        The shard's queue (``get`` of a :data:`Forwarded` list).
    memory
        Returns the memory to put them in (read for each batch: a restored snapshot replaces it).
    """

    def __init__(self, inbox: Any, memory: Callable[[], AnswerMemory]):
        self.inbox = inbox
        self.memory = memory
        self.received = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="answers-received", daemon=True)

    def start(self) -> None:
        """Receive in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop receiving (within a fraction of a second)."""
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(queue.Empty):
                rows: Forwarded = self.inbox.get(timeout=0.2)
                memory = self.memory()
                for batch_id, device, answered in rows:
                    memory.remember(batch_id, device, answered)
                self.received += len(rows)
