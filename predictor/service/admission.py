"""Calibration for the question asked: degraded replay at ingest and answer–outcome linking.

The answers that matter are the ones a scheduler gets before it dispatches a batch, and
those know less than the observation that later arrives. Two mechanisms feed the
:class:`~predictor.calibration.shape.ShapeCalibrator` that bounds every answer with
residuals of answers of the same :class:`~predictor.calibration.shapes.QueryShape`:

* **degraded replay** — for every observed record the service also asks itself, before
  learning the record, the questions a scheduler could have asked about the same batch
  (:func:`admission_queries`: its co-runners without overlaps and no signals; with
  overlaps and no signals), through the very path that answers real queries
  (:func:`~predictor.service.replay_block.replay_record`), and
  calibrates each shape on the residuals of those answers;
* **answer–outcome linking** — a query that carries a ``batch_id`` has its answer
  remembered (:class:`AnswerMemory`, bounded and expiring); when the observation of that
  batch arrives (``ReportObservations`` carries batch ids), the residual of that very answer
  calibrates its shape, in cells of its own that are preferred to the replayed ones where they
  hold enough (they describe the questions really asked, with the co-runners really known).

:class:`AdmissionCalibration` holds the calibrator, the memory and the
:class:`~predictor.service.monitor.ShapeMonitor` that reports admission-time error and
coverage per query shape, model and co-runner count.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from predictor.calibration.conformal import BoundSource
from predictor.calibration.shape import ShapeCalibrator
from predictor.calibration.shape_block import Outcome, learn_block
from predictor.calibration.shapes import QueryShape, count_bucket
from predictor.records.record import Record
from predictor.runtime.gil_yield import point as gil_point
from predictor.service.monitor import LINKED, REPLAY, ShapeMonitor
from predictor.service.types import CoRunnerSource, PlannedCoRunner, Query


@dataclass(frozen=True, slots=True)
class Answered:
    """What the service answered about one batch: enough to calibrate on its outcome."""

    shape: QueryShape
    device_kind: str
    count: int  # co-runner count bucket
    model: str
    predicted_ms: float  # the predictor's latency (before the calibrated correction)
    upper_ms: float  # its bound at the tracked confidence
    at: float  # monotonic seconds
    answered_ms: float = math.nan  # the latency answered (after the correction; NaN: predicted_ms)


class AnswerMemory:
    """Answers remembered by ``(batch id, device)`` until their observation arrives.

    Bounded: at most ``capacity`` (the oldest go first) and none older than ``ttl_s``.
    """

    def __init__(self, capacity: int = 100_000, ttl_s: float = 600.0, clock: Callable[[], float] = time.monotonic):
        if capacity < 1 or not (math.isfinite(ttl_s) and ttl_s > 0):
            raise ValueError("capacity must be >= 1 and ttl_s > 0")
        self.capacity = capacity
        self.ttl_s = ttl_s
        self.clock = clock
        self._answers: OrderedDict[tuple[str, str], Answered] = OrderedDict()
        self.expired = 0
        self._lock = threading.Lock()  # answers remember without the service's lock

    def __len__(self) -> int:
        return len(self._answers)

    def remember(self, batch_id: str, device: str, answered: Answered) -> None:
        """Keep ``answered`` for the batch (a later answer about the same batch and device replaces it)."""
        key = (batch_id, device)
        with self._lock:
            self._answers.pop(key, None)
            self._answers[key] = answered
            self._expire(answered.at)
            while len(self._answers) > self.capacity:
                self._answers.popitem(last=False)
                self.expired += 1

    def take(self, batch_id: str, device: str) -> Answered | None:
        """The answer given about the batch on ``device`` (forgotten now), if still remembered."""
        with self._lock:
            answered = self._answers.pop((batch_id, device), None)
        if answered is not None and self.clock() - answered.at > self.ttl_s:
            self.expired += 1
            return None
        return answered

    def _expire(self, now: float) -> None:
        while self._answers:
            oldest = next(iter(self._answers.values()))
            if now - oldest.at <= self.ttl_s:
                break
            self._answers.popitem(last=False)
            self.expired += 1

    def __getstate__(self) -> dict:
        return {"capacity": self.capacity, "ttl_s": self.ttl_s}  # answers are not kept across restarts

    def __setstate__(self, state: dict) -> None:
        self.capacity, self.ttl_s = state["capacity"], state["ttl_s"]
        self.clock = time.monotonic
        self._answers = OrderedDict()
        self.expired = 0
        self._lock = threading.Lock()


Learned = tuple[Record, str, float, list[tuple[QueryShape, float]], str]
"""A learned record to calibrate on: the record, its device kind, its prediction before it was
learned, its replayed admission-time answers and its batch id (:meth:`AdmissionCalibration.observe`)."""


def record_shape(record: Record) -> QueryShape:
    """The shape of an observed record taken as a query: every overlap known, its signals."""
    n = len(record.co_runners)
    return _shape(n, n, bool(record.signals))


@functools.lru_cache(maxsize=1024)
def _shape(co_runners: int, overlaps: int, signals: bool) -> QueryShape:
    """:meth:`QueryShape.of` without remaining times (looked up: a few are asked for every record)."""
    return QueryShape.of(co_runners, overlaps, 0, signals=signals)


def admission_shapes(record: Record) -> list[tuple[QueryShape, bool]]:
    """The shapes of :func:`admission_queries` about ``record``, each with whether its question
    gives the co-runners' overlaps, in the same order (no query built)."""
    own = record_shape(record)
    n = len(record.co_runners)
    wanted: list[tuple[QueryShape, bool]] = []
    for shape, with_overlaps in ((_shape(n, 0, False), False), (_shape(n, n, False), True)):
        if shape != own and all(shape != s for s, _ in wanted):
            wanted.append((shape, with_overlaps))
    return wanted


