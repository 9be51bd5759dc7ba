"""River-native faces of the project's online learners: ``river.base.Regressor`` on dicts.

* :class:`RiverRLS`: :class:`~predictor.regressors.least_squares.RLS` as a river regressor on any
  numeric feature dict (:class:`~predictor.regressors.boosted.BoostedResidual` is one already);
* :class:`LatencyRegressor`: any registered latency predictor (``rls``, ``sgd``, ``forest``, ...)
  as a river regressor whose ``x`` is a record flattened into one dict (:func:`record_to_x`,
  :func:`x_to_record`) and whose ``y`` is the latency in ms.

All pass ``river.checks.check_estimator`` (``tests/predictors/test_river_native.py``), compose in
river pipelines and run under ``river.evaluate.progressive_val_score``, giving the numbers the
service's direct path (records and feature arrays) gives.

The flat record: ``model`` and ``device`` (strings), ``batch_size``, ``device_kind``,
``solo_latency_ms`` (optional), ``sig:S`` the device signals, ``co<i>:model``,
``co<i>:batch_size``, ``co<i>:overlap`` and ``co<i>:K`` the co-runners and their attributes
(``i`` from 0), and any other key a numeric attribute of the batch itself.

Examples
--------
>>> from predictor.records.record import BatchSpec, CoRunner, Record
>>> r = Record("gpu0", BatchSpec("bert", 4, {"seq": 128.0}), 9.5,
...            co_runners=(CoRunner("mlp", 2, {"seq": 8.0}, 0.5),))
>>> x = record_to_x(r)
>>> x["co0:overlap"], x["seq"], x_to_record(x, 9.5) == r
(0.5, 128.0, True)
>>> model = LatencyRegressor("rls")
>>> model.learn_one(x, 9.5)
>>> model.predict_one(x) > 0
True
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np
from river import base

from predictor.predictors.registry import create
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.regressors.least_squares import RLS

RESERVED = ("model", "batch_size", "device", "device_kind", "solo_latency_ms")
SIGNAL = "sig:"
_CO = re.compile(r"^co(\d+):(.+)$")


def record_to_x(record: Record) -> dict[str, object]:
    """A record as one flat dict (see the module's docstring); its latency is left out (that is ``y``)."""
    x: dict[str, object] = {"model": record.batch.model, "batch_size": record.batch.batch_size,
                            "device": record.device, "device_kind": record.device_kind}
    if record.solo_latency_ms is not None:
        x["solo_latency_ms"] = record.solo_latency_ms
    x.update(record.batch.attrs)
    for key, value in record.signals.items():
        x[SIGNAL + key] = value
    for i, runner in enumerate(record.co_runners):
        x[f"co{i}:model"] = runner.model
        x[f"co{i}:batch_size"] = runner.batch_size
        x[f"co{i}:overlap"] = runner.overlap
        for key, value in runner.attrs.items():
            x[f"co{i}:{key}"] = value
    return x


def _number(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"x[{key!r}]: must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"x[{key!r}]: must be finite, got {value!r}")
    return number


def x_to_record(x: Mapping[str, object], latency_ms: float | None = None) -> Record:
    """The record a flat dict stands for (keys taken in sorted order, so their order does not matter).

    Raises
    ------
    ValueError
        Naming the key of a value that is not a finite number where one is needed.
    """
    attrs: dict[str, float] = {}
    signals: dict[str, float] = {}
    runners: dict[int, dict[str, object]] = {}
    for key in sorted(x):
        value = x[key]
        if key in RESERVED:
            continue
        if key.startswith(SIGNAL):
            signals[key[len(SIGNAL):]] = _number(key, value)
            continue
        match = _CO.match(key)
        if match:
            runners.setdefault(int(match.group(1)), {})[match.group(2)] = value
            continue
        attrs[key] = _number(key, value)
    co_runners = []
    for i in sorted(runners):
        fields = runners[i]
        co_attrs = {k: _number(f"co{i}:{k}", v) for k, v in fields.items()
                    if k not in ("model", "batch_size", "overlap")}
        overlap = _number(f"co{i}:overlap", fields.get("overlap", 1.0))
        co_runners.append(CoRunner(str(fields.get("model", "co-runner")),
                                   max(1, int(_number(f"co{i}:batch_size", fields.get("batch_size", 1)))),
                                   co_attrs, overlap=min(max(overlap, 0.0), 1.0)))
    solo = x.get("solo_latency_ms")
    return Record(
        device=str(x.get("device", "device")),
        batch=BatchSpec(str(x.get("model", "model")), max(1, int(_number("batch_size", x.get("batch_size", 1)))),
                        attrs),
        latency_ms=latency_ms,
        device_kind=str(x.get("device_kind", "")),
        solo_latency_ms=None if solo is None else _number("solo_latency_ms", solo),
        co_runners=tuple(co_runners),
        signals=signals,
    )


class LatencyRegressor(base.Regressor):
    """A registered latency predictor as a river regressor: ``x`` a flat record, ``y`` its latency (ms).

    Parameters
    ----------
    predictor
        The predictor's spec (``"rls"``, ``"tree:window=2000"``, ...).
    seed
        Passed to the predictor.
    """

    def __init__(self, predictor: str = "rls", seed: int = 0):

        self.predictor = predictor
        self.seed = seed
        self._predictor = create(predictor, seed=seed)

    @classmethod
    def _unit_test_params(cls):
        yield {"predictor": "rls"}
        yield {"predictor": "sgd"}
        yield {"predictor": "tree:first_fit=50,refit_every=100,swap_after=20,n_estimators=20"}

    @property
    def latency_predictor(self):
        """The wrapped predictor (the service's fast path calls it on records directly)."""
        return self._predictor

    def learn_one(self, x: Mapping[str, object], y: float) -> None:
        """Learn that the batch ``x`` took ``y`` ms."""
        y = float(y)
        if not (math.isfinite(y) and y > 0):
            raise ValueError(f"y: a latency must be finite and > 0, got {y!r}")
        self._predictor.learn_one(x_to_record(x, y))

    def predict_one(self, x: Mapping[str, object]) -> float:
        """Predicted latency (ms) of the batch ``x``."""
        return float(self._predictor.predict_one(x_to_record(x)))


class RiverRLS(base.Regressor):
    """:class:`~predictor.regressors.least_squares.RLS` as a river regressor on numeric feature dicts.

    Parameters
    ----------
    forgetting, delta, max_trace, max_features, scale_features
        As :class:`~predictor.regressors.least_squares.RLS`.
    """

    def __init__(self, forgetting: float = 0.999, delta: float = 100.0, max_trace: float | None = None,
                 max_features: int = 256, scale_features: bool = True):
        self.forgetting = forgetting
        self.delta = delta
        self.max_trace = max_trace
        self.max_features = max_features
        self.scale_features = scale_features
        self._rls = RLS(forgetting, delta, max_trace, max_features, scale_features)

    @classmethod
    def _unit_test_params(cls):
        yield {}
        yield {"forgetting": 0.98, "delta": 1.0, "scale_features": False}

    @property
    def regressor(self) -> RLS:
        """The underlying :class:`RLS` (its array path: ``vectorize``, ``predict_vector``, ``predict_matrix``)."""
        return self._rls

    def learn_one(self, x: Mapping[str, float], y: float) -> None:
        """One RLS step towards ``y``."""
        self._rls.learn_one({k: _number(k, v) for k, v in x.items()}, float(y))

    def predict_one(self, x: Mapping[str, float]) -> float:
        """``w . x`` (unseen names ignored)."""
        return self._rls.predict_one({k: _number(k, v) for k, v in x.items()})
