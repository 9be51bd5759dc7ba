"""Markdown tables of evaluation summaries, for the README."""

from __future__ import annotations

import math

COLUMNS = (("mape", "MAPE"), ("p50", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"),
           ("under_rate", "under"))


def percent(value: float) -> str:
    """``value`` as a percentage with two decimals; a dash for ``None`` or NaN."""
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.2f}%"


def markdown_table(summaries: dict[str, dict]) -> str:
    """One row per predictor; the best MAPE in bold."""
    best = min(s["mape"] for s in summaries.values())
    header = "| predictor | " + " | ".join(label for _, label in COLUMNS) + " | n |"
    rule = "|---|" + "---:|" * (len(COLUMNS) + 1)
    rows = []
    for name, s in summaries.items():
        cells = [percent(s[key]) for key, _ in COLUMNS]
        if s["mape"] == best:
            cells[0] = f"**{cells[0]}**"
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {s['n']} |")
    return "\n".join([header, rule, *rows])
