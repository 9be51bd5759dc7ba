"""The learner lets answers have the GIL at least every so often: points where it pauses.

CPython hands the GIL to a waiting thread when the holder has run a whole switch interval
(:mod:`predictor.runtime.gil`) *with no release in between*: the waiter's wait starts over each time the
holder drops the GIL and takes it back. NumPy drops and retakes it inside most array operations,
which the learner's numpy-heavy stages (the admission-time replay's predictions, the calibrator's
block) make every few tens of microseconds: an answer waiting for the GIL then waits until it
wins the race at one of those brief releases, or until the learner stops.

:func:`point` is called at places in those stages between two small pieces of work. When the
process is set to yield (:func:`configure`, ``predictor serve --learner-yield-ms``), the service
was asked something within :data:`ASKED_WITHIN_S` (:func:`asked`, called by the RPC layer as each
unary call begins and ends) and the period has passed since the last pause, it sleeps
:data:`PAUSE_S`, long enough for a waiting thread to take the GIL. Pauses change when the learner
works, never what it computes; a server that only learns never pauses. Off (the default in every
process but a one-process server), a point costs a global read and a comparison.

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
"""How long a pause sleeps: long enough for a thread waiting for the GIL to wake and take it."""

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
