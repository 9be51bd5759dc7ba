"""Feature extraction: deterministic, solo case, overlap weighting, EWMA closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import batch_sizes, co_runners, names, numeric_maps, records

from predictor.features.extract import (
    RESERVED,
    EwmaCoLocation,
    coarse_features,
    feature_matrix,
    feature_row,
    fine_features,
    interaction_features,
    interaction_values,
    planned_row,
)
from predictor.records.colocations import CoLocations
from predictor.records.record import BatchSpec, CoRunner, Record


def solo_record(**attrs: float) -> Record:
    return Record("gpu0", BatchSpec("resnet", 4, attrs), 10.0, signals={"sm_util": 0.5})


@pytest.mark.parametrize("extract", [coarse_features, fine_features, interaction_features])
def test_no_co_runners_is_the_solo_case(extract):
    features = extract(solo_record(l2_util=0.3))
    assert not any(k.startswith(("co:", "co_model:", "pair:")) for k in features)
    assert features["own:l2_util"] == 0.3


@settings(max_examples=80, deadline=None)
@given(record=records, features=st.sampled_from(["interactions", "fine", "coarse"]))
def test_a_planned_row_makes_the_feature_row(record, features):
    """:func:`planned_row`'s layout and base values give :func:`feature_row`'s names and values (the
    replay's kernel makes the products as ``interaction_values`` does)."""
    names, values = feature_row(record, features)
    layout, base = planned_row(record, features)
    assert layout.names == names
    np.testing.assert_array_equal(interaction_values(layout, np.array(list(base.values()), dtype=float)), values)
    assert planned_row(record, features)[0] is layout  # shared by the rows of the same names


def test_a_planned_row_whose_interaction_names_would_repeat_is_its_merged_dict():
    """An own attribute named like the product of two others: the dict merges the two, and so does the
    planned row (its values alone, no products)."""
    record = solo_record(a=1.0, b=2.0, **{"a*own:b": 3.0})
    features = interaction_features(record)
    layout, base = planned_row(record, "interactions")
    assert layout.names == tuple(features) and layout.left.size == layout.keys.size == 0
    assert base == features


@settings(max_examples=50, deadline=None)
@given(records)
def test_features_are_deterministic_and_finite(record):
    for extract in (coarse_features, fine_features):
        first, second = extract(record), extract(record)
        assert first == second
        assert all(isinstance(v, float) and math.isfinite(v) for v in first.values())


def test_fine_features_weight_by_overlap_and_use_unknown_attrs():
    record = Record(
        "gpu0",
        BatchSpec("resnet", 2, {"dram_util": 0.5, "mystery": 3.0}),
        None,
        co_runners=(
            CoRunner("bert", 1, {"dram_util": 0.4, "mystery": 1.0}, overlap=0.5),
            CoRunner("bert", 4, {"dram_util": 0.2}, overlap=1.0),
            CoRunner("vgg", 8, {"dram_util": 0.9}, overlap=0.0),
        ),
    )
    features = fine_features(record)
    assert features["co:dram_util"] == pytest.approx(0.5 * 0.4 + 0.2)
    assert features["co:mystery"] == pytest.approx(0.5)
    assert features["x:mystery"] == pytest.approx(1.5)
    assert features["co:count"] == 3.0
    assert features["co:overlap"] == pytest.approx(1.5)
    assert features["pair:resnet|bert"] == pytest.approx(1.5)
    assert "co_model:vgg" not in features  # zero overlap contributes nothing
    assert coarse_features(record)["co:dram_util"] == pytest.approx(1.5)  # coarse: full overlap


@settings(max_examples=50, deadline=None)
@given(
    values=st.lists(st.floats(min_value=-100, max_value=100), min_size=1, max_size=30),
    alpha=st.floats(min_value=0.01, max_value=1.0),
)
def test_ewma_matches_closed_form(values, alpha):
    """s_n = (1-a)^(n-1) x_1 + sum_{k=2..n} a (1-a)^(n-k) x_k."""
    ewma = EwmaCoLocation(alpha)
    for value in values:
        out = ewma.update(Record("d", BatchSpec("m", 1), None, co_runners=(CoRunner("c", 1, {"k": value}),)))
    n = len(values)
    expected = (1 - alpha) ** (n - 1) * values[0] + sum(
        alpha * (1 - alpha) ** (n - k) * values[k - 1] for k in range(2, n + 1)
    )
    assert out["co:k"] == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_ewma_is_per_device_and_preview_does_not_commit():
    ewma = EwmaCoLocation(0.5)
    run = lambda device, v: Record(device, BatchSpec("m", 1), None, co_runners=(CoRunner("c", 1, {"k": v}),))  # noqa: E731
    ewma.update(run("a", 10.0))
    assert ewma.update(run("b", 2.0))["co:k"] == 2.0
    assert ewma.features(run("a", 0.0))["co:k"] == 5.0
    assert ewma.features(run("a", 0.0))["co:k"] == 5.0


def test_ewma_rejects_bad_alpha():
    with pytest.raises(ValueError, match="alpha"):
        EwmaCoLocation(0.0)


@settings(max_examples=60, deadline=None)
@given(
    batch=st.builds(BatchSpec, model=names, batch_size=batch_sizes, attrs=numeric_maps),
    rows=st.lists(st.tuples(st.lists(co_runners, max_size=4), numeric_maps), min_size=1, max_size=5),
)
def test_matrix_rows_equal_per_record_features(batch, rows):
    """Both paths read one table of definitions: every matrix row is the per-record dict, exactly."""
    colocations = CoLocations.build(
        batch,
        [f"d{i}" for i in range(len(rows))],
        [[(c.model, c.batch_size, c.attrs, c.overlap) for c in runners] for runners, _ in rows],
        signals=[signals for _, signals in rows],
    )
    for name, per_record in (("fine", fine_features), ("interactions", interaction_features)):
        matrix = feature_matrix(colocations, name)
        if matrix is None:  # declined only where a dict would merge two features
            assert any(not RESERVED.isdisjoint(c.attrs) for runners, _ in rows for c in runners)
            continue
        assert len(set(matrix.names)) == len(matrix.names)
        for i in range(len(colocations)):
            expected = per_record(colocations.record(i))
            row = dict(zip(matrix.names, matrix.values[i].tolist(), strict=True))
            assert {k: v for k, v in row.items() if k in expected} == expected
            assert all(v == 0 for k, v in row.items() if k not in expected)


def test_signals_measured_on_the_batch_itself_are_never_features():
    """``batch_cpu_ms`` is known only after the batch ran: logged, never learned from or filled in."""
    from predictor.records.rules import BATCH_CPU_SIGNAL
    from predictor.service.estimates.filling import Filling

    record = Record("cpu0", BatchSpec("resnet", 2), 10.0, co_runners=(CoRunner("vgg", 1, {}, 0.5),),
                    signals={"cpu_util": 0.5, BATCH_CPU_SIGNAL: 7.5})
    row = fine_features(record)
    assert "sig:cpu_util" in row and not any(BATCH_CPU_SIGNAL in k for k in row)
    column = feature_matrix(CoLocations.from_records([record]))
    assert column is not None
    assert "sig:cpu_util" in column.names and not any(BATCH_CPU_SIGNAL in k for k in column.names)
    smoothed = EwmaCoLocation(0.5).features(record)
    assert not any(BATCH_CPU_SIGNAL in k for k in smoothed)
    filling = Filling(0.5, 8)
    filling.observe(record)
    filled, estimated = filling.fill_signals("cpu0", record.device_kind, {})
    assert BATCH_CPU_SIGNAL not in filled and "cpu_util" in filled
