"""The report of ``predictor demo``: three plots and a Markdown page tying them together.

:func:`write_report` takes the sample scheduler's decisions (each with its answer, deadline,
warm-up flag and, once the batch ran, its latency) and writes into a folder

- ``prediction_vs_actual.png``: the predicted latency, the bound and the actual latency of each
  dispatched batch over time (log scale), warm-up shaded;
- ``coverage_admission.png``: over time, the share of dispatched batches within their bound and
  the share of decided batches admitted, over a sliding window of decisions, beside the targets;
- ``error_by_co_runners.png``: the error and the coverage of the answers by the number of
  co-runners the query named;
- ``decisions.csv``: every decision, one row each (time, batch, co-runners, answer, deadline,
  warm-up / dispatched / refused / refused but run, actual latency when it ran);
- ``report.md``: the machine's conditions, the summary with its targets, the plots, what other
  admission thresholds would have decided on the same run (:func:`threshold_rows`) and the
  command that reproduces the run.

``python -m predictor.cli.demo_report DIR...`` prints the threshold table of reports already
written (from their ``decisions.csv``).

matplotlib draws off-screen (``Agg``); it is imported only here, so the demo without a report
never loads it.
"""

from __future__ import annotations

import csv
import math
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WINDOW = 50  # decisions per point of the sliding-window curves
THRESHOLDS = (0.5, 0.7, 0.8, 0.9, 0.95)
"""Admission thresholds (on the probability of meeting the deadline) the report compares."""


def _rolling(flags: Sequence[float], window: int) -> list[float]:
    """The mean of the last ``window`` values at each position (fewer at the start)."""
    out, total = [], 0.0
    for i, value in enumerate(flags):
        total += value
        if i >= window:
            total -= flags[i - window]
        out.append(total / min(i + 1, window))
    return out


def _shade_warmup(ax: Any, decisions: Sequence[Any]) -> None:
    warm = [d.t_s for d in decisions if d.warmup]
    if warm:
        ax.axvspan(0.0, max(warm), color="0.9", label="warm-up (all dispatched)")


