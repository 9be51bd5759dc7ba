"""Memory signals for memory-aware placement: device capacity and use, process peak.

What a collector sends with its batch reports (``ReportBatchStart``: the device's
``memory_total_mb`` and ``memory_used_mb``; ``ReportBatchEnd``: the batch's
``peak_memory_mb``), on either backend:

* **GPU**: :func:`gpu_memory` reads ``nvmlDeviceGetMemoryInfo`` through
  :class:`~collectors.nvml.Nvml` (total and used, MB);
* **CPU**: :func:`cpu_memory` reads ``/proc/meminfo`` (``MemTotal``, and in use
  ``MemTotal - MemAvailable``); :func:`process_memory` reads the resident set of a
  process and its peak (``VmRSS``, ``VmHWM`` of ``/proc/<pid>/status``).

Every reader returns ``None`` rather than raising when its source cannot be read.

Examples
--------
>>> reading = cpu_memory()
>>> 0 < reading.used_mb <= reading.total_mb
True
>>> rss, peak = process_memory()
>>> 0 < rss <= peak
True
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from collectors.nvml import Nvml


@dataclass(frozen=True, slots=True)
class MemoryReading:
    """A device's memory capacity and use, MB."""

    total_mb: float
    used_mb: float

    @property
    def free_mb(self) -> float:
        """Capacity not in use."""
        return max(self.total_mb - self.used_mb, 0.0)


def _kib_fields(path: Path, names: tuple[str, ...]) -> dict[str, float] | None:
    """The ``name: value kB`` lines of a ``/proc`` file, in MB (``None``: unreadable or missing)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    out: dict[str, float] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in names:
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0]) * 1024 / 1e6
    return out if len(out) == len(names) else None


def cpu_memory(proc: str | Path = "/proc") -> MemoryReading | None:
    """The system's memory (the CPU backend's device memory) from ``/proc/meminfo``."""
    fields = _kib_fields(Path(proc) / "meminfo", ("MemTotal", "MemAvailable"))
    if fields is None:
        return None
    total = fields["MemTotal"]
    return MemoryReading(total, max(total - fields["MemAvailable"], 0.0))


def process_memory(pid: int | str = "self", proc: str | Path = "/proc") -> tuple[float, float] | None:
    """``(resident_mb, peak_resident_mb)`` of a process (``VmRSS``, ``VmHWM``)."""
    fields = _kib_fields(Path(proc) / str(pid) / "status", ("VmRSS", "VmHWM"))
    if fields is None:
        return None
    return fields["VmRSS"], fields["VmHWM"]


def gpu_memory(nvml: Nvml, index: int) -> MemoryReading | None:
    """GPU ``index``'s memory from NVML (``None``: no NVML, lost or unreadable)."""
    reading = nvml.memory(index)
    if reading is None:
        return None
    return MemoryReading(*reading)
