"""The outlier gate's restore points (:func:`predictor.service.ingest._restore_point`): what the
``rls`` predictor, an ensemble and the gates learn after one is taken, compiled or record by record, is undone
to the bit (a refused record must never change the model), far cheaper than the pickle it replaces.
"""

from __future__ import annotations

import math
import pickle

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.predictors import create
from predictor.prequential.blocks import prequential_blocks
from predictor.prequential.tree_blocks import prequential_tree_blocks
from predictor.service.guards.gates import OutlierGates
from predictor.service.synthetic import synthetic_records
from tests.pickles import unshared

RECORDS = synthetic_records(500, seed=11)


def _state(thing: object) -> bytes:
    return pickle.dumps(thing, protocol=pickle.HIGHEST_PROTOCOL)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.integers(0, 300), after=st.integers(1, 150), compiled=st.booleans(), again=st.booleans())
def test_a_restored_predictor_is_the_predictor_at_its_restore_point(before, after, compiled, again):
    predictor = create("rls")
    for record in RECORDS[:before]:
        predictor.predict_learn_one(record)
    point, expected = predictor.restore_point(), _state(predictor)
    later = RECORDS[before:before + after]
    if compiled:  # the ingest's way: new columns, scales and keys included
        prequential_blocks(predictor, later, block=len(later))
    else:
        for record in later:
            predictor.predict_learn_one(record)
    predictor.restore(point)
    assert _state(predictor) == expected
    if again:  # a restored predictor learns on as the one that never learned the undone records
        twin = pickle.loads(expected)
        for record in later[:20]:
            assert predictor.predict_learn_one(record) == twin.predict_learn_one(record)
        mine, its = predictor._models[""], twin._models[""]
        assert mine.index.columns == its.index.columns
        for name in ("_weights", "_s", "_column_scale"):
            assert getattr(mine, name).tobytes() == getattr(its, name).tobytes(), name
        assert predictor.predict_many(RECORDS[-50:]) == twin.predict_many(RECORDS[-50:])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.integers(0, 300), after=st.integers(1, 150), compiled=st.booleans(),
       experts=st.sampled_from(["rls,sgd", "rls,solo"]))
def test_a_restored_ensemble_is_the_ensemble_at_its_restore_point(before, after, compiled, experts):
    """The default learner (its experts restored in place) and an ensemble with an expert that has no
    restore point of its own (pickled): undone to the bit, and it learns on as the one that never learned.
    Compared by pickles without a memo: an expert restored from its pickle holds its own copies of the
    strings it shared with the rest, the same values in another layout of a memo."""
    predictor = create(f"ensemble:experts='{experts}'")
    for record in RECORDS[:before]:
        predictor.predict_learn_one(record)
    point, expected, twin = predictor.restore_point(), unshared(predictor), pickle.loads(_state(predictor))
    later = RECORDS[before:before + after]
    if compiled:  # the ingest's way
        prequential_tree_blocks(predictor, later)
    else:
        for record in later:
            predictor.predict_learn_one(record)
    assert unshared(predictor) != expected
    predictor.restore(point)
    assert unshared(predictor) == expected
    assert [predictor.predict_learn_one(r) for r in later[:20]] == [twin.predict_learn_one(r) for r in later[:20]]
    assert predictor.predict_many(RECORDS[-50:]) == twin.predict_many(RECORDS[-50:])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.floats(0.2, 20.0), st.sampled_from(["x", "y"])),
                min_size=1, max_size=120), st.integers(0, 120), st.booleans())
def test_restored_gates_are_the_gates_at_their_restore_point(checks, at, named):
    """Restored whole, or from a restore point of only the kinds checked since (``named``; a kind past
    ``max_kinds`` checks the shared gate)."""
    gates = OutlierGates(warmup=5, max_kinds=2)
    for kind, ratio, source in checks[:at]:
        gates.check(kind, 10.0, 10.0 * ratio, source)
    kinds = {kind for kind, _, _ in checks[at:]} if named else None
    point, expected = gates.restore_point(kinds), _state(gates)
    for kind, ratio, source in checks[at:]:
        gates.check(kind, 10.0, 10.0 * ratio, source)
    gates.restore(point)
    assert _state(gates) == expected
    kind, ratio, source = checks[0]
    twin = pickle.loads(expected)
    assert gates.check(kind, 10.0, 10.0 * math.sqrt(ratio), source) == twin.check(kind, 10.0, 10.0 * math.sqrt(ratio),
                                                                                  source)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.floats(0.7, 1.4), st.floats(0.05, 20.0)), st.sampled_from(["x", "y", "z"])),
                min_size=1, max_size=160),
       st.integers(0, 160), st.integers(0, 3), st.booleans())
def test_a_gate_rewound_to_a_mark_is_the_gate_at_its_mark(checks, at, others, release_first):
    """Full windows (residuals and decisions evicted), escapes and refreshes after the mark are undone
    to the bit; marks taken and released after it (the ingest's own, per part) leave it intact."""
    from predictor.service.guards.robust import OutlierGate

    gate = OutlierGate(warmup=4, window=7, escape_window=5, escape_sources=2)
    for ratio, source in checks[:at]:
        gate.admit(10.0, 10.0 * ratio, source)
    mark, expected = gate.mark(), _state(gate)
    later = checks[at:]
    for i, (ratio, source) in enumerate(later):
        if i < others:  # another mark, taken and let go (or left open: the rewind closes it)
            inner = gate.mark()
            gate.admit(10.0, 10.0 * ratio, source)
            if release_first:
                gate.release(inner)
            continue
        gate.admit(10.0, 10.0 * ratio, source)
    gate.rewind(mark)
    assert _state(gate) == expected
    twin = pickle.loads(expected)
    assert [gate.admit(10.0, 10.0 * r, s) for r, s in checks] == [twin.admit(10.0, 10.0 * r, s) for r, s in checks]
    assert unshared(gate) == unshared(twin)  # (the sources: the same strings, shared otherwise)
