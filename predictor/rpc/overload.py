"""Overload shedding by time: an answer that would wait longer than a bound for a thread is refused at once.

A server offered more calls than it can answer queues them; bounded by length
(``maximum_concurrent_rpcs``), the queue still holds calls that wait far longer than their answer is
worth, and a client's deadline ends them ``CANCELLED`` after it has waited. Bounded by time, the
excess is refused ``RESOURCE_EXHAUSTED`` as it arrives, while the calls taken wait at most about the
bound:

* The answers (the prediction service's unary ``read`` methods: PredictLatency, RankPlacements, ...)
  run on a few threads of their own, a :class:`QueueClock` (:data:`DEFAULT_ANSWER_THREADS`; the
  streams, writes and state operations on the server's other pool, so that a long call never holds
  an answer's thread). Few threads, because every thread of the process shares one GIL with gRPC's
  polling thread, which takes the calls in: with many busy threads it falls behind, and calls queue
  *before* any thread of ours can see them; with few, the queue forms in the pool, where it is measured.
* :class:`QueueClock` counts the calls waiting for a thread and measures, while calls wait, the
  interval between two calls finishing (an exponentially weighted mean); the wait of a call submitted
  now is the calls ahead of it times that interval, and at least as long as the queue has gone without
  a completion (none when a thread is free): :meth:`QueueClock.expected_wait_s`.
* :class:`~predictor.rpc.thin.ThinInterceptor` asks it, as each answer arrives (on gRPC's polling
  thread, before the call is queued): beyond the bound, the call's handler is a refusal that gRPC's
  polling thread runs itself (:class:`AtOnce`): the status is sent at once, the request never read.

Health checks, reflection, writes and state operations are never refused. ``predictor serve
--shed-wait-ms`` sets the bound and ``--answer-threads`` the answers' threads (each answering worker of
``--workers N`` bounds its own queue).

Examples
--------
>>> pool = QueueClock(max_workers=2)
>>> pool.expected_wait_s()  # a thread is free
0.0
>>> pool.submit(sum, [1, 2]).result()
3
>>> pool.shutdown()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

DEFAULT_SHED_WAIT_MS = 5.0
"""``predictor serve``'s bound on the expected wait of a call for a thread (``--shed-wait-ms``)."""
DEFAULT_ANSWER_THREADS = 2
"""``predictor serve``'s threads computing answers (``--answer-threads``), apart from the server's other threads."""
INITIAL_INTERVAL_S = 0.001
"""The service interval assumed before any is measured."""
ALPHA = 0.05
"""Weight of the newest interval in the mean (about the last 20 completions)."""
MAX_INTERVAL_S = 0.05
"""Longest interval taken in (a pause of the whole process, a collection, is not the pool's pace)."""


def check_answer_threads(threads: int) -> None:
    """``ValueError`` naming ``--answer-threads`` unless ``threads`` is a whole number >= 1."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"--answer-threads must be a whole number >= 1, got {threads!r}")


class QueueClock(futures.ThreadPoolExecutor):
    """A thread pool that knows how long a call submitted now would wait for a thread.

    Parameters
    ----------
    max_workers
        Threads.
    **kwargs
        The rest of :class:`concurrent.futures.ThreadPoolExecutor`'s arguments.
    """

    def __init__(self, max_workers: int, **kwargs: Any):
        super().__init__(max_workers=max_workers, **kwargs)
        self.threads = max_workers
        self.interval_s = INITIAL_INTERVAL_S
        self._waiting = 0  # submitted, not started
        self._running = 0
        self._last_completion: float | None = None  # the last completion that left calls waiting
        self._stalled_since = 0.0  # the last completion, or the first call to wait after none waited
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future:
        """Queue ``fn(*args, **kwargs)`` for a thread (counted as waiting until it starts)."""
        with self._lock:
            if self._waiting == 0:
                self._stalled_since = time.perf_counter()
            self._waiting += 1
        return super().submit(self._run, fn, args, kwargs)

    def _run(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        with self._lock:
            self._waiting -= 1
            self._running += 1
        try:
            return fn(*args, **kwargs)
        finally:
            now = time.perf_counter()
            with self._lock:
                self._running -= 1
                if self._waiting > 0:  # calls wait: this thread takes the next at once
                    if self._last_completion is not None:
                        gap = min(now - self._last_completion, MAX_INTERVAL_S)
                        self.interval_s += ALPHA * (gap - self.interval_s)
                    self._last_completion = self._stalled_since = now
                else:
                    self._last_completion = None

    @property
    def waiting(self) -> int:
        """Calls queued for a thread now."""
        return self._waiting

    def expected_wait_s(self) -> float:
        """How long a call submitted now would wait for a thread, seconds: none while a thread is free
        and nothing waits; else one service interval for itself and each call ahead of it, and at least
        as long as the calls waiting have gone without a completion (threads held by long calls: the
        estimate grows while they hold them)."""
        waiting = self._waiting
        if waiting == 0:
            return 0.0 if self._running < self.threads else self.interval_s
        return max((waiting + 1) * self.interval_s, time.perf_counter() - self._stalled_since)


class AtOnce(futures.ThreadPoolExecutor):
    """An executor that runs what it is given at once, on the submitting thread, and hands back its
    finished future: the refusals' ``experimental_thread_pool``, so that gRPC's polling thread refuses a
    call itself (sends its status, nothing waited for) rather than queueing it for another thread.

    Only for work that never waits for the polling thread (a refusal, which reads no message).
    """

    def __init__(self) -> None:
        super().__init__(max_workers=1)  # never started: nothing is queued

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future:
        """Run ``fn(*args, **kwargs)`` now; its outcome is the returned (done) future's."""
        future: futures.Future = futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # noqa: BLE001 - handed back in the future, as a pool's thread would
            future.set_exception(error)
        return future


class Shedder:
    """Refuses the answers that would wait longer than ``bound_ms`` in ``pool`` (see the module).

    Parameters
    ----------
    pool
        The answers' thread pool.
    bound_ms
        The longest expected wait a call is taken with, ms (> 0).
    """

    def __init__(self, pool: QueueClock, bound_ms: float):
        if not bound_ms > 0:
            raise ValueError(f"the shedding bound must be > 0 ms, got {bound_ms!r}")
        self.pool = pool
        self.bound_s = bound_ms / 1000.0
        self.refusals = AtOnce()

    def overloaded(self) -> float | None:
        """The expected wait of a call arriving now, seconds, when beyond the bound; else ``None``."""
        wait = self.pool.expected_wait_s()
        return wait if wait > self.bound_s else None

    def message(self, method: str) -> str:
        """The refusal's details."""
        return (f"overloaded: {method} would wait more than {self.bound_s * 1e3:g} ms for a thread; "
                "retry later or elsewhere")

    def close(self) -> None:
        """Stop the answers' threads once their calls are done (the server has stopped)."""
        self.pool.shutdown(wait=False)
