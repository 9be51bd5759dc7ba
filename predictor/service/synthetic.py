"""Synthetic ``coloc/v1`` records with a known interference law, for tests and load generation.

Latency is ``solo * (1 + sum_i overlap_i * (a * own_l2 * l2_i + b * dram_i)) * noise``
with log-normal noise, so a linear model on the fine features can learn it.

Examples
--------
>>> records = synthetic_records(3, seed=1)
>>> [r.device for r in records], all(r.latency_ms > 0 for r in records)
(['sim0', 'sim1', 'sim0'], True)
"""

from __future__ import annotations

import numpy as np

from predictor.records.record import BatchSpec, CoRunner, Record

MODELS = {"resnet": (0.3, 0.2, 8.0), "bert": (0.5, 0.4, 12.0), "mlp": (0.1, 0.6, 4.0)}


def synthetic_records(
    n: int,
    *,
    seed: int = 0,
    devices: tuple[str, ...] = ("sim0", "sim1"),
    device_kind: str = "SimGPU",
    noise: float = 0.05,
) -> list[Record]:
    """``n`` records over ``devices`` (round robin), 0 to 2 co-runners each."""
    rng = np.random.default_rng(seed)
    names = sorted(MODELS)
    out = []
    for i in range(n):
        model = names[rng.integers(len(names))]
        l2, dram, solo_per_item = MODELS[model]
        batch_size = int(rng.integers(1, 9))
        solo = solo_per_item * (0.5 + 0.5 * batch_size)
        batch = BatchSpec(model, batch_size, _pressure(l2, dram))
        out.append(_record(rng, i, devices[i % len(devices)], device_kind, batch, solo, int(rng.integers(0, 3)),
                           lambda: _named(names[rng.integers(len(names))]), noise))
    return out


def fleet_records(
    n: int,
    *,
    models: int = 6,
    device_kinds: int = 1,
    devices_per_kind: int = 2,
    max_co_runners: int = 3,
    noise: float = 0.03,
    seed: int = 0,
) -> list[Record]:
    """``n`` records of a fleet of ``models`` models on ``device_kinds`` kinds of device.

    Each model ``m<i>`` has its own profiled ``l2_util``, ``dram_util`` and solo latency per item,
    each kind ``k<j>`` its speed; a batch has 0 to ``max_co_runners`` co-runners (uniform) and a
    slowdown linear in their overlap-weighted pressure (the :func:`synthetic_records` law) with
    log-normal noise ``noise``. Records go round robin over the devices, time-ordered.

    >>> records = fleet_records(4, models=12, device_kinds=3, seed=1)
    >>> sorted({r.device_kind for r in records}) <= ['k0', 'k1', 'k2'], len(records)
    (True, 4)
    """
    if models < 1 or device_kinds < 1 or devices_per_kind < 1 or max_co_runners < 0:
        raise ValueError("models, device_kinds and devices_per_kind must be >= 1, max_co_runners >= 0")
    rng = np.random.default_rng(seed)
    profile = [(f"m{i}", round(float(rng.uniform(0.05, 0.6)), 4), round(float(rng.uniform(0.05, 0.7)), 4),
                float(rng.uniform(2.0, 15.0))) for i in range(models)]
    speed = [float(rng.uniform(0.5, 2.0)) for _ in range(device_kinds)]
    devices = [(f"gpu{j}-{d}", j) for j in range(device_kinds) for d in range(devices_per_kind)]
    out = []
    for i in range(n):
        model, l2, dram, per_item = profile[rng.integers(models)]
        device, kind = devices[i % len(devices)]
        batch_size = int(rng.integers(1, 9))
        solo = per_item * speed[kind] * (0.5 + 0.5 * batch_size)
        batch = BatchSpec(model, batch_size, _pressure(l2, dram))
        out.append(_record(rng, i, device, f"k{kind}", batch, solo, int(rng.integers(0, max_co_runners + 1)),
                           lambda: profile[rng.integers(models)][:3], noise))
    return out


def _pressure(l2: float, dram: float) -> dict[str, float]:
    return {"l2_util": l2, "dram_util": dram}


def _named(model: str) -> tuple[str, float, float]:
    """``(name, l2, dram)`` of one of :data:`MODELS`."""
    l2, dram, _ = MODELS[model]
    return model, l2, dram


def _record(rng: np.random.Generator, i: int, device: str, device_kind: str, batch: BatchSpec, solo: float,
            count: int, draw, noise: float) -> Record:
    """Record ``i``: ``count`` co-runners, each ``draw()``-n (its name, l2 and dram) with a uniform
    overlap and batch size, the latency the module's law gives with log-normal ``noise``."""
    l2 = batch.attrs["l2_util"]
    runners = []
    slowdown = 1.0
    for _ in range(count):
        other, o_l2, o_dram = draw()
        overlap = float(rng.uniform(0.1, 1.0))
        runners.append(CoRunner(other, int(rng.integers(1, 9)), _pressure(o_l2, o_dram), overlap))
        slowdown += overlap * (1.5 * l2 * o_l2 + 0.8 * o_dram)
    latency = solo * slowdown * float(np.exp(rng.normal(0.0, noise)))
    return Record(device=device, device_kind=device_kind, batch=batch, latency_ms=latency, solo_latency_ms=solo,
                  co_runners=tuple(runners), start_s=float(i) * 0.01, source="synthetic")
