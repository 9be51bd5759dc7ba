"""Records, queries and answers for the "one truth" tests (``docs/design.md``, One truth).

What the service learns and answers must be a function of the ordered records alone: the tests
feed the same :func:`records` cut into messages of different sizes, to different processes, across
restarts, and compare :func:`answers_of` the same :data:`QUERIES`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.service.ingest import MESSAGE_END
from predictor.service.types import CoRunnerSource, Deadline, PlannedCoRunner, Query

MODELS = {"resnet": (0.3, 0.2, 8.0), "bert": (0.5, 0.4, 12.0), "mlp": (0.1, 0.6, 4.0), "vit": (0.4, 0.3, 10.0)}
ATTRS = ("l2_util", "dram_util", "sm_occupancy", "pcie_gbps", "tensor_util")
SIGNALS = ("sm_util", "mem_bw", "temp_c")


def _attrs(rng: np.random.Generator, l2: float, dram: float) -> dict[str, float]:
    """Five attributes, in a drawn insertion order (whatever order a map arrives in must not matter)."""
    values = {"l2_util": l2, "dram_util": dram, "sm_occupancy": float(rng.uniform(0.1, 0.9)),
              "pcie_gbps": float(rng.uniform(1, 16)), "tensor_util": float(rng.uniform(0, 1))}
    order = rng.permutation(len(ATTRS))
    return {ATTRS[i]: values[ATTRS[i]] for i in order}


def records(n: int = 600, seed: int = 7, outliers: Sequence[int] = (311, 312, 450),
            profiled: bool = True) -> list[Record]:
    """``n`` records over three devices of two kinds: 0 to 3 co-runners with their overlaps, five
    attributes, signals on every third record, a solo latency on four records in five (``profiled``
    false: on all), and a few absurd latencies (``outliers``) that the outlier gate refuses."""
    rng = np.random.default_rng(seed)
    names = sorted(MODELS)
    devices = (("g0", "A10"), ("g1", "A10"), ("g2", "L4"))
    out = []
    for i in range(n):
        device, kind = devices[i % len(devices)]
        model = names[rng.integers(len(names))]
        l2, dram, per_item = MODELS[model]
        batch_size = int(rng.integers(1, 9))
        solo = per_item * (0.5 + 0.5 * batch_size) * (1.3 if kind == "L4" else 1.0)
        runners = []
        slowdown = 1.0
        for _ in range(int(rng.integers(0, 4))):
            other = names[rng.integers(len(names))]
            o_l2, o_dram, _ = MODELS[other]
            overlap = float(rng.uniform(0.1, 1.0))
            runners.append(CoRunner(other, int(rng.integers(1, 9)), _attrs(rng, o_l2, o_dram), overlap))
            slowdown += overlap * (1.5 * l2 * o_l2 + 0.8 * o_dram)
        signals = {}
        if i % 3 == 0:
            drawn = {"sm_util": float(rng.uniform(0, 1)), "mem_bw": float(rng.uniform(0, 1)),
                     "temp_c": float(rng.uniform(40, 80))}
            signals = {SIGNALS[j]: drawn[SIGNALS[j]] for j in rng.permutation(len(SIGNALS))}
            slowdown *= 1.0 + 0.2 * signals["sm_util"]
        latency = solo * slowdown * float(np.exp(rng.normal(0.0, 0.05)))
        if i in outliers:
            latency *= 60.0
        out.append(Record(device=device, device_kind=kind, batch=BatchSpec(model, batch_size, _attrs(rng, l2, dram)),
                          latency_ms=latency, solo_latency_ms=solo if i % 5 or not profiled else None, co_runners=tuple(runners),
                          signals=signals, start_s=float(i) * 0.01, source="one-truth"))
    return out


def _runner(model: str, batch_size: int, overlap: float | None) -> PlannedCoRunner:
    l2, dram, _ = MODELS[model]
    return PlannedCoRunner(model, batch_size, {"l2_util": l2, "dram_util": dram, "sm_occupancy": 0.5,
                                               "pcie_gbps": 8.0, "tensor_util": 0.4}, overlap=overlap)


def _queries() -> list[Query]:
    out = []
    for device, kind in (("g0", "A10"), ("g2", "L4")):
        for model in ("bert", "mlp"):
            l2, dram, _ = MODELS[model]
            batch = BatchSpec(model, 4, {"l2_util": l2, "dram_util": dram, "sm_occupancy": 0.5, "pcie_gbps": 8.0,
                                         "tensor_util": 0.3})
            for signals in ({}, {"sm_util": 0.6, "mem_bw": 0.3, "temp_c": 61.0}):
                for runners in ((), (_runner("resnet", 2, 0.7),), (_runner("resnet", 2, None),),
                                (_runner("vit", 4, None), _runner("bert", 1, 0.4))):
                    out.append(Query(device, batch, device_kind=kind, co_runners=runners,
                                     co_runner_source=CoRunnerSource.EXPLICIT, signals=signals))
    return out


QUERIES = _queries()
"""Queries with and without signals, with co-runners whose overlaps are given, omitted (estimated)
or mixed, on two device kinds."""


def answers_of(predict: Callable[..., object], check_deadline: Callable[..., object] | None = None) -> list[float]:
    """Per query of :data:`QUERIES`: the latency, its 0.9 and 0.99 bounds, and (with
    ``check_deadline``) the probability of meeting a 20 ms deadline."""
    out: list[float] = []
    for query in QUERIES:
        for confidence in (0.9, 0.99):
            p = predict(query, confidence)
            out += [p.latency_ms, p.upper_bound_ms]  # type: ignore[attr-defined]
        if check_deadline is not None:
            out.append(check_deadline(query, Deadline(ms=20.0), 0.99).probability)  # type: ignore[attr-defined]
    return out


def max_relative(a: Sequence[float], b: Sequence[float]) -> float:
    """The largest ``|a - b| / max(|a|, |b|)`` over the pairs (0 where both are equal, infinities
    included; 1 where one is 0 and the other not; infinite where only one is infinite)."""
    assert len(a) == len(b)
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        if x == y:
            continue
        scale = max(abs(x), abs(y))
        worst = max(worst, abs(x - y) / scale if math.isfinite(scale) else math.inf)
    return worst


def chunked(items: Sequence[Record], sizes: Iterable[int]) -> Iterator[tuple]:
    """The stream items of ``items`` cut into messages of ``sizes`` (cycled, the rest in the last),
    each message followed by :data:`~predictor.service.ingest.MESSAGE_END`, as the gRPC layer feeds
    :meth:`Service.report_observations <predictor.service.core.Service.report_observations>`."""
    sizes = list(sizes)
    at, k = 0, 0
    while at < len(items):
        size = sizes[k % len(sizes)]
        k += 1
        for record in items[at:at + size]:
            yield record, ""
        yield MESSAGE_END
        at += size
