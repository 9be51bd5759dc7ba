"""Batch timers: one interface, a CPU clock or CUDA events, chosen by device.

A timer opens a :class:`Span` when a batch starts and closes it when the batch
has been issued. On the CPU the span is complete at once
(``time.perf_counter_ns``). On a GPU the span holds two CUDA events recorded on
the current stream, so the hot path never synchronises; :meth:`Span.ready`
polls the end event and :meth:`Span.elapsed_ms` resolves the GPU time later,
off the hot path.

Every span also carries ``start_s``, a ``time.monotonic`` timestamp: that clock
is ``CLOCK_MONOTONIC`` on Linux, shared by all processes of the machine, so
spans measured in different worker processes can be compared.

Examples
--------
>>> timer = make_timer("cpu")
>>> span = timer.begin()
>>> timer.end(span)
>>> span.ready(), span.elapsed_ms() >= 0.0, span.end_s() >= span.start_s
(True, True, True)
"""

from __future__ import annotations

import time
from typing import Any, Protocol


class Span(Protocol):
    """The timing of one batch."""

    start_s: float

    def ready(self) -> bool:
        """Whether :meth:`elapsed_ms` can answer without waiting."""

    def elapsed_ms(self) -> float:
        """Execution time in milliseconds (may wait for the device)."""

    def end_s(self) -> float:
        """End of the batch on the ``time.monotonic`` clock."""


class Timer(Protocol):
    """Opens and closes :class:`Span` objects."""

    kind: str

    def begin(self) -> Span:
        """Start timing a batch."""

    def end(self, span: Span) -> None:
        """Stop timing ``span`` (never waits for the device)."""


class CpuSpan:
    """A span timed with ``perf_counter_ns``."""

    __slots__ = ("start_s", "_t0", "_t1")

    def __init__(self) -> None:
        self.start_s = time.monotonic()
        self._t0 = time.perf_counter_ns()
        self._t1: int | None = None

    def ready(self) -> bool:
        """Whether the span has ended."""
        return self._t1 is not None

    def elapsed_ms(self) -> float:
        """Wall time between begin and end in milliseconds; ``RuntimeError`` before the end."""
        if self._t1 is None:
            raise RuntimeError("span not ended")
        return (self._t1 - self._t0) / 1e6

    def end_s(self) -> float:
        """End of the batch on the ``time.monotonic`` clock."""
        return self.start_s + self.elapsed_ms() / 1e3


class CpuTimer:
    """Host clock timer: ``time.perf_counter_ns`` around the batch."""

    kind = "cpu"

    def begin(self) -> CpuSpan:
        """A span started now."""
        return CpuSpan()

    def end(self, span: CpuSpan) -> None:  # type: ignore[override]
        """Stop ``span`` now."""
        span._t1 = time.perf_counter_ns()


class CudaSpan:
    """A span timed with two CUDA events; resolved lazily."""

    __slots__ = ("start_s", "_start", "_end", "_ms")

    def __init__(self, start_event: Any, end_event: Any) -> None:
        self.start_s = time.monotonic()
        self._start = start_event
        self._end = end_event
        self._ms: float | None = None

    def ready(self) -> bool:
        """Whether the end event has completed on the device (a non-blocking query)."""
        return self._ms is not None or bool(self._end.query())

    def elapsed_ms(self) -> float:
        """GPU time between the two events in milliseconds; waits for the end event the first time."""
        if self._ms is None:
            self._end.synchronize()
            self._ms = float(self._start.elapsed_time(self._end))
        return self._ms

    def end_s(self) -> float:
        """Host start plus GPU time: the start is when the work was issued, an approximation."""
        return self.start_s + self.elapsed_ms() / 1e3


class CudaEventTimer:
    """CUDA-event timer: ``torch.cuda.Event(enable_timing=True)`` recorded on the current stream.

    Parameters
    ----------
    device
        The CUDA device, e.g. ``"cuda:0"``.
    """

    kind = "cuda"

    def __init__(self, device: str = "cuda") -> None:
        import torch  # heavy: torch only for CUDA timers (in workers)

        self._torch = torch
        self.device = torch.device(device)

    def begin(self) -> CudaSpan:
        """A span whose start event is recorded on the device's current stream."""
        cuda = self._torch.cuda
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        span = CudaSpan(start, end)
        start.record(cuda.current_stream(self.device))
        return span

    def end(self, span: CudaSpan) -> None:  # type: ignore[override]
        """Record ``span``'s end event on the current stream (does not wait)."""
        span._end.record(self._torch.cuda.current_stream(self.device))


def make_timer(device: str = "cpu") -> Timer:
    """The right timer for ``device``: CUDA events for an available CUDA device, else the CPU clock.

    Parameters
    ----------
    device
        A torch device string (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
    """
    if device.startswith("cuda"):
        import torch  # heavy: torch only for CUDA devices (in workers)

        if torch.cuda.is_available():
            return CudaEventTimer(device)
    return CpuTimer()
