"""The sampler base: a daemon thread reading signals on a drift-free monotonic schedule.

Tick ``k`` is due at ``t_first + k / hz`` on the ``time.monotonic`` clock, so
sleep jitter never accumulates; ticks missed while a read overran are skipped,
not bunched. Each read becomes one interval sample of a :class:`SignalBuffer`,
covering the time since the previous read, and the window averages come from
there. Subclasses implement :meth:`Sampler.read` (and may override
:meth:`Sampler.window` to select one device's signals).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping

from collectors.buffer import SignalBuffer

DEFAULT_HZ = 50.0


class Sampler:
    """Base class: periodic reads into a bounded buffer, averaged over any window.

    Parameters
    ----------
    hz
        Reads per second.
    seconds
        History kept in the ring buffer, in seconds at ``hz``.
    name
        Thread name.
    """

    def __init__(self, hz: float = DEFAULT_HZ, *, seconds: float = 60.0, name: str = "sampler") -> None:
        if not (math.isfinite(hz) and hz > 0):
            raise ValueError(f"hz must be a positive number, got {hz!r}")
        if seconds <= 0:
            raise ValueError(f"seconds must be > 0, got {seconds!r}")
        self.hz = float(hz)
        self.period_s = 1.0 / self.hz
        self.buffer = SignalBuffer(max(2, int(math.ceil(seconds * self.hz))))
        self.name = name
        self.reads = 0
        self.skipped_ticks = 0
        self.errors = 0
        self.cpu_time_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_t: float | None = None

    # ------------------------------------------------------------ subclass API

    def read(self) -> Mapping[str, float]:
        """One reading of the signals over the interval since the previous read."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what :meth:`read` holds (called when the thread stops)."""

    def window(self, device: str, t0: float, t1: float) -> dict[str, float]:
        """Signals relevant to ``device`` averaged over ``[t0, t1]`` (machine-wide by default)."""
        return self.buffer.average(t0, t1)

    # --------------------------------------------------------------- running

    def sample_once(self) -> None:
        """Read now and store the interval since the previous read (the first read only sets the origin)."""
        try:
            values = self.read()
        except Exception:  # a sampler must never take the collection down
            self.errors += 1
            return
        now = time.monotonic()
        if self._last_t is not None:
            self.buffer.add(self._last_t, now, values)
        self._last_t = now
        self.reads += 1

    def start(self) -> Sampler:
        """Start the daemon thread (idempotent); returns ``self``."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        cpu0 = time.thread_time()
        first = time.monotonic()
        tick = 0
        try:
            while not self._stop.is_set():
                self.sample_once()
                self.cpu_time_s = time.thread_time() - cpu0
                tick += 1
                now = time.monotonic()
                due = first + tick * self.period_s
                if now > due:  # overran: skip the missed ticks, keep the grid
                    missed = int((now - due) / self.period_s) + 1
                    self.skipped_ticks += missed
                    tick += missed
                    due = first + tick * self.period_s
                self._stop.wait(due - now)
        finally:
            self.close()
            self.cpu_time_s = time.thread_time() - cpu0
