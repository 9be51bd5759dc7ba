"""Study 3: concurrency beyond two. Each predictor's error as 2, 3 and 4 batches run at once.

The paper stops at two concurrent batches. Here the same workload (all six
models, 40 requests/s, same seed) was recorded with 2, 3 and 4 worker
processes (``collect_all.sh``; the 2-worker run is ``cpu-load-medium``, the
very same command). Every predictor is scored on each, under the 75/25 split
and prequentially. Also reported per collection: the mean number of co-runners
and the mean slowdown over solo latency, which say how much more interference
there is to predict.

Run: ``.venv/bin/python -m experiments.concurrency``
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from experiments.common import finish, start
from experiments.datasets import load
from predictor.evaluation import run_prequential, run_split, summarize
from predictor.predictors import create
from predictor.records import Record

PREDICTORS = ("solo", "static", "ewma:alpha=0.3", "sgd", "rls", "forest", "ensemble")


@dataclasses.dataclass(frozen=True)
class Config:
    workers: tuple[int, ...] = (2, 3, 4)
    datasets: tuple[str, ...] = ("cpu-load-medium", "cpu-workers-3", "cpu-workers-4")  # one per workers entry
    predictors: tuple[str, ...] = PREDICTORS
    split: float = 0.75
    seed: int = 0


def describe(records: list[Record]) -> dict:
    slowdowns = np.array([r.slowdown for r in records if r.slowdown is not None])
    co = np.array([len(r.co_runners) for r in records])
    overlap = np.array([sum(c.overlap for c in r.co_runners) for r in records])
    return {"records": len(records), "mean_co_runners": float(co.mean()), "mean_overlap_sum": float(overlap.mean()),
            "co_located_fraction": float((co > 0).mean()), "mean_slowdown": float(slowdowns.mean()),
            "p95_slowdown": float(np.percentile(slowdowns, 95))}


def plot(results: dict, predictors: tuple[str, ...], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workers = [int(w) for w in results["workers"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, protocol in zip(axes, ("split", "prequential"), strict=True):
        for spec in predictors:
            ax.plot(workers, [100 * results["workers"][str(w)][protocol][spec]["mape"] for w in workers],
                    marker="o", label=spec)
        ax.set_title(f"{protocol}")
        ax.set_xlabel("concurrent workers")
        ax.set_xticks(workers)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("MAPE (%)")
    axes[1].legend(fontsize=7)
    fig.suptitle("Relative error as concurrency grows (CPU, 6 models, 40 req/s)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def markdown(results: dict, predictors: tuple[str, ...]) -> str:
    workers = list(results["workers"])
    lines = ["| workers | dataset | batches | mean co-runners | co-located | mean slowdown | p95 slowdown |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for w in workers:
        d = results["workers"][w]
        s = d["data"]
        lines.append(f"| {w} | {d['dataset']} | {s['records']} | {s['mean_co_runners']:.2f} | "
                     f"{s['co_located_fraction']:.0%} | {s['mean_slowdown']:.2f} | {s['p95_slowdown']:.2f} |")
    for protocol in ("split", "prequential"):
        lines += ["", f"MAPE ({protocol}; p95 of the relative error in brackets):", "",
                  "| predictor | " + " | ".join(f"{w} workers" for w in workers) + " |",
                  "|---|" + "---:|" * len(workers)]
        best = {w: min(results["workers"][w][protocol][p]["mape"] for p in predictors) for w in workers}
        for spec in predictors:
            cells = []
            for w in workers:
                s = results["workers"][w][protocol][spec]
                cell = f"{100 * s['mape']:.1f}% ({100 * s['p95']:.0f}%)"
                cells.append(f"**{cell}**" if s["mape"] == best[w] else cell)
            lines.append(f"| {spec} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    config, out = start("concurrency", Config(), __doc__.splitlines()[0])
    if len(config.workers) != len(config.datasets):
        raise SystemExit("give one dataset per workers entry")
    loaded = load(list(config.datasets))
    results: dict = {"workers": {}}
    for workers, name in zip(config.workers, config.datasets, strict=True):
        if name not in loaded:
            continue
        records = loaded[name]
        entry: dict = {"dataset": name, "data": describe(records)}
        for protocol in ("split", "prequential"):
            entry[protocol] = {}
            for spec in config.predictors:
                predictor = create(spec, seed=config.seed)
                scored = (run_split(predictor, records, split=config.split, seed=config.seed) if protocol == "split"
                          else run_prequential(predictor, records))
                entry[protocol][spec] = summarize(scored)
                print(f"{workers} workers ({name}) {protocol} {spec}: MAPE {100 * entry[protocol][spec]['mape']:.1f}%")
        results["workers"][str(workers)] = entry
    text = "# Concurrency: error per predictor with 2, 3 and 4 workers\n\n" + markdown(results, config.predictors)
    print(text)
    (out / "results.md").write_text(text + "\n")
    plot(results, config.predictors, out / "mape-vs-workers.png")
    finish(out, results)


if __name__ == "__main__":
    main()
