"""Ray Serve's default router against the interference-aware router, on one workload, in one run.

Two inference applications of the same deployment (:class:`~collectors.ray_inference.InferenceReplica`,
two replicas, each pinned to one core and running three of the project's CPU models) differ only in
their request router: Serve's default power-of-two-choices (shortest queue of two) and
:class:`~predictor.ray_serve.router.InterferenceAwareRouter` (ranked by the service's predicted latency
beside what runs on each replica). Both report their observations to one learner actor, which
learns first from a warm-up phase. Then the same open-loop arrival trace (Poisson, a seeded mix of
light and heavy batches, each with a deadline a multiple of its solo latency) is replayed against
each, in alternating phases (default, aware, default, aware...), so that drifts in the shared
machine's load fall on both. Printed: p50/p99 end-to-end latency (submission to answer, at the
caller) and deadline attainment per router, and the aware/default p99 ratio.

Run: ``.venv/bin/python -m experiments.studies.ray_router`` (about three minutes on two cores).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import numpy as np

from experiments import common


@dataclasses.dataclass(frozen=True)
class Config:
    """The experiment's settings (each one a ``--flag``)."""

    seed: int = 0
    models: tuple[str, ...] = ("mobilenet", "mlp", "bert")
    batch_sizes: tuple[int, ...] = (1, 4)
    mix: tuple[str, ...] = ("bert:1", "bert:1", "mobilenet:1", "mobilenet:1", "mlp:4", "mobilenet:4")
    """Request kinds (``model:batch_size``), drawn uniformly: repeats weigh a kind."""
    rate: float = 20.0
    """Arrivals per second (open loop)."""
    requests: int = 150
    """Requests per measured phase."""
    rounds: int = 4
    """Phases per router (alternating)."""
    warmup_requests: int = 300
    """Requests of the learning phase (default router), before any measurement."""
    deadline_factor: float = 4.0
    """A request's deadline: this many times its solo latency, plus ``deadline_slack_ms``."""
    deadline_slack_ms: float = 10.0
    stats_period_s: float = 0.1
    """Serve's routing stats period (the replicas' co-location reports)."""
    confidence: float = 0.9


def trace(config: Config, rng: np.random.Generator, n: int) -> list[tuple[float, str, int]]:
    """``n`` arrivals: (offset in s, model, batch size)."""
    gaps = rng.exponential(1.0 / config.rate, size=n)
    kinds = rng.integers(0, len(config.mix), size=n)
    out = []
    for offset, k in zip(np.cumsum(gaps).tolist(), kinds.tolist(), strict=True):
        model, batch_size = config.mix[k].split(":")
        out.append((offset, model, int(batch_size)))
    return out


async def drive(handle: Any, arrivals: list[tuple[float, str, int]], solo: dict[str, float], config: Config,
                tag: str) -> list[tuple[float, float, str, float]]:
    """Replay ``arrivals`` open-loop; returns per request (latency ms, deadline ms, kind, execution ms)."""
    from predictor.ray_serve.colocation import solo_key
    from predictor.ray_serve.requests import InferenceRequest

    async def one(i: int, at: float, model: str, batch_size: int, t0: float) -> tuple[float, float, str, float]:
        await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
        deadline = config.deadline_factor * solo[solo_key(model, batch_size)] + config.deadline_slack_ms
        sent = time.perf_counter()
        result = await handle.remote(InferenceRequest(f"{tag}-{i}", model, batch_size, deadline))
        return (time.perf_counter() - sent) * 1000.0, deadline, f"{model}:{batch_size}", result.latency_ms

    t0 = time.perf_counter()
    return await asyncio.gather(*(one(i, *a, t0) for i, a in enumerate(arrivals)))


