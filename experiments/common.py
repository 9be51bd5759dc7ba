"""Shared plumbing for experiment scripts: config, seed, output folder, results.

Every study is a small frozen dataclass config; :func:`start` parses
``--seed``/``--out`` (and any config field as ``--field value``), creates
the output folder and writes the resolved configuration there; :func:`finish`
writes the results JSON next to it. Paths inside the repository are recorded
relative to it (:func:`relative`), so that results do not name the machine
that produced them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import time
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from predictor.runtime import threads

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
DEFAULT_DATASET = ROOT / "predictor" / "data" / "cpu-default.jsonl.gz"

Config = TypeVar("Config")


def start(name: str, config: Config, description: str) -> tuple[Config, Path]:
    """Parse the command line into ``config``, seed everything, write ``config.json``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", default=str(RESULTS / name), help="results folder")
    parser.add_argument("--blas-threads", type=int, default=None, metavar="N",
                        help=f"BLAS threads (default ${threads.ENV_VAR}, else 1; 0 = leave as is)")
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, field.name)
        kind = parse_bool if isinstance(value, bool) else type(value) if not isinstance(value, tuple) else str
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=kind, default=None,
                            help=f"default {value!r}")
    args = parser.parse_args()
    threads.pin_blas_threads(args.blas_threads)
    overrides = {}
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        raw = getattr(args, field.name)
        if raw is None:
            continue
        current = getattr(config, field.name)
        if isinstance(current, tuple):
            raw = tuple(type(current[0])(x) if current else x for x in str(raw).split(","))
        overrides[field.name] = raw
    config = dataclasses.replace(config, **overrides)  # type: ignore[type-var]
    seed = getattr(config, "seed", 0)
    random.seed(seed)
    np.random.seed(seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    resolved = {"study": name, "config": portable(dataclasses.asdict(config)), "machine": machine(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}  # type: ignore[call-overload]
    (out / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")
    return config, out


def parse_bool(text: str) -> bool:
    """``true``/``false`` (also yes/no, 1/0) from the command line."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def finish(out: Path, results: dict[str, Any]) -> Path:
    """Write ``results.json`` into ``out`` and return its path."""
    path = out / "results.json"
    path.write_text(json.dumps(portable(results), indent=2, default=float) + "\n")
    print(f"results written to {relative(path)}")
    return path


def relative(path: str | Path) -> str:
    """``path`` relative to the repository when it lies inside it, else as given.

    >>> relative(ROOT / "predictor" / "data" / "cpu-default.jsonl.gz")
    'predictor/data/cpu-default.jsonl.gz'
    >>> relative("/elsewhere/data.jsonl"), relative("runs/a.jsonl")
    ('/elsewhere/data.jsonl', 'runs/a.jsonl')
    """
    candidate = Path(path)
    if not candidate.is_absolute():
        return str(path)
    try:
        return candidate.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def portable(value: Any) -> Any:
    """``value`` with every absolute path string inside the repository made relative (recursively).

    >>> portable({"log": str(ROOT / "experiments" / "data" / "x.jsonl.gz"), "n": [1, "/tmp/y"]})
    {'log': 'experiments/data/x.jsonl.gz', 'n': [1, '/tmp/y']}
    """
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(item) for item in value]
    if isinstance(value, Path) or (isinstance(value, str) and value.startswith(str(ROOT) + "/")):
        return relative(value)
    return value


def machine() -> dict[str, Any]:
    """What ran the study (for the record next to the figures)."""
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    blas = sorted(set(threads.blas_threads().values()))
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "blas_threads": blas}


def plot_against_load(results: dict[str, Any], group: str, panels: tuple[tuple[str, str, float], ...],
                      path: Path, title: str, *, xlabel: str = "offered load",
                      figsize: tuple[float, float] = (15, 3.4), legend_size: int = 7,
                      percent_ylabel: bool = False) -> None:
    """One panel per metric against load, a line per member of ``group``.

    ``results["loads"][load][group][member][key]`` holds the figures; each panel is
    ``(key, title, scale)`` (scale 100 for shares shown in %, with a "%" axis label when
    ``percent_ylabel``).
    """
    import matplotlib  # heavy: only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg")

    loads = [float(k) for k in results["loads"]]
    members = list(next(iter(results["loads"].values()))[group])
    fig, axes = plt.subplots(1, len(panels), figsize=figsize)
    for ax, (key, label, scale) in zip(axes, panels, strict=True):
        for member in members:
            ax.plot(loads, [scale * results["loads"][k][group][member][key] for k in results["loads"]],
                    marker="o", label=member)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel(xlabel)
        if percent_ylabel and scale == 100:
            ax.set_ylabel("%")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=legend_size)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
