"""A bounded ring buffer of interval samples with time-weighted window averages.

Each sample describes an interval ``(t_start, t_end]`` of the ``time.monotonic``
clock and holds the signals measured over it (a utilisation over the interval,
a gauge read at its end). A signal is piecewise constant over the intervals, so
its average over a window ``[t0, t1]`` weights each sample by how much of the
window its interval covers. A signal absent from a sample (a field the device
does not support) is left out of that sample's weight, never counted as 0.

Examples
--------
>>> buf = SignalBuffer(capacity=8)
>>> buf.add(0.0, 1.0, {"util": 0.2})
>>> buf.add(1.0, 2.0, {"util": 0.6, "power": 100.0})
>>> {k: round(v, 4) for k, v in buf.average(0.5, 2.0).items()}
{'util': 0.4667, 'power': 100.0}
>>> buf.average(1.5, 1.5)
{'util': 0.6, 'power': 100.0}
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Mapping


class SignalBuffer:
    """Thread-safe ring buffer of ``(t_start, t_end, signals)`` samples.

    Parameters
    ----------
    capacity
        Samples kept; the oldest are dropped first.
    """

    def __init__(self, capacity: int = 3000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._samples: deque[tuple[float, float, dict[str, float]]] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, t_start: float, t_end: float, signals: Mapping[str, float]) -> None:
        """Append the sample of interval ``(t_start, t_end]``; non-finite values are dropped."""
        if t_end < t_start:
            raise ValueError(f"interval ends before it starts: ({t_start}, {t_end}]")
        clean = {k: float(v) for k, v in signals.items() if math.isfinite(v)}
        with self._lock:
            self._samples.append((t_start, t_end, clean))

    def latest_time(self) -> float | None:
        """End of the newest sample, or ``None`` when empty."""
        with self._lock:
            return self._samples[-1][1] if self._samples else None

    def samples(self) -> list[tuple[float, float, dict[str, float]]]:
        """A copy of the buffered samples, oldest first."""
        with self._lock:
            return list(self._samples)

    def average(self, t0: float, t1: float) -> dict[str, float]:
        """Time-weighted average of every signal over ``[t0, t1]``.

        A zero-length window takes the sample whose interval contains ``t0``.
        Signals with no sample overlapping the window are absent from the result.
        """
        if t1 < t0:
            raise ValueError(f"window ends before it starts: [{t0}, {t1}]")
        sums: dict[str, float] = {}
        weights: dict[str, float] = {}
        point: dict[str, float] | None = None
        with self._lock:
            for t_start, t_end, signals in reversed(self._samples):
                if t_end < t0:
                    break
                if t_start <= t0 <= t_end and point is None:
                    point = signals
                width = min(t1, t_end) - max(t0, t_start)
                if width <= 0.0:
                    continue
                for key, value in signals.items():
                    sums[key] = sums.get(key, 0.0) + value * width
                    weights[key] = weights.get(key, 0.0) + width
        if not sums:
            return dict(point) if point is not None and t1 == t0 else {}
        return {key: total / weights[key] for key, total in sums.items()}
