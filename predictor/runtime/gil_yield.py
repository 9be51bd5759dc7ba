"""The learner lets answers have the GIL at least every so often: points where it pauses.

CPython hands the GIL to a waiting thread when the holder has run a whole switch interval
(:mod:`predictor.runtime.gil`) *with no release in between*: the waiter's wait starts over each time the
holder drops the GIL and takes it back. NumPy drops and retakes it inside most array operations
(fancy indexing, ``bincount``, copies, sorts, whatever their size), and the learner's block
makes them every few tens of microseconds, so an answer waiting for the GIL is not handed it
after an interval: it waits until it happens to win the race at one of those brief releases, or
until the learner stops. Measured in one process learning at full speed (a probe thread that
sleeps 0.2 ms and needs the GIL to wake): late by more than 1.5 ms 370 times in 8,000, two thirds
of them in the admission-time replay's predictions and the rest in the calibrator's block, the
numpy-heavy stages, against 4 in the compiled RLS kernel, which releases the GIL for
milliseconds at a time. A Python loop that makes one such release every 144 µs kept a probe
thread waiting 0.7 s at the median, and 1.0 ms once it paused every 1 ms
(``experiments/gil_starvation.py``). In a one-process server under full-speed ingest
(``experiments/bench_learner_yield.py``, 3 rounds of 8 s), pausing every 0.5 ms took a
sequential client's PredictLatency p99 from 8.4-8.5 to 4.5-5.1 ms (p50 1.94-1.98 to 1.64-1.71)
and an open-loop one's at 300 calls/s from 9.4-11.6 to 5.5-6.3 ms, for 4-10% of the learning
rate (every 1 ms: 4.3-4.7 and 6.1-15.4 ms, 3-6%).

:func:`point` is called at places in those stages between two small pieces of work. When the
process is set to yield (:func:`configure`, ``predictor serve --learner-yield-ms``), the service
was asked something within :data:`ASKED_WITHIN_S` (:func:`asked`, called by the RPC layer as
each unary call begins and ends) and the period has passed since the last pause, it sleeps
:data:`PAUSE_S`: long enough for a waiting thread to wake and take the GIL, which it then keeps
until it drops it. A server that only learns never pauses: each pause costs the learner ~0.13 ms
(the sleep and the timer's slack), 10-12% of its rate at 0.5 ms when nothing waits. Off (the
default in every process but a one-process server), a point costs a global read and a
comparison.

Examples
--------
>>> with yielding(1.0):
...     point()  # nothing asked: no pause
...     asked()
...     point()  # asked: the first point pauses, a whole period has passed since none
...     paused()
1
>>> paused()  # off again: the count is the setting's
0
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

PAUSE_S = 50e-6
"""How long a pause sleeps (a thread waiting for the GIL wakes in ~10-50 µs on this machine)."""

ASKED_WITHIN_S = 1.0
"""How recently the service must have been asked something for the learner to pause: an answer's
first waits for the GIL (gRPC taking the call in) come before the RPC layer sees it."""

DEFAULT_LEARNER_YIELD_MS = 0.5
"""``predictor serve``'s period in a one-process server."""

_period_ns = 0  # 0: off
_next_ns = 0
_paused = 0
_asked_ns = -(1 << 62)  # when an answer last began or ended (never)
_ASKED_WITHIN_NS = int(ASKED_WITHIN_S * 1e9)


def check_period_ms(value: float) -> None:
    """``ValueError`` naming ``--learner-yield-ms`` unless ``0 <= value <= 1000``."""
    if not 0 <= value <= 1000:
        raise ValueError(f"--learner-yield-ms must be 0 (never pause) or up to 1000, got {value!r}")


def configure(period_ms: float) -> float:
    """Pause at a :func:`point` once ``period_ms`` has passed since the last pause (0: never), for
    the whole process; returns the period before (ms)."""
    global _period_ns, _next_ns, _paused
    check_period_ms(period_ms)
    previous = _period_ns / 1e6
    _period_ns, _next_ns, _paused = int(period_ms * 1e6), 0, 0
    return previous


@contextlib.contextmanager
def yielding(period_ms: float) -> Iterator[None]:
    """Run the block with :func:`configure` ``(period_ms)``, then restore the setting before."""
    previous = configure(period_ms)
    try:
        yield
    finally:
        configure(previous)


def asked() -> None:
    """Note that an answer begins or ends now (the RPC layer calls this around each unary call)."""
    global _asked_ns
    _asked_ns = time.perf_counter_ns()


def point() -> None:
    """A place where the learner may pause so that a thread waiting for the GIL takes it."""
    global _next_ns, _paused
    if _period_ns:
        now = time.perf_counter_ns()
        if now >= _next_ns and now - _asked_ns < _ASKED_WITHIN_NS:
            time.sleep(PAUSE_S)
            _paused += 1
            _next_ns = time.perf_counter_ns() + _period_ns


def paused() -> int:
    """How many pauses the current setting has made."""
    return _paused
