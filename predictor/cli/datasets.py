"""Short names of the datasets shipped inside the package, for the options that take a log.

``predictor serve --warm-start embedded`` and ``predictor demo --warm-start embedded`` read
the CPU dataset installed with the package (``predictor/data/cpu-default.jsonl.gz``), wherever
the package is installed; any other value is a path to a ``coloc/v1`` log.

Examples
--------
>>> resolve_log("runs/cpu.jsonl.gz")
'runs/cpu.jsonl.gz'
>>> resolve_log("embedded").endswith("cpu-default.jsonl.gz")
True
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
EMBEDDED_DATASET = DATA_DIR / "cpu-default.jsonl.gz"
"""The CPU dataset recorded with ``predictor collect`` and shipped in the package."""
EMBEDDED_NAMES = {"embedded": EMBEDDED_DATASET, "cpu-default": EMBEDDED_DATASET}
"""Names accepted in place of a log path, each with the shipped file it stands for."""


def resolve_log(value: str, option: str = "--warm-start") -> str:
    """The path of the log ``value`` names: a shipped dataset's file for one of :data:`EMBEDDED_NAMES`,
    else ``value`` itself.

    Raises
    ------
    FileNotFoundError
        ``value`` names a shipped dataset that this installation lacks; the message names ``option``.
    """
    path = EMBEDDED_NAMES.get(value)
    if path is None:
        return value
    if not path.is_file():
        raise FileNotFoundError(
            f"{option} {value}: the embedded dataset is not installed at {path}; give a log's path instead"
        )
    return str(path)
