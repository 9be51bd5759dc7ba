"""An ensemble replayed by its experts' compiled blocks takes an expert's book-keeping (solo profile, plausible
slowdown range) instead of keeping its own again, only where the two were alike: its books are then those of
the ensemble that kept them record by record, to the bit. Its split replay's scored part, predicted per
expert at once, is ``predict_many``'s within rounding."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from predictor.predictors import DEFAULT, create
from predictor.prequential import blocks, tree_blocks
from predictor.prequential.blocks import predict_rows
from predictor.prequential.evaluation import run_prequential
from predictor.service.synthetic import fleet_records, synthetic_records

RECORDS = list(synthetic_records(300, seed=5)) + fleet_records(600, models=8, device_kinds=2, seed=4)


def _books(predictor) -> bytes:
    return pickle.dumps((predictor._solo.__dict__, predictor._range_seen, predictor._slowdown_range,
                         predictor.n_learned))


def test_books_are_taken_from_an_expert_that_kept_them_alike():
    assert len(RECORDS) >= blocks.BOOKS_FROM
    fast, reference = create(DEFAULT), create(DEFAULT)
    assert tree_blocks._books_alike(fast, len(RECORDS), None) is not None
    got = tree_blocks.prequential_tree_blocks(fast, RECORDS).predicted
    expected = run_prequential(reference, RECORDS).predicted
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    assert _books(fast) == _books(reference)
    assert fast._solo is not fast.expert_predictors[0]._solo  # a copy, not shared


def test_books_are_kept_again_where_an_expert_kept_other_books():
    fast, reference = create(DEFAULT), create(DEFAULT)
    for ensemble in (fast, reference):  # an expert taught a record the ensemble was not: its books differ
        ensemble.expert_predictors[0].learn_one(RECORDS[-1])
        ensemble.expert_predictors[1].learn_one(RECORDS[-2])
    assert tree_blocks._books_alike(fast, len(RECORDS), None) is None
    tree_blocks.prequential_tree_blocks(fast, RECORDS)
    run_prequential(reference, RECORDS)
    assert _books(fast) == _books(reference)
    assert _books(fast) != _books(fast.expert_predictors[0])


@pytest.mark.parametrize("spec", [DEFAULT, "ensemble:experts='rls,solo',split_by=device_kind"])
def test_the_split_replays_scored_part_is_predict_many_within_rounding(spec):
    predictor = create(spec)
    tree_blocks.prequential_tree_blocks(predictor, RECORDS[:600])
    scored = RECORDS[600:]
    np.testing.assert_allclose(predict_rows(predictor, scored), predictor.predict_many(scored), rtol=1e-12)


def _state(predictor) -> bytes:
    """Each attribute's pickle (so that which objects two attributes share does not count), an ensemble's
    experts left out (compared one by one)."""
    state = dict(predictor.__dict__)
    state.pop("_memo", None)
    state.pop("_experts", None)
    return pickle.dumps(sorted((key, pickle.dumps(value)) for key, value in state.items()))


@pytest.mark.parametrize("experts", ["rls,sgd", "sgd,rls", "rls,rls:features=fine,sgd", "rls:features=coarse,sgd,rls"])
@pytest.mark.parametrize("parts", [1, 40])
def test_experts_in_one_pass_learn_what_each_learns_alone(experts, parts):
    """Lockstep (features computed once, books kept once by the last expert) against each expert's own
    blocks: the same predictions and state to the bit, in one call or in parts with plans kept (as ingest)."""
    specs = experts.split(",")
    together, alone = [create(spec) for spec in specs], [create(spec) for spec in specs]
    kept, kept_alone = blocks.KeptPlans(), blocks.KeptPlans()
    got: list[list[float]] = [[] for _ in specs]
    expected: list[list[float]] = [[] for _ in specs]
    size = -(-len(RECORDS) // parts)
    for start in range(0, len(RECORDS), size):
        part = RECORDS[start:start + size]
        for column, predicted in zip(got, blocks.prequential_experts(together, part, kept=kept, overlap=True), strict=True):
            column += predicted
        for column, expert in zip(expected, alone, strict=True):
            column += blocks.prequential_blocks(expert, part, kept=kept_alone).predicted
    assert [[x.hex() for x in c] for c in got] == [[x.hex() for x in c] for c in expected]
    for a, b in zip(together, alone, strict=True):
        assert _state(a) == _state(b)


@pytest.mark.parametrize("with_knows", [False, True])
def test_an_ensemble_replayed_a_chunk_at_a_time_learns_what_it_learns_at_once(monkeypatch, with_knows):
    """The replay holds a chunk of records at a time (``STREAM_CHUNK``): chunks of 97 records, the ensemble's
    books taken per chunk, give the predictions, ``knows`` and state of one chunk holding them all."""
    outcomes = []
    for chunk in (97, 10**9):
        monkeypatch.setattr(tree_blocks, "STREAM_CHUNK", chunk)
        ensemble, knows = create(DEFAULT), [] if with_knows else None
        predicted = tree_blocks.prequential_tree_blocks(ensemble, iter(RECORDS), knows=knows, overlap=True).predicted
        outcomes.append(([x.hex() for x in predicted], knows, _state(ensemble),
                         [_state(expert) for expert in ensemble.expert_predictors]))
    assert outcomes[0] == outcomes[1]
