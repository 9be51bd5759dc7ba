"""The terms a deadline answer adds to the execution latency: queue wait, model load, memory.

For every row of an answer (a query, or a ranking's candidates), :func:`terms_of` asks
the queue book (:mod:`predictor.service.queues`) for the wait before the batch starts and
the memory book (:mod:`predictor.service.memory`) for the load time and whether it fits.
The answer then counts its slack from the *completion bound*::

    completion_bound = wait bound + load + upper bound of the latency

its probability from the deadline less the mean wait and the load, and ranks the
candidates that do not fit in memory after those that do (each with its reason). A
saturated queue has no finite wait: its completion bound is infinite, its probability 0.

When neither book knows anything, :func:`terms_of` returns ``None`` and the answer is the
latency alone, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from predictor.calibration import Bound
from predictor.colocations import CoLocations
from predictor.service.liveview import LiveView
from predictor.service.memory import MemoryBook, MemoryNeed
from predictor.service.queues import QueueBook, WaitEstimate, WaitSource


@dataclass(frozen=True, eq=False)
class Terms:
    """Per row: the wait, the load time and the memory verdict."""

    waits: list[WaitEstimate]
    wait_ms: np.ndarray
    wait_bound_ms: np.ndarray
    load_ms: np.ndarray
    needed_mb: np.ndarray
    free_mb: np.ndarray  # NaN: unknown
    fits: np.ndarray
    reasons: list[str]

    @property
    def extra_bound_ms(self) -> np.ndarray:
        """What the completion bound adds to the latency's upper bound (inf: saturated)."""
        return self.wait_bound_ms + self.load_ms

    @property
    def extra_mean_ms(self) -> np.ndarray:
        """What the expected completion adds to the expected latency (inf: saturated)."""
        return self.wait_ms + self.load_ms

    def probabilities(self, probability_within: np.ndarray) -> np.ndarray:
        """Probabilities of meeting the deadline, 0 where the queue is saturated or memory lacks."""
        blocked = ~self.fits | ~np.isfinite(self.wait_ms)
        return np.where(blocked, 0.0, probability_within)

    def order(self, slack: np.ndarray) -> np.ndarray:
        """Ranking: candidates that fit first, then most slack first (stable)."""
        return np.lexsort((-slack, ~self.fits))

    def deciding_term(self, i: int, latency_upper: float, solo: float) -> str:
        """The term that decided row ``i``: ``memory`` when it does not fit, else the largest share
        of its completion bound (``queue``, ``load``, ``interference`` or ``solo``)."""
        if not self.fits[i]:
            return "memory"
        shares = {
            "solo": solo,
            "interference": max(latency_upper - solo, 0.0),
            "queue": float(self.wait_bound_ms[i]),
            "load": float(self.load_ms[i]),
        }
        return max(shares, key=shares.__getitem__)


def terms_of(
    queues: QueueBook,
    memory: MemoryBook,
    live: LiveView,
    rows: CoLocations,
    confidence: float,
    bounds: dict[str, Bound],
) -> Terms | None:
    """The terms of every row (``None`` when no device has a queue, rates or memory known)."""
    batch = rows.batch
    devices = rows.devices
    if not (queues.active_among(devices) or memory.relevant(batch.model, devices)):
        return None
    n = len(rows)
    waits: list[WaitEstimate] = []
    load = np.zeros(n)
    needed = np.zeros(n)
    free = np.full(n, np.nan)
    fits = np.ones(n, dtype=bool)
    reasons = [""] * n
    cache: dict[tuple[str, str], tuple[WaitEstimate, MemoryNeed]] = {}
    for i, (device, kind) in enumerate(zip(rows.devices, rows.device_kinds, strict=True)):
        key = (device, kind)
        if key not in cache:
            factor = bounds[kind].upper_ms if kind in bounds else 1.0
            cache[key] = (queues.wait(device, partial(_remaining, live, device), confidence, factor),
                          memory.need(device, kind, batch.model, batch.batch_size))
        wait, need = cache[key]
        waits.append(wait)
        load[i] = need.load_ms
        needed[i] = need.needed_mb
        if need.free_mb is not None:
            free[i] = need.free_mb
        fits[i] = need.fits
        reasons[i] = need.reason()
    if all(w.source is WaitSource.NONE for w in waits) and not load.any() and not needed.any() and fits.all():
        return None
    return Terms(
        waits=waits,
        wait_ms=np.array([w.mean_ms for w in waits], dtype=float),
        wait_bound_ms=np.array([w.bound_ms for w in waits], dtype=float),
        load_ms=load,
        needed_mb=needed,
        free_mb=free,
        fits=fits,
        reasons=reasons,
    )


def _remaining(live: LiveView, device: str) -> list[float]:
    """Remaining times (ms) of the batches running on ``device``, from the live view."""
    return [ms for _, ms in live.running(device)] if live.knows(device) else []
