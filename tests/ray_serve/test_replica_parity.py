"""A Ray Serve replica answers exactly what the learner's own process answers (``docs/design.md``, One truth).

A replica (:class:`~predictor.ray_serve.pinned.PinnedService`) installs what the learner publishes
(:meth:`Learner.published_after <predictor.ray_serve.learner.Learner.published_after>`): the model
version and the books answers read besides it, so that it fills omitted signals, estimates omitted
overlaps and resolves device kinds from the learner's state, not from its own empty one. What
crosses to the replica is pickled, as Ray sends it.
"""

from __future__ import annotations

import pickle

import pytest
from one_truth_data import QUERIES, answers_of, chunked, records

pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")

from predictor.ray_serve.learner import Learner  # noqa: E402
from predictor.ray_serve.pinned import PinnedService  # noqa: E402
from predictor.service import Query, ServiceConfig  # noqa: E402

CONFIG = ServiceConfig(snapshot_every_s=0, observation_log=False)


def _learner() -> Learner:
    learner = Learner(CONFIG)
    learner.service.report_observations(chunked(records(600), [50]))
    return learner


def _answers(service) -> list:
    out = answers_of(service.predict, service.check_deadline)
    out += [service.predict(q).estimated for q in QUERIES]
    kindless = [Query(q.device, q.batch, co_runners=q.co_runners, co_runner_source=q.co_runner_source)
                for q in QUERIES[:8]]  # the device's kind from the learner's live view
    out += [service.predict(q).latency_ms for q in kindless]
    return out


def test_a_replica_fills_and_estimates_as_the_learner_does():
    learner = _learner()
    published = pickle.loads(pickle.dumps(learner.published_after(0)))  # as Ray carries it
    replica = PinnedService(CONFIG)
    assert replica.install(*published)
    assert _answers(replica.service) == _answers(learner.service)  # to the bit, estimated fields included
    assert learner.published_after(replica.generation) is None  # nothing newer


def test_without_the_books_a_replica_answers_otherwise():
    """What the books carry matters: the model version alone fills nothing (the parity above is not vacuous)."""
    learner = _learner()
    version, _ = learner.published_after(0)
    replica = PinnedService(CONFIG)
    assert replica.install(pickle.loads(pickle.dumps(version)))
    assert answers_of(replica.service.predict) != answers_of(learner.service.predict)


@pytest.mark.slow
def test_a_replica_over_a_real_ray_actor_answers_as_the_learner():
    """The same through a local Ray: the learner as a named actor fed ``coloc/v1`` dicts, its
    publication fetched with ``ray.get``, against a learner in this process fed the same."""
    import ray

    from predictor.ray_serve.learner import start_learner, stop_learner
    from predictor.ray_serve.local import start_local_ray
    from predictor.records.record import record_to_dict

    dicts = [record_to_dict(r) for r in records(600, outliers=())]
    start_local_ray()
    actor = start_learner("parity-learner", CONFIG)
    local = Learner(CONFIG)
    try:
        for at in range(0, len(dicts), 50):
            ray.get(actor.observe.remote(dicts[at:at + 50]))
            local.observe(dicts[at:at + 50])
        replica = PinnedService(CONFIG)
        assert replica.install(*ray.get(actor.published_after.remote(0)))
        assert _answers(replica.service) == _answers(local.service)
    finally:
        stop_learner("parity-learner")
