"""Feature extraction: from a :class:`~predictor.records.Record` to ``dict[str, float]``.

Three views of the same record:

* :func:`coarse_features`: the GPUlet view. The batch's own profiled
  attributes and the plain sums of its co-runners', every co-runner taken as
  fully overlapping.
* :func:`fine_features`: overlap-weighted sums over co-runners of each of
  their attributes, per co-runner model and per (model, co-runner model) pair,
  products of the batch's own attributes with its co-runners', co-runner
  counts, device signals, and any numeric attribute (unknown keys are used).
* :class:`EwmaCoLocation`: the co-location part of the coarse view smoothed
  per device by an exponentially weighted moving average.

All are deterministic; a record without co-runners yields the solo case
(every co-runner feature absent, i.e. zero).

Examples
--------
>>> from predictor.records import BatchSpec, CoRunner, Record
>>> r = Record(device="gpu0", latency_ms=None,
...            batch=BatchSpec("a", 2, {"l2_util": 0.5}),
...            co_runners=(CoRunner("b", 1, {"l2_util": 0.2}, overlap=0.5),))
>>> coarse_features(r)
{'own:l2_util': 0.5, 'co:l2_util': 0.2, 'co:count': 1.0}
>>> fine_features(r)["co:l2_util"], fine_features(r)["pair:a|b"]
(0.1, 0.5)
"""

from __future__ import annotations

import functools
import math

import numpy as np

from predictor.records import Record

Features = dict[str, float]


def _add(features: Features, key: str, value: float) -> None:
    features[key] = features.get(key, 0.0) + value


def own_features(record: Record) -> Features:
    """The batch's own attributes and its batch size (log scale)."""
    features: Features = {f"own:{k}": v for k, v in record.batch.attrs.items()}
    return features


def coarse_features(record: Record) -> Features:
    """GPUlet-style features: own attrs and unweighted sums of co-runner attrs."""
    features = own_features(record)
    for runner in record.co_runners:
        for key, value in runner.attrs.items():
            _add(features, f"co:{key}", value)
    if record.co_runners:
        features["co:count"] = float(len(record.co_runners))
    return features


def fine_features(record: Record) -> Features:
    """Overlap-weighted, fine-grained co-location features.

    Keys: ``own:K`` own attributes; ``log_batch``; ``co:K`` overlap-weighted
    sum of co-runner attribute K; ``co:overlap`` total overlap; ``co:count``
    number of co-runners; ``co:log_batch`` overlap-weighted log batch size;
    ``co_model:M`` overlap per co-runner model; ``pair:A|B`` overlap per pair
    of own model and co-runner model; ``x:K`` product of own attribute K and
    ``co:K``; ``sig:S`` device signals.
    """
    features = own_features(record)
    features["log_batch"] = math.log(record.batch.batch_size)
    own_model = record.batch.model
    for runner in record.co_runners:
        weight = runner.overlap
        _add(features, "co:count", 1.0)
        if weight == 0.0:
            continue
        _add(features, "co:overlap", weight)
        _add(features, "co:log_batch", weight * math.log1p(runner.batch_size))
        _add(features, f"co_model:{runner.model}", weight)
        _add(features, f"pair:{own_model}|{runner.model}", weight)
        for key, value in runner.attrs.items():
            _add(features, f"co:{key}", weight * value)
    for key, own_value in record.batch.attrs.items():
        co_value = features.get(f"co:{key}")
        if co_value is not None:
            features[f"x:{key}"] = own_value * co_value
    for key, value in record.signals.items():
        features[f"sig:{key}"] = value
    return features


@functools.lru_cache(maxsize=1024)
def _interaction_layout(keys: tuple[str, ...], model: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Names and index pairs of the second-order terms over ``keys`` (cached per key set)."""
    first, second = np.triu_indices(len(keys))
    names = [f"{keys[i]}*{keys[j]}" for i, j in zip(first, second, strict=True)]
    names += [f"m:{model}*{key}" for key in keys]
    return names, first, second


def interaction_features(record: Record) -> Features:
    """:func:`fine_features` plus second-order terms.

    Adds the products of every pair of numeric co-location quantities (own
    attributes, ``log_batch``, overlap-weighted co-runner attributes and
    log batch sizes) and, per own model, a copy of each of them
    (``m:MODEL*K``), so that a linear learner can fit curvature and
    model-specific sensitivity. Device signals are not crossed.
    """
    features = fine_features(record)
    keys = crossed_keys(tuple(features))
    names, first, second = _interaction_layout(keys, record.batch.model)
    values = np.fromiter(map(features.__getitem__, keys), dtype=float, count=len(keys))
    extra = np.concatenate([values[first] * values[second], values])
    features.update(zip(names, extra.tolist(), strict=True))
    return features


@functools.lru_cache(maxsize=4096)
def crossed_keys(names: tuple[str, ...]) -> tuple[str, ...]:
    """The keys among ``names`` that :func:`interaction_features` crosses, sorted (cached per key set)."""
    return tuple(
        sorted(k for k in names if k.startswith("own:") or (k.startswith("co:") and k != "co:count") or k == "log_batch")
    )


FEATURE_SETS = {"coarse": coarse_features, "fine": fine_features, "interactions": interaction_features}


class EwmaCoLocation:
    """Co-location signals smoothed per device with an EWMA.

    ``s_t = alpha * x_t + (1 - alpha) * s_{t-1}``, started at the first value.
    Smoothed keys are the co-runner part of :func:`coarse_features` and the
    device signals; the batch's own attributes are passed through unsmoothed.
    A key absent from a record counts as 0 for that step.

    Parameters
    ----------
    alpha
        Weight of the newest value, in (0, 1].

    Examples
    --------
    >>> from predictor.records import BatchSpec, CoRunner, Record
    >>> ewma = EwmaCoLocation(alpha=0.5)
    >>> def rec(l2):
    ...     return Record("gpu0", BatchSpec("a", 1), None,
    ...                   co_runners=(CoRunner("b", 1, {"l2": l2}),))
    >>> ewma.update(rec(1.0))["co:l2"]
    1.0
    >>> ewma.update(rec(0.0))["co:l2"]
    0.5
    >>> ewma.features(rec(0.0))["co:l2"]  # a preview: state not committed
    0.25
    """

    def __init__(self, alpha: float = 0.3):
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1], got {alpha!r}")
        self.alpha = alpha
        self._state: dict[str, Features] = {}

    def _smoothed(self, record: Record) -> tuple[Features, Features]:
        current = coarse_features(record)
        shared = {k: v for k, v in current.items() if not k.startswith("own:")}
        shared.update({f"sig:{k}": v for k, v in record.signals.items()})
        previous = self._state.get(record.device)
        if previous is None:
            smoothed = dict(shared)
        else:
            keys = previous.keys() | shared.keys()
            a = self.alpha
            smoothed = {k: a * shared.get(k, 0.0) + (1 - a) * previous.get(k, 0.0) for k in keys}
        features = {k: v for k, v in current.items() if k.startswith("own:")}
        features.update(smoothed)
        return features, smoothed

    def features(self, record: Record) -> Features:
        """The smoothed features for ``record`` without changing the state."""
        return self._smoothed(record)[0]

    def update(self, record: Record) -> Features:
        """Smooth ``record`` into the device's state and return its features."""
        features, smoothed = self._smoothed(record)
        self._state[record.device] = smoothed
        return features

