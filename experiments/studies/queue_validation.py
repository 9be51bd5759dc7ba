"""The queue wait the service predicts against a discrete-event simulation (simpy) of an M/G/1 queue.

For each utilisation ``rho`` and service distribution (exponential: M/M/1; deterministic:
M/D/1), a simpy simulation serves ``customers`` Poisson arrivals one at a time and measures
their mean wait in the queue. The same run is fed to the service's queue book
(:class:`~predictor.service.live.queues.QueueBook`) as the reports a collector would send
(a start report when a batch starts, an end report when it ends, on the simulated clock),
and the book's Pollaczek-Khinchine wait is compared with the simulated one. The exact
formula with the true parameters is reported beside it, and, for the tail, the book's
quantile at ``confidence`` against the simulated quantile.

Run: ``.venv/bin/python -m experiments.studies.queue_validation`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import dataclasses
import random

import numpy as np
import simpy

from predictor.service.live.queueing import mg1_wait
from predictor.service.live.queues import QueueBook

SERVICES = ("exponential", "deterministic")
RHOS = (0.1, 0.3, 0.5, 0.7, 0.9)
MEAN_SERVICE_MS = 10.0


@dataclasses.dataclass(frozen=True)
class Trace:
    """One simulated run: per customer, its arrival, start and end times (ms)."""

    arrivals: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    @property
    def waits(self) -> np.ndarray:
        """Time each customer waited in the queue, ms."""
        return self.starts - self.arrivals


def simulate_mg1(rho: float, service: str, customers: int, seed: int = 0,
                 mean_service_ms: float = MEAN_SERVICE_MS) -> Trace:
    """Simulate an M/G/1 FIFO queue with simpy (one server, Poisson arrivals at ``rho / mean``)."""
    if service not in SERVICES:
        raise ValueError(f"service must be one of {SERVICES}, got {service!r}")
    rng = random.Random(seed)
    env = simpy.Environment()
    server = simpy.Resource(env, capacity=1)
    arrivals = np.zeros(customers)
    starts = np.zeros(customers)
    ends = np.zeros(customers)
    rate = rho / mean_service_ms

    def customer(i: int):
        arrivals[i] = env.now
        with server.request() as request:
            yield request
            starts[i] = env.now
            duration = rng.expovariate(1.0 / mean_service_ms) if service == "exponential" else mean_service_ms
            yield env.timeout(duration)
            ends[i] = env.now

    def source():
        for i in range(customers):
            env.process(customer(i))
            yield env.timeout(rng.expovariate(rate))

    env.process(source())
    env.run()
    return Trace(arrivals, starts, ends)


def book_of(trace: Trace, warmup: int = 0) -> QueueBook:
    """A queue book fed the trace's start and end reports in time order, on the simulated clock."""
    now = [0.0]
    n = len(trace.starts) - warmup
    book = QueueBook(clock=lambda: now[0] / 1000.0, window=n, min_samples=20, stale_after_s=1e12)
    # at equal times an end comes first: the server starts the next batch when one ends
    events = [(t, 1, i) for i, t in enumerate(trace.starts[warmup:], start=warmup)]
    events += [(t, 0, i) for i, t in enumerate(trace.ends[warmup:], start=warmup)]
    events.sort()
    for t, kind, i in events:
        now[0] = float(t)
        if kind == 1:
            book.started("dev", str(i))
        else:
            book.ended("dev", str(i))
    return book


def validate(rho: float, service: str, customers: int, seed: int = 0, confidence: float = 0.95) -> dict:
    """Simulated against predicted mean wait (and tail quantile) for one utilisation and service."""
    trace = simulate_mg1(rho, service, customers, seed)
    warmup = customers // 20
    waits = trace.waits[warmup:]
    book = book_of(trace, warmup)
    estimate = book.wait("dev", running_remaining=[], confidence=confidence, bound_factor=1.0)
    second = 2 * MEAN_SERVICE_MS**2 if service == "exponential" else MEAN_SERVICE_MS**2
    exact = mg1_wait(rho / MEAN_SERVICE_MS, MEAN_SERVICE_MS, second)
    simulated = float(np.mean(waits))
    return {
        "rho": rho,
        "service": service,
        "customers": customers,
        "simulated_ms": simulated,
        "predicted_ms": estimate.mean_ms,
        "formula_ms": exact.mean_ms,
        "error": estimate.mean_ms / simulated - 1.0,
        "formula_error": exact.mean_ms / simulated - 1.0,
        "estimated_rho": estimate.utilisation,
        "simulated_quantile_ms": float(np.quantile(waits, confidence)),
        "predicted_quantile_ms": estimate.bound_ms,
        "confidence": confidence,
    }


def customers_for(rho: float, quick: bool) -> int:
    """Customers simulated at ``rho``: more near saturation, where the mean converges slowly."""
    base = 20_000 if quick else 100_000
    return int(base * (4 if rho >= 0.85 else 1))


def markdown(rows: list[dict]) -> str:
    """The validation table."""
    lines = ["| service | rho | customers | simulated mean wait (ms) | predicted (ms) | error | "
             "P-K, true parameters (ms) | q95 simulated (ms) | q95 predicted (ms) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['service']} | {r['rho']:.1f} | {r['customers']} | {r['simulated_ms']:.2f} | "
                     f"{r['predicted_ms']:.2f} | {r['error']:+.1%} | {r['formula_ms']:.2f} | "
                     f"{r['simulated_quantile_ms']:.1f} | {r['predicted_quantile_ms']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Print the validation table (every utilisation and service)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer customers (seconds)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = [validate(rho, service, customers_for(rho, args.quick), args.seed)
            for service in SERVICES for rho in RHOS]
    print(markdown(rows))


if __name__ == "__main__":
    main()
