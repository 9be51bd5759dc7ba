"""The time to move a batch's input to a device: the topology's links, corrected online.

A query may say where its input is (a host, or a device) and how large it is; the transfer to a
candidate device goes over the link class between the two
(:meth:`~predictor.service.live.topology.Topology.link_class`), whose nominal time is
``latency + bytes / bandwidth``. Each class is corrected online from the transfers observed
(``ReportBatchStart`` with ``transfer_ms``):

* **mean**: the nominal time times ``exp`` of an EWMA of ``log(observed / nominal)``;
* **bound** at a confidence: the mean times the conformal quantile of the recent ratios
  ``observed / mean``; before ``min_samples`` transfers, ``fallback_factor`` (or the largest
  ratio seen, if larger).

A farther link never predicts less (a class's mean and bound are the largest of the classes up
to it), and both grow with the bytes.

Examples
--------
>>> from predictor.service.live.topology import Topology
>>> book = TransferBook(Topology({"gpu0": ("h0", "r0"), "gpu1": ("h1", "r0")}, {"h0": "r0", "h1": "r0"}))
>>> where = InputPlace(host="h0", n_bytes=31.25e6)   # 31.25 MB
>>> book.estimate("gpu1", where, 0.99).link, round(book.estimate("gpu1", where, 0.99).mean_ms, 2)
('rack', 10.05)
>>> for _ in range(30):
...     _ = book.observe("gpu1", where, 20.1)        # the rack link runs at half its bandwidth
>>> estimate = book.estimate("gpu1", where, 0.99)
>>> round(estimate.mean_ms, 1), estimate.observed
(20.1, 30)
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

from predictor.service.live.topology import LINK_CLASSES, Topology
from predictor.service.types import InputPlace

NOWHERE = InputPlace()


@dataclass(frozen=True, slots=True)
class TransferEstimate:
    """The transfer of a batch's input to a device (``link`` ``""``: none counted)."""

    link: str
    mean_ms: float
    bound_ms: float
    correction: float = 1.0
    observed: int = 0

    @property
    def local(self) -> bool:
        """Whether the input is on the device or its host (no network hop)."""
        return self.link in ("device", "host")


NO_TRANSFER = TransferEstimate("", 0.0, 0.0)


MIN_RATIO, MAX_RATIO = 1e-6, 1e6
"""Observed over nominal transfer times are clipped to this range (a link is never a million times off)."""


class LinkCorrection:
    """Online correction of one link class: EWMA of log ratios, conformal bound on ratios.

    Parameters
    ----------
    alpha
        EWMA weight of the newest log ratio, in (0, 1].
    window
        Recent ratios kept for the bound.
    min_samples
        Ratios needed before the bound is their quantile.
    fallback_factor
        Bound factor before then.
    """

    def __init__(self, alpha: float = 0.2, window: int = 256, min_samples: int = 20, fallback_factor: float = 1.5):
        self.alpha = alpha
        self.min_samples = min_samples
        self.fallback_factor = fallback_factor
        self.log_ratio = 0.0
        self.n = 0
        self.ratios: deque[float] = deque(maxlen=window)

    @property
    def factor(self) -> float:
        """Multiplier of the nominal time."""
        return math.exp(self.log_ratio)

    def learn(self, nominal_ms: float, observed_ms: float) -> None:
        """One observed transfer of nominal time ``nominal_ms`` that took ``observed_ms``."""
        if not (nominal_ms > 0 and observed_ms > 0):
            return
        self.ratios.append(min(max(observed_ms / (nominal_ms * self.factor), MIN_RATIO), MAX_RATIO))
        ratio = math.log(min(max(observed_ms / nominal_ms, MIN_RATIO), MAX_RATIO))
        self.log_ratio = ratio if self.n == 0 else self.log_ratio + self.alpha * (ratio - self.log_ratio)
        self.n += 1

    def bound_factor(self, confidence: float) -> float:
        """Bound over mean at ``confidence`` (at least 1)."""
        n = len(self.ratios)
        k = math.ceil((n + 1) * confidence)
        largest = max(self.ratios, default=1.0)
        if n < self.min_samples or k > n:
            return max(self.fallback_factor, largest, 1.0)
        return max(float(np.partition(np.fromiter(self.ratios, float, n), k - 1)[k - 1]), 1.0)


class TransferBook:
    """Thread-safe transfer estimates over a topology, with one correction per link class.

    Parameters
    ----------
    topology
        Devices, hosts, racks and links (default: no device known, default links).
    alpha, window, min_samples, fallback_factor
        Of each link class's :class:`LinkCorrection`.
    """

    def __init__(self, topology: Topology | None = None, *, alpha: float = 0.2, window: int = 256,
                 min_samples: int = 20, fallback_factor: float = 1.5):
        self.topology = topology or Topology()
        self._corrections = {link: LinkCorrection(alpha, window, min_samples, fallback_factor)
                             for link in LINK_CLASSES}
        self._lock = threading.Lock()

    def estimate(self, device: str, where: InputPlace, confidence: float) -> TransferEstimate:
        """The transfer of an input at ``where`` to ``device`` (none when its size is not given)."""
        if not where.given:
            return NO_TRANSFER
        link = self.topology.link_class(device, where.host, where.device)
        n_bytes = float(where.n_bytes or 0.0)
        mean = bound = 0.0
        with self._lock:
            for name in LINK_CLASSES[: LINK_CLASSES.index(link) + 1]:
                correction = self._corrections[name]
                here = self.topology.time_ms(name, n_bytes) * correction.factor
                mean = max(mean, here)
                bound = max(bound, here * correction.bound_factor(confidence))
            own = self._corrections[link]
            return TransferEstimate(link, mean, max(bound, mean), own.factor, own.n)

    def observe(self, device: str, where: InputPlace, transfer_ms: float) -> str:
        """An observed transfer of the input at ``where`` to ``device`` that took ``transfer_ms``;
        returns its link class (a transfer of no bytes, or of nominal time 0, teaches nothing)."""
        link = self.topology.link_class(device, where.host, where.device)
        nominal = self.topology.time_ms(link, float(where.n_bytes or 0.0))
        with self._lock:
            self._corrections[link].learn(nominal, transfer_ms)
        return link

    def corrections(self) -> dict[str, tuple[float, int]]:
        """Per link class: its correction factor and the transfers it learned from."""
        with self._lock:
            return {link: (c.factor, c.n) for link, c in self._corrections.items()}
