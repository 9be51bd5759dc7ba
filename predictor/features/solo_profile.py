"""Online solo-latency profile keyed by (model, batch size), and by configuration.

A batch's *key* is its (model, batch size); its *configuration* is the key with the batch's own
attributes (one key may run under several configurations, each with a solo latency of its own:
another input shape, another share of the device). When a record carries ``solo_latency_ms`` it
is used as is. Otherwise the profile answers from what it has seen, in this order:

1. the latest profiled solo latency for the key (from records that carried one);
2. the mean latency of the configuration's records that ran alone (no overlapping co-runner);
3. the geometric mean latency of the configuration's records, or for a configuration never seen a
   least-squares fit of the model's log latencies on batch size and attributes (``a`` and
   ``log a``; once it has twice as many records as unknowns), either over the model's *shift*
   (how far its configurations' records that ran alone lay below their configuration's geometric
   mean; none where none ran alone). A *baseline*, not a solo latency: it holds the
   configuration's typical interference, a constant per configuration that the learners'
   slowdowns absorb;
4. the mean latency of the key's records that ran alone;
5. the same model at the nearest profiled batch size, scaled linearly by batch size;
6. the lowest latency seen for the key (least interference seen so far);
7. the mean latency of everything seen, or 1 ms before anything was seen.

Configurations are learned from records without a solo latency (and a positive, finite latency)
only. Memory is bounded by ``max_keys`` (keys, and configurations apart).

Examples
--------
>>> from predictor.records.record import BatchSpec, CoRunner, Record
>>> profile = SoloProfile()
>>> profile.learn(Record("cpu0", BatchSpec("mlp", 2), 4.0))
>>> profile.estimate(Record("cpu0", BatchSpec("mlp", 4), None))
8.0
>>> crowded = (CoRunner("cnn", 1, overlap=1.0),)
>>> for latency in (2.0, 8.0):
...     profile.learn(Record("cpu0", BatchSpec("cnn", 1, {"share": 0.5}), latency, co_runners=crowded))
>>> round(profile.estimate(Record("cpu0", BatchSpec("cnn", 1, {"share": 0.5}), None)), 9)
4.0
"""

from __future__ import annotations

import math

import numpy as np

from predictor.records.record import Record

Key = tuple[str, int]
Configuration = tuple[str, int, tuple[tuple[str, float], ...]]


def configuration(record: Record) -> Configuration:
    """``record``'s configuration: its model, batch size and own attributes (sorted by name)."""
    batch = record.batch
    return batch.model, batch.batch_size, tuple(sorted(batch.attrs.items()))


