"""Per-key token buckets: how many observations one client (or one source) may teach per second.

Each key (a client identity or a record's ``source``) has a bucket of
``burst`` tokens refilled at ``rate`` tokens per second; an observation takes
one token or is refused. Memory is bounded: beyond ``max_keys`` the least
recently seen key is forgotten (it comes back with a full bucket).

Examples
--------
>>> now = [0.0]
>>> limiter = RateLimiter(rate=2.0, burst=3, clock=lambda: now[0])
>>> [limiter.allow("a") for _ in range(4)]
[True, True, True, False]
>>> now[0] = 0.5                      # half a second refills one token
>>> limiter.allow("a"), limiter.allow("a"), limiter.allow("b")
(True, False, True)
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable


class RateLimiter:
    """Token buckets keyed by client or source.

    Parameters
    ----------
    rate
        Tokens added per second to each bucket (> 0).
    burst
        Capacity of a bucket (>= 1): how many observations may arrive at once.
    max_keys
        Buckets kept; the least recently used is dropped beyond it.
    clock
        Monotonic clock in seconds.
    """

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"rate must be finite and > 0, got {rate!r}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst!r}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys!r}")
        self.rate = float(rate)
        self.burst = int(burst)
        self.max_keys = max_keys
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, time)
        self._lock = threading.Lock()
        self.n_refused = 0

    def allow(self, key: str, cost: float = 1.0) -> bool:
        """Take ``cost`` tokens from ``key``'s bucket; ``False`` (nothing taken) when it has too few."""
        with self._lock:
            now = self.clock()
            tokens, then = self._buckets.pop(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + max(0.0, now - then) * self.rate)
            allowed = tokens >= cost
            if allowed:
                tokens -= cost
            else:
                self.n_refused += 1
            self._buckets[key] = (tokens, now)
            if len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
            return allowed

    def __len__(self) -> int:
        return len(self._buckets)
