"""The ensemble's Hedge steps over a stream, compiled (:meth:`EnsemblePredictor.combine_learn_many`), against
:meth:`~predictor.predictors.ensemble.EnsemblePredictor.combine_learn` record by record: the same combined
predictions, errors, keys and book-keeping, to the bit."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.predictors import create
from predictor.records.record import BatchSpec, Record

_latency = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False, allow_infinity=False)


@st.composite
def streams(draw):
    """An ensemble's settings and a stream of (record, each expert's prediction of it)."""
    experts = draw(st.sampled_from(["static,ewma", "static,ewma,static"]))
    split_by = draw(st.sampled_from(["model", "device_kind", None]))
    max_keys = draw(st.integers(0, 4))
    eta = draw(st.sampled_from([0.0, 1.0, 50.0, 5000.0]))
    spec = f"ensemble:experts='{experts}',split_by={split_by},max_keys={max_keys},eta={eta}"
    n_experts = experts.count(",") + 1
    steps = []
    for _ in range(draw(st.integers(0, 40))):
        record = Record(device="d0", batch=BatchSpec(draw(st.sampled_from("abcdef")), draw(st.integers(1, 4))),
                        latency_ms=draw(_latency), device_kind=draw(st.sampled_from(["k0", "k1", "k2"])),
                        solo_latency_ms=draw(st.none() | _latency))
        steps.append((record, [draw(_latency) for _ in range(n_experts)]))
    return spec, steps


def _state(predictor) -> bytes:
    return pickle.dumps((predictor._errors, list(predictor._key_errors.items()), predictor._solo.__dict__,
                         predictor._range_seen, predictor._slowdown_range, predictor.n_learned))


@settings(max_examples=150, deadline=None)
@given(streams(), st.integers(0, 40))
def test_compiled_steps_are_the_reference_steps_to_the_bit(stream, cut):
    spec, steps = stream
    reference, compiled = create(spec), create(spec)
    known_reference: list[bool] = []
    expected = []
    for record, predictions in steps:
        known_reference.append(reference.knows_solo(record))
        expected.append(reference.combine_learn(record, predictions))
    known: list[bool] = []
    got = []
    for part in (steps[:cut], steps[cut:]):  # two calls: the state carries over
        records = [record for record, _ in part]
        columns = [[predictions[e] for _, predictions in part] for e in range(len(compiled.expert_predictors))]
        got += compiled.combine_learn_many(records, columns, known)
    assert [x.hex() for x in got] == [x.hex() for x in expected]
    assert known == known_reference
    assert _state(compiled) == _state(reference)


def test_a_non_positive_latency_errs_as_the_reference_does_after_the_steps_before_it():
    spec = "ensemble:experts='static,ewma'"
    reference, compiled = create(spec), create(spec)
    records = [Record("d0", BatchSpec("a", 1), latency) for latency in (2.0, 3.0, 0.0, 4.0)]
    with pytest.raises(ValueError):
        for record in records:
            reference.combine_learn(record, [1.0, 2.0])
    with pytest.raises(ValueError):
        compiled.combine_learn_many(records, [[1.0] * 4, [2.0] * 4])
    assert _state(compiled) == _state(reference)
