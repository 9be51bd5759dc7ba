"""Contract checks for latency predictors, registered or third-party.

In the style of river's ``utils.estimator_checks``: :func:`check_predictor`
runs every check in :data:`CHECKS` on fresh predictors, and each ``check_*``
function takes a fresh, unfitted predictor and a list of observed records and
raises ``AssertionError`` saying which predictor broke what. The checks are
deterministic and need neither pytest nor hypothesis; this project's tests
run them over every registered predictor on hypothesis-drawn records too.

A third-party predictor subclasses
:class:`~predictor.predictors.base.LatencyPredictor` in a module of its own
(the pickle and snapshot checks need its class importable by name), e.g.
``my_predictors.py``::

    from predictor.predictors import LatencyPredictor

    class MeanSlowdown(LatencyPredictor):
        '''The mean observed slowdown, whatever the co-location.'''

        name = "mean-slowdown"

        def __init__(self, prior: float = 1.0, seed: int = 0):
            super().__init__(seed=seed)
            self.prior = prior
            self._total, self._count = 0.0, 0

        def predict_slowdown(self, record):
            return (self.prior + self._total) / (1 + self._count)

        def learn_slowdown(self, record, slowdown):
            self._total += slowdown
            self._count += 1

and passes the checks (``tests/predictors/test_contract.py`` runs exactly this)::

    from my_predictors import MeanSlowdown
    from predictor.testing import check_predictor

    check_predictor(MeanSlowdown)             # a factory: called once per check
    check_predictor(MeanSlowdown(prior=2.0))  # an instance: cloned once per check

Examples
--------
>>> from predictor.predictors import LatencyPredictor, create
>>> check_predictor(create("rls"))
>>> import random
>>> class Jittery(LatencyPredictor):
...     name = "jittery"
...     def predict_slowdown(self, record):
...         return 1.0 + random.random()
...     def learn_slowdown(self, record, slowdown):
...         pass
>>> check_deterministic(Jittery(), default_records())
Traceback (most recent call last):
...
AssertionError: Jittery(seed=0) is not deterministic
"""

from __future__ import annotations

import copy
import math
import pickle
import random
from collections.abc import Callable, Iterable

import numpy as np

from predictor.predictors.base import LatencyPredictor
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.snapshot import restore_predictor, snapshot_predictor

Check = Callable[[LatencyPredictor, list[Record]], None]


def default_records(n: int = 48, seed: int = 0) -> list[Record]:
    """``n`` observed records in a small, learnable world (the checks' default data).

    Three models, two devices, ``l2_util`` and ``dram_util`` in [0, 1], zero to three
    co-runners of any overlap (0 included), a device signal, and a profiled solo latency
    on about half of them.
    """
    rng = random.Random(seed)
    models = ("resnet", "bert", "vgg")

    def attrs() -> dict[str, float]:
        return {"l2_util": rng.random(), "dram_util": rng.random()}

    records = []
    for i in range(n):
        runners = tuple(
            CoRunner(
                rng.choice(models), rng.randint(1, 8), attrs(), overlap=rng.choice((0.0, 1.0, rng.random()))
            )
            for _ in range(rng.randint(0, 3))
        )
        records.append(
            Record(
                device=f"gpu{i % 2}",
                batch=BatchSpec(rng.choice(models), rng.randint(1, 8), attrs()),
                latency_ms=rng.uniform(1.0, 50.0),
                device_kind="kind",
                solo_latency_ms=rng.uniform(1.0, 20.0) if rng.random() < 0.5 else None,
                co_runners=runners,
                signals={"sm_util": rng.random()},
            )
        )
    return records


def _require(condition: bool, message: str) -> None:
    """Raise ``AssertionError(message)`` unless ``condition`` (also under ``python -O``)."""
    if not condition:
        raise AssertionError(message)


def _learn(predictor: LatencyPredictor, records: list[Record]) -> LatencyPredictor:
    for record in records:
        predictor.learn_one(record)
    return predictor


def check_finite_positive_output(predictor: LatencyPredictor, records: list[Record]) -> None:
    """Predictions are finite and positive, before and after learning."""
    for record in records:
        value = predictor.predict_one(record)
        _require(math.isfinite(value) and value > 0, f"{predictor}: prediction {value!r} before learning")
    _learn(predictor, records)
    for record in records:
        value = predictor.predict_one(record)
        _require(math.isfinite(value) and value > 0, f"{predictor}: prediction {value!r}")


def check_input_not_mutated(predictor: LatencyPredictor, records: list[Record]) -> None:
    """Learning and predicting leave the records as they were."""
    before = copy.deepcopy(records)
    _learn(predictor, records)
    for record in records:
        predictor.predict_one(record)
    _require(records == before, f"{predictor} mutated its input")


def check_deterministic(predictor: LatencyPredictor, records: list[Record]) -> None:
    """Two clones fed the same records predict the same numbers."""
    first = _learn(predictor.clone(), records)
    second = _learn(predictor.clone(), records)
    _require(first.predict_many(records) == second.predict_many(records), f"{predictor} is not deterministic")


