"""Study 1 and 4: the paper's comparison, and beyond linear, on every dataset.

``static``, ``ewma`` at four factors, ``sgd``, ``rls`` (the paper's set), plus
``solo`` (interference ignored) and the non-linear ``forest`` and the
``ensemble`` that follows the recently best expert; under the 75/25 split
and prequentially. Writes a table per dataset and protocol, relative-error
CDF plots, and ``results.json``.

Run: ``.venv/bin/python -m experiments.studies.paper_comparison``
"""

from __future__ import annotations

import dataclasses

from experiments.common import finish, start
from experiments.datasets import collected_names, load
from experiments.report import markdown_table
from predictor.analysis.plots import error_cdf
from predictor.predictors import create
from predictor.prequential.evaluation import run_prequential, run_split, summarize

PREDICTORS = (
    "solo", "static", "ewma:alpha=0.1", "ewma:alpha=0.3", "ewma:alpha=0.5", "ewma:alpha=0.9",
    "sgd", "rls", "forest", "ensemble",
)


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    datasets: tuple[str, ...] = ("cpu-default", "igniter", "gpulet")
    data: str = ""  # folder holding igniter-v100/ and gpulet-ampere/ (empty: $INTERFERENCE_DATA)
    include_collected: bool = True
    predictors: tuple[str, ...] = PREDICTORS
    split: float = 0.75
    seed: int = 0


def overview(datasets: dict, protocol: str) -> str:
    """MAPE (%) of every predictor on every dataset under ``protocol``; the best per dataset in bold."""
    specs = list(next(iter(datasets.values()))[protocol])
    lines = [f"MAPE (%), {protocol}:", "", "| dataset | " + " | ".join(specs) + " |", "|---|" + "---:|" * len(specs)]
    for name, result in datasets.items():
        mapes = [result[protocol][spec]["mape"] for spec in specs]
        best = min(mapes)
        lines.append(f"| {name} | " + " | ".join(f"**{100 * m:.1f}**" if m == best else f"{100 * m:.1f}"
                                                  for m in mapes) + " |")
    return "\n".join(lines)


def main() -> None:
    """Score every predictor on every dataset under both protocols; write tables, CDF plots and results."""
    config, out = start("paper_comparison", Config(), __doc__.splitlines()[0])
    names = list(config.datasets) + (collected_names() if config.include_collected else [])
    datasets = load(list(dict.fromkeys(names)), config.data)
    results: dict = {"datasets": {}}
    lines = ["# Paper comparison: relative error per predictor", ""]
    for name, records in datasets.items():
        results["datasets"][name] = {}
        for protocol in ("split", "prequential"):
            scored = {}
            for spec in config.predictors:
                predictor = create(spec, seed=config.seed)
                if protocol == "split":
                    scored[spec] = run_split(predictor, records, split=config.split, seed=config.seed)
                else:
                    scored[spec] = run_prequential(predictor, records)
            summaries = {spec: summarize(s) for spec, s in scored.items()}
            results["datasets"][name][protocol] = summaries
            error_cdf(scored, f"{name} ({protocol})", out / f"{name}-{protocol}-cdf.png")
            lines += [f"## {name}, {protocol} (n = {next(iter(summaries.values()))['n']})", "",
                      markdown_table(summaries), ""]
            print("\n".join(lines[-4:]))
    lines[2:2] = [overview(results["datasets"], protocol) + "\n" for protocol in ("split", "prequential")]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    finish(out, results)


if __name__ == "__main__":
    main()
