"""The datasets the studies run on, found by name.

* ``cpu-default``: the embedded dataset shipped in ``predictor/data``;
* ``cpu-*``: collections recorded for the studies, under ``experiments/data``
  (see ``experiments/collect_all.sh`` for the commands);
* ``igniter`` and ``gpulet``: the shared third-party GPU datasets, imported on
  first use into ``experiments/results/_imported`` (skipped when absent).
"""

from __future__ import annotations

from pathlib import Path

from experiments.common import DEFAULT_DATASET, RESULTS, ROOT, SHARED_DATA
from predictor.importers.gpulet import import_gpulet
from predictor.importers.igniter import import_igniter
from predictor.logio import read_records, write_records
from predictor.records import Record

COLLECTED = ROOT / "experiments" / "data"
IMPORTED = RESULTS / "_imported"
SHARED = {
    "igniter": (SHARED_DATA / "igniter-v100" / "gpulet.config", import_igniter),
    "gpulet": (SHARED_DATA / "gpulet-ampere", import_gpulet),
}


def path_of(name: str) -> Path | None:
    """The log for dataset ``name``, importing shared data if needed; None when absent."""
    if name == "cpu-default":
        return DEFAULT_DATASET if DEFAULT_DATASET.exists() else None
    if name in SHARED:
        source, importer = SHARED[name]
        if not source.exists():
            return None
        target = IMPORTED / f"{name}.jsonl.gz"
        if not target.exists():
            IMPORTED.mkdir(parents=True, exist_ok=True)
            write_records(target, importer(source))
        return target
    candidate = COLLECTED / f"{name}.jsonl.gz"
    return candidate if candidate.exists() else None


def load(names: tuple[str, ...] | list[str]) -> dict[str, list[Record]]:
    """Records of every dataset in ``names`` that is present; says which are skipped."""
    loaded: dict[str, list[Record]] = {}
    for name in names:
        path = path_of(name)
        if path is None:
            print(f"skipping dataset {name}: not found")
            continue
        loaded[name] = read_records(path)[0]
    return loaded


def collected_names() -> list[str]:
    """Every collection recorded under ``experiments/data``."""
    return sorted(p.name.split(".")[0] for p in COLLECTED.glob("*.jsonl.gz"))