def _check_copy(
    predictor: LatencyPredictor,
    records: list[Record],
    copy_of: Callable[[LatencyPredictor], LatencyPredictor],
    how: str,
) -> None:
    """A copy taken half-way through ``records`` predicts, and goes on learning, exactly like the original."""
    half = len(records) // 2
    _learn(predictor, records[:half])
    copy_ = copy_of(predictor)
    _require(
        type(copy_) is type(predictor) and copy_.params() == predictor.params(),
        f"{predictor}: {copy_} after {how}",
    )
    _require(
        copy_.predict_many(records) == predictor.predict_many(records), f"{predictor}: differs after {how}"
    )
    _learn(predictor, records[half:])
    _learn(copy_, records[half:])
    _require(
        copy_.predict_many(records) == predictor.predict_many(records), f"{predictor}: diverged after {how}"
    )
    _require(copy_.n_learned == predictor.n_learned, f"{predictor}: n_learned differs after {how}")


def check_pickle_round_trip(predictor: LatencyPredictor, records: list[Record]) -> None:
    """An unpickled copy predicts, and goes on learning, exactly like the original."""
    _check_copy(predictor, records, lambda p: pickle.loads(pickle.dumps(p)), "unpickling")


def check_snapshot_restore(predictor: LatencyPredictor, records: list[Record]) -> None:
    """A predictor restored from its snapshot (:mod:`predictor.snapshot`) is the same predictor."""
    _check_copy(predictor, records, lambda p: restore_predictor(snapshot_predictor(p)), "restoring")


def check_unseen_features(predictor: LatencyPredictor, records: list[Record]) -> None:
    """A record with unseen devices, models, attributes and signals gets a finite, positive prediction."""
    _learn(predictor, records)
    stranger = Record(
        device="never-seen",
        batch=BatchSpec("new-model", 3, {"brand_new_attr": 7.0}),
        latency_ms=None,
        co_runners=(CoRunner("other-new", 2, {"odd": 1e3}, overlap=0.4),),
        signals={"new_signal": 0.5},
    )
    value = predictor.predict_one(stranger)
    _require(math.isfinite(value) and value > 0, f"{predictor}: prediction {value!r} for unseen features")


def check_clone_is_unfitted(predictor: LatencyPredictor, records: list[Record]) -> None:
    """A clone has the same hyperparameters and has learned nothing."""
    _learn(predictor, records)
    fresh = predictor.clone()
    _require(
        fresh.n_learned == 0 and fresh.params() == predictor.params(),
        f"{predictor}: clone {fresh} has learned {fresh.n_learned} records",
    )


def check_predict_learn_matches_predict_then_learn(
    predictor: LatencyPredictor, records: list[Record]
) -> None:
    """``predict_learn_one`` equals ``predict_one`` then ``learn_one``."""
    other = predictor.clone()
    combined = [predictor.predict_learn_one(r) for r in records]
    separate = []
    for record in records:
        separate.append(other.predict_one(record))
        other.learn_one(record)
    # equal up to rounding: a vector grown for learning sums over extra zero-weight columns
    _require(np.allclose(combined, separate, rtol=1e-9, atol=0), f"{predictor}: predict_learn_one differs")
    _require(
        np.allclose(predictor.predict_many(records), other.predict_many(records), rtol=1e-9, atol=0),
        f"{predictor}: predictions differ after predict_learn_one",
    )
    _require(predictor.n_learned == other.n_learned == len(records), f"{predictor}: n_learned differs")


CHECKS: list[Check] = [
    check_predict_learn_matches_predict_then_learn,
    check_finite_positive_output,
    check_input_not_mutated,
    check_deterministic,
    check_pickle_round_trip,
    check_snapshot_restore,
    check_unseen_features,
    check_clone_is_unfitted,
]
"""Every check :func:`check_predictor` runs, in order."""


def check_predictor(
    predictor: LatencyPredictor | Callable[[], LatencyPredictor],
    records: Iterable[Record] | None = None,
) -> None:
    """Run every check in :data:`CHECKS`, each on a fresh predictor.

    Parameters
    ----------
    predictor
        A predictor (cloned for each check) or a callable making a fresh one.
    records
        Observed records (at least two) to learn and predict; default :func:`default_records`.

    Raises
    ------
    AssertionError
        At the first violation, naming the check and the predictor.
    """
    if isinstance(predictor, LatencyPredictor):
        make: Callable[[], LatencyPredictor] = predictor.clone
    elif callable(predictor):
        make = predictor
    else:
        raise TypeError(f"give a LatencyPredictor or a callable making one, not {predictor!r}")
    records = default_records() if records is None else list(records)
    if len(records) < 2:
        raise ValueError(f"give at least two records, not {len(records)}")
    for check in CHECKS:
        fresh = make()
        _require(isinstance(fresh, LatencyPredictor), f"{predictor!r} made {fresh!r}, not a LatencyPredictor")
        try:
            check(fresh, records)
        except AssertionError as exc:
            raise AssertionError(f"{check.__name__}: {exc}") from exc
