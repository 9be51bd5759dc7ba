"""Names of the devices batches run on: record ``device`` and ``device_kind``.

On a CPU every worker shares one device, ``cpu0`` (the socket whose caches and
memory bandwidth they contend for); on GPUs worker ``i`` uses CUDA device
``i mod n`` and records run there as ``gpu<n>``.

Examples
--------
>>> record_device("cpu", 3), record_device("cuda:1", 0)
('cpu0', 'gpu1')
>>> isinstance(cpu_model_name(), str)
True
"""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model_name(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's marketing name (``model name`` in ``/proc/cpuinfo``), or ``"cpu"``."""
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() in ("model name", "Model", "Processor") and value.strip():
                return " ".join(value.split())[:256]
    except OSError:
        pass
    return platform.processor() or "cpu"


def record_device(torch_device: str, worker: int) -> str:
    """The record's ``device`` for a worker running on ``torch_device``."""
    if torch_device.startswith("cuda"):
        _, _, index = torch_device.partition(":")
        return f"gpu{int(index or 0)}"
    return "cpu0"


def worker_torch_device(device: str, worker: int) -> str:
    """The torch device of worker ``worker`` when the run asks for ``device`` (``cpu``, ``cuda``, ``auto``)."""
    if device == "cpu":
        return "cpu"
    import torch  # heavy: torch only when a CUDA device is asked for

    if device in ("cuda", "auto") and torch.cuda.is_available():
        return f"cuda:{worker % torch.cuda.device_count()}"
    if device.startswith("cuda:"):
        return device
    if device == "cuda":
        raise ValueError("--device cuda: no CUDA device is available")
    return "cpu"
