"""Measure the coverage of the service's upper bounds by replaying logs prequentially.

Each log is fed through :meth:`Service.observe`, the exact path of the
observation stream: predict, bound at the tracked confidence, score, then
learn. Coverage is the fraction of latencies within their bound, over all
records and over those whose bound came from residuals (after the fallback
phase); beside it, the coverage of the admission-time answers the service replays for each
record (co-runners without overlaps, no signals; :mod:`predictor.service.admission`).

Run ``python -m predictor.service.coverage LOG [LOG ...] [--predictor rls] [--confidence 0.99]``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from predictor.predictors.registry import DEFAULT as DEFAULT_PREDICTOR
from predictor.records.logio import iter_records
from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.errors import OutlierRejected


@dataclass(frozen=True)
class CoverageResult:
    """Coverage of one replayed log."""

    log: str
    records: int
    coverage: float
    calibrated_records: int
    calibrated_coverage: float
    mape: float  # mean absolute percentage error over the whole log (%)
    seconds: float
    admission_coverage: float = math.nan  # of the replayed admission-time answers (recent window)


def measure(path: str | Path, config: ServiceConfig) -> CoverageResult:
    """Replay ``path`` through a fresh service with ``config``; returns its coverage."""
    service = Service(config)
    service.open()
    start = time.perf_counter()
    errors = 0.0
    count = 0
    for record in iter_records(path):
        try:
            predicted = service.observe(record)
        except OutlierRejected:  # only with the gate on: neither learned nor scored
            continue
        errors += abs(record.latency_ms - predicted) / record.latency_ms  # type: ignore[operator]
        count += 1
    seconds = time.perf_counter() - start
    monitor = service.state.monitor
    return CoverageResult(
        log=str(path),
        records=monitor.observations(),
        coverage=monitor.cumulative_coverage(),
        calibrated_records=monitor.calibrated_observations(),
        calibrated_coverage=monitor.cumulative_coverage(calibrated_only=True),
        mape=100.0 * errors / count if count else math.nan,
        seconds=seconds,
        admission_coverage=_nan(service.status().admission_coverage),
    )


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def main(argv: list[str] | None = None) -> int:
    """Replay each log given on the command line and print its coverage; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m predictor.service.coverage", description=__doc__.split("\n")[0]
    )
    parser.add_argument("logs", nargs="+", help="coloc/v1 logs (.jsonl or .jsonl.gz)")
    parser.add_argument("--predictor", default=DEFAULT_PREDICTOR, help=f"predictor spec (default {DEFAULT_PREDICTOR})")
    parser.add_argument(
        "--confidence", type=float, default=0.99, help="confidence of the bound (default 0.99)"
    )
    parser.add_argument(
        "--window", type=int, default=ServiceConfig.calibration_window, help="residual window"
    )
    parser.add_argument("--adapt", type=float, default=ServiceConfig.adapt, help="adaptive-conformal step")
    parser.add_argument(
        "--outlier-gate",
        action="store_true",
        help="keep the service's outlier gate on (off by default here: every measured record is clean "
        "data and must count in the coverage; a gated record would be neither learned nor scored)",
    )
    args = parser.parse_args(argv)
    config = ServiceConfig(
        predictor=args.predictor,
        coverage_confidence=args.confidence,
        calibration_window=args.window,
        adapt=args.adapt,
        snapshot_every_s=0,
        outlier_gate=args.outlier_gate,
    )
    print(
        f"predictor {args.predictor}, bound at {args.confidence:g}, window {args.window}, adapt {args.adapt:g}"
    )
    print(
        f"{'log':<40} {'records':>8} {'coverage':>9} {'calibrated':>11} {'coverage':>9} {'MAPE %':>8} "
        f"{'admission':>10} {'s':>6}"
    )
    for log in args.logs:
        r = measure(log, config)
        print(
            f"{Path(r.log).name:<40} {r.records:>8} {r.coverage:>9.4f} {r.calibrated_records:>11} "
            f"{r.calibrated_coverage:>9.4f} {r.mape:>8.1f} {r.admission_coverage:>10.4f} {r.seconds:>6.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
