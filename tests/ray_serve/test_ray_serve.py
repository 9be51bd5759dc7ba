"""Ray Serve integration on a local Ray: the service's deployment and the interference-aware router.

The deployment's answers equal those of an in-process service that learned the same records
(the same model version); the router ranks replicas by the service's predicted latency, against
their queue lengths where those disagree, and on a live cluster avoids the replica that runs a heavy batch.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
serve = pytest.importorskip("ray.serve", reason="ray[serve] is not installed (pip install -e '.[ray]')")

from collectors.ray_inference import InferenceReplica  # noqa: E402
from predictor.ray_serve.colocation import ColocationState, Ledger, RunningBatch, solo_key  # noqa: E402
from predictor.ray_serve.learner import learner_named, stop_learner  # noqa: E402
from predictor.ray_serve.local import start_local_ray  # noqa: E402
from predictor.ray_serve.pinned import PinnedService  # noqa: E402
from predictor.ray_serve.requests import InferenceRequest  # noqa: E402
from predictor.ray_serve.router import InterferenceAwareRouter, rank_replicas  # noqa: E402
from predictor.ray_serve.service_app import deploy_service  # noqa: E402
from predictor.records.record import BatchSpec, parse_record  # noqa: E402
from predictor.service import (  # noqa: E402
    Candidate,
    CoRunnerSource,
    Deadline,
    PlannedCoRunner,
    Query,
    Service,
    ServiceConfig,
)

SOLO = {"mobilenet": 10.0, "bert": 80.0}
WEIGHT = {"mobilenet": 0.1, "bert": 1.0}  # slowdown added per fully overlapping co-runner


def records(n: int = 400, seed: int = 0) -> list[dict]:
    """Co-located batches whose slowdown depends on who runs beside them: bert hurts, mobilenet barely."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        model = ("mobilenet", "bert")[i % 2]
        co = [{"model": str(rng.choice(list(SOLO))), "batch_size": 1, "overlap": float(rng.uniform(0.2, 1.0))}
              for _ in range(int(rng.integers(0, 3)))]
        slowdown = 1.0 + sum(WEIGHT[c["model"]] * c["overlap"] for c in co)
        out.append({"schema": "coloc/v1", "device": f"cpu{i % 2}", "device_kind": "cpu",
                    "batch": {"model": model, "batch_size": 1}, "solo_latency_ms": SOLO[model],
                    "latency_ms": SOLO[model] * slowdown * float(rng.uniform(0.97, 1.03)), "co_runners": co})
    return out


def learned_service(data: list[dict]) -> Service:
    service = Service(ServiceConfig())
    service.open()
    for record in data:
        service.observe(parse_record(record))
    return service


# ------------------------------------------------------------------ ranking (no cluster)
def test_ranking_follows_predicted_interference_not_queue_length():
    pinned = PinnedService(ServiceConfig())
    assert pinned.install(learned_service(records()).state.publish())
    now = 1000.0
    # replica a runs two light batches, replica b one heavy batch: b has the shorter queue
    light = ColocationState("cpu0", "cpu", {solo_key("bert", 1): SOLO["bert"]}, (
        RunningBatch("x1", "mobilenet", 1, now - 0.001, SOLO["mobilenet"]),
        RunningBatch("x2", "mobilenet", 1, now - 0.001, SOLO["mobilenet"])))
    heavy = ColocationState("cpu1", "cpu", {solo_key("bert", 1): SOLO["bert"]}, (
        RunningBatch("y1", "bert", 1, now - 0.001, SOLO["bert"]),))
    request = InferenceRequest("q", "bert", 1, deadline_ms=200.0)
    ranked = rank_replicas(pinned.service, request, [("b", heavy), ("a", light)], Ledger(), 0.9, now)
    assert [i for i, _ in ranked] == [1, 0]
    assert ranked[0][1] < ranked[1][1]
    # what the router sent itself counts too: a heavy batch it sent to a makes b the better one
    ledger = Ledger()
    for k in range(2):
        ledger.sent("a", f"i{k}", RunningBatch(f"z{k}", "bert", 1, now, SOLO["bert"]))
    ranked = rank_replicas(pinned.service, request, [("b", heavy), ("a", light)], ledger, 0.9, now)
    assert [i for i, _ in ranked] == [0, 1]


