"""One truth, in process: what the service learns is a function of the ordered records alone.

However a stream is cut into messages (each learned as a block, :data:`~predictor.service.ingest.MESSAGE_END`)
or into streams, the learned state (model, calibrators, admission calibration, filling, gates,
monitor, replay base) and every answer are the same, bit for bit, as when the records are learned
one by one (``docs/design.md``, One truth).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from one_truth_data import QUERIES, answers_of, chunked, max_relative, records

from predictor.records.logio import write_records
from predictor.service import Service, ServiceConfig
from predictor.service.ingest import Ingest

CONFIG = ServiceConfig(snapshot_every_s=0, observation_log=False, replay_every_records=64)
RECORDS = records(600)


def _fed(chunks: list[int] | None, config: ServiceConfig = CONFIG, streams: int = 1) -> Service:
    """A fresh service fed :data:`RECORDS` record by record (``None``), else in messages of ``chunks``
    (cycled), over ``streams`` streams."""
    service = Service(config)
    service.open()
    if chunks is None:
        for record in RECORDS:
            try:
                service.observe(record)
            except Exception:  # noqa: BLE001 - an outlier, refused as a stream refuses it
                pass
        return service
    per = math.ceil(len(RECORDS) / streams)
    for at in range(0, len(RECORDS), per):
        service.report_observations(chunked(RECORDS[at:at + per], chunks))
    return service


@functools.lru_cache(maxsize=4)
def _one_by_one(config: ServiceConfig = CONFIG) -> tuple[Service, list[float]]:
    service = _fed(None, config)
    return service, answers_of(service.predict, service.check_deadline)


def _parts(service: Service) -> dict[str, object]:
    state = service.state
    monitor = copy.deepcopy(state.monitor)
    monitor.alarms = [dataclasses.replace(alarm, time=0.0) for alarm in monitor.alarms]  # wall clock: not learned
    return {"predictor": state.predictor, "calibrator": state.calibrator, "admission": state.admission.calibrator,
            "admission monitor": state.admission.monitor, "filling": state.filling, "gates": state.gates,
            "monitor": monitor, "replay base": state.replay_base(), "sequence": state.sequence,
            "outliers": state.n_outliers, "learned": state.predictor.n_learned}


_SKIPPED = {"_lock", "clock", "_projected", "_array", "_packed"}
"""Attributes that are no learned state: locks, clocks, wall times, caches derived from the state."""


def differs(a: object, b: object, path: str = "") -> str | None:
    """Where ``a`` and ``b`` differ in value (floats to the bit), or ``None``: a deep comparison that,
    unlike comparing pickles, does not depend on which objects happen to be shared."""
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, np.ndarray):
        same = a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        return None if same else f"{path}: arrays differ"
    if isinstance(a, float):
        return None if a == b or (math.isnan(a) and math.isnan(b)) else f"{path}: {a!r} != {b!r}"
    if isinstance(a, (int, str, bytes, bool, type(None))):
        return None if a == b else f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{path}: keys {list(a)[:5]}... != {list(b)[:5]}..."
        return next((d for k in a if k not in _SKIPPED and (d := differs(a[k], b[k], f"{path}[{k!r}]"))), None)
    if isinstance(a, (list, tuple, deque)):
        if len(a) != len(b):
            return f"{path}: lengths {len(a)} != {len(b)}"
        return next((d for i, (x, y) in enumerate(zip(a, b, strict=True)) if (d := differs(x, y, f"{path}[{i}]"))),
                    None)
    if isinstance(a, (set, frozenset)):
        return None if a == b else f"{path}: sets differ"
    if callable(a) and not hasattr(a, "__dict__"):
        return None
    state_a = a.__getstate__() if hasattr(a, "__getstate__") else vars(a)
    state_b = b.__getstate__() if hasattr(b, "__getstate__") else vars(b)
    if state_a is None and hasattr(a, "__slots__"):
        state_a = {s: getattr(a, s, None) for s in a.__slots__}
        state_b = {s: getattr(b, s, None) for s in b.__slots__}
    if isinstance(state_a, tuple) and len(state_a) == 2 and state_a[0] is None:  # (None, slots dict)
        state_a, state_b = state_a[1], state_b[1]
    return differs(state_a, state_b, f"{path}.{type(a).__name__}")


def _assert_same_state(one: Service, other: Service) -> None:
    a, b = _parts(one), _parts(other)
    for name in a:
        where = differs(a[name], b[name], name)
        assert where is None, where


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # an example takes seconds: no shrinking
@given(chunks=st.lists(st.integers(1, 300), min_size=1, max_size=6), streams=st.integers(1, 3))
def test_any_cut_into_messages_and_streams_learns_and_answers_what_one_by_one_does(chunks, streams):
    one, expected = _one_by_one()
    service = _fed(chunks, streams=streams)
    assert answers_of(service.predict, service.check_deadline) == expected  # to the bit
    _assert_same_state(one, service)


@pytest.mark.parametrize("size", [1, 7, 50, 500])
def test_message_sizes_of_the_issue_answer_to_the_bit(size):
    _, expected = _one_by_one(ServiceConfig(snapshot_every_s=0, observation_log=False))
    service = _fed([size], ServiceConfig(snapshot_every_s=0, observation_log=False))
    assert max_relative(expected, answers_of(service.predict, service.check_deadline)) == 0.0


def test_the_replay_base_moves_at_multiples_of_replay_every_records_of_the_sequence():
    service = _fed([37, 101])
    state = service.state
    assert state.sequence == len(RECORDS)  # the refused outliers count: they reached the learner
    assert state.n_outliers >= 3 and state.predictor.n_learned == len(RECORDS) - state.n_outliers
    base = state.replay_base()
    assert base.sequence == (len(RECORDS) // 64) * 64
    # the base is a copy of the model as it stood then: a service fed only that far predicts the same
    prefix = Service(CONFIG)
    prefix.open()
    prefix.report_observations(chunked(RECORDS[:base.sequence], [base.sequence]))
    rows = [r for r in RECORDS[:50]]
    np.testing.assert_array_equal(base.predictor.predict_many(rows), prefix.state.predictor.predict_many(rows))
    assert differs(base.filling, prefix.state.filling) is None


def test_a_record_learned_compiled_equals_the_reference_steps_within_1e_12(monkeypatch):
    """Blocks (and single records) are learned by the compiled RLS steps; the reference class's
    steps (BLAS sums, another order of additions) give the same answers within 1e-12 relative."""
    _, compiled = _one_by_one()
    monkeypatch.setattr(Ingest, "_learn_compiled", lambda self, block: None)
    reference = _fed([50])
    assert max_relative(compiled, answers_of(reference.predict, reference.check_deadline)) < 1e-12


def test_queries_cover_signals_and_overlaps_given_and_omitted():
    assert any(q.signals for q in QUERIES) and any(not q.signals for q in QUERIES)
    overlaps = [r.overlap for q in QUERIES for r in q.co_runners]
    assert None in overlaps and any(o is not None for o in overlaps)


@pytest.mark.parametrize("publish_every", [1, 37, 512])
def test_a_warm_start_learns_by_blocks_what_one_by_one_does(tmp_path, publish_every):
    """A warm start (and the observation log's replay, by the same :meth:`Ingest.learn_stream`) learns its
    records by blocks: the same state and answers, to the bit, as observing them one by one."""
    log = tmp_path / "warm.jsonl"
    write_records(log, RECORDS)
    one, expected = _one_by_one()
    service = Service(dataclasses.replace(CONFIG, publish_every_records=publish_every))
    service.open(warm_start=log)
    assert answers_of(service.predict, service.check_deadline) == expected
    _assert_same_state(one, service)


@pytest.mark.parametrize("chunks", [[300], [37, 250, 5]])
def test_without_the_admission_replay_any_cut_learns_what_one_by_one_does(chunks):
    """With the admission-time replay off (its own configuration, no replay base read), the same
    state and answers, to the bit, as the records one by one."""
    config = dataclasses.replace(CONFIG, admission_replay=False)
    one, expected = _one_by_one(config)
    service = _fed(chunks, config)
    assert answers_of(service.predict, service.check_deadline) == expected
    _assert_same_state(one, service)
