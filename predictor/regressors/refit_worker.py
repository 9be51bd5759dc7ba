"""Tree refits in a separate, persistent worker process, so that they never hold the service's GIL.

A refit of the ``tree`` learner (LightGBM training and the export of its trees) run in a
thread of the serving process competes with the answers for the interpreter: LightGBM
releases the GIL while it trains, but building its dataset and exporting the trees do not,
and on a small machine the two compete for the cores too. :func:`submit` runs a function in
one long-lived worker process instead (a :class:`~concurrent.futures.ProcessPoolExecutor` of
one worker, started through a ``forkserver``: the serving process has threads, which a plain
``fork`` would copy in an unknown state). The worker limits BLAS to one thread and runs at a
lower scheduling priority (``nice`` :data:`NICENESS`), so answers keep their cores.

The worker is shared by every learner of the process (refits queue up behind each other). If
it dies, the pool is broken: :func:`restart` replaces it, and the caller redoes the refit
itself (:class:`~predictor.regressors.boosted.BoostedResidual` does, so a dying worker costs
one slow swap, never a wrong or a missing model). A worker that dies while it sends its result
would leave the pool waiting for the rest of the message forever (this process holds a write end
of the result pipe too): :func:`result` waits for a refit, and where no worker of its pool is
alive it closes that end, so the pool sees the pipe end and breaks as for any other death.

As with any ``spawn`` or ``forkserver`` worker, the worker imports the main module of the
program (as ``__mp_main__``): a script that trains a ``tree`` learner must keep its top-level
work under ``if __name__ == "__main__":`` (the project's entry points, run with ``-m``, do).

Examples
--------
>>> import operator
>>> submit(operator.add, 2, 3).result()
5
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor

from predictor.runtime.threads import pin_blas_threads

NICENESS = 5
"""How much lower the worker's scheduling priority is than the serving process's."""

POLL_S = 0.5
"""How often :func:`result` looks whether the worker it waits for is still alive."""

_LOCK = threading.Lock()
_EXECUTOR: ProcessPoolExecutor | None = None
_RAN_BY: weakref.WeakKeyDictionary[Future, ProcessPoolExecutor] = weakref.WeakKeyDictionary()


def _initialize() -> None:
    """In the worker: one BLAS thread, a lower priority."""

    pin_blas_threads(1)
    try:
        os.nice(NICENESS)
    except OSError:  # pragma: no cover - not allowed here: run at the same priority
        pass


def _executor() -> ProcessPoolExecutor:
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("forkserver"),
                                            initializer=_initialize)
        return _EXECUTOR


def submit(function: Callable, /, *args, **kwargs) -> Future:
    """Run ``function(*args, **kwargs)`` in the worker process (started on first use).

    ``function``, its arguments and its result must pickle. A worker that died makes the
    future raise :class:`~concurrent.futures.process.BrokenProcessPool`; call :func:`restart`.
    Wait for it with :func:`result`.
    """
    executor = _executor()
    future = executor.submit(function, *args, **kwargs)
    _RAN_BY[future] = executor
    return future


def result(future: Future, poll_s: float = POLL_S) -> object:
    """``future.result()`` of a :func:`submit`, also where its worker died while sending the result:
    once no worker of the pool is alive and the future is still pending, this process's write end
    of the result pipe is closed, the pool reads the pipe's end and breaks, and the future raises
    :class:`~concurrent.futures.process.BrokenProcessPool` (if even that does not end it, this raises
    :class:`~concurrent.futures.BrokenExecutor` itself)."""
    executor = _RAN_BY.get(future)
    closed = 0
    while True:
        try:
            return future.result(timeout=poll_s)
        except TimeoutError:
            if executor is None or _live_pids(executor):
                continue
            if closed >= 4:
                raise BrokenExecutor("the refit worker died and its pool did not notice") from None
            if not closed:
                _close_result_writer(executor)
            closed += 1


def _live_pids(executor: ProcessPoolExecutor | None) -> list[int]:
    """The process ids of ``executor``'s live workers."""
    processes = getattr(executor, "_processes", None) or {}
    return [pid for pid, process in dict(processes).items() if process.is_alive()]


def _close_result_writer(executor: ProcessPoolExecutor) -> None:
    """Close this process's write end of ``executor``'s result pipe (CPython's ``_result_queue``): with
    every worker dead no writer is left, and a read waiting for the rest of a message ends."""
    writer = getattr(getattr(executor, "_result_queue", None), "_writer", None)
    if writer is not None:
        try:
            writer.close()
        except OSError:  # pragma: no cover - already closed
            pass


def restart() -> None:
    """Drop the worker pool if it is broken (its worker died); the next :func:`submit` starts another.

    A healthy pool is kept: several learners may see the same death, and the first one's
    restart must not be undone by the others'.
    """
    global _EXECUTOR
    with _LOCK:
        executor = _EXECUTOR
        if executor is None or not getattr(executor, "_broken", True):
            return
        _EXECUTOR = None
    executor.shutdown(wait=False, cancel_futures=True)


def worker_pids() -> list[int]:
    """The process ids of the live worker (empty before the first :func:`submit`)."""
    with _LOCK:
        executor = _EXECUTOR
    return _live_pids(executor)
