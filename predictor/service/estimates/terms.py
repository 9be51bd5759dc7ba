"""The terms a deadline answer adds to the execution latency: queue wait, model load, memory, transfer.

For every row of an answer (a query, or a ranking's candidates), :func:`terms_of` asks
the queue book (:mod:`predictor.service.live.queues`) for the wait before the batch starts,
the memory book (:mod:`predictor.service.live.memory`) for the load time and whether it fits,
and, when the query says where its input is, the transfer book
(:mod:`predictor.service.live.transfers`) for the time to move the input to the device.
The answer then counts its slack from the *completion bound*::

    completion_bound = wait bound + load + transfer bound + upper bound of the latency

its probability from the deadline less the mean wait, the load and the mean transfer, and ranks the
candidates that do not fit in memory after those that do (each with its reason). A
saturated queue has no finite wait: its completion bound is infinite, its probability 0.

When no book knows anything (and no input is given), :func:`terms_of` returns ``None`` and the answer is the
latency alone, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from predictor.calibration.conformal import Bound
from predictor.records.colocations import CoLocations
from predictor.service.live.liveview import LiveView
from predictor.service.live.memory import MemoryBook, MemoryNeed
from predictor.service.live.queues import QueueBook, QueueWhatIf, WaitEstimate, WaitSource
from predictor.service.live.transfers import NO_TRANSFER, TransferBook, TransferEstimate
from predictor.service.types import InputPlace


@dataclass(frozen=True, eq=False)
class Terms:
    """Per row: the wait, the load time, the memory verdict and the input's transfer."""

    waits: list[WaitEstimate]
    wait_ms: np.ndarray
    wait_bound_ms: np.ndarray
    load_ms: np.ndarray
    needed_mb: np.ndarray
    free_mb: np.ndarray  # NaN: unknown
    fits: np.ndarray
    reasons: list[str]
    transfers: list[TransferEstimate] | None = None  # None: no input given
    transfer_ms: np.ndarray | None = None
    transfer_bound_ms: np.ndarray | None = None

    @property
    def extra_bound_ms(self) -> np.ndarray:
        """What the completion bound adds to the latency's upper bound (inf: saturated)."""
        extra = self.wait_bound_ms + self.load_ms
        return extra if self.transfer_bound_ms is None else extra + self.transfer_bound_ms

    @property
    def extra_mean_ms(self) -> np.ndarray:
        """What the expected completion adds to the expected latency (inf: saturated)."""
        extra = self.wait_ms + self.load_ms
        return extra if self.transfer_ms is None else extra + self.transfer_ms

    def transfer(self, i: int) -> TransferEstimate:
        """Row ``i``'s transfer (none when no input was given)."""
        return NO_TRANSFER if self.transfers is None else self.transfers[i]

    def probabilities(self, probability_within: np.ndarray) -> np.ndarray:
        """Probabilities of meeting the deadline, 0 where the queue is saturated or memory lacks."""
        blocked = ~self.fits | ~np.isfinite(self.wait_ms)
        return np.where(blocked, 0.0, probability_within)

    def order(self, slack: np.ndarray) -> np.ndarray:
        """Ranking: candidates that fit first, then most slack first (stable)."""
        return np.lexsort((-slack, ~self.fits))

    def deciding_term(self, i: int, latency_upper: float, solo: float) -> str:
        """The term that decided row ``i``: ``memory`` when it does not fit, else the largest share
        of its completion bound (``queue``, ``load``, ``transfer``, ``interference`` or ``solo``)."""
        if not self.fits[i]:
            return "memory"
        shares = {
            "solo": solo,
            "interference": max(latency_upper - solo, 0.0),
            "queue": float(self.wait_bound_ms[i]),
            "load": float(self.load_ms[i]),
            "transfer": self.transfer(i).bound_ms,
        }
        return max(shares, key=shares.__getitem__)


def terms_of(
    queues: QueueBook,
    memory: MemoryBook,
    live: LiveView,
    rows: CoLocations,
    confidence: float,
    bounds: Callable[[], dict[str, Bound]],
    transfers: TransferBook | None = None,
    where: InputPlace | None = None,
    what_if: QueueWhatIf | None = None,
) -> Terms | None:
    """The terms of every row (``None`` when no device has a queue, rates or memory known, no input
    is given and no what-if asked). ``bounds()``: the bound of a 1 ms prediction per device kind, asked
    only when there are terms (most single queries have none); ``what_if``: the queue waits at its
    rates (:meth:`QueueBook.wait <predictor.service.live.queues.QueueBook.wait>`)."""
    batch = rows.batch
    devices = rows.devices
    moving = transfers is not None and where is not None and where.given
    if not (moving or what_if is not None or queues.active_among(devices) or memory.relevant(batch.model, devices)):
        return None
    n = len(rows)
    waits: list[WaitEstimate] = []
    load = np.zeros(n)
    needed = np.zeros(n)
    free = np.full(n, np.nan)
    fits = np.ones(n, dtype=bool)
    reasons = [""] * n
    cache: dict[tuple[str, str], tuple[WaitEstimate, MemoryNeed]] = {}
    factors = bounds()
    for i, (device, kind) in enumerate(zip(rows.devices, rows.device_kinds, strict=True)):
        key = (device, kind)
        if key not in cache:
            factor = factors[kind].upper_ms if kind in factors else 1.0
            cache[key] = (queues.wait(device, partial(_remaining, live, device), confidence, factor, what_if),
                          memory.need(device, kind, batch.model, batch.batch_size))
        wait, need = cache[key]
        waits.append(wait)
        load[i] = need.load_ms
        needed[i] = need.needed_mb
        if need.free_mb is not None:
            free[i] = need.free_mb
        fits[i] = need.fits
        reasons[i] = need.reason()
    moved: list[TransferEstimate] | None = None
    if moving:
        assert transfers is not None and where is not None
        by_device: dict[str, TransferEstimate] = {}
        moved = [by_device.get(d) or by_device.setdefault(d, transfers.estimate(d, where, confidence))
                 for d in devices]
    elif all(w.source is WaitSource.NONE for w in waits) and not load.any() and not needed.any() and fits.all():
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
        transfers=moved,
        transfer_ms=None if moved is None else np.array([t.mean_ms for t in moved], dtype=float),
        transfer_bound_ms=None if moved is None else np.array([t.bound_ms for t in moved], dtype=float),
    )


def _remaining(live: LiveView, device: str) -> list[float]:
    """Remaining times (ms) of the batches running on ``device``, from the live view."""
    return [ms for _, ms in live.running(device)] if live.knows(device) else []
