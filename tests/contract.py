"""Contract checks every registered predictor must pass (river's ``check_*`` style).

Each ``check_*`` takes a fresh, unfitted predictor and a list of observed
records, and raises ``AssertionError`` on a violation.
"""

from __future__ import annotations

import copy
import math
import pickle

import numpy as np

from predictor.predictors.base import LatencyPredictor
from predictor.records import BatchSpec, CoRunner, Record
from predictor.snapshot import restore_predictor, snapshot_predictor


def _learn(predictor: LatencyPredictor, records: list[Record]) -> LatencyPredictor:
    for record in records:
        predictor.learn_one(record)
    return predictor


def check_finite_positive_output(predictor: LatencyPredictor, records: list[Record]) -> None:
    for record in records:
        value = predictor.predict_one(record)
        assert math.isfinite(value) and value > 0, f"{predictor}: prediction {value!r} before learning"
    _learn(predictor, records)
    for record in records:
        value = predictor.predict_one(record)
        assert math.isfinite(value) and value > 0, f"{predictor}: prediction {value!r}"


def check_input_not_mutated(predictor: LatencyPredictor, records: list[Record]) -> None:
    before = copy.deepcopy(records)
    _learn(predictor, records)
    for record in records:
        predictor.predict_one(record)
    assert records == before, f"{predictor} mutated its input"


def check_deterministic(predictor: LatencyPredictor, records: list[Record]) -> None:
    first = _learn(predictor.clone(), records)
    second = _learn(predictor.clone(), records)
    assert first.predict_many(records) == second.predict_many(records), f"{predictor} is not deterministic"


def check_pickle_round_trip(predictor: LatencyPredictor, records: list[Record]) -> None:
    half = len(records) // 2
    _learn(predictor, records[:half])
    copy_ = pickle.loads(pickle.dumps(predictor))
    assert copy_.predict_many(records) == predictor.predict_many(records)
    _learn(predictor, records[half:])
    _learn(copy_, records[half:])
    assert copy_.predict_many(records) == predictor.predict_many(records), "diverged after unpickling"


def check_snapshot_restore(predictor: LatencyPredictor, records: list[Record]) -> None:
    half = len(records) // 2
    _learn(predictor, records[:half])
    restored = restore_predictor(snapshot_predictor(predictor))
    assert type(restored) is type(predictor) and restored.params() == predictor.params()
    _learn(predictor, records[half:])
    _learn(restored, records[half:])
    assert restored.predict_many(records) == predictor.predict_many(records)
    assert restored.n_learned == predictor.n_learned


def check_unseen_features(predictor: LatencyPredictor, records: list[Record]) -> None:
    _learn(predictor, records)
    stranger = Record(
        device="never-seen",
        batch=BatchSpec("new-model", 3, {"brand_new_attr": 7.0}),
        latency_ms=None,
        co_runners=(CoRunner("other-new", 2, {"odd": 1e3}, overlap=0.4),),
        signals={"new_signal": 0.5},
    )
    value = predictor.predict_one(stranger)
    assert math.isfinite(value) and value > 0


def check_clone_is_unfitted(predictor: LatencyPredictor, records: list[Record]) -> None:
    _learn(predictor, records)
    fresh = predictor.clone()
    assert fresh.n_learned == 0 and fresh.params() == predictor.params()


def check_predict_learn_matches_predict_then_learn(predictor: LatencyPredictor, records: list[Record]) -> None:
    other = predictor.clone()
    combined = [predictor.predict_learn_one(r) for r in records]
    separate = []
    for record in records:
        separate.append(other.predict_one(record))
        other.learn_one(record)
    # equal up to rounding: a vector grown for learning sums over extra zero-weight columns
    assert np.allclose(combined, separate, rtol=1e-9, atol=0), f"{predictor}: predict_learn_one differs"
    assert np.allclose(predictor.predict_many(records), other.predict_many(records), rtol=1e-9, atol=0)
    assert predictor.n_learned == other.n_learned == len(records)


CHECKS = [
    check_predict_learn_matches_predict_then_learn,
    check_finite_positive_output,
    check_input_not_mutated,
    check_deterministic,
    check_pickle_round_trip,
    check_snapshot_restore,
    check_unseen_features,
    check_clone_is_unfitted,
]
