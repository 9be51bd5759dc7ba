"""Study 2: drift. How each predictor's error follows a workload whose mix and rate change mid-run.

Runs on every collection that was recorded with a schedule: a collection
``experiments/data/NAME.jsonl.gz`` has one when ``NAME.schedule`` lies next to
it, holding the ``--schedule`` text it was recorded with (``collect_all.sh``
writes it). Each predictor is replayed prequentially (predict, then learn) in
stream order, and its relative error smoothed by a trailing mean over
``window`` observations: the rolling error plotted over time.

**Change points.** A phase of the schedule starting at ``at`` seconds starts,
in the log's clock, at ``t0 + at`` where ``t0`` is the ``start_s`` of the first
record (the load starts a few ms before the first batch closes). Where the new
phase brings a model the previous one did not run, the change point is instead
the ``start_s`` of the first batch of such a model (looked for from 2 s before
the scheduled time on), which is when the new
workload is seen (requests already queued finish in the old mix); the two are
reported side by side. A change point's index is that of the first record
starting at or after it.

**Recovery time** of a predictor after a change, in observations: let ``L``
be its rolling error just before the change; if the rolling error rises above
``tolerance x L`` after the change, the recovery time is the number of
observations from the change until it is back within ``tolerance x L`` (1.2 by
default), searched up to the next change (``null`` when it never comes back
in the phase); 0 when it never left. Since the new phase may be intrinsically
easier or harder than the old, each phase's settled error (mean over the last
``window`` observations of the phase) is reported too.

**Degradation** of a predictor at a change: its mean error over the phase after
the change divided by that over the phase before (``static``, fitted once on
the first records, cannot adapt).

Run: ``.venv/bin/python -m experiments.studies.drift``
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from collectors.schedule import parse_schedule
from experiments.common import finish, start
from experiments.datasets import COLLECTED, load
from predictor.predictors import create
from predictor.prequential.evaluation import rolling_mean, run_prequential, summarize
from predictor.records.record import Record

MIX_MARGIN_S = 2.0  # a new model's first batch is looked for from this long before the scheduled change
PREDICTORS = ("static", "ewma:alpha=0.3", "sgd", "rls", "rls:drift_reset=True", "forest", "ensemble")


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    datasets: tuple[str, ...] = ()  # empty: every collection with a NAME.schedule file
    predictors: tuple[str, ...] = PREDICTORS
    window: int = 100
    tolerance: float = 1.2
    recovery_of: tuple[str, ...] = ("rls", "sgd", "rls:drift_reset=True")
    seed: int = 0


def scheduled_names() -> list[str]:
    """The collections under ``experiments/data`` that have a ``NAME.schedule`` file."""
    return sorted(p.name.removesuffix(".schedule") for p in COLLECTED.glob("*.schedule")
                  if (COLLECTED / f"{p.name.removesuffix('.schedule')}.jsonl.gz").exists())


def change_points(records: list[Record], schedule_text: str) -> list[dict]:
    """Each phase change: its scheduled time, the time seen in the model mix, and the record index."""
    phases = parse_schedule(schedule_text)
    t0 = records[0].start_s
    starts = np.array([r.start_s for r in records])
    points = []
    for before, after in zip(phases, phases[1:], strict=False):
        scheduled = t0 + after.start_s
        new_models = set(after.models) - set(before.models)
        seen = next((r.start_s for r in records
                     if r.start_s >= scheduled - MIX_MARGIN_S and r.batch.model in new_models), None)
        at = seen if seen is not None else scheduled
        points.append({
            "phase_start_s": after.start_s,
            "scheduled_s": scheduled - t0,
            "seen_in_mix_s": None if seen is None else seen - t0,
            "used_s": at - t0,
            "index": int(np.searchsorted(starts, at, side="left")),
            "models": list(after.models),
            "rate": after.rate,
        })
    return points


def recovery(curve: np.ndarray, change: int, end: int, tolerance: float) -> int | None:
    """Observations after ``change`` until ``curve`` is back within ``tolerance`` x its level before."""
    level = curve[change - 1]
    after = curve[change:end]
    above = np.flatnonzero(after > tolerance * level)
    if not above.size:
        return 0
    back = np.flatnonzero(after[above[0]:] <= tolerance * level)
    return None if not back.size else int(above[0] + back[0] + 1)


def study(name: str, records: list[Record], schedule_text: str, config: Config, out: Path) -> dict:
    """Change points, and per predictor its phase errors, degradation and recovery; plots rolling errors."""
    points = change_points(records, schedule_text)
    bounds = [0] + [p["index"] for p in points] + [len(records)]
    t0 = records[0].start_s
    times = np.array([r.start_s - t0 for r in records])
    result: dict = {"records": len(records), "schedule": schedule_text, "change_points": points, "predictors": {}}
    curves = {}
    for spec in config.predictors:
        scored = run_prequential(create(spec, seed=config.seed), records)
        errors = scored.relative_errors()
        curve = rolling_mean(errors, config.window)
        curves[spec] = curve
        phases = [float(errors[a:b].mean()) for a, b in zip(bounds, bounds[1:], strict=False)]
        settled = [float(errors[max(a, b - config.window):b].mean()) for a, b in zip(bounds, bounds[1:], strict=False)]
        entry = {
            "overall": summarize(scored),
            "phase_mape": phases,
            "phase_settled_mape": settled,
            "degradation": [phases[i + 1] / phases[i] for i in range(len(points))],
            "level_before_change": [float(curve[p["index"] - 1]) for p in points],
            "peak_after_change": [float(curve[p["index"]:bounds[i + 2]].max()) for i, p in enumerate(points)],
        }
        entry["recovery_obs"] = [recovery(curve, p["index"], bounds[i + 2], config.tolerance)
                                 for i, p in enumerate(points)]
        # the same in seconds of the run
        entry["recovery_s"] = [None if k is None else float(times[min(p["index"] + k, len(times) - 1)] - times[p["index"]])
                               for k, p in zip(entry["recovery_obs"], points, strict=True)]
        result["predictors"][spec] = entry
        print(f"{name} {spec}: phase MAPE {', '.join(f'{100 * m:.1f}%' for m in phases)}; "
              f"recovery {entry['recovery_obs']}")
    plot(name, times, curves, points, config, out / f"{name}-rolling.png")
    return result


def plot(name: str, times: np.ndarray, curves: dict, points: list[dict], config: Config, path: Path) -> None:
    """Rolling error of every predictor over time, with the change points dashed."""
    import matplotlib  # heavy: matplotlib only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg")

    fig, ax = plt.subplots(figsize=(8, 4.4))
    for spec, curve in curves.items():
        ax.plot(times, 100 * curve, label=spec, linewidth=1)
    for p in points:
        ax.axvline(p["used_s"], color="k", linestyle="--", linewidth=0.8)
        ax.text(p["used_s"], 0.02, f" {','.join(p['models'])} @{p['rate']:g}/s", rotation=90, va="bottom",
                ha="left", fontsize=7, transform=ax.get_xaxis_transform())
    ax.set_yscale("log")
    ax.set_xlabel("time since the first batch (s)")
    ax.set_ylabel(f"rolling MAPE over {config.window} batches (%)")
    ax.set_title(f"{name}: prequential rolling error (dashed: workload changes)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=4, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def pct(value: float | None) -> str:
    """``value`` as a percentage with one decimal; a dash for ``None`` or NaN."""
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}%"


def markdown(name: str, result: dict, config: Config) -> str:
    """A collection's change points and its table of phase errors, degradation and recovery."""
    points = result["change_points"]
    lines = [f"## {name} ({result['records']} batches; schedule `{result['schedule']}`)", "",
             "Change points: " + "; ".join(
                 f"{p['used_s']:.1f} s (scheduled {p['scheduled_s']:.1f} s, record #{p['index']}) -> "
                 f"{','.join(p['models'])} @ {p['rate']:g}/s" for p in points), ""]
    n_phases = len(points) + 1
    header = ("| predictor | " + " | ".join(f"phase {i + 1} MAPE" for i in range(n_phases)) + " | "
              + " | ".join(f"after change {i + 1}: x before | recovery (obs) " for i in range(len(points))) + "|")
    lines += [header, "|---|" + "---:|" * (n_phases + 2 * len(points))]
    for spec, e in result["predictors"].items():
        cells = [pct(m) for m in e["phase_mape"]]
        for i in range(len(points)):
            rec = e["recovery_obs"][i]
            cells += [f"{e['degradation'][i]:.2f}",
                      "not in phase" if rec is None else (f"{rec} ({e['recovery_s'][i]:.1f} s)" if rec else "0")]
        lines.append(f"| {spec} | " + " | ".join(cells) + " |")
    lines += ["", f"Recovery: observations until the rolling error (window {config.window}) is back within "
              f"{config.tolerance:g}x its level before the change (0: it never rose above that). "
              "x before: phase MAPE after the change over the phase before."]
    return "\n".join(lines)


def main() -> None:
    """Study every scheduled collection; print, plot, write ``results.md`` and ``results.json``."""
    config, out = start("drift", Config(), __doc__.splitlines()[0])
    names = list(config.datasets) or scheduled_names()
    if not names:
        raise SystemExit("no collection with a schedule found under experiments/data (see collect_all.sh)")
    results: dict = {"datasets": {}}
    text = ["# Drift: prequential rolling error across workload changes", ""]
    for name, records in load(names).items():
        schedule_text = (COLLECTED / f"{name}.schedule").read_text().strip()
        results["datasets"][name] = study(name, records, schedule_text, config, out)
        text += [markdown(name, results["datasets"][name], config), ""]
    print("\n".join(text))
    (out / "results.md").write_text("\n".join(text) + "\n")
    finish(out, results)


if __name__ == "__main__":
    main()
