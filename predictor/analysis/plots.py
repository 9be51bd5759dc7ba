"""PNG plots of evaluation results (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from predictor.prequential.evaluation import Scored, rolling_mean


def _pyplot():
    import matplotlib  # heavy: only the plotting commands need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display

    return plt


def error_cdf(results: dict[str, Scored], title: str, path: Path) -> Path:
    """Empirical CDF of the relative error, one line per predictor."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, scored in results.items():
        errors = np.sort(scored.relative_errors()) * 100
        if errors.size:
            ax.plot(errors, np.arange(1, errors.size + 1) / errors.size, label=name)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("relative error (%)")
    ax.set_ylabel("fraction of batches")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def rolling_error(results: dict[str, Scored], title: str, path: Path, window: int = 200) -> Path:
    """Rolling mean relative error over the scored stream, one line per predictor."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, scored in results.items():
        errors = scored.relative_errors() * 100
        if errors.size:
            ax.plot(rolling_mean(errors, window), label=name, linewidth=1)
    ax.set_xlabel("scored record")
    ax.set_ylabel(f"rolling MAPE over {window} (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
