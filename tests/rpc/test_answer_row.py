"""PredictLatency's response written from the one-row answer (:func:`convert.answer_row_to_pb`) is
the message :func:`convert.prediction_to_pb` makes of the same answer's :class:`Prediction`, over
queries of every kind: co-runners given by overlap, by remaining time or left out, from the live
view, with signals, an unseen model, a queue what-if (an answer with terms)."""

from __future__ import annotations

import numpy as np
import pytest

from predictor.records.record import BatchSpec
from predictor.rpc import convert
from predictor.rpc.protos import pb2
from predictor.service import CoRunnerSource, PlannedCoRunner, Query, Service, ServiceConfig
from predictor.service.live.queues import QueueWhatIf
from predictor.service.synthetic import MODELS, synthetic_records


@pytest.fixture(scope="module")
def service():
    service = Service(ServiceConfig(predictor="rls", snapshot_every_s=0))
    service.open(None)
    for record in synthetic_records(600, seed=3, devices=("sim0", "sim1")):
        service.observe(record)
    service.batch_start("sim0", "SimGPU", "b1", BatchSpec("bert", 2, {"l2_util": 0.5, "dram_util": 0.4}), 1.0)
    yield service
    service.close()


def _queries(rng: np.random.Generator) -> list[Query]:
    names = sorted(MODELS)
    out = []
    for i in range(60):
        runners = []
        for _ in range(int(rng.integers(0, 3))):
            other = names[int(rng.integers(len(names)))]
            way = int(rng.integers(3))
            runners.append(PlannedCoRunner(other, int(rng.integers(1, 9)), {"l2_util": float(rng.uniform(0, 1))},
                                           overlap=float(rng.uniform(0, 1)) if way == 0 else None,
                                           remaining_ms=float(rng.uniform(1, 20)) if way == 1 else None))
        model = names[int(rng.integers(len(names)))] if i % 7 else "never-seen"
        live = i % 5 == 0
        out.append(Query(
            "sim0" if live else f"sim{i % 2}", BatchSpec(model, int(rng.integers(1, 9)), {"l2_util": 0.3}),
            device_kind="" if live else ("NewGPU" if i % 13 == 0 else "SimGPU"), co_runners=() if live else tuple(runners),
            co_runner_source=CoRunnerSource.LIVE_VIEW if live else CoRunnerSource.EXPLICIT,
            signals={"sm_util": 0.5} if i % 3 == 0 else {},
            solo_latency_ms=5.0 if i % 7 == 0 else None,
            what_if=QueueWhatIf(50.0, 4.0, 1.0) if i % 11 == 0 else None,
        ))
    return out


def test_answer_row_is_the_predictions_message(service):
    messages = pb2()
    seen = {"terms": 0, "fallback": 0, "estimated": 0, "co_runners": 0}
    for query in _queries(np.random.default_rng(5)):
        answer = service.answers.predict_columns(query, 0.95)
        written = messages.Prediction()
        convert.answer_row_to_pb(answer, written)
        expected = convert.prediction_to_pb(answer.prediction(0))
        assert written.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
        seen["terms"] += answer.terms is not None
        seen["fallback"] += written.fallback
        seen["estimated"] += bool(written.estimated)
        seen["co_runners"] += bool(written.co_runners)
    assert min(seen.values()) > 0, seen
