"""Every registered predictor passes the shared contract checks (:mod:`predictor.testing`)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import learnable_records

from predictor.predictors import LatencyPredictor, available, create
from predictor.records.record import Record
from predictor.snapshot import VERSION, SnapshotError, restore_predictor, snapshot_predictor
from predictor.testing import CHECKS, check_predictor

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


@pytest.mark.parametrize("name", available() + VARIANTS)
def test_check_predictor_on_default_records(name):
    check_predictor(lambda: create(small_spec(name)))


class MeanSlowdown(LatencyPredictor):
    """The third-party predictor of :mod:`predictor.testing`'s docstring."""

    name = "mean-slowdown"

    def __init__(self, prior: float = 1.0, seed: int = 0):
        super().__init__(seed=seed)
        self.prior = prior
        self._total, self._count = 0.0, 0

    def predict_slowdown(self, record: Record) -> float:
        return (self.prior + self._total) / (1 + self._count)

    def learn_slowdown(self, record: Record, slowdown: float) -> None:
        self._total += slowdown
        self._count += 1


def test_a_third_party_predictor_passes_the_checks():
    check_predictor(MeanSlowdown)
    check_predictor(MeanSlowdown(prior=2.0))


class Forgetful(MeanSlowdown):
    """Loses its learned state when pickled: the snapshot checks must say so."""

    name = "forgetful"

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_total": 0.0, "_count": 0}


def test_a_violation_names_the_check_and_the_predictor():
    with pytest.raises(AssertionError, match=r"check_pickle_round_trip: Forgetful\(prior=1.0, seed=0\)"):
        check_predictor(Forgetful)


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
        restore_predictor(blob.replace(f'"version": {VERSION}'.encode(), b'"version": 99', 1))
