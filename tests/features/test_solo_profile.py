"""The solo profile's answers where records carry no solo latency: per configuration (model, batch
size and own attributes) before per key, and a training set's profile learned ahead of it."""

from __future__ import annotations

import math
import pickle

import pytest

from predictor.features.solo_profile import SoloProfile, configuration
from predictor.predictors import DEFAULT, create
from predictor.predictors.base import LatencyPredictor
from predictor.records.record import BatchSpec, CoRunner, Record

CROWDED = (CoRunner("other", 4, {"share": 0.5}, overlap=1.0),)


def batch(share: float, model: str = "cnn", size: int = 8) -> BatchSpec:
    return BatchSpec(model, size, {"share": share})


def test_each_configuration_answers_its_own_geometric_mean():
    profile = SoloProfile()
    for latency in (2.0, 8.0):  # one key, two shares of the device: two solo latencies
        profile.learn(Record("d", batch(0.25), latency, co_runners=CROWDED))
    for latency in (1.0, 1.0, 4.0):
        profile.learn(Record("d", batch(0.75), latency, co_runners=CROWDED))
    assert profile.estimate(Record("d", batch(0.25), None)) == pytest.approx(4.0)
    assert profile.estimate(Record("d", batch(0.75), None)) == pytest.approx(4.0 ** (1 / 3))
    # a configuration not seen falls back to the key (its lowest latency here), not a guess of 4
    assert profile.estimate(Record("d", batch(0.5), None)) == 1.0
    assert not profile.knows(Record("d", batch(0.25), None))  # a typical latency, not a solo one


def test_a_configuration_that_ran_alone_answers_its_mean_alone_and_shifts_the_others():
    profile = SoloProfile()
    for latency in (3.0, 5.0):
        profile.learn(Record("d", batch(0.25), latency))  # alone
    assert profile.estimate(Record("d", batch(0.25), None)) == 4.0
    assert profile.knows(Record("d", batch(0.25), None))
    profile.learn(Record("d", batch(0.25), 9.0, co_runners=CROWDED))
    assert profile.estimate(Record("d", batch(0.25), None)) == 4.0  # still its mean alone
    # a configuration never alone: its geometric mean, over how far the model's configurations ran
    # alone below theirs (each alone record against its configuration's mean as it was taken in)
    profile.learn(Record("d", batch(0.75), 6.0, co_runners=CROWDED))
    shift = (0.0 + ((math.log(3.0) + math.log(5.0)) / 2 - math.log(5.0))) / 2
    assert profile.estimate(Record("d", batch(0.75), None)) == pytest.approx(6.0 / math.exp(shift))
    # another model's configurations are not shifted; one never seen: the mean of everything
    profile.learn(Record("d", batch(0.75, model="rnn"), 2.0, co_runners=CROWDED))
    assert profile.estimate(Record("d", batch(0.75, model="rnn"), None)) == pytest.approx(2.0)
    assert profile.estimate(Record("d", batch(0.75, model="gru"), None)) == pytest.approx(25.0 / 5)


def test_a_configuration_never_seen_answers_the_models_fit_once_it_has_enough_records():
    profile = SoloProfile()
    shares = (0.2, 0.3, 0.4, 0.5, 0.7, 0.8, 0.9, 1.0)  # 8 records: twice the 4 unknowns
    for i, share in enumerate(shares):
        size = 2 ** (i % 3)
        profile.learn(Record("d", batch(share, size=size), 3.0 * size / share, co_runners=CROWDED))
        if i < len(shares) - 1:  # not enough records yet: the key's answers
            assert profile.estimate(Record("d", batch(0.6, size=size), None)) == profile._lowest[("cnn", size)]
    # log latency = log 3 + log size - log share: a fit in (1, log size, share, log share)
    assert profile.estimate(Record("d", batch(0.6, size=4), None)) == pytest.approx(3.0 * 4 / 0.6, rel=1e-3)
    profile.learn(Record("d", batch(0.6, size=4), 0.0, co_runners=CROWDED))  # no log of 0 taken
    assert profile.estimate(Record("d", batch(0.6, size=4), None)) == pytest.approx(3.0 * 4 / 0.6, rel=1e-3)