def summary(rows: list[tuple[float, float, str, float]]) -> dict[str, Any]:
    """p50/p99 latency and deadline attainment of ``rows`` (and p99 per kind; execution and the rest:
    routing, queueing and transport)."""
    latency = np.array([r[0] for r in rows])
    execution = np.array([r[3] for r in rows])
    met = np.array([r[0] <= r[1] for r in rows])
    kinds = sorted({r[2] for r in rows})
    return {
        "requests": len(rows),
        "p50_ms": float(np.percentile(latency, 50)),
        "p99_ms": float(np.percentile(latency, 99)),
        "mean_ms": float(latency.mean()),
        "attainment": float(met.mean()),
        "mean_execution_ms": float(execution.mean()),
        "p99_execution_ms": float(np.percentile(execution, 99)),
        "mean_outside_ms": float((latency - execution).mean()),
        "p99_by_kind_ms": {k: float(np.percentile([r[0] for r in rows if r[2] == k], 99)) for k in kinds},
    }


def main() -> None:
    """Run the comparison and print its table."""
    config, out = common.start("ray_router", Config(), __doc__.splitlines()[0])
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from collectors.ray_inference import InferenceReplica
    from predictor.ray_serve.learner import learner_named
    from predictor.ray_serve.local import start_local_ray
    from predictor.ray_serve.router import InterferenceAwareRouter
    from predictor.ray_serve.service_app import deploy_service

    began = time.perf_counter()
    start_local_ray(num_cpus=2)
    deploy_service("ray-router", num_replicas=1)
    learner = "ray-router-learner"
    args = (list(config.models), list(config.batch_sizes))
    kwargs = {"learner": learner, "profile_runs": 5}
    handles = {}
    for name, router in (("default", None), ("aware", InterferenceAwareRouter)):
        routing = RequestRouterConfig(request_routing_stats_period_s=config.stats_period_s)
        if router is not None:
            routing = RequestRouterConfig(request_router_class=router, request_routing_stats_period_s=config.stats_period_s,
                                          request_router_kwargs={"learner": learner, "confidence": config.confidence})
        app = InferenceReplica.options(name=f"infer-{name}", num_replicas=2, request_router_config=routing)
        handles[name] = serve.run(app.bind(*args, **kwargs), name=f"infer-{name}", route_prefix=None)
    solo = handles["default"].solo_profile.remote().result()
    print(f"deployed in {time.perf_counter() - began:.0f} s; solo latency (ms): "
          + ", ".join(f"{k} {v:.1f}" for k, v in sorted(solo.items())))

    rng = np.random.default_rng(config.seed)
    asyncio.run(drive(handles["default"], trace(config, rng, config.warmup_requests), solo, config, "warmup"))
    asyncio.run(drive(handles["aware"], trace(config, rng, 20), solo, config, "warmup-aware"))  # the router's version
    learned = ray_get(learner_named(learner).observations_learned.remote())
    print(f"learned {learned} observations in the warm-up")

    arrivals = trace(config, rng, config.requests)
    rows: dict[str, list] = {"default": [], "aware": []}
    for r in range(config.rounds):
        for name in ("default", "aware") if r % 2 == 0 else ("aware", "default"):
            rows[name] += asyncio.run(drive(handles[name], arrivals, solo, config, f"{name}-{r}"))
    results = {name: summary(v) for name, v in rows.items()}
    results["p99_ratio"] = results["aware"]["p99_ms"] / results["default"]["p99_ms"]
    results["observations_learned"] = ray_get(learner_named(learner).observations_learned.remote())
    results["wall_s"] = time.perf_counter() - began

    print(f"\n{'router':<10}{'requests':>9}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'deadlines met':>15}"
          f"{'exec mean':>11}{'exec p99':>10}{'outside':>9}")
    for name in ("default", "aware"):
        s = results[name]
        print(f"{name:<10}{s['requests']:>9}{s['p50_ms']:>9.1f}{s['p99_ms']:>9.1f}{s['mean_ms']:>9.1f}"
              f"{s['attainment']:>14.1%}{s['mean_execution_ms']:>11.1f}{s['p99_execution_ms']:>10.1f}"
              f"{s['mean_outside_ms']:>9.1f}")
    print(f"aware / default p99: {results['p99_ratio']:.2f}   (run took {results['wall_s']:.0f} s)")
    common.finish(out, results)
    serve.shutdown()


def ray_get(ref: Any) -> Any:
    """``ray.get`` (imported with Ray)."""
    import ray

    return ray.get(ref)


if __name__ == "__main__":
    main()