def _prediction_plot(plt: Any, path: Path, decisions: Sequence[Any]) -> None:
    ran = [d for d in decisions if d.ran and (d.feasible or d.warmup)]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    _shade_warmup(ax, decisions)
    t = [d.t_s for d in ran]
    ax.scatter(t, [d.actual_ms for d in ran], s=6, color="black", label="actual latency")
    ax.scatter(t, [d.predicted_ms for d in ran], s=6, color="tab:blue", alpha=0.6, label="predicted before dispatch")
    ax.scatter(t, [d.bound_ms for d in ran], s=4, color="tab:orange", alpha=0.5, marker="_", label="upper bound")
    missed = [d for d in ran if not d.covered]
    ax.scatter([d.t_s for d in missed], [d.actual_ms for d in missed], s=18, facecolors="none",
               edgecolors="red", label="above its bound")
    ax.set_yscale("log")
    ax.set_xlabel("seconds since the first decision")
    ax.set_ylabel("latency (ms)")
    ax.set_title("dispatched batches: prediction, bound and actual latency")
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _coverage_plot(plt: Any, path: Path, decisions: Sequence[Any], targets: Sequence[Any], confidence: float) -> None:
    scored = [d for d in decisions if not d.warmup]
    ran = [d for d in decisions if d.ran and (d.feasible or d.warmup)]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    _shade_warmup(ax, decisions)
    if ran:
        ax.plot([d.t_s for d in ran], [100 * v for v in _rolling([float(d.covered) for d in ran], WINDOW)],
                color="tab:orange", label=f"within the {confidence:g} bound (last {WINDOW} dispatched)")
    if scored:
        ax.plot([d.t_s for d in scored], [100 * v for v in _rolling([float(d.feasible) for d in scored], WINDOW)],
                color="tab:green", label=f"admitted (last {WINDOW} decided)")
    for key, colour in (("bound held", "tab:orange"), ("admitted (", "tab:green")):
        target = next((t for t in targets if key in t.name), None)
        if target is not None and target.low is not None:
            ax.axhline(target.low, color=colour, linestyle="--", linewidth=0.8)
        if target is not None and target.high is not None:
            ax.axhline(target.high, color=colour, linestyle=":", linewidth=0.8)
    ax.set_ylim(0, 101)
    ax.set_xlabel("seconds since the first decision")
    ax.set_ylabel("%")
    ax.set_title("coverage of the bound and admission over time (dashed: targets)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def error_by_co_runners(decisions: Sequence[Any]) -> list[tuple[int, int, float, float]]:
    """``(co-runners, batches, MAPE %, coverage %)`` of the dispatched batches that ran after the
    warm-up, per number of co-runners the query named."""
    groups: dict[int, list[Any]] = {}
    for d in decisions:
        if d.ran and d.feasible and not d.warmup:
            groups.setdefault(d.co_runners, []).append(d)
    rows = []
    for count in sorted(groups):
        ds = groups[count]
        mape = 100 * sum(abs(d.actual_ms - d.predicted_ms) / d.actual_ms for d in ds) / len(ds)
        rows.append((count, len(ds), mape, 100 * sum(d.covered for d in ds) / len(ds)))
    return rows


def threshold_rows(decisions: Sequence[Any], thresholds: Sequence[float] = THRESHOLDS
                   ) -> list[tuple[float, int, int, int, int]]:
    """What each admission threshold would have decided on the batches that ran after the warm-up:
    ``(threshold, ran at or above it, of which met, ran below it, of which met)``.

    A decision needs ``probability``, ``actual_ms``, ``deadline_ms`` and ``warmup``; batches that
    did not run are left out (their outcome is unknown), so a threshold below the one the run used
    is read on the explored refusals only.
    """
    ran = [d for d in decisions if not d.warmup and d.actual_ms == d.actual_ms]
    rows = []
    for threshold in thresholds:
        above = [d.actual_ms <= d.deadline_ms for d in ran if d.probability >= threshold]
        below = [d.actual_ms <= d.deadline_ms for d in ran if d.probability < threshold]
        rows.append((threshold, len(above), sum(above), len(below), sum(below)))
    return rows


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def threshold_table(decisions: Sequence[Any]) -> list[str]:
    """:func:`threshold_rows` as a Markdown table."""
    lines = ["| dispatch when P(meet) >= | batches that ran above | met | ran below | would have met |",
             "|---:|---:|---:|---:|---:|"]
    for threshold, n_above, met_above, n_below, met_below in threshold_rows(decisions):
        lines.append(f"| {threshold:g} | {n_above} | {_pct(met_above, n_above)} | {n_below} "
                     f"| {_pct(met_below, n_below)} |")
    return lines


@dataclass(frozen=True)
class _Row:
    """A decision read back from ``decisions.csv``."""

    probability: float
    deadline_ms: float
    actual_ms: float
    warmup: bool


def read_decisions(path: str | Path) -> list[_Row]:
    """The decisions of a ``decisions.csv`` written by :func:`write_report`."""
    with Path(path).open(newline="") as f:
        return [_Row(float(r["probability"]), float(r["deadline_ms"]),
                     float(r["actual_ms"]) if r["actual_ms"] else math.nan, r["decision"] == "warm-up")
                for r in csv.DictReader(f)]


def _co_runner_plot(plt: Any, path: Path, rows: Sequence[tuple[int, int, float, float]]) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r[0] for r in rows]
    ax.bar([x - 0.2 for x in xs], [r[2] for r in rows], width=0.4, color="tab:blue", label="MAPE (%)")
    ax.bar([x + 0.2 for x in xs], [100 - r[3] for r in rows], width=0.4, color="tab:red",
           label="above the bound (%)")
    for x, n in zip(xs, [r[1] for r in rows], strict=True):
        ax.annotate(f"n={n}", (x, 0), textcoords="offset points", xytext=(0, -24), ha="center", fontsize=8)
    ax.set_xticks(xs)
    ax.set_xlabel("co-runners named by the query (batches in flight)")
    ax.set_ylabel("%")
    ax.set_title("error and misses of the bound by co-runner count (after the warm-up)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _decisions_csv(path: Path, decisions: Sequence[Any]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["t_s", "model", "batch_size", "co_runners", "predicted_ms", "bound_ms", "deadline_ms",
                         "probability", "decision", "actual_ms"])
        for d in decisions:
            decision = ("warm-up" if d.warmup else "dispatched" if d.feasible
                        else "refused, run" if d.explored else "refused")
            writer.writerow([f"{d.t_s:.3f}", d.model, d.batch_size, d.co_runners, f"{d.predicted_ms:.3f}",
                             f"{d.bound_ms:.3f}", f"{d.deadline_ms:.3f}", f"{d.probability:.4f}", decision,
                             "" if not d.ran else f"{d.actual_ms:.3f}"])


