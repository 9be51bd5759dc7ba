"""What reading a published model version costs a worker: the whole pickle against shared parts.

Warm-starts one service (in this process) from ``records``, then ``versions`` times learns
``step`` more records of the same file (cycled) and publishes a version, as a learner under ingest
does. Each version is written and read two ways, interleaved:

* **whole**: ``pickle.dumps`` of the version to a file renamed into place / the file read and
  ``pickle.loads``, as the version files held it before (every residual window pickled in full,
  and re-sorted when read);
* **parts**: :class:`~predictor.service.replicas.version_file.VersionFile` and
  :class:`~predictor.service.replicas.version_file.VersionReader` (windows packed, and only the windows
  that changed since the version the reader holds are written and read again).

Also prints where a whole load spends its time, by part of the version (the predictor, the
calibrators' residual windows, the rest), and checks that the last version read back both ways pickles
(whole) to the same bytes.

Run: ``.venv/bin/python -m experiments.bench.bench_version_file`` (``--versions 40 --step 16``)
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pickle
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from experiments.common import ROOT, finish, start
from predictor.records.logio import read_records
from predictor.service import Service, ServiceConfig
from predictor.service.published import ModelVersion
from predictor.service.replicas.version_file import VersionFile, VersionReader


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    records: str = "predictor/data/cpu-default.jsonl.gz"
    versions: int = 40
    step: int = 16


def timed(call: Any) -> tuple[Any, float]:
    """``call()`` and the seconds it took."""
    begin = time.perf_counter()
    result = call()
    return result, time.perf_counter() - begin


def write_whole(path: Path, obj: Any) -> bytes:
    """``obj`` pickled whole to a temporary file renamed to ``path`` (the version files before)."""
    data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return data


def load_profile(version: ModelVersion) -> dict[str, float]:
    """Milliseconds ``pickle.loads`` spends on each part of a version pickled whole."""
    windows = [*version.calibrator._windows.values(), *version.shapes._windows.values()]
    parts = {"predictor": version.predictor, "residual windows": windows, "whole version": version}
    pickled = {name: pickle.dumps(obj, pickle.HIGHEST_PROTOCOL) for name, obj in parts.items()}
    return {name: 1e3 * min(timed(lambda d=data: pickle.loads(d))[1] for _ in range(5)) for name, data in pickled.items()}


def main() -> None:
    """Learn, publish, write and read each version both ways; print the table."""
    config, out = start("bench_version_file", Config(), __doc__.splitlines()[0])
    records, _ = read_records(ROOT / config.records)
    learner = Service(ServiceConfig())
    learner.open(None, ROOT / config.records)
    cycle = itertools.cycle(records)
    times: dict[str, list[float]] = {k: [] for k in ("whole write", "whole read", "parts write", "parts read")}
    sizes: dict[str, list[int]] = {"whole": [], "parts": []}
    with tempfile.TemporaryDirectory() as folder:
        writer, reader = VersionFile(folder, "m"), VersionReader(folder, "m")
        whole = Path(folder) / "whole.pickle"
        for _ in range(config.versions):
            for record in itertools.islice(cycle, config.step):
                learner.observe(record)
            version = learner.state.publish()
            data, seconds = timed(lambda v=version: write_whole(whole, v))
            times["whole write"].append(seconds)
            sizes["whole"].append(len(data))
            times["whole read"].append(timed(lambda: pickle.loads(whole.read_bytes()))[1])
            times["parts write"].append(timed(lambda v=version: writer.write(v))[1])
            sizes["parts"].append(writer.bytes_written)
            read, seconds = timed(reader.latest)
            times["parts read"].append(seconds)
        # the last version read back both ways pickles (whole) to the same bytes
        same = pickle.dumps(read, pickle.HIGHEST_PROTOCOL) == pickle.dumps(pickle.loads(data), pickle.HIGHEST_PROTOCOL)
        parts_read = reader.parts.unpickled
    profile = load_profile(version)
    median_ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    results = {"median_ms": median_ms, "bytes_median": {k: statistics.median(v) for k, v in sizes.items()},
               "load_profile_ms": profile, "windows": len(version.shapes._windows) + len(version.calibrator._windows),
               "parts_unpickled_per_version": parts_read / config.versions, "same_as_learner": same, "read_speedup": median_ms["whole read"] / median_ms["parts read"],
               "write_speedup": median_ms["whole write"] / median_ms["parts write"]}
    console = Console()
    table = Table(title=f"a version every {config.step} records learned, {config.versions} versions (medians)")
    for column in ("", "write ms", "read ms", "bytes"):
        table.add_column(column, justify="right")
    for way in ("whole", "parts"):
        table.add_row(way, f"{median_ms[way + ' write']:.3f}", f"{median_ms[way + ' read']:.3f}",
                      f"{statistics.median(sizes[way]):,.0f}")
    console.print(table)
    console.print(f"read {results['read_speedup']:.1f}x faster, write {results['write_speedup']:.1f}x; "
                  f"{results['parts_unpickled_per_version']:.1f} of {results['windows']} windows read per version; "
                  f"read back the same both ways: {same}")
    console.print("pickle.loads of the whole version, by part (ms): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in profile.items()))
    finish(out, results)


if __name__ == "__main__":
    main()
