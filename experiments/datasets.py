"""The datasets the studies run on, found by name.

* ``cpu-default``: the embedded dataset shipped in ``predictor/data``;
* ``cpu-*``: collections recorded for the studies, under ``experiments/data``
  (see ``experiments/collect_all.sh`` for the commands);
* ``igniter`` and ``gpulet``: the third-party GPU datasets (``docs/datasets.md``),
  not in the repository: found under the folder given as ``--data`` (else
  ``$INTERFERENCE_DATA``), imported on first use into
  ``experiments/results/_imported`` and skipped when absent.
"""

from __future__ import annotations

from pathlib import Path

from experiments.common import DEFAULT_DATASET, RESULTS, ROOT
from predictor.records.importers.gpulet import import_gpulet
from predictor.records.importers.igniter import import_igniter
from predictor.records.importers.sources import find_source
from predictor.records.logio import read_records, write_records
from predictor.records.record import Record

COLLECTED = ROOT / "experiments" / "data"
IMPORTED = RESULTS / "_imported"
THIRD_PARTY = {"igniter": import_igniter, "gpulet": import_gpulet}


def locate(name: str, data: str | Path | None = None) -> tuple[Path | None, str]:
    """The log for dataset ``name`` (importing third-party data if needed), else None and why.

    Parameters
    ----------
    name
        ``cpu-default``, a collection under ``experiments/data``, ``igniter`` or ``gpulet``.
    data
        The folder holding the third-party datasets (default: ``$INTERFERENCE_DATA``).
    """
    if name == "cpu-default":
        return (DEFAULT_DATASET, "") if DEFAULT_DATASET.exists() else (None, "not found")
    if name in THIRD_PARTY:
        source, reason = find_source(name, data)
        if source is None:
            return None, reason
        target = IMPORTED / f"{name}.jsonl.gz"
        if not target.exists():
            IMPORTED.mkdir(parents=True, exist_ok=True)
            write_records(target, THIRD_PARTY[name](source))
        return target, ""
    candidate = COLLECTED / f"{name}.jsonl.gz"
    return (candidate, "") if candidate.exists() else (None, "not found")


def load(names: tuple[str, ...] | list[str], data: str | Path | None = None) -> dict[str, list[Record]]:
    """Records of every dataset in ``names`` that is present; says which are skipped.

    Parameters
    ----------
    names
        Dataset names (see :func:`locate`).
    data
        The folder holding the third-party datasets (default: ``$INTERFERENCE_DATA``).
    """
    loaded: dict[str, list[Record]] = {}
    for name in names:
        path, reason = locate(name, data)
        if path is None:
            print(f"skipping dataset {name}: {reason}")
            continue
        loaded[name] = read_records(path)[0]
    return loaded


def collected_names() -> list[str]:
    """Every collection recorded under ``experiments/data``."""
    return sorted(p.name.split(".")[0] for p in COLLECTED.glob("*.jsonl.gz"))