def _command(options: Any) -> str:
    words = ["predictor", "demo"]
    if options.short:
        words.append("--short")
    words += ["--duration", f"{options.duration_s:g}", "--warmup", f"{options.warmup:g}"]
    if options.neighbour:
        words += ["--neighbour", f"{options.neighbour:g}"]
    if options.slo != 2.5:
        words += ["--slo", f"{options.slo:g}"]
    if options.confidence != 0.95:
        words += ["--confidence", f"{options.confidence:g}"]
    if options.admit_probability != 0.5:
        words += ["--admit-probability", f"{options.admit_probability:g}"]
    if options.explore != 0.05:
        words += ["--explore", f"{options.explore:g}"]
    if options.warm_start:
        words += ["--warm-start", options.warm_start]
    if options.seed:
        words += ["--seed", str(options.seed)]
    return shlex.join(words)


def write_report(folder: str | Path, options: Any, decisions: Sequence[Any], conditions: Any,
                 targets: Sequence[Any]) -> Path:
    """Write the plots and ``report.md`` into ``folder`` (created if needed); returns the page's path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    _prediction_plot(plt, out / "prediction_vs_actual.png", decisions)
    _coverage_plot(plt, out / "coverage_admission.png", decisions, targets, options.confidence)
    rows = error_by_co_runners(decisions)
    _decisions_csv(out / "decisions.csv", decisions)
    _co_runner_plot(plt, out / "error_by_co_runners.png", rows)
    marks = {True: "met", False: "**MISSED**", None: "-"}
    lines = [
        "# predictor demo: report",
        "",
        f"Command: `{_command(options)}` (Python {sys.version.split()[0]}).",
        "",
        f"Machine: {conditions.line()}.",
        "",
        f"Deadline {options.slo:g} × solo latency; a batch is dispatched when the service's "
        f"`CheckDeadline` gives it a probability of at least {options.admit_probability:g} of meeting "
        f"it (the upper bound, at confidence {options.confidence:g}, is scored for coverage); the first "
        f"{options.warmup:g} s dispatch everything (warm-up, not scored); {options.explore:g} of the "
        "refused batches run anyway, to tell whether they would have met their deadline.",
        "",
        "| figure | value | target | batches | |",
        "|---|---:|---|---:|---|",
    ]
    for t in targets:
        why = t.why if t.met is False else ""
        lines.append(f"| {t.name} | {t.text} | {t.target()} | {t.sample} | {marks[t.met]}{': ' + why if why else ''} |")
    lines += [
        "",
        "## Prediction against actual latency",
        "",
        "![prediction vs actual](prediction_vs_actual.png)",
        "",
        "## Coverage and admission over time",
        "",
        "![coverage and admission](coverage_admission.png)",
        "",
        "## Error by co-runner count",
        "",
        "| co-runners | batches | MAPE | within the bound |",
        "|---:|---:|---:|---:|",
    ]
    lines += [f"| {c} | {n} | {m:.1f}% | {cov:.1f}% |" for c, n, m, cov in rows]
    lines += ["", "![error by co-runner count](error_by_co_runners.png)", ""]
    if not rows:
        lines.insert(-2, "(no dispatched batch ran after the warm-up)")
    lines += ["## Other admission thresholds on this run", "",
              "What dispatching at other thresholds of the probability of meeting the deadline would have "
              "decided on the batches that ran after the warm-up (refused batches that did not run are left "
              "out: their outcome is unknown).", "", *threshold_table(decisions), ""]
    page = out / "report.md"
    page.write_text("\n".join(lines))
    return page


def main(argv: Sequence[str] | None = None) -> int:
    """Print the threshold table of each report folder named."""
    folders = list(sys.argv[1:] if argv is None else argv)
    if not folders:
        print("usage: python -m predictor.cli.demo_report DIR...", file=sys.stderr)
        return 2
    for folder in folders:
        print(f"{folder}:")
        print("\n".join(threshold_table(read_decisions(Path(folder) / "decisions.csv"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
