"""Study 3: concurrency beyond two. Each predictor's error as 2, 3 and 4 batches run at once.

The paper stops at two concurrent batches. Here the same workload (all six
models, same seed) was recorded with 2, 3 and 4 worker processes, in two
series (``collect_all.sh``): at 40 requests/s (the 2-worker run is
``cpu-load-medium``, the very same command) and at 90 requests/s (2 workers:
``cpu-load-high``), where every worker stays busy so that more workers really
means more co-runners. Every predictor is scored on each collection, under the
75/25 split and prequentially. Also reported per collection: the mean number
of co-runners, the fraction of co-located batches and the slowdown over solo
latency, which say how much interference there is to predict.

Since the realised concurrency of a run depends on how busy its workers are
(not only on how many there are), the prequential errors of every collection of
a series are also pooled and grouped by the number of co-runners each batch
actually had (0, 1, 2, 3 or more): the error as realised concurrency grows.

A series is ``label=dataset+dataset+...``, one dataset per entry of
``workers``.

Run: ``.venv/bin/python -m experiments.studies.concurrency``
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from experiments.common import finish, start
from experiments.datasets import load
from predictor.predictors import create
from predictor.prequential.evaluation import run_prequential, run_split, summarize
from predictor.records.record import Record

COUNT_BUCKETS = ("0", "1", "2", "3+")
PREDICTORS = ("solo", "static", "ewma:alpha=0.3", "sgd", "rls", "forest", "ensemble")


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    workers: tuple[int, ...] = (2, 3, 4)
    series: tuple[str, ...] = ("40/s=cpu-load-medium+cpu-workers-3+cpu-workers-4",
                               "90/s=cpu-load-high+cpu-workers-3-r90+cpu-workers-4-r90")
    predictors: tuple[str, ...] = PREDICTORS
    split: float = 0.75
    seed: int = 0


def describe(records: list[Record]) -> dict:
    """How much interference a collection holds: co-runners, co-located fraction, slowdown."""
    slowdowns = np.array([r.slowdown for r in records if r.slowdown is not None])
    co = np.array([len(r.co_runners) for r in records])
    overlap = np.array([sum(c.overlap for c in r.co_runners) for r in records])
    return {"records": len(records), "mean_co_runners": float(co.mean()), "mean_overlap_sum": float(overlap.mean()),
            "co_located_fraction": float((co > 0).mean()), "mean_slowdown": float(slowdowns.mean()),
            "p95_slowdown": float(np.percentile(slowdowns, 95))}


def plot(results: dict, predictors: tuple[str, ...], path: Path) -> None:
    """MAPE against the number of workers, one row per series, split and prequential side by side."""
    import matplotlib  # heavy: matplotlib only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg")

    series = list(results["series"])
    fig, axes = plt.subplots(len(series), 2, figsize=(10, 3.4 * len(series)), sharey="row", squeeze=False)
    for row, label in zip(axes, series, strict=True):
        points = results["series"][label]
        workers = [int(w) for w in points]
        for ax, protocol in zip(row, ("split", "prequential"), strict=True):
            for spec in predictors:
                ax.plot(workers, [100 * points[str(w)][protocol][spec]["mape"] for w in workers],
                        marker="o", label=spec)
            ax.set_title(f"{label}, {protocol}", fontsize=10)
            ax.set_xlabel("concurrent workers")
            ax.set_xticks(workers)
            ax.set_yscale("log")
            ax.grid(alpha=0.3, which="both")
        row[0].set_ylabel("MAPE (%)")
    axes[0][1].legend(fontsize=7)
    fig.suptitle("Relative error as concurrency grows (CPU, all six models)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_by_count(counts: dict, path: Path) -> None:
    """Prequential MAPE against the co-runners a batch actually had, one panel per series."""
    import matplotlib  # heavy: matplotlib only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg")

    fig, axes = plt.subplots(1, len(counts), figsize=(5 * len(counts), 3.6), sharey=True, squeeze=False)
    for ax, (label, by_spec) in zip(axes[0], counts.items(), strict=True):
        for spec, by in by_spec.items():
            buckets = [b for b in COUNT_BUCKETS if b in by]
            ax.plot(buckets, [100 * by[b]["mape"] for b in buckets], marker="o", label=spec)
        ax.set_title(f"{label}: all worker counts pooled, prequential", fontsize=10)
        ax.set_xlabel("co-runners of the batch")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("MAPE (%)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def markdown(label: str, points: dict, predictors: tuple[str, ...]) -> str:
    """A series' collections, then its MAPE tables (split, prequential), the best per column in bold."""
    workers = list(points)
    lines = [f"## {label}", "",
             "| workers | dataset | batches | mean co-runners | co-located | mean slowdown | p95 slowdown |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for w in workers:
        d = points[w]
        s = d["data"]
        lines.append(f"| {w} | {d['dataset']} | {s['records']} | {s['mean_co_runners']:.2f} | "
                     f"{s['co_located_fraction']:.0%} | {s['mean_slowdown']:.2f} | {s['p95_slowdown']:.2f} |")
    for protocol in ("split", "prequential"):
        lines += ["", f"MAPE ({protocol}; p95 of the relative error in brackets):", "",
                  "| predictor | " + " | ".join(f"{w} workers" for w in workers) + " |",
                  "|---|" + "---:|" * len(workers)]
        best = {w: min(points[w][protocol][p]["mape"] for p in predictors) for w in workers}
        for spec in predictors:
            cells = []
            for w in workers:
                s = points[w][protocol][spec]
                cell = f"{100 * s['mape']:.1f}% ({100 * s['p95']:.0f}%)"
                cells.append(f"**{cell}**" if s["mape"] == best[w] else cell)
            lines.append(f"| {spec} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def by_count_markdown(counts: dict) -> str:
    """Prequential MAPE per predictor and co-runner count, with the batches in each bucket."""
    buckets = [b for b in COUNT_BUCKETS if b in next(iter(counts.values()))]
    first = next(iter(counts.values()))
    lines = ["Prequential MAPE by the number of co-runners a batch had (all collections of the series pooled):", "",
             "| predictor | " + " | ".join(f"{b} co-runners (n = {first[b]['n']})" for b in buckets) + " |",
             "|---|" + "---:|" * len(buckets)]
    for spec, by in counts.items():
        lines.append(f"| {spec} | " + " | ".join(f"{100 * by[b]['mape']:.1f}%" for b in buckets) + " |")
    return "\n".join(lines)


def main() -> None:
    """Score every predictor on every series; print, plot, write ``results.md`` and ``results.json``."""
    config, out = start("concurrency", Config(), __doc__.splitlines()[0])
    results: dict = {"series": {}}
    text = ["# Concurrency: error per predictor with 2, 3 and 4 workers", ""]
    for entry in config.series:
        label, _, names = entry.partition("=")
        names = names.split("+")
        if len(names) != len(config.workers):
            raise SystemExit(f"series {label}: give one dataset per workers entry ({len(config.workers)})")
        loaded = load(names)
        points: dict = {}
        by_count: dict = {spec: {} for spec in config.predictors}
        for workers, name in zip(config.workers, names, strict=True):
            if name not in loaded:
                continue
            records = loaded[name]
            point: dict = {"dataset": name, "data": describe(records)}
            for protocol in ("split", "prequential"):
                point[protocol] = {}
                for spec in config.predictors:
                    predictor = create(spec, seed=config.seed)
                    scored = (run_split(predictor, records, split=config.split, seed=config.seed)
                              if protocol == "split" else run_prequential(predictor, records))
                    point[protocol][spec] = summarize(scored)
                    if protocol == "prequential":
                        for record, error in zip(records, scored.relative_errors(), strict=True):
                            bucket = COUNT_BUCKETS[min(len(record.co_runners), len(COUNT_BUCKETS) - 1)]
                            by_count[spec].setdefault(bucket, []).append(float(error))
                    print(f"{label} {workers} workers ({name}) {protocol} {spec}: "
                          f"MAPE {100 * point[protocol][spec]['mape']:.1f}%")
            points[str(workers)] = point
        if points:
            results["series"][label] = points
            counts = {spec: {b: {"mape": float(np.mean(e)), "n": len(e)} for b, e in sorted(buckets.items())}
                      for spec, buckets in by_count.items()}
            results.setdefault("by_co_runners", {})[label] = counts
            text += [markdown(label, points, config.predictors), "", by_count_markdown(counts), ""]
    print("\n".join(text))
    (out / "results.md").write_text("\n".join(text) + "\n")
    plot(results, config.predictors, out / "mape-vs-workers.png")
    if results.get("by_co_runners"):
        plot_by_count(results["by_co_runners"], out / "mape-by-co-runners.png")
    finish(out, results)


if __name__ == "__main__":
    main()