class SoloProfile:
    """Solo latencies learnt online per (model, batch size) and per configuration, with the fallbacks above.

    Parameters
    ----------
    max_keys
        Most (model, batch size) keys remembered, and most configurations; records of further
        ones only update the overall mean.
    """

    def __init__(self, max_keys: int = 4096):
        self.max_keys = max_keys
        self._profiled: dict[Key, float] = {}
        self._alone: dict[Key, tuple[float, int]] = {}
        self._lowest: dict[Key, float] = {}
        self._config_alone: dict[Configuration, tuple[float, int]] = {}
        self._config_typical: dict[Configuration, tuple[float, int, float]] = {}
        self._shift: dict[str, tuple[float, int]] = {}
        self._total = 0.0
        self._count = 0

    def __setstate__(self, state: dict) -> None:
        """Unpickle; a profile pickled before configurations were profiled gets empty ones (it answers as it did)."""
        self.__dict__.update(state)
        for name in ("_config_alone", "_config_typical", "_shift"):
            self.__dict__.setdefault(name, {})

    def copy(self) -> SoloProfile:
        """An independent copy (the tables hold immutable values: shallow copies suffice)."""
        twin = SoloProfile.__new__(SoloProfile)
        twin.__dict__.update(self.__dict__)
        twin._profiled = dict(self._profiled)
        twin._alone = dict(self._alone)
        twin._lowest = dict(self._lowest)
        twin._config_alone = dict(self._config_alone)
        twin._config_typical = dict(self._config_typical)
        twin._shift = dict(self._shift)
        return twin

    def same_as(self, other: SoloProfile) -> bool:
        """Whether ``other`` holds the same tables and limits, value for value (it answers as this one does)."""
        return self.__dict__ == other.__dict__

    def _has_room(self, key: Key) -> bool:
        return key in self._lowest or len(self._lowest) < self.max_keys

    def learn(self, record: Record) -> None:
        """Take in an observed record (``latency_ms`` set)."""
        latency = record.latency_ms
        if latency is None:
            return
        key = (record.batch.model, record.batch.batch_size)
        self._total += latency
        self._count += 1
        alone = False
        if record.solo_latency_ms is None:
            alone = not any(r.overlap > 0 for r in record.co_runners)
            if 0.0 < latency < math.inf:
                self._learn_configuration(configuration(record), latency, alone)
        if not self._has_room(key):
            return
        self._lowest[key] = min(latency, self._lowest.get(key, latency))
        if record.solo_latency_ms is not None:
            self._profiled[key] = record.solo_latency_ms
        elif alone:
            self._alone[key] = _mean_with(self._alone.get(key), latency)

    def _learn_configuration(self, config: Configuration, latency: float, alone: bool) -> None:
        """Take in the latency of a record of configuration ``config`` that carried no solo latency."""
        typical = self._config_typical.get(config)
        if typical is None and len(self._config_typical) >= self.max_keys:
            return
        log_mean, n = _mean_with(typical and typical[:2], math.log(latency))  # type: ignore[arg-type]
        self._config_typical[config] = (log_mean, n, math.exp(log_mean))
        if alone:
            self._config_alone[config] = _mean_with(self._config_alone.get(config), latency)
            self._shift[config[0]] = _mean_with(self._shift.get(config[0]), log_mean - math.log(latency))

    def knows(self, record: Record) -> bool:
        """Whether the solo latency of ``record`` is given or profiled for its exact key or configuration (not
        a guess, nor a configuration's typical latency)."""
        return (
            record.solo_latency_ms is not None
            or self._known((record.batch.model, record.batch.batch_size)) is not None
            or (bool(self._config_alone) and configuration(record) in self._config_alone)
        )

    def seen(self, record: Record) -> bool:
        """Whether a record of ``record``'s exact key (model, batch size) has been learned, alone or
        not: answers for it come from its own observations, even where its solo latency is a guess."""
        return (record.batch.model, record.batch.batch_size) in self._lowest

    def _known(self, key: Key) -> float | None:
        if key in self._profiled:
            return self._profiled[key]
        if key in self._alone:
            return self._alone[key][0]
        return None

    def estimate(self, record: Record) -> float:
        """Solo latency (ms) for ``record``'s model and batch size (see the module's order)."""
        if record.solo_latency_ms is not None:
            return record.solo_latency_ms
        model, batch_size = record.batch.model, record.batch.batch_size
        key = (model, batch_size)
        if key in self._profiled:
            return self._profiled[key]
        if self._config_typical:
            config = configuration(record)
            if config in self._config_alone:
                return self._config_alone[config][0]
            typical = self._config_typical.get(config)
            value = typical[2] if typical is not None else _fitted_latency(self._config_typical, config)
            if value is not None:
                shift = self._shift.get(model)
                return value / (math.exp(shift[0]) if shift else 1.0)
        if key in self._alone:
            return self._alone[key][0]
        sizes = [b for (m, b) in self._profiled.keys() | self._alone.keys() if m == model]
        if sizes:
            nearest = min(sizes, key=lambda b: (abs(b - batch_size), b))
            return self._known((model, nearest)) * batch_size / nearest  # type: ignore[operator]
        if key in self._lowest:
            return self._lowest[key]
        return self._total / self._count if self._count else 1.0


def _mean_with(mean_and_count: tuple[float, int] | None, value: float) -> tuple[float, int]:
    """A running mean and its count with ``value`` taken in (``None``: nothing taken in yet)."""
    mean, n = mean_and_count or (0.0, 0)
    return mean + (value - mean) / (n + 1), n + 1


RIDGE = 1e-3
"""The ridge of :func:`_fitted_latency`'s least squares (its intercept not ridged)."""


def _fitted_latency(typical: dict[Configuration, tuple[float, int, float]], config: Configuration) -> float | None:
    """A typical latency for ``config``, a configuration never seen: the least squares, lightly ridged, of
    the log latencies of its model's records on their configurations' batch size and attributes (each
    ``a`` and ``log a``, 0 where ``a <= 0``; the attributes of the model's first configuration), from
    each configuration's mean log latency and count (``typical``); ``None`` until the model's records
    number twice the unknowns."""
    seen = [(other, log_mean, n) for other, (log_mean, n, _) in typical.items() if other[0] == config[0]]
    if not seen:
        return None
    names = tuple(name for name, _ in seen[0][0][2])
    size = 2 + 2 * len(names)
    counts = np.array([n for _, _, n in seen], dtype=float)
    if counts.sum() < 2 * size:
        return None
    rows = np.array([_fit_row(other, names) for other, _, _ in seen])
    ridge = RIDGE * np.eye(size)
    ridge[0, 0] = 0.0
    moment = rows.T @ (counts * np.array([log_mean for _, log_mean, _ in seen]))
    weights = np.linalg.solve((rows * counts[:, None]).T @ rows + ridge, moment)
    return math.exp(min(float(_fit_row(config, names) @ weights), 50.0))


def _fit_row(config: Configuration, names: tuple[str, ...]) -> np.ndarray:
    """``config``'s row of :func:`_fitted_latency`: 1, log batch size, the attributes ``names``, their logs."""
    attrs = dict(config[2])
    values = [value if math.isfinite(value := attrs.get(name, 0.0)) else 0.0 for name in names]
    return np.array([1.0, math.log(config[1]), *values, *(math.log(v) if v > 0 else 0.0 for v in values)])
