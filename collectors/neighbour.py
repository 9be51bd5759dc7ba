"""A CPU hog of known duty: a process that keeps one core busy a set share of the time.

:class:`Neighbour` starts a separate process that spins for ``duty x period_s`` and then sleeps
for the rest of each period, so that it uses about ``duty`` of one core for as long as it runs.
It is the load a co-located job puts on a machine without telling the prediction service:
``predictor demo --neighbour 0.5`` starts one beside the workload. :meth:`Neighbour.stop` returns
the share of a core it really used (its own CPU time over its wall time).

Examples
--------
>>> with Neighbour(0.2, period_s=0.02) as hog:
...     pass
>>> 0.0 <= hog.measured_duty <= 1.0
True
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any


def _spin(duty: float, period_s: float, stop: Any, used: Any) -> None:
    """The neighbour's process: spin ``duty`` of each period, sleep the rest, until ``stop`` is set."""
    wall0, cpu0 = time.monotonic(), time.process_time()
    busy_s, idle_s = duty * period_s, (1.0 - duty) * period_s
    try:
        while not stop.is_set():
            start = time.perf_counter()
            while time.perf_counter() - start < busy_s:
                pass
            if idle_s > 0:
                stop.wait(idle_s)
    finally:
        used[0] = time.process_time() - cpu0
        used[1] = time.monotonic() - wall0


class Neighbour:
    """A process using about ``duty`` of one core (0 < duty <= 1) while it runs.

    Parameters
    ----------
    duty
        Share of each period the process spins, in (0, 1].
    period_s
        Length of one spin-and-sleep period, seconds.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, duty: float, period_s: float = 0.05) -> None:
        if not 0.0 < duty <= 1.0:
            raise ValueError(f"duty must lie in (0, 1], got {duty!r}")
        if not period_s > 0.0:
            raise ValueError(f"period_s must be > 0, got {period_s!r}")
        self.duty = duty
        self.period_s = period_s
        self.measured_duty = float("nan")
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._used = context.Array("d", 2)
        self._process = context.Process(
            target=_spin, args=(duty, period_s, self._stop, self._used), name="neighbour", daemon=True
        )

    def start(self) -> Neighbour:
        """Start the process; returns ``self``."""
        self._process.start()
        return self

    def stop(self, timeout: float = 10.0) -> float:
        """Stop the process and return the share of a core it used (``measured_duty``)."""
        if self._process.pid is None:
            return self.measured_duty
        self._stop.set()
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout)
        cpu_s, wall_s = self._used[0], self._used[1]
        self.measured_duty = cpu_s / wall_s if wall_s > 0 else float("nan")
        return self.measured_duty

    def __enter__(self) -> Neighbour:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
