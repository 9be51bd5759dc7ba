"""Replaying records through predictors and scoring them.

Two protocols:

* **split**: learn from the first ``split`` fraction of the records (after a
  seeded shuffle when the records carry no ``start_s``, i.e. have no time
  order), score on the rest; ``keep_learning`` lets online predictors go on
  learning from each scored record after predicting it.
* **prequential**: predict every record before learning from it.

Errors are relative: ``|predicted - measured| / measured``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from predictor.predictors.base import LatencyPredictor
from predictor.records.record import Record
from predictor.records.typed_decoding import ColocRow, record_of

Progress = Callable[[int], None]


@dataclass
class Scored:
    """Predictions and measurements of the scored records, in stream order."""

    predicted: list[float] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)

    def add(self, predicted: float, measured: float) -> None:
        """Append one scored record."""
        self.predicted.append(predicted)
        self.measured.append(measured)

    def relative_errors(self) -> np.ndarray:
        """``|predicted - measured| / measured`` per scored record."""
        predicted, measured = np.asarray(self.predicted), np.asarray(self.measured)
        return np.abs(predicted - measured) / measured


def summarize(scored: Scored) -> dict[str, float]:
    """MAPE, percentiles of the relative error, under-prediction rate and n."""
    errors = scored.relative_errors()
    if errors.size == 0:
        return {"mape": float("nan"), "p50": float("nan"), "p90": float("nan"), "p95": float("nan"),
                "p99": float("nan"), "under_rate": float("nan"), "n": 0}
    under = np.asarray(scored.predicted) < np.asarray(scored.measured)
    p50, p90, p95, p99 = np.percentile(errors, [50, 90, 95, 99])
    return {
        "mape": float(errors.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p95": float(p95),
        "p99": float(p99),
        "under_rate": float(under.mean()),
        "n": int(errors.size),
    }


def has_time_order(records: Sequence[Record]) -> bool:
    """True when every record carries ``start_s`` (so file order is time order)."""
    return all(r.start_s is not None for r in records)


def split_records(records: Sequence[Record], split: float, seed: int) -> tuple[list[Record], list[Record]]:
    """Train and test parts; records without time order are shuffled first (seeded)."""
    if not 0.0 < split < 1.0:
        raise ValueError(f"split must lie in (0, 1), got {split!r}")
    ordered = list(records)
    if not has_time_order(ordered):
        random.Random(seed).shuffle(ordered)
    cut = int(round(len(ordered) * split))
    return ordered[:cut], ordered[cut:]


def read_by(predictor: LatencyPredictor, records: Iterable[Record | ColocRow]) -> Iterable[Record | ColocRow]:
    """``records`` as ``predictor`` reads them: decoded rows left as they are where it reads rows alike
    (:attr:`~predictor.predictors.base.LatencyPredictor.reads_rows`), else each made a record."""
    if predictor.reads_rows:
        return records
    return (record_of(r) if isinstance(r, ColocRow) else r for r in records)


def run_split(
    predictor: LatencyPredictor,
    records: Sequence[Record],
    *,
    split: float = 0.75,
    seed: int = 0,
    keep_learning: bool = False,
    progress: Progress | None = None,
) -> Scored:
    """Fit on the training part, score the rest (optionally learning as it goes)."""
    train, test = split_records(records, split, seed)
    predictor.fit(train)
    if progress:
        progress(len(train))
    scored = Scored()
    for record in test:
        scored.add(predictor.predict_one(record), record.latency_ms)  # type: ignore[arg-type]
        if keep_learning:
            predictor.learn_one(record)
        if progress:
            progress(1)
    return scored


def run_prequential(
    predictor: LatencyPredictor,
    records: Iterable[Record],
    *,
    progress: Progress | None = None,
) -> Scored:
    """Predict each record, then learn from it, in stream order."""
    scored = Scored()
    for record in records:
        scored.add(predictor.predict_learn_one(record), record.latency_ms)  # type: ignore[arg-type]
        if progress:
            progress(1)
    return scored


def rolling_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over ``window`` values (shorter at the start).

    >>> rolling_mean(np.array([1.0, 3.0, 5.0]), 2).tolist()
    [1.0, 2.0, 4.0]
    """
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    index = np.arange(1, values.size + 1)
    start = np.maximum(index - window, 0)
    return (cumulative[index] - cumulative[start]) / (index - start)
