"""Every registered predictor passes the shared contract checks."""

from __future__ import annotations

import pytest
from contract import CHECKS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import learnable_records

from predictor.predictors import available, create
from predictor.snapshot import SnapshotError, restore_predictor, snapshot_predictor

VARIANTS = ["rls:drift_reset=True,clip=6.0,split_by='model'", "rls:features='fine',log_target=False",
            "sgd:log_target=False", "ensemble:experts='rls,static'"]


def small_spec(name: str) -> str:
    # static/ewma fit once after a handful of records so the checks see a fitted model
    return f"{name}:fit_after=5" if name in ("static", "ewma") else name  # variants pass through


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", available() + VARIANTS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(learnable_records, min_size=2, max_size=24))
def test_contract(name, check, records):
    check(create(small_spec(name)), records)


@pytest.mark.parametrize("name", available())
def test_bad_hyperparameters_name_the_argument(name):
    with pytest.raises(ValueError):
        create(f"{name}:no_such_argument=1")


@pytest.mark.parametrize(
    "spec,field",
    [("rls:forgetting=2", "forgetting"), ("rls:split_by='colour'", "split_by"), ("sgd:learning_rate=0", "learning_rate"),
     ("ewma:alpha=0", "alpha"), ("static:fit_after=0", "fit_after"), ("rls:features='none'", "features")],
)
def test_invalid_values_are_named(spec, field):
    with pytest.raises(ValueError, match=field):
        create(spec)


def test_corrupt_snapshot_is_refused_whole():
    blob = snapshot_predictor(create("rls"))
    with pytest.raises(SnapshotError, match="body unreadable"):
        restore_predictor(blob[: len(blob) // 2])
    with pytest.raises(SnapshotError, match="version"):
        restore_predictor(blob.replace(b'"version": 1', b'"version": 99', 1))
