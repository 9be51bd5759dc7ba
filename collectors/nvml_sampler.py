"""GPU signals from NVML, sampled for every device on one thread.

Keys in the buffer are ``"gpu<index>.<field>"`` (fields in :mod:`collectors.nvml`);
:meth:`NvmlSampler.window` returns one device's fields without the prefix.
With no driver the sampler runs and records nothing; a lost GPU drops out
while the others keep being read.

Examples
--------
>>> sampler = NvmlSampler()
>>> sampler.sample_once(); sampler.sample_once()
>>> sampler.window("gpu0", 0.0, 1e12) == {} or sampler.nvml.available()
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from collectors.nvml import Nvml
from collectors.sampler import DEFAULT_HZ, Sampler


class NvmlSampler(Sampler):
    """Periodic NVML reads of all devices.

    Parameters
    ----------
    hz
        Reads per second (NVML's own utilisation counters update every 1/6 s to 1 s).
    seconds
        History kept, in seconds.
    nvml
        An :class:`~collectors.nvml.Nvml` session, or a ``pynvml``-like module object to build one from.
    own_pids
        The workload's processes (called at each read); with it, ``other_gpu_util`` (kernels of
        processes the workload does not own) is recorded.
    """

    def __init__(self, hz: float = DEFAULT_HZ, *, seconds: float = 60.0, nvml: Any = None,
                 own_pids: Callable[[], Iterable[int]] | None = None) -> None:
        super().__init__(hz, seconds=seconds, name="nvml-sampler")
        self.nvml = nvml if isinstance(nvml, Nvml) else Nvml(nvml)
        self.own_pids = own_pids

    def read(self) -> dict[str, float]:
        """The NVML fields of every visible device, keyed ``"gpu<index>.<field>"``."""
        out: dict[str, float] = {}
        own = set(self.own_pids()) if self.own_pids is not None else None
        for index in self.nvml.devices():
            for key, value in self.nvml.read(index, own).items():
                out[f"gpu{index}.{key}"] = value
        return out

    def close(self) -> None:
        """Shut the NVML session down."""
        self.nvml.close()

    def window(self, device: str, t0: float, t1: float) -> dict[str, float]:
        """Fields of ``device`` (``"gpu0"``) averaged over ``[t0, t1]``."""
        prefix = device + "."
        return {
            key[len(prefix) :]: value
            for key, value in self.buffer.average(t0, t1).items()
            if key.startswith(prefix)
        }
