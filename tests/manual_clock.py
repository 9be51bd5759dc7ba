"""A clock for tests: monotonic seconds that move only when a test moves them."""

from __future__ import annotations


class ManualClock:
    """Call it for the time; set or add to ``now`` to move it."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now
