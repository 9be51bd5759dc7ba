"""Queueing delay of an M/G/1 queue: the Pollaczek-Khinchine mean wait and a tail quantile.

A device that serves its batches one after the other, with Poisson arrivals at rate
``lambda`` (per ms) and service times ``S`` of any distribution, makes a batch wait on
average (Pollaczek-Khinchine)::

    W = lambda * E[S^2] / (2 * (1 - rho)),    rho = lambda * E[S]

which holds only for ``rho < 1``; at ``rho >= 1`` the queue grows without bound and
:func:`mg1_wait` says *saturated* instead of giving a number.

The bound at a confidence ``q`` is a quantile of the wait. A batch waits at all with
probability ``rho`` (an arrival finds the device busy); given that it waits, the wait
is taken as exponential with mean ``W / rho``, so that::

    P(wait > t) = rho * exp(-rho * t / W),    t_q = (W / rho) * ln(rho / (1 - q))  (0 when rho <= 1 - q)

which is exact for exponential service (M/M/1) and the usual heavy-traffic
approximation otherwise (Kingman: the wait of a G/G/1 queue near saturation is
exponential).

Examples
--------
>>> w = mg1_wait(arrival_rate=0.05, mean_service=10.0, second_moment=200.0)  # M/M/1, rho 0.5
>>> round(w.mean_ms, 6), w.utilisation, w.saturated
(10.0, 0.5, False)
>>> round(w.quantile(0.99), 3)  # M/M/1: ln(0.5 / 0.01) / (mu - lambda) = ln(50) * 20
78.24
>>> mg1_wait(0.2, 10.0, 200.0).saturated
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Wait:
    """An M/G/1 wait: its mean and utilisation, or saturation (no number then)."""

    utilisation: float | None
    """``rho = lambda * E[S]``; ``None`` when saturated (``rho >= 1``)."""
    mean_ms: float
    """Mean wait (``math.inf`` when saturated)."""

    @property
    def saturated(self) -> bool:
        """Whether the queue grows without bound (``rho >= 1``)."""
        return self.utilisation is None

    def quantile(self, confidence: float) -> float:
        """The wait not exceeded with probability ``confidence`` (see the module docstring)."""
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
        if self.utilisation is None:
            return math.inf
        rho = self.utilisation
        if rho <= 1.0 - confidence or self.mean_ms <= 0.0:
            return 0.0
        return (self.mean_ms / rho) * math.log(rho / (1.0 - confidence))

    def exceedance(self, t_ms: float) -> float:
        """``P(wait > t_ms)`` under the same model (1 when saturated)."""
        if self.utilisation is None:
            return 1.0
        rho = self.utilisation
        if t_ms < 0:
            return 1.0
        if self.mean_ms <= 0.0:
            return 0.0
        return rho * math.exp(-rho * t_ms / self.mean_ms)


def mg1_wait(arrival_rate: float, mean_service: float, second_moment: float) -> Wait:
    """The Pollaczek-Khinchine wait of an M/G/1 queue.

    Parameters
    ----------
    arrival_rate
        Poisson arrival rate, per ms (``>= 0``).
    mean_service
        Mean service time ``E[S]``, ms (``>= 0``).
    second_moment
        ``E[S^2]``, ms^2 (``>= mean_service ** 2``; smaller values, from rounding, are raised to it).
    """
    for name, value in (("arrival_rate", arrival_rate), ("mean_service", mean_service),
                        ("second_moment", second_moment)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    rho = arrival_rate * mean_service
    if rho >= 1.0:
        return Wait(None, math.inf)
    second = max(second_moment, mean_service * mean_service)
    return Wait(rho, arrival_rate * second / (2.0 * (1.0 - rho)))
