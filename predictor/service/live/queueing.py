"""Queueing delay of an M/G/1 (or M/G/c) queue: the Pollaczek-Khinchine mean wait and a tail quantile.

A device that serves its batches one after the other, with Poisson arrivals at rate
``lambda`` (per ms) and service times ``S`` of any distribution, makes a batch wait on
average (Pollaczek-Khinchine)::

    W = lambda * E[S^2] / (2 * (1 - rho)),    rho = lambda * E[S]

for ``rho < 1``; at ``rho >= 1`` the queue grows without bound and :func:`mg1_wait` says
*saturated* instead of giving a number. The bound at a confidence ``q`` is a quantile of the wait:
a batch waits at all with probability ``rho``, and given that it waits, the wait is taken as
exponential with mean ``W / rho`` (exact for M/M/1, Kingman's heavy-traffic approximation
otherwise)::

    P(wait > t) = rho * exp(-rho * t / W),    t_q = (W / rho) * ln(rho / (1 - q))  (0 when rho <= 1 - q)

A device that runs up to ``c`` batches at once is an M/G/c queue (:func:`mgc_wait`).

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
    """``rho = lambda * E[S] / c``; ``None`` when saturated (``rho >= 1``)."""
    mean_ms: float
    """Mean wait (``math.inf`` when saturated)."""
    p_wait: float | None = None
    """Probability that an arrival waits at all (default: the utilisation, M/G/1)."""

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
        p = self.utilisation if self.p_wait is None else self.p_wait
        if p <= 1.0 - confidence or self.mean_ms <= 0.0:
            return 0.0
        return (self.mean_ms / p) * math.log(p / (1.0 - confidence))

    def exceedance(self, t_ms: float) -> float:
        """``P(wait > t_ms)`` under the same model (1 when saturated)."""
        if self.utilisation is None or t_ms < 0:
            return 1.0
        p = self.utilisation if self.p_wait is None else self.p_wait
        if self.mean_ms <= 0.0:
            return 0.0
        return p * math.exp(-p * t_ms / self.mean_ms)


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits in an M/M/c queue with ``offered = lambda E[S]`` (< ``servers``)."""
    term, total = 1.0, 1.0  # a^k / k!, summed for k < c
    for k in range(1, servers):
        term *= offered / k
        total += term
    last = term * offered / servers / (1.0 - offered / servers)  # a^c / c! / (1 - rho)
    return last / (total + last)


def mgc_wait(arrival_rate: float, mean_service: float, second_moment: float, servers: int = 1) -> Wait:
    """The wait of an M/G/c queue (Allen-Cunneen; exactly Pollaczek-Khinchine for ``servers = 1``).

    The Allen-Cunneen approximation scales the exact M/M/c wait (Erlang C) by ``(1 + C_s^2) / 2``
    (``C_s`` the coefficient of variation of the service time), with ``rho = lambda E[S] / c``; the
    probability of waiting at all is the Erlang C probability (:func:`erlang_c`) instead of ``rho``.

    >>> round(mgc_wait(0.05, 10.0, 200.0, servers=1).mean_ms, 9) == round(mg1_wait(0.05, 10.0, 200.0).mean_ms, 9)
    True
    >>> round(mgc_wait(0.2, 10.0, 200.0, servers=4).mean_ms, 4)  # M/M/4 at rho 0.5: C(4, 2) / (c mu - lambda)
    0.8696
    """
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers!r}")
    if servers == 1:
        return mg1_wait(arrival_rate, mean_service, second_moment)
    _check(arrival_rate, mean_service, second_moment)
    offered = arrival_rate * mean_service
    rho = offered / servers
    if rho >= 1.0:
        return Wait(None, math.inf)
    if mean_service <= 0.0 or arrival_rate <= 0.0:
        return Wait(rho, 0.0, 0.0)
    cv2 = max(second_moment / (mean_service * mean_service) - 1.0, 0.0)
    p_wait = erlang_c(servers, offered)
    mmc = p_wait * mean_service / (servers * (1.0 - rho))
    return Wait(rho, mmc * (1.0 + cv2) / 2.0, p_wait)


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
    _check(arrival_rate, mean_service, second_moment)
    rho = arrival_rate * mean_service
    if rho >= 1.0:
        return Wait(None, math.inf)
    second = max(second_moment, mean_service * mean_service)
    return Wait(rho, arrival_rate * second / (2.0 * (1.0 - rho)))


def _check(arrival_rate: float, mean_service: float, second_moment: float) -> None:
    for name, value in (("arrival_rate", arrival_rate), ("mean_service", mean_service),
                        ("second_moment", second_moment)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
