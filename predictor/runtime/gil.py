"""How long a thread may hold the GIL while another waits: the service's answers against its learning.

CPython lets a thread that wants the GIL take it after the holder has run for the *switch
interval* (``sys.getswitchinterval()``, 5 ms by default). In one process the learner's thread
(a stream of observations) and the answering threads share the GIL; an answer needs it a dozen
times on its way through gRPC and the handler, and each time it may wait up to a whole interval
behind a learner that is busy in Python, or much longer where the learner drops and retakes the
GIL often, as NumPy does (the learner's pauses for answers: :mod:`predictor.runtime.gil_yield`). A
shorter interval shortens those waits, so ``predictor serve`` runs with
:data:`DEFAULT_SWITCH_INTERVAL_MS` unless told otherwise (``--switch-interval-ms``).

Examples
--------
>>> import sys
>>> before = sys.getswitchinterval()
>>> with switch_interval(0.0005):
...     sys.getswitchinterval()
0.0005
>>> sys.getswitchinterval() == before
True
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

DEFAULT_SWITCH_INTERVAL_MS = 0.5


def check_switch_interval_ms(value: float) -> None:
    """``ValueError`` naming ``--switch-interval-ms`` unless ``0 < value <= 1000``."""
    if not 0 < value <= 1000:
        raise ValueError(f"--switch-interval-ms must be in (0, 1000], got {value!r}")


@contextlib.contextmanager
def switch_interval(seconds: float) -> Iterator[None]:
    """Run the block with the interpreter's switch interval set to ``seconds``, then restore it."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)
