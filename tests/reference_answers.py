"""What an uninterrupted service answers: the reference the fault and exactly-once tests compare with."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from predictor.records.record import BatchSpec, Record
from predictor.rpc import convert
from predictor.service import CoRunnerSource, Prediction, Query, Service, ServiceConfig

QUERIES = [
    Query("sim0", BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4}), co_runner_source=CoRunnerSource.EXPLICIT),
    Query("sim1", BatchSpec("mlp", 2, {"l2_util": 0.1, "dram_util": 0.6}), co_runner_source=CoRunnerSource.EXPLICIT),
]


def answers_of(predict: Callable[[Query, float], Prediction]) -> list[float]:
    """Latency and 0.9 bound of each of :data:`QUERIES`, from ``predict`` (a service's or a client's)."""
    out = []
    for query in QUERIES:
        p = predict(query, 0.9)
        out += [p.latency_ms, p.upper_bound_ms]
    return out


def reference_answers(records: Sequence[Record]) -> list[float]:
    """:func:`answers_of` a fresh service that learned ``records`` once, in order (through the
    protobuf round trip the RPC path takes)."""
    reference = Service(ServiceConfig(snapshot_every_s=0))
    reference.open()
    items = ((convert.record_from_pb(convert.record_to_pb(r)), "") for r in records)
    assert reference.report_observations(items).accepted == len(records)
    return answers_of(reference.predict)
