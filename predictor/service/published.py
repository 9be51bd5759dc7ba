"""Published model versions: what answers are computed from, apart from what learns.

Learning changes the predictor and the two calibrators record by record; answering
reads them. Rather than both holding the state's lock, the learner *publishes* an
immutable :class:`ModelVersion` (independent copies, made under the lock) and
answers read the latest one through a plain attribute, holding no lock while they
compute. A burst of ingest then never stalls an answer for longer than it takes to
read one reference. An acknowledged record is in the answers that follow the
acknowledgement, and a query asked after learning ends sees everything learned
(:class:`Publisher` says when versions are made).

Across processes (``predictor serve --workers N``), a learner process also writes its versions
to a file replaced atomically, with a memory-mapped generation counter that answering processes
check on every call (:mod:`predictor.service.replicas.version_file`, :mod:`predictor.service.replicas.file_publisher`,
:mod:`predictor.service.replicas.workers`); the window copies shared by consecutive versions are written
and read once, as parts (:mod:`predictor.service.replicas.version_pickle`).

Copies are cheap where they are made often: the RLS predictor copies its weights,
not its covariance (:meth:`~predictor.regressors.least_squares.RLS.frozen`); the calibrators
re-copy only the residual windows that changed since the previous version
(:class:`~predictor.calibration.conformal.WindowCopies`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from predictor.calibration.conformal import ConformalCalibrator, WindowCopies
from predictor.calibration.shape import ShapeCalibrator
from predictor.predictors import LatencyPredictor

COPY_SHARE = 10.0
"""A version is published at most once per this many times the time the last copy took."""


@dataclasses.dataclass(frozen=True)
class ModelVersion:
    """One published, immutable state of what answers read.

    Attributes
    ----------
    generation
        The learner's change count this version was copied at.
    predictor
        The predictor (a :meth:`~predictor.predictors.LatencyPredictor.frozen` copy, or the
        live one in :meth:`Publisher.live`).
    calibrator
        The per-device-kind conformal calibrator (bound factors of ranked rows).
    shapes
        The conditional (per query shape) calibrator of the answers.
    observations_learned
        Observations the predictor had learned.
    sequence
        The records the learner had taken in (learned, or refused by its gates) when the version
        was copied: the version's number in the record sequence. Answers computed from versions of
        the same sequence are the same, whichever process computes them.
    """

    generation: int
    predictor: LatencyPredictor
    calibrator: ConformalCalibrator
    shapes: ShapeCalibrator
    observations_learned: int
    sequence: int = 0


class Publisher:
    """When to publish, and how to copy (see the module documentation).

    A version is published:

    * by the learner, every ``every_records`` records or ``every_s`` seconds while it learns
      (whichever comes first; never more often than a few times the time one copy takes, so that
      copying stays a small share of learning), and at the end of every ``ReportObservations``
      stream, before it is acknowledged: an acknowledged record is in the answers that follow the
      acknowledgement;
    * by a reader that finds the version stale while nothing is being learned (the learner's
      state is then still, so a fresh copy costs one copy per change): a query asked after
      learning ends sees everything learned, as if it had read the live model.

    Parameters
    ----------
    every_records
        The learner publishes after this many records learned since the last version.
    every_s
        ... or once this many seconds have passed since it (whichever comes first).
    clock
        Monotonic clock in seconds.
    """

    def __init__(self, every_records: int = 256, every_s: float = 0.005,
                 clock: Callable[[], float] = time.perf_counter):
        if every_records < 1:
            raise ValueError(f"every_records must be >= 1, got {every_records!r}")
        if not every_s > 0:
            raise ValueError(f"every_s must be > 0, got {every_s!r}")
        self.every_records = every_records
        self.every_s = every_s
        self.clock = clock
        self.pending = 0  # records learned since the last version
        self.published = 0  # versions published
        self.copy_s = 0.0  # what the last copy took
        self._last = clock()
        self._copies = WindowCopies()

    def due(self, records: int = 1) -> bool:
        """Whether the learner, having learned ``records`` more records, should publish now."""
        self.pending += records
        return self.pending >= self.every_records or self.overdue()

    def overdue(self) -> bool:
        """Whether the latest version is older than the learner would let it get while learning."""
        return self.clock() - self._last >= max(self.every_s, COPY_SHARE * self.copy_s)

    def copy(self, generation: int, predictor: LatencyPredictor, calibrator: ConformalCalibrator,
             shapes: ShapeCalibrator, sequence: int = 0) -> ModelVersion:
        """A new version of the live objects (call under the state's lock: nothing may learn meanwhile)."""
        start = self.clock()
        version = ModelVersion(
            generation,
            predictor.frozen(),
            calibrator.frozen(self._copies),
            shapes.frozen(self._copies),
            predictor.n_learned,
            sequence,
        )
        self._copies.done()
        end = self.clock()
        self.copy_s = end - start
        self._last = end
        self.pending = 0
        self.published += 1
        return version

    @staticmethod
    def live(generation: int, predictor: LatencyPredictor, calibrator: ConformalCalibrator,
             shapes: ShapeCalibrator, sequence: int = 0) -> ModelVersion:
        """The live objects seen as a version, without copies: only for the learner, under the lock
        (the admission-time answers it replays before learning a record)."""
        return ModelVersion(generation, predictor, calibrator, shapes, predictor.n_learned, sequence)
