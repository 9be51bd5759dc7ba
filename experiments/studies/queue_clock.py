"""The queue's clock: the M/G/1 wait the service learns when start reports arrive late.

One device serves Poisson arrivals one batch at a time (service times of ``--floor-ms`` plus an
exponential part, ``--mean-ms`` on average; utilisation ``--rho``). Its start and end reports are fed
to a real :class:`~predictor.service.core.Service` on clocks moved by hand, so that each report
arrives exactly when the run says:

* on time (the reference);
* every start ``--late-ms`` late, saying nothing (the start is stamped on the report's arrival, and
  every service time loses the delay);
* every start ``--late-ms`` late with ``elapsed_ms`` = the delay (``ReportBatchStart.elapsed_ms``);
* every start ``--late-ms`` late and every end ``--end-late-ms`` late, each stamped with its
  ``client_time``.

It prints the learned mean service time and the wait the service answers (the book's M/G/1 wait),
and each one's ratio to the reference.

Run: ``.venv/bin/python -m experiments.studies.queue_clock``.
"""

from __future__ import annotations

import argparse
import random

from predictor.records.record import BatchSpec
from predictor.service import Service, ServiceConfig

BATCH = BatchSpec("bert", 4)
WALL_OFFSET_S = 1.7e9


def run(start_late_ms: float, end_late_ms: float, how: str, args: argparse.Namespace) -> tuple[float, float]:
    """The learned mean service time and the answered wait (ms) of one run; ``how``: none, elapsed or
    client_time."""
    now = [1000.0]
    service = Service(ServiceConfig(snapshot_every_s=0, observation_log=False), clock=lambda: now[0],
                      wall=lambda: WALL_OFFSET_S + now[0])
    service.open()
    rng = random.Random(args.seed)
    events, free_at, arrival = [], 0.0, 0.0
    for i in range(args.batches):
        arrival += rng.expovariate(args.rho / args.mean_ms)
        start = max(arrival, free_at)
        free_at = end = start + args.floor_ms + rng.expovariate(1 / (args.mean_ms - args.floor_ms))
        events += [(start + start_late_ms, start, "start", i), (end + end_late_ms, end, "end", i)]
    for reported, at, kind, i in sorted(events):
        now[0] = 1000.0 + reported / 1000.0
        delay = reported - at
        stamp = WALL_OFFSET_S + now[0] - delay / 1000.0 if how == "client_time" else None
        if kind == "start":
            service.batch_start("gpu0", "SimGPU", f"b{i}", BATCH, delay if how == "elapsed" else None,
                                client_time_s=stamp)
        else:
            service.batch_end("gpu0", f"b{i}", client_time_s=stamp)
    rates = service.state.queues.rates("gpu0")
    wait = service.state.queues.wait("gpu0", [], 0.9, 1.0)
    service.close()
    assert rates is not None
    return rates[1], wait.mean_ms


def main(argv: list[str] | None = None) -> None:
    """Run the four cases and print their table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=500, help="batches served (default 500; the book keeps 512)")
    parser.add_argument("--rho", type=float, default=0.7, help="utilisation (default 0.7)")
    parser.add_argument("--mean-ms", type=float, default=100.0, help="mean service time (default 100)")
    parser.add_argument("--floor-ms", type=float, default=60.0, help="shortest service time (default 60)")
    parser.add_argument("--late-ms", type=float, default=50.0, help="start reports' delay (default 50)")
    parser.add_argument("--end-late-ms", type=float, default=8.0, help="end reports' delay, last case (default 8)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    cases = [("on time", 0.0, 0.0, "none"),
             (f"starts {args.late_ms:g} ms late, nothing said", args.late_ms, 0.0, "none"),
             (f"starts {args.late_ms:g} ms late, elapsed_ms = {args.late_ms:g}", args.late_ms, 0.0, "elapsed"),
             (f"starts {args.late_ms:g} ms and ends {args.end_late_ms:g} ms late, unstamped", args.late_ms,
              args.end_late_ms, "none"),
             (f"starts {args.late_ms:g} ms and ends {args.end_late_ms:g} ms late, client_time", args.late_ms,
              args.end_late_ms, "client_time")]
    results = [(name, *run(start, end, how, args)) for name, start, end, how in cases]
    reference = results[0][2]
    print("reports | learned mean service ms | M/G/1 wait ms | wait / on time")
    print("--- | --- | --- | ---")
    for name, service_ms, wait_ms in results:
        print(f"{name} | {service_ms:.1f} | {wait_ms:.1f} | {wait_ms / reference:.3f}")


if __name__ == "__main__":
    main()
