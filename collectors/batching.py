"""Request arrivals and dynamic batching, driven by the caller's clock.

:class:`PoissonArrivals` draws each active model's requests as an independent
Poisson process following a :mod:`~collectors.schedule`; :class:`DynamicBatcher`
queues them per model and closes a batch when it reaches ``max_batch`` or when
its oldest request has waited ``timeout_s``. Both are plain objects advanced by
explicit times, so they are deterministic for a seed and testable without
sleeping.

Examples
--------
>>> from collectors.schedule import constant_schedule
>>> arrivals = PoissonArrivals(constant_schedule(["a", "b"], rate=100.0), seed=0)
>>> batcher = DynamicBatcher(max_batch=4, timeout_s=0.02)
>>> for t, model in arrivals.until(1.0):
...     batcher.add(model, t)
>>> batches = batcher.ready(1.0)
>>> all(1 <= b.batch_size <= 4 for b in batches)
True
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from collectors.schedule import Phase


class PoissonArrivals:
    """Merged Poisson request streams of the models active in each phase.

    Parameters
    ----------
    phases
        The schedule; times are seconds from the start of the run.
    seed
        Seed of the exponential inter-arrival draws.
    """

    def __init__(self, phases: Sequence[Phase], seed: int = 0) -> None:
        self.phases = list(phases)
        self._rng = np.random.default_rng(seed)
        self._phase_index = -1
        self._heap: list[tuple[float, str]] = []
        self._enter_phase(0)

    def _enter_phase(self, index: int) -> None:
        self._phase_index = index
        phase = self.phases[index]
        rate = phase.rate_per_model()
        self._heap = []
        if rate > 0:
            for model in phase.models:
                heapq.heappush(self._heap, (phase.start_s + self._rng.exponential(1.0 / rate), model))

    def _phase_end(self) -> float:
        nxt = self._phase_index + 1
        return self.phases[nxt].start_s if nxt < len(self.phases) else float("inf")

    def next_time(self) -> float:
        """Time of the next arrival (``inf`` when none will come)."""
        while True:
            end = self._phase_end()
            if self._heap and self._heap[0][0] < end:
                return self._heap[0][0]
            if end == float("inf"):
                return end
            self._enter_phase(self._phase_index + 1)

    def until(self, t: float) -> list[tuple[float, str]]:
        """Every arrival ``(time, model)`` up to ``t``, in time order (consumed)."""
        out: list[tuple[float, str]] = []
        while self.next_time() <= t:
            when, model = heapq.heappop(self._heap)
            out.append((when, model))
            rate = self.phases[self._phase_index].rate_per_model()
            heapq.heappush(self._heap, (when + self._rng.exponential(1.0 / rate), model))
        return out


@dataclass(frozen=True, slots=True)
class Batch:
    """A closed batch: ``batch_size`` requests of ``model``, the oldest arrived at ``first_arrival``."""

    model: str
    batch_size: int
    first_arrival: float
    closed_at: float


class DynamicBatcher:
    """Per-model request queues closed into batches by size or by waiting time.

    Parameters
    ----------
    max_batch
        Largest batch.
    timeout_s
        A batch closes once its oldest request has waited this long.
    max_queue
        Requests queued per model beyond which new arrivals are dropped (counted in ``dropped``).
    """

    def __init__(self, max_batch: int = 8, timeout_s: float = 0.02, max_queue: int | None = None) -> None:
        if max_batch < 1 or timeout_s < 0:
            raise ValueError(f"need max_batch >= 1 and timeout_s >= 0, got {max_batch}, {timeout_s}")
        self.max_batch = max_batch
        self.timeout_s = timeout_s
        self.max_queue = max_queue if max_queue is not None else 8 * max_batch
        self._queues: dict[str, deque[float]] = {}
        self.dropped = 0

    def add(self, model: str, t: float) -> None:
        """A request for ``model`` arrived at ``t``."""
        queue = self._queues.setdefault(model, deque())
        if len(queue) >= self.max_queue:
            self.dropped += 1
            return
        queue.append(t)

    def queued(self) -> int:
        """Requests waiting over all models."""
        return sum(len(q) for q in self._queues.values())

    def next_deadline(self) -> float:
        """When the next batch closes on time (``inf`` when nothing is queued)."""
        oldest = [q[0] for q in self._queues.values() if q]
        return min(oldest) + self.timeout_s if oldest else float("inf")

    def ready(self, now: float) -> list[Batch]:
        """Close and return every batch due at ``now``: full ones, then timed-out ones, oldest first."""
        out: list[Batch] = []
        for model, queue in self._queues.items():
            while len(queue) >= self.max_batch or (queue and queue[0] + self.timeout_s <= now):
                size = min(self.max_batch, len(queue))
                first = queue[0]
                for _ in range(size):
                    queue.popleft()
                out.append(Batch(model, size, first, now))
        out.sort(key=lambda b: b.first_arrival)
        return out

    def clear(self) -> int:
        """Drop every queued request; returns how many."""
        count = self.queued()
        self._queues.clear()
        return count