def test_malformed_routing_stats_name_the_field():
    with pytest.raises(ValueError, match=r"colocation\.running\[0\]"):
        ColocationState.from_stats({"colocation": {"device": "cpu0", "running": [["only-an-id"]]}})
    with pytest.raises(ValueError, match=r"colocation\.device"):
        ColocationState.from_stats({"colocation": {"device": ""}})
    assert ColocationState.from_stats({}) is None


# ------------------------------------------------------------------ on a local Ray cluster
@pytest.fixture(scope="module")
def local_ray():
    start_local_ray(num_cpus=2)
    yield
    serve.shutdown()
    ray.shutdown()


def _wait_for_version(handle, query: Query, learned: int, timeout_s: float = 60.0) -> None:
    """Until ten answers in a row (from either replica) come from the version that learned ``learned``."""
    end, in_a_row = time.monotonic() + timeout_s, 0
    while in_a_row < 10:
        assert time.monotonic() < end, "the replicas never installed the learner's version"
        got = handle.predict.remote(query).result().observations_learned
        in_a_row = in_a_row + 1 if got == learned else 0
        time.sleep(0.01)


@pytest.mark.slow
def test_deployment_answers_equal_the_in_process_service(local_ray):
    data = records(300, seed=1)
    handle = deploy_service("t-answers", num_replicas=2)
    try:
        learner = learner_named("t-answers-learner")
        assert ray.get(learner.observe.remote(data)) == len(data)
        assert ray.get(learner.publish.remote()) > 0
        reference = learned_service(data)
        query = Query("cpu0", BatchSpec("bert", 1), device_kind="cpu",
                      co_runners=(PlannedCoRunner("bert", 1, overlap=0.8),), co_runner_source=CoRunnerSource.EXPLICIT)
        deadline = Deadline(ms=150.0)
        candidates = [Candidate("cpu0", "cpu", (PlannedCoRunner("bert", 1, remaining_ms=40.0),), CoRunnerSource.EXPLICIT),
                      Candidate("cpu1", "cpu", (PlannedCoRunner("mobilenet", 1, remaining_ms=5.0),),
                                CoRunnerSource.EXPLICIT)]
        _wait_for_version(handle, query, len(data))
        for _ in range(4):  # several calls: both replicas answer
            assert handle.predict.remote(query).result() == reference.predict(query)
            assert handle.check_deadline.remote(query, deadline).result() == reference.check_deadline(query, deadline)
            ranking = handle.rank_placements.remote(BatchSpec("bert", 1), candidates, deadline).result()
            assert ranking == reference.rank_placements(BatchSpec("bert", 1), candidates, deadline)
    finally:
        serve.delete("t-answers")
        stop_learner("t-answers-learner")


@pytest.mark.slow
def test_router_avoids_the_replica_running_a_heavy_batch(local_ray):
    handle = deploy_service("t-router", num_replicas=1)
    try:
        learner = learner_named("t-router-learner")
        ray.get(learner.observe.remote(records(400, seed=2)))
        ray.get(learner.publish.remote())
        config = serve.config.RequestRouterConfig(
            request_router_class=InterferenceAwareRouter, request_router_kwargs={"learner": "t-router-learner"},
            request_routing_stats_period_s=0.1)
        app = InferenceReplica.options(num_replicas=2, request_router_config=config).bind(
            ["mobilenet", "bert"], [1, 16], learner="", profile_runs=1)
        inference = serve.run(app, name="t-infer", route_prefix=None)
        inference.remote(InferenceRequest("warm-up", "mobilenet", 1, deadline_ms=10_000.0)).result()
        time.sleep(0.5)  # the router asked the learner for its version on the first request
        avoided = 0
        for k in range(3):
            heavy = inference.remote(InferenceRequest(f"h{k}", "bert", 16, deadline_ms=10_000.0))
            time.sleep(0.05)  # routed and running (a bert batch of 16 runs for 200 ms and more)
            light = inference.remote(InferenceRequest(f"l{k}", "mobilenet", 1, deadline_ms=10_000.0)).result()
            busy = heavy.result()
            avoided += light.device != busy.device
        assert avoided == 3
    finally:
        serve.delete("t-infer")
        serve.delete("t-router")
        stop_learner("t-router-learner")
    del handle
