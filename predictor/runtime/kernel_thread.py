"""A thread of its own for a compiled call that releases the GIL, run while its caller goes on.

The blockwise replay (:mod:`predictor.prequential.blocks`) learns each block of records in one compiled
call (numba, ``nogil=True``) and, meanwhile, could already decode the next block and compute its
features in Python. :class:`KernelThread` runs the call on a second thread so the two overlap.

Handing a call to another Python thread is the delicate part: that thread needs the GIL to begin
(to unbox the arguments), and a caller that goes on in Python keeps the GIL. CPython asks a
running thread to drop the GIL only after the waiting one has waited a whole switch interval
(5 ms by default) *with no release in between*, and a caller that reads a gzip file releases and
retakes it at every chunk it inflates, which restarts that wait each time: a worker left to itself
would begin only when the caller itself blocked, one block later. So :meth:`KernelThread.start`
returns only once the worker has begun: the caller blocks on a lock, releasing the GIL, which the
worker takes, releases the lock, and holds until the compiled code drops it. The result is collected by :meth:`KernelThread.wait`.

Examples
--------
>>> with KernelThread() as worker:
...     worker.start(sum, [1, 2, 3])
...     worker.wait()
6
"""

from __future__ import annotations

import _thread
import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = object()


class KernelThread:
    """One worker thread that runs one call at a time, begun before :meth:`start` returns."""

    def __init__(self, name: str = "kernel") -> None:
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._begun = _thread.allocate_lock()
        self._done = _thread.allocate_lock()
        self._begun.acquire()
        self._done.acquire()
        self._outcome: tuple[bool, Any] | None = None
        self._busy = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            if call is _STOP:
                return
            function, args = call
            self._begun.release()  # the caller waits on this with the GIL released: this thread holds it
            try:
                self._outcome = (True, function(*args))
            except BaseException as exc:  # handed to the caller by wait()
                self._outcome = (False, exc)
            self._done.release()

    def start(self, function: Callable[..., Any], *args: Any) -> None:
        """Run ``function(*args)`` on the worker; returns once it has begun.

        Raises
        ------
        RuntimeError
            When the previous call's result has not been collected by :meth:`wait`, or after
            :meth:`close`.
        """
        if self._busy:
            raise RuntimeError("the previous call's result was not collected (wait())")
        if not self._thread.is_alive():
            raise RuntimeError("the kernel thread is closed")
        self._busy = True
        self._calls.put((function, args))
        self._begun.acquire()

    @property
    def busy(self) -> bool:
        """Whether a call was started and its result not yet collected."""
        return self._busy

    def wait(self) -> Any:
        """The started call's result (its exception raised here); ``RuntimeError`` when none was started."""
        if not self._busy:
            raise RuntimeError("no call was started")
        self._done.acquire()
        self._busy = False
        ok, value = self._outcome  # type: ignore[misc]
        self._outcome = None
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Collect any call still running (its exception dropped) and end the thread."""
        if self._busy:
            try:
                self.wait()
            except BaseException:  # noqa: S110 - closing after a failure elsewhere: that one is reported
                pass
        if self._thread.is_alive():
            self._calls.put(_STOP)
            self._thread.join()

    def __enter__(self) -> KernelThread:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
