"""Import the GPUlet re-implementation's Ampere pair measurements (``data/*.csv``).

Reading of the data (see ``docs/datasets.md``):

* ``inference.csv`` gives the solo latency (seconds) per (model, batch,
  partition %); ``mem_util.csv`` the solo ``mem_util`` and ``l2_util``
  (percent). Rows of ``mem_util.csv`` flagged 1 are ignored, as the
  original loader does (they are the BERT rows, never used in pairs).
* each ``interference.csv`` row is the target model's latency while
  ``co_model`` runs at the same time; its flag column is 1 on every row and
  is not a filter. The co-runner's partition is not recorded: we assume
  ``100 - partition`` (unconfirmed), and take its attributes from its solo
  profile at that share and its own batch size.
* ``mem_util`` becomes ``dram_util`` (fraction), ``l2_util`` a fraction,
  and the partition share a fraction in ``partition``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from predictor.records.record import BatchSpec, CoRunner, Record

DEVICE = "ampere"
DEVICE_KIND = "NVIDIA Ampere (sm_80)"
Key = tuple[str, int, int]


def _rows(path: Path, width: int) -> Iterator[tuple[int, list[str]]]:
    with open(path, encoding="utf-8", newline="") as stream:
        for number, row in enumerate(csv.reader(stream), start=1):
            if not row:
                continue
            if len(row) != width:
                raise ValueError(f"{path}: line {number}: expected {width} fields, got {len(row)}")
            yield number, row


def _key(path: Path, number: int, model: str, batch: str, partition: str) -> Key:
    try:
        return model, int(batch), int(partition)
    except ValueError:
        raise ValueError(f"{path}: line {number}: batch and partition must be integers") from None


def load_profiles(folder: Path) -> tuple[dict[Key, float], dict[Key, dict[str, float]]]:
    """Solo latency (ms) and solo attributes per (model, batch, partition %)."""
    solo: dict[Key, float] = {}
    for number, row in _rows(folder / "inference.csv", 8):
        solo[_key(folder / "inference.csv", number, *row[:3])] = float(row[6]) * 1000.0
    attrs: dict[Key, dict[str, float]] = {}
    for number, row in _rows(folder / "mem_util.csv", 8):
        if row[7].strip() == "1":
            continue
        model, batch, partition = _key(folder / "mem_util.csv", number, *row[:3])
        attrs[(model, batch, partition)] = {
            "l2_util": float(row[6]) / 100.0,
            "dram_util": float(row[4]) / 100.0,
            "partition": partition / 100.0,
        }
    return solo, attrs


def import_gpulet(folder: str | Path) -> Iterator[Record]:
    """Yield one record per row of ``interference.csv`` in ``folder``."""
    folder = Path(folder)
    solo, attrs = load_profiles(folder)
    path = folder / "interference.csv"
    for number, row in _rows(path, 10):
        model, batch, partition = _key(path, number, *row[:3])
        co_model, co_batch, co_partition = _key(path, number, row[3], row[4], str(100 - partition))
        own = (model, batch, partition)
        if own not in attrs or own not in solo:
            raise ValueError(f"{path}: line {number}: no solo profile for {own}")
        co_attrs = attrs.get((co_model, co_batch, co_partition), {"partition": co_partition / 100.0})
        yield Record(
            device=DEVICE,
            device_kind=DEVICE_KIND,
            batch=BatchSpec(model, batch, attrs[own]),
            latency_ms=float(row[8]) * 1000.0,
            solo_latency_ms=solo[own],
            co_runners=(CoRunner(co_model, co_batch, co_attrs, overlap=1.0),),
            source="gpulet",
        )
