"""Solo profiles of a model: latency alone, and intensity attributes for coarse features.

For each (model, batch size) a worker measures, with nothing else scheduled:

- ``solo_ms``: median latency over ``repeats`` timed runs after warm-up;
- ``gflops``: floating-point work of one batch (``torch.utils.flop_counter``);
- ``mbytes``: bytes read and written by the batch's operators (inputs,
  parameters and outputs of every non-view aten op), in MB: a rough measure of
  memory traffic;
- ``cpu_util``: the worker's CPU time over wall time while running it alone.

Imports ``torch``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from collectors.timers import Timer


def count_gflops(model: torch.nn.Module, x: torch.Tensor) -> float | None:
    """GFLOPs of one forward pass, or ``None`` when they cannot be counted."""
    try:
        from torch.utils.flop_counter import FlopCounterMode

        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            model(x)
        return counter.get_total_flops() / 1e9
    except Exception:
        return None


def count_mbytes(model: torch.nn.Module, x: torch.Tensor) -> float | None:
    """MB read and written by the operators of one forward pass, or ``None``."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return None

    class _Bytes(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if not getattr(func, "is_view", False):
                for t in tree_leaves((args, kwargs or {}, out)):
                    if isinstance(t, torch.Tensor):
                        self.total += t.numel() * t.element_size()
            return out

    try:
        with torch.inference_mode(), _Bytes() as mode:
            model(x)
        return mode.total / 1e6
    except Exception:
        return None


def solo_latency(
    model: torch.nn.Module, x: torch.Tensor, timer: Timer, *, repeats: int = 7, warmup: int = 2
) -> tuple[float, float]:
    """Median latency (ms) of ``repeats`` runs after ``warmup``, and CPU time over wall time during them."""
    with torch.inference_mode():
        for _ in range(warmup):
            span = timer.begin()
            model(x)
            timer.end(span)
            span.elapsed_ms()
        times: list[float] = []
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(repeats):
            span = timer.begin()
            model(x)
            timer.end(span)
            times.append(span.elapsed_ms())
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return statistics.median(times), (cpu / wall if wall > 0 else 0.0)


def profile(
    model: torch.nn.Module, x: torch.Tensor, timer: Timer, *, repeats: int = 7, warmup: int = 2
) -> dict[str, float]:
    """All solo figures of ``model`` on input ``x``: ``solo_ms`` and the intensity attributes.

    Examples
    --------
    >>> from collectors.models import build
    >>> from collectors.timers import CpuTimer
    >>> model, x = build("mlp", 1)
    >>> figures = profile(model, x, CpuTimer(), repeats=3, warmup=1)
    >>> sorted(figures), figures["solo_ms"] > 0
    (['cpu_util', 'gflops', 'mbytes', 'solo_ms'], True)
    """
    solo_ms, cpu_util = solo_latency(model, x, timer, repeats=repeats, warmup=warmup)
    out = {"solo_ms": solo_ms, "cpu_util": round(min(cpu_util, 64.0), 4)}
    gflops = count_gflops(model, x)
    if gflops is not None:
        out["gflops"] = round(gflops, 6)
    mbytes = count_mbytes(model, x)
    if mbytes is not None:
        out["mbytes"] = round(mbytes, 4)
    return out