def test_given_solo_latencies_come_first_and_make_no_configurations():
    profile = SoloProfile()
    profile.learn(Record("d", batch(0.25), 9.0, solo_latency_ms=3.0, co_runners=CROWDED))
    assert not profile._config_typical
    profile.learn(Record("d", batch(0.75), 2.0, co_runners=CROWDED))
    assert profile.estimate(Record("d", batch(0.75), None)) == 3.0  # the key's profiled solo latency
    assert profile.estimate(Record("d", batch(0.75), None, solo_latency_ms=7.0)) == 7.0


def test_configurations_are_bounded_and_copies_independent():
    profile = SoloProfile(max_keys=2)
    for share in (0.1, 0.2, 0.3):
        profile.learn(Record("d", batch(share), 10 * share, co_runners=CROWDED))
    assert len(profile._config_typical) == 2
    twin = profile.copy()
    twin.learn(Record("d", batch(0.1), 100.0, co_runners=CROWDED))
    assert profile.estimate(Record("d", batch(0.1), None)) == pytest.approx(1.0)
    assert twin.estimate(Record("d", batch(0.1), None)) == pytest.approx(10.0)


def test_configuration_sorts_the_attributes():
    one = Record("d", BatchSpec("m", 2, {"b": 1.0, "a": 2.0}), 1.0)
    other = Record("d", BatchSpec("m", 2, {"a": 2.0, "b": 1.0}), 1.0)
    assert configuration(one) == configuration(other) == ("m", 2, (("a", 2.0), ("b", 1.0)))


class Recorder(LatencyPredictor):
    """Answers slowdown 1 and keeps every slowdown it is taught."""

    name = "recorder"

    def __init__(self, seed: int = 0):
        super().__init__(seed=seed)
        self.taught: list[float] = []

    def predict_slowdown(self, record: Record) -> float:
        return 1.0

    def learn_slowdown(self, record: Record, slowdown: float) -> None:
        self.taught.append(slowdown)


TRAINING = [Record("d", batch(share), latency, co_runners=CROWDED)
            for share, latency in ((0.25, 2.0), (0.25, 8.0), (0.75, 1.0), (0.25, 4.0))]


def test_fit_teaches_slowdowns_over_the_training_sets_profile():
    fitted = Recorder().fit(TRAINING)
    # the first record over its configuration's geometric mean over the whole set (4), the next ones
    # over the set's profile with the records before them taken in again
    assert fitted.taught == pytest.approx([2.0 / 4.0, 8.0 / (2.0 * 8.0 * 4.0 * 2.0) ** 0.25, 1.0, 4.0 / 4.0])
    online = Recorder()
    for record in TRAINING:
        online.learn_one(record)
    # online, over what was seen before: the first record over 1 ms (nothing seen), the first of a new configuration over its key's lowest
    assert online.taught == pytest.approx([2.0, 8.0 / 2.0, 1.0 / 2.0, 4.0 / 4.0])


def test_fit_learns_the_profiles_of_an_ensembles_experts_too():
    fitted = create(DEFAULT).fit(TRAINING)
    for profile in (fitted._solo, *(expert._solo for expert in fitted.expert_predictors)):
        assert profile._count == 2 * len(TRAINING)  # taken in ahead, then as learned: the same means
        assert profile.estimate(Record("d", batch(0.25), None)) == pytest.approx(4.0)


def test_a_profile_pickled_before_configurations_loads_and_answers_as_it_did():
    """A snapshot written before the per-configuration profile holds a profile without its tables: it
    loads with them empty, answers what it answered, and learns on."""
    old = SoloProfile()
    for latency, size in ((4.0, 2), (9.0, 4)):
        old.learn(Record("cpu0", BatchSpec("mlp", size), latency))
    for name in ("_config_alone", "_config_typical", "_shift"):
        del old.__dict__[name]
    loaded = pickle.loads(pickle.dumps(old))
    assert loaded.estimate(Record("cpu0", BatchSpec("mlp", 8), None)) == 18.0
    loaded.learn(Record("cpu0", BatchSpec("mlp", 8), 20.0))
    assert loaded.copy().estimate(Record("cpu0", BatchSpec("mlp", 8), None)) == 20.0
