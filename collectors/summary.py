"""Slowdown per model pair: the end-of-run summary of a collection, and of any ``coloc/v1`` log.

A record counts towards the pair (its model, its main co-runner's model), the
main co-runner being the one with the largest overlap; a record without
co-runners counts towards (its model, ``-``), whose slowdown should stay near
1 if the solo profile is right. Records without ``solo_latency_ms`` are counted
but have no slowdown.

Examples
--------
>>> from predictor.records.record import BatchSpec, CoRunner, Record
>>> summary = SlowdownSummary()
>>> summary.add(Record("cpu0", BatchSpec("bert", 1), 12.0, solo_latency_ms=10.0))
>>> summary.add(Record("cpu0", BatchSpec("bert", 1), 15.0, solo_latency_ms=10.0,
...                    co_runners=(CoRunner("mlp", 2, overlap=0.8),)))
>>> [(r.model, r.co_runner, r.count, r.mean) for r in summary.rows()]
[('bert', '-', 1, 1.2), ('bert', 'mlp', 1, 1.5)]
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from predictor.records.logio import iter_records
from predictor.records.record import Record

NO_CO_RUNNER = "-"


@dataclass
class PairRow:
    """Slowdown statistics of one (model, co-runner) pair."""

    model: str
    co_runner: str
    count: int
    mean: float
    p95: float
    mean_overlap: float


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation quantile of already sorted values."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass
class SlowdownSummary:
    """Accumulates records (a sink) and reports slowdown per model pair."""

    records: int = 0
    without_solo: int = 0
    _slowdowns: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    _overlaps: dict[tuple[str, str], float] = field(default_factory=dict)

    def add(self, record: Record) -> None:
        """Count ``record``; usable as a tracker sink."""
        self.records += 1
        slowdown = record.slowdown
        if slowdown is None:
            self.without_solo += 1
            return
        main = max(record.co_runners, key=lambda c: c.overlap, default=None)
        key = (record.batch.model, main.model if main is not None else NO_CO_RUNNER)
        self._slowdowns.setdefault(key, []).append(slowdown)
        self._overlaps[key] = self._overlaps.get(key, 0.0) + (main.overlap if main is not None else 0.0)

    __call__ = add

    def rows(self) -> list[PairRow]:
        """One row per pair, sorted by model then co-runner (``-`` first)."""
        out = []
        for key in sorted(self._slowdowns, key=lambda k: (k[0], k[1] != NO_CO_RUNNER, k[1])):
            values = sorted(self._slowdowns[key])
            out.append(
                PairRow(
                    key[0],
                    key[1],
                    len(values),
                    sum(values) / len(values),
                    _quantile(values, 0.95),
                    self._overlaps[key] / len(values),
                )
            )
        return out

    def overall(self, co_located: bool) -> tuple[int, float, float]:
        """Count, mean and p95 slowdown of the records with (or without) co-runners."""
        values = sorted(
            v for key, vs in self._slowdowns.items() if (key[1] != NO_CO_RUNNER) == co_located for v in vs
        )
        if not values:
            return 0, math.nan, math.nan
        return len(values), sum(values) / len(values), _quantile(values, 0.95)

    def table(self, title: str = "Slowdown per model pair") -> object:
        """The summary as a ``rich.table.Table`` (mean and p95 slowdown, mean overlap of the main co-runner)."""
        from rich.table import Table  # rich only when printing: predictor.cli imports this module

        table = Table(title=title)
        for name, justify in (
            ("model", "left"),
            ("co-runner", "left"),
            ("records", "right"),
            ("mean", "right"),
            ("p95", "right"),
            ("overlap", "right"),
        ):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for row in self.rows():
            table.add_row(
                row.model,
                row.co_runner,
                str(row.count),
                f"{row.mean:.3f}",
                f"{row.p95:.3f}",
                f"{row.mean_overlap:.2f}" if row.co_runner != NO_CO_RUNNER else "",
            )
        for label, co_located in (("alone", False), ("co-located", True)):
            count, mean, p95 = self.overall(co_located)
            if count:
                table.add_row(f"({label})", "", str(count), f"{mean:.3f}", f"{p95:.3f}", "", style="bold")
        return table

    def markdown(self) -> str:
        """The rows as a Markdown table (for a README)."""
        lines = [
            "| model | co-runner | records | mean slowdown | p95 slowdown | mean overlap |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for row in self.rows():
            overlap = f"{row.mean_overlap:.2f}" if row.co_runner != NO_CO_RUNNER else ""
            lines.append(
                f"| {row.model} | {row.co_runner} | {row.count} | {row.mean:.3f} | {row.p95:.3f} | {overlap} |"
            )
        for label, co_located in (("alone", False), ("co-located", True)):
            count, mean, p95 = self.overall(co_located)
            if count:
                lines.append(f"| **all {label}** | | {count} | {mean:.3f} | {p95:.3f} | |")
        return "\n".join(lines)


def summarize(records: Iterable[Record]) -> SlowdownSummary:
    """The summary of ``records``."""
    summary = SlowdownSummary()
    for record in records:
        summary.add(record)
    return summary


def main(argv: list[str] | None = None) -> int:
    """``python -m collectors.summary LOG [--markdown]``: print a log's slowdown per model pair."""
    parser = argparse.ArgumentParser(prog="python -m collectors.summary", description=main.__doc__)
    parser.add_argument("log", help="a coloc/v1 JSONL log (.gz allowed)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    summary = summarize(iter_records(args.log))
    if args.markdown:
        print(summary.markdown())
    else:
        from rich.console import Console  # rich only when printing: predictor.cli imports this module

        Console().print(summary.table(f"{os.path.basename(args.log)}: {summary.records} records"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
