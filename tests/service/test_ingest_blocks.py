"""Ingest by blocks: a stream's records are learned as blocks, replayed against the block's start.

What must not change: the model, the conformal calibrator, the error monitor and the gates learn
exactly what they learned record by record; so does the degraded replay, whose admission-time
questions are answered by the replay base, the model at the last multiple of
``replay_every_records`` of the sequence, whatever the blocks (``tests/service/test_one_truth.py``).
A block of one is the per-record path, exactly.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
from test_one_truth import differs

from predictor import snapshot
from predictor.analysis.admission_replay import partial_overlap_records, replay
from predictor.predictors import create
from predictor.predictors.sgd import SgdPredictor
from predictor.records.record import RecordError
from predictor.service import Service, ServiceConfig, ingest
from predictor.service.ingest import MESSAGE_END, _restore_point
from predictor.service.replay_block import replay_block, replay_record

CONFIG = ServiceConfig(snapshot_every_s=0, observation_log=False)


def _records(n: int = 700, seed: int = 3):
    return partial_overlap_records(n, seed=seed)


def _per_record(records, config: ServiceConfig = CONFIG) -> Service:
    service = Service(config)
    service.open()
    for record in records:
        try:
            service.observe(record)
        except Exception:  # noqa: BLE001 - an outlier refused: as the stream path refuses it
            pass
    return service


def _blocks(records, message: int, config: ServiceConfig = CONFIG) -> Service:
    service = Service(config)
    service.open()
    for at in range(0, len(records), message):
        service.report_observations([(r, "") for r in records[at:at + message]])
    return service


def _parts(service: Service) -> dict[str, object]:
    state = service.state
    monitor = copy.deepcopy(state.monitor)
    monitor.alarms = [dataclasses.replace(alarm, time=0.0) for alarm in monitor.alarms]  # wall clock: not learned
    return {"predictor": state.predictor, "calibrator": state.calibrator, "monitor": monitor,
            "gates": state.gates, "filling": state.filling}


def _assert_same_learning(one: Service, many: Service, records) -> None:
    """The model, calibrator, monitor and gates of two services agree within 1e-9 (the compiled
    RLS steps equal the reference's within rounding, :mod:`predictor.prequential.blocks`)."""
    a, b = one.state, many.state
    assert a.predictor.n_learned == b.predictor.n_learned
    np.testing.assert_allclose(a.predictor.predict_many(records), b.predictor.predict_many(records), rtol=1e-9)
    for key, model in getattr(a.predictor, "_models", {}).items():
        np.testing.assert_allclose(model._weights, b.predictor._models[key]._weights, rtol=1e-9, atol=1e-12)
    kinds = sorted({r.device_kind for r in records})
    for kind in kinds:
        for predicted in (1.0, 10.0, 100.0):
            assert a.calibrator.upper_bound(predicted, kind, 0.95).upper_ms == pytest.approx(
                b.calibrator.upper_bound(predicted, kind, 0.95).upper_ms, rel=1e-9)
        assert a.monitor.observations(kind) == b.monitor.observations(kind)
        assert a.monitor.mape(kind) == pytest.approx(b.monitor.mape(kind), rel=1e-9)
        assert a.monitor.coverage(kind) == b.monitor.coverage(kind)
    assert (a.gates.n_rejected, a.n_outliers) == (b.gates.n_rejected, b.n_outliers)
    assert snapshot.dump_state(a.filling) == snapshot.dump_state(b.filling)


def test_blocks_learn_what_records_one_by_one_learn_compiled_within_rounding():
    records = _records()
    one, many = _per_record(records), _blocks(records, 256)
    assert one.state.predictor.n_learned > 600
    _assert_same_learning(one, many, records[-100:])


def test_sgd_blocks_learn_what_records_one_by_one_learn():
    """An ``sgd`` service learns its blocks in compiled steps too (:mod:`predictor.predictors.sgd_kernel`):
    the model's weights to the bit, and what learns from the predictions alike."""
    records = _records()
    config = dataclasses.replace(CONFIG, predictor="sgd")
    one, many = _per_record(records, config), _blocks(records, 256, config)
    assert one.state.predictor.n_learned > 600
    _assert_same_learning(one, many, records[-100:])
    a, b = (s.state.predictor._model for s in (one, many))
    assert (a.weights, a.intercept) == (b.weights, b.intercept)


def test_blocks_learn_exactly_what_records_one_by_one_learn_where_nothing_is_compiled():
    records = _records()
    config = dataclasses.replace(CONFIG, predictor="rls:clip=2.0")  # not compiled (fastreplay.supports)
    one, many = _per_record(records, config), _blocks(records, 256, config)
    for name, part in _parts(one).items():
        assert snapshot.dump_state(part) == snapshot.dump_state(_parts(many)[name]), name


ENSEMBLE = "ensemble:experts='rls,sgd'"


def test_an_ensemble_of_compiled_experts_learns_its_blocks_as_it_learns_record_by_record():
    """Each expert over a block by its kernel, then the weights record by record: the predictions and
    the weights of the ensemble's own ``predict_learn_one``, record after record."""
    records = _records()
    config = dataclasses.replace(CONFIG, predictor=ENSEMBLE, outlier_gate=False)
    service = _blocks(records, 256, config)
    reference = create(ENSEMBLE)
    for record in records:
        reference.predict_learn_one(record)
    learned = service.state.predictor
    np.testing.assert_allclose(learned.predict_many(records), reference.predict_many(records), rtol=1e-9)
    for key in {r.batch.model for r in records}:
        weights, expected = learned.key_weights(key), reference.key_weights(key)
        assert weights.keys() == expected.keys()
        np.testing.assert_allclose(list(weights.values()), list(expected.values()), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("predictor", ["rls", "sgd", ENSEMBLE])
def test_refused_outliers_in_a_block_are_not_learned_by_what_follows(predictor):
    records = _records(400)
    outliers = (256, 300, 310)  # the first record of a block, then two in its middle
    records = [dataclasses.replace(r, latency_ms=r.latency_ms * 50) if i in outliers else r
               for i, r in enumerate(records)]
    config = dataclasses.replace(CONFIG, predictor=predictor)
    one, many = _per_record(records, config), _blocks(records, 128, config)
    assert many.state.n_outliers == one.state.n_outliers >= len(outliers)
    report = Service(config)
    report.open()
    rejected = [r for at in range(0, 400, 128)
                for r in report.report_observations([(x, "") for x in records[at:at + 128]]).rejections]
    assert [(r.index, r.field) for r in rejected] == [(i - 256, "record.latency_ms") for i in outliers]
    _assert_same_learning(one, many, records[-100:])


@pytest.mark.parametrize("predictor", ["rls", "sgd", ENSEMBLE])
def test_a_restore_point_brings_the_predictor_and_gates_back_to_the_bit(predictor):
    """What a refusal of the gate restores (each predictor's own restore point; the gates of the kinds
    checked since): the learned state as it was, to the bit, whatever was learned since."""
    records = _records(500)
    service = _blocks(records[:300], 100, dataclasses.replace(CONFIG, predictor=predictor))
    state = service.state
    before = copy.deepcopy((state.predictor, state.gates))
    weights = _sgd_weights(state.predictor)
    restore, _ = _restore_point(state, {r.device_kind or state.live.kind_of(r.device) for r in records[300:]})
    service.report_observations([(r, "") for r in records[300:]])
    assert differs((state.predictor, state.gates), before) is not None
    assert not weights or differs(_sgd_weights(state.predictor), weights) is not None
    restore()
    assert differs((state.predictor, state.gates), before) is None
    assert differs(_sgd_weights(state.predictor), weights) is None


def _sgd_weights(predictor) -> list[list[tuple[str, float]]]:
    """The weights, in order, of ``predictor`` or its experts that are ``sgd``."""
    sgds = [p for p in (predictor, *getattr(predictor, "expert_predictors", ())) if isinstance(p, SgdPredictor)]
    return [list(p._model.weights.items()) for p in sgds]


def test_blocks_of_one_calibrate_admission_exactly_as_records_one_by_one():
    records = _records(400)
    one = _per_record(records)
    many = _blocks(records, 1)
    # by value (which string objects a pickle shares depends on what the process's caches met first)
    assert differs(one.state.admission.calibrator, many.state.admission.calibrator) is None


def test_a_block_replays_against_the_replay_base_as_records_one_by_one_do():
    records = _records(600)
    per_record, blocks = _per_record(records), _blocks(records, 200)
    # the replayed admission-time residuals are the same (answers from the replay base, not the block's start)
    a, b = per_record.state.admission.calibrator, blocks.state.admission.calibrator
    assert (a._alphas, list(a._windows)) == (b._alphas, list(b._windows))
    assert all(a._windows[k].__getstate__() == b._windows[k].__getstate__() for k in a._windows)
    # a block's questions replayed together are those replayed one by one, against one model
    service = Service(CONFIG)
    service.open()
    answering = service.answers
    for at in range(0, len(records), 200):
        chunk = records[at:at + 200]
        expected = [replay_record(answering, r) for r in chunk]  # each against the model before the block
        with service.state.lock:
            together = replay_block(answering, chunk)
        assert [[s for s, _ in q] for q in together] == [[s for s, _ in q] for q in expected]
        np.testing.assert_allclose([v for q in together for _, v in q], [v for q in expected for _, v in q],
                                   rtol=1e-9)
        service.report_observations([(r, "") for r in chunk])
    assert snapshot.dump_state(service.state.predictor) == snapshot.dump_state(blocks.state.predictor)


def test_a_bad_record_in_a_block_is_named_and_the_rest_learned():
    records = _records(300)
    service = Service(CONFIG)
    service.open()
    items: list = [(r, "") for r in records[:100]]
    items[37] = (RecordError("batch.batch_size", "must be >= 1"), "")
    items[50] = ({"schema": "coloc/v1", "device": "d", "batch": {"model": "m", "batch_size": 1}}, "")
    report = service.report_observations(items)
    assert report.accepted == 98 and report.rejected == 2
    assert [(r.index, r.field) for r in report.rejections] == [(37, "record.batch.batch_size"),
                                                               (50, "record.latency_ms")]
    reference = _per_record([r for i, r in enumerate(records[:100]) if i not in (37, 50)])
    _assert_same_learning(reference, service, records[100:200])


def test_message_ends_close_blocks_and_every_logged_record_is_learned(tmp_path):
    records = _records(120)
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open(tmp_path)
    seen: list[int] = []

    def stream():
        for at in range(0, 120, 40):
            seen.append(service.state.predictor.n_learned)
            yield from ((r, "") for r in records[at:at + 40])
            yield MESSAGE_END

    report = service.report_observations(stream())
    assert report.accepted == 120 and seen == [0, 40, 80]  # each message learned before the next is read
    assert report.log_sequence == service.state.obs_log.last_seq == 120
    service.close()
    again = Service(ServiceConfig(snapshot_every_s=0))
    again.open(tmp_path)
    assert again.state.predictor.n_learned == 120


def test_offline_admission_replay_models_the_service_blocks():
    records = _records(500, seed=5)
    config = ServiceConfig(snapshot_every_s=0, observation_log=False, outlier_gate=False)
    per_record, blocks = replay(records, "s", config), replay(records, "s", config, block=100)
    assert per_record.answered == blocks.answered
    assert per_record.status.observations_learned == blocks.status.observations_learned == 500
    with pytest.raises(ValueError, match="block"):
        replay(records, "s", config, block=config.publish_every_records + 1)


def test_a_part_whose_learning_raises_leaves_no_gate_noting_changes(monkeypatch):
    """The gates' marks of a part's restore point are let go however the part ends: a learner that
    raises leaves no gate noting its changes for a mark nobody will rewind."""
    records = _records(200)
    service = _blocks(records[:100], 100)

    def broken(*args, **kwargs):
        raise RuntimeError("the learner failed")

    monkeypatch.setattr(ingest, "_prequential_compiled", broken)
    with pytest.raises(RuntimeError, match="the learner failed"):
        service.report_observations([(r, "") for r in records[100:]])
    gates = service.state.gates._gates.values()
    assert gates and not any(gate._marks for gate in gates)
