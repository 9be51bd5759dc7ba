"""What the service knows, and how it is kept across restarts.

:class:`ServiceState` holds the online predictor, the conformal calibrator, the
error monitor, the outlier gates, the live view, readiness and the counters,
behind one lock; it writes and restores its snapshot, replays the observation
log (write-ahead) after it, and reports :meth:`ServiceState.status`. Learning
(:mod:`predictor.service.ingest`) works on it under the lock; answering
(:mod:`predictor.service.answering`) reads the latest published
:class:`~predictor.service.published.ModelVersion` (:meth:`ServiceState.model`),
without the lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

from predictor import snapshot
from predictor.calibration.conformal import ConformalCalibrator
from predictor.calibration.shape import ShapeCalibrator
from predictor.calibration.shapes import ADMISSION
from predictor.predictors import LatencyPredictor, create
from predictor.records.logio import ReadReport
from predictor.records.record import Record
from predictor.service.admission import AdmissionCalibration, AnswerMemory
from predictor.service.config import ServiceConfig
from predictor.service.durability import livelog, wal
from predictor.service.durability.dedup import DedupKey, Deduplicator
from predictor.service.errors import OutlierRejected, ServiceError, Unavailable
from predictor.service.estimates.filling import Filling
from predictor.service.guards.gates import OutlierGates
from predictor.service.live.liveview import LiveView
from predictor.service.live.memory import MemoryBook
from predictor.service.live.queues import QueueBook
from predictor.service.live.transfers import TransferBook
from predictor.service.monitor import REPLAY, ErrorMonitor, ShapeMonitor
from predictor.service.published import ModelVersion, Publisher
from predictor.service.types import KindStatus, LogStatus, Status

log = logging.getLogger("predictor.service")

SNAPSHOT_FILE = "service.snapshot"
"""The snapshot's file name in the service's state folder."""


@dataclasses.dataclass(frozen=True)
class ReplayBase:
    """What the admission-time replay answers from, between two replay boundaries: the predictor
    (a frozen copy) and the filling (a copy) as they stood when :attr:`sequence` records had
    reached the learner, a multiple of ``config.replay_every_records`` (:meth:`ServiceState.replay_base`)."""

    sequence: int
    predictor: LatencyPredictor
    filling: Filling


class Learner(Protocol):
    """What :meth:`ServiceState.open` learns through (the ingest path)."""

    def observe(self, record: Record, batch_id: str = "", *, client: str = "", key: DedupKey | None = None) -> float:
        """Learn from one observed record (a replayed log entry); returns its prediction before learning."""
        ...

    def warm_start(self, path: str | Path, *, tolerant: bool = True) -> ReadReport:
        """Learn from a ``coloc/v1`` log, prequentially."""
        ...

    def learn_stream(self, items: Iterable[tuple[Record, str]], refused: Callable[[int, ServiceError], None]) -> None:
        """Learn ``(record, client)`` pairs in order, as :meth:`observe` learns each; ``refused(index, error)``
        is told of each one refused."""
        ...


class ServiceState:
    """The learned state of the service, its readiness and counters, and their persistence.

    Parameters
    ----------
    config
        The service's configuration.
    predictor
        An already built predictor (default: built from ``config.predictor``).
    clock
        Monotonic clock of the live view, in seconds.
    """

    def __init__(
        self,
        config: ServiceConfig,
        predictor: LatencyPredictor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.config = config
        self.predictor = predictor if predictor is not None else create(config.predictor)
        self.calibrator = self.new_calibrator()
        self.admission = self.new_admission()
        self.monitor = self.new_monitor()
        self.gates = self.new_gates()
        self.dedup = self.new_dedup()
        self.live = LiveView(
            clock,
            stale_after_s=config.stale_after_s,
            overrun_fraction=config.overrun_remaining_fraction,
            max_devices=config.max_devices,
            max_running_per_device=config.max_running_per_device,
        )
        self.filling = Filling(config.signal_alpha, config.max_devices)
        self.queues = QueueBook(clock, stale_after_s=config.stale_after_s, max_devices=config.max_devices)
        self.memory = MemoryBook(clock, max_devices=config.max_devices)
        self.transfers = TransferBook(config.topology, alpha=config.transfer_alpha)
        self.lock = threading.RLock()
        # see learning_block: the status as a block began, and its admission monitor's counts then
        self._status_before_block: tuple[Status, ShapeMonitor] | None = None
        self._ready = False
        self._listeners: list[Callable[[bool], None]] = []
        self.started = time.time()
        self._started_monotonic = time.monotonic()  # uptime: immune to wall-clock steps
        # counters
        self.changes = 0  # observations (and gate moves) since the last snapshot
        self.n_rejected = 0
        self.n_outliers = 0
        self.n_rate_limited = 0
        # persistence: the state folder, its snapshots and the observation log (write-ahead)
        self.state_dir: Path | None = None
        self.last_snapshot_time: float | None = None
        self.snapshot_failures = 0
        self.snapshot_sequence = 0
        self.obs_log: wal.ObservationLog | None = None
        # the log's entries not learned yet (logged as they come, learned with their block): a
        # snapshot covers the log only up to the first of them, else a record logged before the
        # snapshot and learned after it would be in neither what the snapshot restores nor what
        # the log replays after it
        self.unlearned: set[int] = set()
        self.replay_report: wal.ReplayReport | None = None
        self.live_log: livelog.LiveLog | None = None
        self.live_report: livelog.LiveRestoreReport | None = None
        self.stop = threading.Event()
        self.snapshotter: threading.Thread | None = None
        # published versions (what answers read): see predictor.service.published
        self.generation = 0  # changes to what answers read, by the learner
        self.publisher = Publisher(config.publish_every_records, config.publish_every_s)
        self._learning = 0  # observation streams in progress
        self._learning_lock = threading.Lock()
        self.version: ModelVersion = self.publisher.copy(0, self.predictor, self.calibrator, self.admission.calibrator)
        # the records that reached the learner (learned, or refused by the outlier gate), in stream
        # order: the sequence position the replay boundaries are counted on (see replay_base)
        self.sequence = 0
        self._replay_base: ReplayBase | None = None

    # ------------------------------------------------------------------ published versions
    def changed(self, records: int = 1) -> None:
        """The learner changed what answers read, learning ``records`` records (call under the
        lock); publishes when due."""
        self.generation += 1
        if self.publisher.due(records):
            self._publish()

    def _publish(self) -> ModelVersion:
        self.version = self.publisher.copy(self.generation, self.predictor, self.calibrator, self.admission.calibrator,
                                           self.sequence)
        return self.version

    def publish(self) -> ModelVersion:
        """Publish a version of what the learner holds now, unless the latest one is it (takes the lock)."""
        with self.lock:
            if self.version.generation != self.generation:
                self._publish()
            return self.version

    def model(self) -> ModelVersion:
        """The version answers are computed from: the latest published, never waiting on learning.

        While nothing is being learned, a stale version is replaced first (a query after
        learning ends sees all of it). While a stream is learning, the learner publishes every
        few milliseconds; a version older than that (a stream idle between records) is replaced
        here only if the lock is free at once.
        """
        version = self.version
        if version.generation == self.generation:
            return version
        if not self._learning:
            return self.publish()
        if self.publisher.overdue() and self.lock.acquire(blocking=False):
            try:
                if self.version.generation != self.generation:
                    self._publish()
                return self.version
            finally:
                self.lock.release()
        return version

    def replay_base(self) -> ReplayBase:
        """The predictor and filling the admission-time questions about the record at position
        :attr:`sequence` are answered from: as they stood at the last multiple of
        ``config.replay_every_records`` (taken here, before the record at a boundary is learned;
        call under the lock). A function of the record sequence alone, whatever the messages."""
        base = self._replay_base
        if base is None or (self.sequence % self.config.replay_every_records == 0 and base.sequence != self.sequence):
            base = self._replay_base = ReplayBase(self.sequence, self.predictor.frozen(), self.filling.copy())
        return base

    def live_model(self) -> ModelVersion:
        """What the learner holds now, as a version without copies (for the learner, under the lock)."""
        return Publisher.live(self.generation, self.predictor, self.calibrator, self.admission.calibrator,
                              self.sequence)

    @contextlib.contextmanager
    def learning(self) -> Iterator[None]:
        """Mark an observation stream in progress (answers then never wait to publish)."""
        with self._learning_lock:
            self._learning += 1
        try:
            yield
        finally:
            with self._learning_lock:
                self._learning -= 1

    def new_gates(self) -> OutlierGates | None:
        """Fresh outlier gates as configured (``None``: no gate)."""
        c = self.config
        if not c.outlier_gate:
            return None
        return OutlierGates(c.outlier_k, c.outlier_min_ratio, c.outlier_warmup, c.max_device_kinds)

    def new_dedup(self) -> Deduplicator:
        """A fresh table of the records taken in (exactly-once learning), as configured."""
        c = self.config
        return Deduplicator(c.dedup_window, c.dedup_max_producers, c.dedup_max_record_ids)

    def new_calibrator(self) -> ConformalCalibrator:
        """A fresh conformal calibrator as configured."""
        c = self.config
        return ConformalCalibrator(
            c.calibration_window, c.min_residuals, c.fallback_sigma, c.adapt, c.coverage_confidence
        )

    def new_monitor(self) -> ErrorMonitor:
        """A fresh error monitor."""
        return ErrorMonitor(self.config.error_window, self.config.coverage_window)

    def new_admission(self) -> AdmissionCalibration:
        """A fresh conditional (per query shape) calibration as configured."""
        c = self.config
        calibrator = ShapeCalibrator(
            window=c.shape_window,
            min_residuals=c.shape_min_residuals,
            fallback_sigma=c.fallback_sigma,
            gamma=c.shape_gamma,
            spread_rate=c.spread_rate,
            monotone=c.monotone_bounds,
            scaled=c.shape_scaling,
        )
        return AdmissionCalibration(calibrator, AnswerMemory(c.answer_memory, c.answer_ttl_s), c.coverage_confidence,
                                    point_correction=c.point_correction)

    # ------------------------------------------------------------------ readiness
    @property
    def ready(self) -> bool:
        """Whether the service answers (opened, not closing)."""
        return self._ready

    def add_ready_listener(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(ready)`` now and whenever readiness changes."""
        self._listeners.append(listener)
        listener(self._ready)

    def set_ready(self, ready: bool) -> None:
        """Change readiness and tell the listeners."""
        self._ready = ready
        for listener in list(self._listeners):
            listener(ready)

    def require_ready(self) -> None:
        """Raise :class:`Unavailable` unless the service is ready."""
        if not self._ready:
            raise Unavailable("the service is not ready (starting, restoring state, or stopping)")

    # ------------------------------------------------------------------ start, stop
    def open(self, learner: Learner, state_dir: str | Path | None = None, warm_start: str | Path | None = None,
             *, ready: bool = True) -> str:
        """Restore the snapshot in ``state_dir`` and replay the log after it, else warm-start from a
        log (both through ``learner``); then become ready (``ready=False``: the caller marks it
        ready, :meth:`set_ready`, once its own start-up is done). Returns what was done, in words.

        Raises :class:`~predictor.snapshot.SnapshotError` for a snapshot that exists but
        cannot be used (nothing is loaded then).
        """
        said = "cold start: nothing learned yet"
        next_seq = 0
        if state_dir is not None:
            self.state_dir = Path(state_dir)
            self.state_dir.mkdir(parents=True, exist_ok=True)
            path = self.state_dir / SNAPSHOT_FILE
            for stale in snapshot.remove_stale_temporaries(path):
                log.warning("removed %s, left by a snapshot cut short (the previous snapshot stands)", stale)
            if path.exists():
                header = self.restore_snapshot(path)
                said = f"restored {header['observations']} observations from {path}"
                warm_start = None
            if self.config.observation_log:
                replayed = self.replay_log(learner)
                next_seq = replayed.last_seq + 1
                if replayed.replayed or replayed.skipped:
                    said = (said if path.exists() else "cold start") + f"; {replayed.summary()}"
                if replayed.replayed:
                    warm_start = None  # what the state folder holds wins
        warmed = False
        if warm_start is not None:
            report = learner.warm_start(warm_start)  # before the log opens: the snapshot below covers it
            said = f"warm start from {warm_start}: {report.summary()}"
            warmed = True
        if self.obs_log is not None:
            self.obs_log.open(next_seq)
        if self.state_dir is not None and self.config.live_log:
            said += "; " + self.restore_live_view().summary()
        if warmed and self.state_dir is not None:
            self.save_snapshot()
        if self.state_dir is not None and self.config.snapshot_every_s > 0:
            self.snapshotter = threading.Thread(target=self._snapshot_loop, name="snapshots", daemon=True)
            self.snapshotter.start()
        self.publish()
        if ready:
            self.set_ready(True)
        return said

    def close(self) -> None:
        """Stop answering, stop periodic snapshots and write a final one (when a state folder is set)."""
        self.set_ready(False)
        self.stop.set()
        if self.snapshotter is not None:
            self.snapshotter.join(timeout=30)
            self.snapshotter = None
        if self.state_dir is not None and self.changes:
            self.save_snapshot()
        if self.obs_log is not None:
            self.obs_log.close()
        if self.live_log is not None:
            self.live_log.close()

    def restore_live_view(self) -> livelog.LiveRestoreReport:
        """Restore the running batches from the live view's side log, and log the view from now on."""
        assert self.state_dir is not None
        self.live_log = livelog.LiveLog(self.state_dir / livelog.DIR_NAME)
        horizon = self.config.live_horizon_s or self.config.stale_after_s
        self.live_report = self.live_log.restore(self.live, horizon)
        self.live_log.attach(self.live)
        return self.live_report

    def replay_log(self, learner: Learner) -> wal.ReplayReport:
        """Learn again, through ``learner``, what the observation log holds after the restored snapshot."""
        assert self.state_dir is not None
        self.obs_log = wal.ObservationLog(
            self.state_dir / wal.DIR_NAME,
            fsync=self.config.fsync,
            fsync_interval_s=self.config.fsync_interval_s,
        )
        report = wal.ReplayReport()
        sequences: list[int] = []

        def entries() -> Iterator[tuple[Record, str]]:
            for entry in self.obs_log.replay(after=self.snapshot_sequence, report=report):  # type: ignore[union-attr]
                # the log holds each key once (a duplicate is refused before it is logged), so its entry is
                # learned as it is: a snapshot taken after the key was taken and before the record was
                # learned holds the key as taken, which must not refuse the entry as a duplicate of itself
                if entry.key:
                    self.dedup.take(entry.client, entry.key)
                sequences.append(entry.seq)
                yield entry.record, entry.client

        def refused(index: int, error: ServiceError) -> None:
            if not isinstance(error, OutlierRejected):  # an outlier is refused again, as it was when it arrived
                report.add_error(f"sequence {sequences[index]}: {error}")

        learner.learn_stream(entries(), refused)
        self.replay_report = report
        if report.skipped:
            log.warning("observation log replay: %s", report.summary())
        return report

    def _snapshot_loop(self) -> None:
        while not self.stop.wait(self.config.snapshot_every_s):
            if not self.changes:
                continue
            try:
                self.save_snapshot()
            except OSError as exc:
                self.snapshot_failures += 1
                log.error("snapshot failed: %s", exc)

    # ------------------------------------------------------------------ snapshots
    def save_snapshot(self, path: str | Path | None = None) -> Path:
        """Write the learned state atomically (default: ``state_dir/service.snapshot``)."""
        if path is None:
            if self.state_dir is None:
                raise ValueError("no state folder configured and no snapshot path given")
            path = self.state_dir / SNAPSHOT_FILE
        own = self.state_dir is not None and Path(path) == self.state_dir / SNAPSHOT_FILE
        with self.lock:
            payload = self.state_payload()
            observations = self.predictor.n_learned
            changes, self.changes = self.changes, 0
            covered, rotated = self.snapshot_sequence, False
            if self.obs_log is not None and self.obs_log.is_open:
                # up to the first entry not learned yet (every entry comes from the log: below its last)
                covered = min(self.unlearned) - 1 if self.unlearned else self.obs_log.last_seq
                if own:  # entries after `covered` go to a new segment; older ones go once this is durable
                    try:
                        self.obs_log.rotate()
                        rotated = True
                    except wal.LogError as exc:
                        log.error("observation log: %s", exc)
        try:
            snapshot.write_payload(
                path,
                payload,
                predictor=self.config.predictor,
                observations=observations,
                extra={"log_sequence": covered},
            )
        except BaseException:
            self.changes += changes
            raise
        self.last_snapshot_time = time.time()
        if own:
            self.snapshot_sequence = covered
            if rotated and self.obs_log is not None:
                self.obs_log.discard_through(covered)
        return Path(path)

    def state_payload(self) -> bytes:
        """The learned state as snapshot payload bytes (equal bytes: equal state)."""
        with self.lock:
            state = {
                "predictor": self.predictor,
                "calibrator": self.calibrator,
                "admission": self.admission,
                "monitor": self.monitor,
                "devices": self.live.devices(),
                "gates": self.gates,
                "filling": self.filling,
                "dedup": self.dedup,
                "sequence": self.sequence,
                "replay_base": self._replay_base,
            }
            return snapshot.dump_state(state)

    def restore_snapshot(self, path: str | Path) -> dict:
        """Replace the learned state by the snapshot at ``path``, whole or not at all."""
        state, header = snapshot.read_snapshot(path)
        if not isinstance(state, dict) or not {"predictor", "calibrator", "monitor"} <= state.keys():
            raise snapshot.SnapshotError(f"{path}: payload is not a service state")
        predictor, calibrator, monitor = state["predictor"], state["calibrator"], state["monitor"]
        if not isinstance(predictor, LatencyPredictor):
            raise snapshot.SnapshotError(f"{path}: payload holds no predictor")
        if not isinstance(calibrator, ConformalCalibrator) or not isinstance(monitor, ErrorMonitor):
            raise snapshot.SnapshotError(f"{path}: payload holds no calibrator or monitor")
        expected = create(self.config.predictor)
        if type(predictor) is not type(expected) or predictor.params() != expected.params():
            raise snapshot.SnapshotError(
                f"{path}: snapshot holds predictor {predictor!r} (spec {header['predictor']!r}), "
                f"but the service is configured for {expected!r}; use a matching --predictor "
                "or another state folder"
            )
        gates = state.get("gates", self.new_gates())
        if gates is not None and not isinstance(gates, OutlierGates):
            raise snapshot.SnapshotError(f"{path}: payload holds no outlier gates")
        if (gates is None) != (not self.config.outlier_gate):
            gates = self.new_gates()
        admission = state.get("admission") or self.new_admission()
        if not isinstance(admission, AdmissionCalibration):
            raise snapshot.SnapshotError(f"{path}: payload holds no admission calibration")
        filling = state.get("filling")
        if not isinstance(filling, Filling):
            filling = Filling(self.config.signal_alpha, self.config.max_devices)
        dedup = state.get("dedup") or self.new_dedup()
        if not isinstance(dedup, Deduplicator):
            raise snapshot.SnapshotError(f"{path}: payload holds no table of records taken in")
        sequence = state.get("sequence", predictor.n_learned)
        replay_base = state.get("replay_base")
        if not isinstance(sequence, int) or (replay_base is not None and not isinstance(replay_base, ReplayBase)):
            raise snapshot.SnapshotError(f"{path}: payload holds no sequence position or replay base")
        with self.lock:
            self.filling = filling
            self.predictor = predictor
            self.calibrator = calibrator
            self.admission = admission
            self.monitor = monitor
            self.gates = gates
            self.dedup = dedup
            self.sequence = sequence
            self._replay_base = replay_base  # None (an older snapshot): taken afresh where it is needed
            self.changes = 0
            self.snapshot_sequence = int(header.get("log_sequence", 0))
            self.generation += 1
            self._publish()
        self.live.restore_devices(dict(state.get("devices", {})))
        self.last_snapshot_time = float(header.get("created", time.time()))
        return header

    # ------------------------------------------------------------------ status
    def _log_status(self) -> LogStatus | None:
        wal_log, replay = self.obs_log, self.replay_report
        if wal_log is None:
            return None
        return LogStatus(
            fsync=wal_log.fsync,
            last_sequence=wal_log.last_seq,
            synced_sequence=wal_log.synced_seq,
            snapshot_sequence=self.snapshot_sequence,
            replayed=replay.replayed if replay else 0,
            replay_skipped=replay.skipped if replay else 0,
        )

    @contextlib.contextmanager
    def learning_block(self) -> Iterator[None]:
        """Hold the lock for a block of learning (a message of a stream: up to a few hundred ms).

        Meanwhile :meth:`status` does not wait: it answers the status as it stood when the block
        began, which holds every write acknowledged before (each took the lock) and none of the
        block's records (acknowledged only after it)."""
        with self.lock:
            # the admission slices (a pass over every cell) made only if a status is asked meanwhile,
            # from a copy of the counts
            self._status_before_block = (self._status_now(admission_slices=False), self.admission.monitor.frozen())
            try:
                yield
            finally:
                self._status_before_block = None

    def status(self) -> Status:
        """Observations learned, rolling error, coverage and drift alarms, per device kind.

        While a block is being learned, the status at the block's start, its clock and live view
        read now (:meth:`learning_block`); otherwise the status now."""
        if not self.lock.acquire(blocking=False):
            held = self._status_before_block  # set only while a block holds the lock
            if held is not None:
                before, slices = held
                return dataclasses.replace(before, admission=tuple(slices.slices()),
                                           uptime_s=time.monotonic() - self._started_monotonic,
                                           devices=len(self.live.devices()),
                                           batches_running=self.live.running_count())
            self.lock.acquire()
        try:
            return self._status_now()
        finally:
            self.lock.release()

    def _status_now(self, admission_slices: bool = True) -> Status:
        """The status as it stands (under the lock); ``admission_slices=False``: without the admission
        monitor's slices (``admission`` empty)."""
        with self.lock:
            monitor, calibrator, admission = self.monitor, self.calibrator, self.admission
            admitted = admission.monitor.rolling(REPLAY, ADMISSION)
            kinds = tuple(
                KindStatus(
                    device_kind=k,
                    observations=monitor.observations(k),
                    rolling_mape=monitor.mape(k),
                    coverage=monitor.coverage(k),
                    residuals=calibrator.n_residuals(k),
                    drift_alarms=monitor.alarm_count(k),
                )
                for k in monitor.kinds()
            )
            return Status(
                ready=self._ready,
                predictor=self.config.predictor,
                observations_learned=self.predictor.n_learned,
                observations_rejected=self.n_rejected,
                rolling_mape=monitor.mape(),
                coverage=monitor.coverage(),
                coverage_confidence=self.config.coverage_confidence,
                device_kinds=kinds,
                drift_alarms=tuple(monitor.alarms),
                devices=len(self.live.devices()),
                batches_running=self.live.running_count(),
                uptime_s=time.monotonic() - self._started_monotonic,
                last_snapshot_time=self.last_snapshot_time,
                observations_outliers=self.n_outliers,
                observations_rate_limited=self.n_rate_limited,
                log=self._log_status(),
                admission=tuple(admission.monitor.slices()) if admission_slices else (),
                admission_coverage=admitted.coverage,
                admission_mape=admitted.mape,
                answers_linked=admission.n_linked,
                answers_remembered=len(admission.memory),
                observations_duplicates=self.dedup.n_duplicates,
                live_restored=self.live_report.restored if self.live_report else 0,
                live_expired=self.live_report.expired if self.live_report else 0,
            )
