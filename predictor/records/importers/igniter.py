"""Import iGniter's V100 pair measurements (``Profile/tools/gpulet.config``).

Reading of the data (see ``docs/datasets.md``):

* the file is JSON Lines, each line one key; lines with the same key are merged;
* ``profile[model][metric][batch][resource%]`` are solo measurements
  (latency in ms, ``l2cache`` and ``dram`` utilisation in percent);
* each ``interference.latency`` row ``[m1, m2, b1, b2, res1, lat1, lat2]``
  gives two records, one per model, the other as a fully overlapping
  co-runner. ``m1`` holds ``res1`` percent of the GPU and ``m2`` holds
  ``100 - res1``; each side's attributes are its solo profile at its own
  batch size and share, and its solo latency is the profiled latency there.

Rows are emitted in file order with no ``start_s`` (steady-state runs have no
time order; evaluation shuffles them with a seed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from predictor.records.record import BatchSpec, CoRunner, Record

DEVICE = "v100"
DEVICE_KIND = "NVIDIA V100"


def load_config(path: str | Path) -> dict[str, Any]:
    """Merge the one-key JSON lines of ``gpulet.config`` into one object."""
    merged: dict[str, Any] = {}
    with open(path, encoding="utf-8") as stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {number}: not valid JSON ({exc.msg})") from None
            for key, value in obj.items():
                if isinstance(value, dict) and isinstance(merged.get(key), dict):
                    merged[key].update(value)
                else:
                    merged[key] = value
    if "interference" not in merged:
        raise ValueError(f"{path}: no 'interference' key; is this iGniter's gpulet.config?")
    return merged


def _side(profile: dict[str, Any], model: str, batch: int, share: int, where: str) -> tuple[dict, float]:
    try:
        entry = profile[model]
        b, r = str(batch), str(share)
        attrs = {
            "l2_util": entry["l2cache"][b][r] / 100.0,
            "dram_util": entry["dram"][b][r] / 100.0,
            "partition": share / 100.0,
        }
        return attrs, float(entry["latency"][b][r])
    except KeyError as exc:
        raise ValueError(f"{where}: no solo profile for {model} batch {batch} at {share}%: {exc}") from None


def import_igniter(path: str | Path) -> Iterator[Record]:
    """Yield two records per pair measurement in ``path``."""
    config = load_config(path)
    for number, row in enumerate(config["interference"]["latency"]):
        where = f"{path}: interference.latency[{number}]"
        try:
            m1, m2, b1, b2, res1, lat1, lat2 = row
        except (TypeError, ValueError):
            raise ValueError(f"{where}: expected 7 fields, got {row!r}") from None
        res2 = 100 - int(res1)
        attrs1, solo1 = _side(config, m1, int(b1), int(res1), where)
        attrs2, solo2 = _side(config, m2, int(b2), res2, where)
        for (model, batch, attrs, solo, latency), (co_model, co_batch, co_attrs) in (
            ((m1, b1, attrs1, solo1, lat1), (m2, b2, attrs2)),
            ((m2, b2, attrs2, solo2, lat2), (m1, b1, attrs1)),
        ):
            yield Record(
                device=DEVICE,
                device_kind=DEVICE_KIND,
                batch=BatchSpec(model, int(batch), attrs),
                latency_ms=float(latency),
                solo_latency_ms=solo,
                co_runners=(CoRunner(co_model, int(co_batch), co_attrs, overlap=1.0),),
                source="igniter",
            )
