"""Solo profiles of a model: latency alone, and intensity attributes for coarse features.

For each (model, batch size) a worker measures, with nothing else scheduled:

- ``solo_ms``: median latency over ``repeats`` timed runs, interleaved with
  the other configurations and idle gaps as in serving (:func:`profile_all`);
- ``gflops``: floating-point work of one batch (``torch.utils.flop_counter``);
- ``mbytes``: bytes read and written by the batch's operators (inputs,
  parameters and outputs of every non-view aten op), in MB: a rough measure of
  memory traffic;
- ``cpu_util``: the worker's CPU time over wall time while running it alone.

Imports ``torch``.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from collectors.timers import Timer


def count_gflops(model: torch.nn.Module, x: torch.Tensor) -> float | None:
    """GFLOPs of one forward pass, or ``None`` when they cannot be counted."""
    try:
        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            model(x)
        return counter.get_total_flops() / 1e9
    except Exception:
        return None


def count_mbytes(model: torch.nn.Module, x: torch.Tensor) -> float | None:
    """MB read and written by the operators of one forward pass, or ``None``."""

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


def warm_up(models: Mapping[str, torch.nn.Module], inputs: Mapping[tuple[str, int], torch.Tensor],
            runs: int = 2) -> None:
    """Run every (model, batch size) of ``inputs`` ``runs`` times, so that no timed batch is its
    shape's first in this process (the first run of a shape selects and loads its kernels: on a
    GPU it can take several times as long).

    Examples
    --------
    >>> from collectors.models import build, example_input
    >>> model, _ = build("mlp", 1)
    >>> warm_up({"mlp": model}, {("mlp", bs): example_input("mlp", bs) for bs in (1, 2)})
    """
    with torch.inference_mode():
        for (name, _), x in inputs.items():
            for _ in range(runs):
                models[name](x)


def profile_all(
    models: Mapping[str, torch.nn.Module],
    inputs: Mapping[tuple[str, int], torch.Tensor],
    timer: Timer,
    *,
    repeats: int = 7,
    max_gap_s: float = 0.04,
    seed: int = 0,
) -> dict[tuple[str, int], dict[str, float]]:
    """Solo figures of every (model, batch size) of ``inputs``: ``solo_ms`` and the intensity attributes.

    The timed runs of all configurations are interleaved in a shuffled order,
    each after an idle gap drawn uniformly from ``[0, max_gap_s]``, as a
    serving worker sees them: caches hold other models' weights and the core
    has been idle. A hot loop over one configuration would be faster than
    anything a worker ever sees, and every batch would look slowed down.

    Examples
    --------
    >>> from collectors.models import build
    >>> from collectors.timers import CpuTimer
    >>> model, x = build("mlp", 1)
    >>> figures = profile_all({"mlp": model}, {("mlp", 1): x}, CpuTimer(), repeats=3)
    >>> sorted(figures["mlp", 1]), figures["mlp", 1]["solo_ms"] > 0
    (['cpu_util', 'gflops', 'mbytes', 'solo_ms'], True)
    """
    rng = random.Random(seed)
    times: dict[tuple[str, int], list[float]] = {key: [] for key in inputs}
    cpu: dict[tuple[str, int], float] = dict.fromkeys(inputs, 0.0)
    warm_up(models, inputs, runs=1)
    with torch.inference_mode():
        order = [key for key in inputs for _ in range(repeats)]
        rng.shuffle(order)
        for key in order:
            time.sleep(rng.uniform(0.0, max_gap_s))
            c0 = time.process_time()
            span = timer.begin()
            models[key[0]](inputs[key])
            timer.end(span)
            times[key].append(span.elapsed_ms())
            cpu[key] += time.process_time() - c0
    out: dict[tuple[str, int], dict[str, float]] = {}
    for key, x in inputs.items():
        wall_s = sum(times[key]) / 1e3
        figures = {
            "solo_ms": statistics.median(times[key]),
            "cpu_util": round(min(cpu[key] / wall_s, 64.0), 4) if wall_s > 0 else 0.0,
        }
        gflops = count_gflops(models[key[0]], x)
        if gflops is not None:
            figures["gflops"] = round(gflops, 6)
        mbytes = count_mbytes(models[key[0]], x)
        if mbytes is not None:
            figures["mbytes"] = round(mbytes, 4)
        out[key] = figures
    return out