def admission_queries(record: Record) -> list[tuple[QueryShape, Query]]:
    """The questions a scheduler could have asked about ``record``'s batch before dispatch,
    each with its shape, leaving out the record's own shape (it is calibrated on the
    observation itself):

    * its co-runners without overlaps, no signals (:data:`predictor.calibration.shapes.ADMISSION`);
    * its co-runners with their overlaps, no signals (when the record has signals).
    """
    wanted = admission_shapes(record)  # a query is built only for a shape asked
    if not wanted:
        return []
    base = {
        "device": record.device,
        "batch": record.batch,
        "device_kind": record.device_kind,
        "co_runner_source": CoRunnerSource.EXPLICIT,
        "solo_latency_ms": record.solo_latency_ms,
    }
    return [
        (shape, Query(co_runners=tuple(PlannedCoRunner(r.model, r.batch_size, r.attrs,
                                                       overlap=r.overlap if with_overlaps else None)
                                       for r in record.co_runners), **base))
        for shape, with_overlaps in wanted
    ]


class AdmissionCalibration:
    """The conditional calibrator, the remembered answers and the admission-time monitor.

    Parameters
    ----------
    calibrator
        The calibrator every answer is bounded by.
    memory
        Answers of queries that carried a batch id.
    confidence
        The confidence at which coverage is tracked.
    """

    def __init__(self, calibrator: ShapeCalibrator, memory: AnswerMemory, confidence: float,
                 monitor: ShapeMonitor | None = None, point_correction: bool = True):
        self.point_correction = point_correction
        self.calibrator = calibrator
        self.memory = memory
        self.confidence = confidence
        self.monitor = monitor or ShapeMonitor()
        self.n_linked = 0

    def remember(self, batch_id: str, device: str, shape: QueryShape, kind: str, co_runners: int, model: str,
                 predicted_ms: float, answered_ms: float = math.nan, *,
                 calibrator: ShapeCalibrator | None = None) -> None:
        """Keep an answer given about ``batch_id`` (the predictor's latency, and the latency
        answered) to calibrate on its outcome; ``calibrator`` (default: this one's, live) bounds it
        (the published copy the answer was computed from)."""
        count = count_bucket(co_runners)
        upper = (calibrator or self.calibrator).bound(shape, kind, count, model, predicted_ms, self.confidence).upper_ms
        self.memory.remember(batch_id, device, Answered(shape, kind, count, model, predicted_ms, upper,
                                                        self.memory.clock(), answered_ms))

    def observe(self, record: Record, kind: str, predicted_ms: float,
                replays: list[tuple[QueryShape, float]], batch_id: str = "") -> None:
        """Calibrate on an observed record: its own prediction, the replayed admission-time
        answers (``(shape, predicted ms)``, made before it was learned) and, with a
        ``batch_id``, the answer remembered for it."""
        self.observe_block([(record, kind, predicted_ms, replays, batch_id)])

    def observe_block(self, observed: list[Learned]) -> None:
        """:meth:`observe` of each of a block's learned records in turn: each answer as it would
        have been given scored, then its outcome calibrated on (the linked answer's only
        calibrated on), by :func:`~predictor.calibration.shape_block.learn_block` (compiled for a block of
        many: the same state and answers as the calls, bit for bit); the monitor then scores the
        answers in the same order."""
        outcomes: list[Outcome] = []
        updates: list[tuple] = []  # (source, shape key, kind, model, count, actual, answered, upper or None,
        #   the outcome's index in outcomes or None: a linked answer is only calibrated on)
        for record, kind, predicted_ms, replays, batch_id in observed:
            gil_point()
            actual = record.latency_ms
            assert actual is not None
            model = record.batch.model
            count = count_bucket(len(record.co_runners))
            linked = self.memory.take(batch_id, record.device) if batch_id else None
            if linked is not None:
                self.n_linked += 1
                answered = linked.predicted_ms if math.isnan(linked.answered_ms) else linked.answered_ms
                updates.append((LINKED, linked.shape.key, kind, model, linked.count, actual, answered,
                                linked.upper_ms, None))
                outcomes.append(Outcome(linked.shape, kind, linked.count, model, actual, linked.predicted_ms, True))
            for shape, predicted in [(record_shape(record), predicted_ms), *replays]:
                if not (math.isfinite(predicted) and predicted > 0):
                    continue
                updates.append((REPLAY, shape.key, kind, model, count, actual, predicted, None, len(outcomes)))
                outcomes.append(Outcome(shape, kind, count, model, actual, predicted, False, self.confidence))
        results = learn_block(self.calibrator, outcomes)
        monitor, point_correction = self.monitor, self.point_correction
        for source, key, kind, model, count, actual, predicted, upper, at in updates:
            gil_point()
            if at is None:
                monitor.update(source, key, kind, model, count, actual=actual, predicted=predicted,
                               covered=actual <= upper)
                continue
            correction, factor, _ = results[at]  # type: ignore[misc]
            answered = predicted * correction if point_correction else predicted
            monitor.update(source, key, kind, model, count, actual=actual, predicted=answered,
                           covered=actual <= predicted * factor.upper_ms,
                           calibrated=factor.source is not BoundSource.FALLBACK)
