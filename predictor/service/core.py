"""The prediction service: a plain object that the gRPC layer (or anything else) calls.

It owns the online predictor, the conformal calibrator, the error monitor and
the live view. Observations are scored prequentially (predict, bound, then
learn) under one lock, so answers never see a half-updated model. A planned
batch is answered by :meth:`Service._answer`; a ranking of hundreds of
candidate devices by :meth:`Service._answer_columns`, which computes the
features and predictions of all candidates at once (column-wise, see
:mod:`predictor.service.placements`) and answers the same numbers.

Examples
--------
>>> from predictor.records import BatchSpec, parse_record
>>> service = Service(ServiceConfig(predictor="solo"))
>>> service.open()
'cold start: nothing learned yet'
>>> service.observe(parse_record({"schema": "coloc/v1", "device": "cpu0",
...     "batch": {"model": "mlp", "batch_size": 2}, "latency_ms": 4.0}))  # predicted before learning
1.0
>>> prediction = service.predict(Query("cpu0", BatchSpec("mlp", 2)))
>>> prediction.latency_ms, prediction.observations_learned
(4.0, 1)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from predictor.calibration import BoundSource, ConformalCalibrator, check_confidence
from predictor.colocations import CoLocations
from predictor.logio import ReadReport, iter_records
from predictor.predictors import LatencyPredictor, create
from predictor.records import MAX_NAME_LENGTH, SCHEMA, BatchSpec, CoRunner, Record, RecordError, parse_record
from predictor.service import snapshot, wal
from predictor.service.config import ServiceConfig
from predictor.service.errors import (
    InvalidArgument,
    NotFound,
    OutlierRejected,
    RateLimited,
    ResourceExhausted,
    ServiceError,
    Unavailable,
)
from predictor.service.gates import OutlierGates
from predictor.service.limits import check_magnitudes
from predictor.service.liveview import LiveView
from predictor.service.monitor import ErrorMonitor
from predictor.service.placements import CandidateColumns, RankingColumns, rows_of, valid_columns
from predictor.service.ratelimit import RateLimiter
from predictor.service.types import (
    Candidate,
    CoRunnerSource,
    Deadline,
    DeadlineAnswer,
    KindStatus,
    LogStatus,
    ObservationReport,
    Prediction,
    Query,
    Ranking,
    Rejection,
    Status,
)

log = logging.getLogger("predictor.service")

RecordLike = Record | Mapping[str, Any] | Callable[[], Record]


@dataclasses.dataclass
class _Planned:
    """A validated planned batch: the record to predict and each co-runner's remaining time."""

    record: Record
    remaining_ms: list[float | None]


class Service:
    """Online interference prediction with calibrated deadline answers.

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
        config: ServiceConfig | None = None,
        *,
        predictor: LatencyPredictor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.config = config = config or ServiceConfig()
        self._predictor = predictor if predictor is not None else create(config.predictor)
        self._calibrator = self._new_calibrator()
        self._monitor = ErrorMonitor(config.error_window, config.coverage_window)
        self.live = LiveView(
            clock,
            stale_after_s=config.stale_after_s,
            overrun_fraction=config.overrun_remaining_fraction,
            max_devices=config.max_devices,
            max_running_per_device=config.max_running_per_device,
        )
        self._lock = threading.RLock()
        self._ready = False
        self._listeners: list[Callable[[bool], None]] = []
        self.started = time.time()
        self.n_rejected = 0
        self._changes = 0  # observations since the last snapshot
        self.state_dir: Path | None = None
        self.last_snapshot_time: float | None = None
        self.snapshot_failures = 0
        self._stop = threading.Event()
        self._snapshotter: threading.Thread | None = None
        # robustness: outlier gates (learned state, snapshotted) and per-client rate limits
        self._gates = self._new_gates()
        self.rate_limiter = (
            RateLimiter(config.rate_limit, config.rate_burst) if config.rate_limit > 0 else None
        )
        self.n_outliers = 0
        self.n_rate_limited = 0
        # durability: the observation log (write-ahead) of a service with a state folder
        self.obs_log: wal.ObservationLog | None = None
        self.snapshot_sequence = 0
        self.replay_report: wal.ReplayReport | None = None

    def _new_gates(self) -> OutlierGates | None:
        c = self.config
        if not c.outlier_gate:
            return None
        return OutlierGates(c.outlier_k, c.outlier_min_ratio, c.outlier_warmup, c.max_device_kinds)

    def _new_calibrator(self) -> ConformalCalibrator:
        c = self.config
        return ConformalCalibrator(
            c.calibration_window, c.min_residuals, c.fallback_sigma, c.adapt, c.coverage_confidence
        )

    # ------------------------------------------------------------------ readiness
    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def predictor_name(self) -> str:
        return self.config.predictor

    @property
    def observations_learned(self) -> int:
        return self._predictor.n_learned

    def add_ready_listener(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(ready)`` now and whenever readiness changes."""
        self._listeners.append(listener)
        listener(self._ready)

    def _set_ready(self, ready: bool) -> None:
        self._ready = ready
        for listener in list(self._listeners):
            listener(ready)

    def mark_ready(self) -> None:
        self._set_ready(True)

    def _require_ready(self) -> None:
        if not self._ready:
            raise Unavailable("the service is not ready (starting, restoring state, or stopping)")

    # ------------------------------------------------------------------ start, stop
    def open(self, state_dir: str | Path | None = None, warm_start: str | Path | None = None) -> str:
        """Restore the snapshot in ``state_dir``, else warm-start from a log; then become ready.

        Returns what was done, in words. Raises :class:`~predictor.service.snapshot.SnapshotError`
        for a snapshot that exists but cannot be used (nothing is loaded then).
        """
        said = "cold start: nothing learned yet"
        next_seq = 0
        if state_dir is not None:
            self.state_dir = Path(state_dir)
            self.state_dir.mkdir(parents=True, exist_ok=True)
            path = self.state_dir / snapshot.FILE_NAME
            if path.exists():
                header = self.restore_snapshot(path)
                said = f"restored {header['observations']} observations from {path}"
                warm_start = None
            if self.config.observation_log:
                replayed = self._replay_log()
                next_seq = replayed.last_seq + 1
                if replayed.replayed or replayed.skipped:
                    said = (said if path.exists() else "cold start") + f"; {replayed.summary()}"
                if replayed.replayed:
                    warm_start = None  # what the state folder holds wins
        warmed = False
        if warm_start is not None:
            report = self.warm_start(warm_start)  # before the log opens: the snapshot below covers it
            said = f"warm start from {warm_start}: {report.summary()}"
            warmed = True
        if self.obs_log is not None:
            self.obs_log.open(next_seq)
        if warmed and self.state_dir is not None:
            self.save_snapshot()
        if self.state_dir is not None and self.config.snapshot_every_s > 0:
            self._snapshotter = threading.Thread(target=self._snapshot_loop, name="snapshots", daemon=True)
            self._snapshotter.start()
        self.mark_ready()
        return said

    def close(self) -> None:
        """Stop answering, stop periodic snapshots and write a final one (when a state folder is set)."""
        self._set_ready(False)
        self._stop.set()
        if self._snapshotter is not None:
            self._snapshotter.join(timeout=30)
            self._snapshotter = None
        if self.state_dir is not None and self._changes:
            self.save_snapshot()
        if self.obs_log is not None:
            self.obs_log.close()

    def _replay_log(self) -> wal.ReplayReport:
        """Learn again what the observation log holds after the restored snapshot."""
        assert self.state_dir is not None
        self.obs_log = wal.ObservationLog(
            self.state_dir / wal.DIR_NAME,
            fsync=self.config.fsync,
            fsync_interval_s=self.config.fsync_interval_s,
        )
        report = wal.ReplayReport()
        for entry in self.obs_log.replay(after=self.snapshot_sequence, report=report):
            try:
                self.observe(entry.record, client=entry.client)
            except OutlierRejected:
                pass  # refused again, as it was when it arrived
            except ServiceError as exc:
                report.add_error(f"sequence {entry.seq}: {exc}")
        self.replay_report = report
        if report.skipped:
            log.warning("observation log replay: %s", report.summary())
        return report

    def _snapshot_loop(self) -> None:
        while not self._stop.wait(self.config.snapshot_every_s):
            if not self._changes:
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
            path = self.state_dir / snapshot.FILE_NAME
        own = self.state_dir is not None and Path(path) == self.state_dir / snapshot.FILE_NAME
        with self._lock:
            payload = self.state_payload()
            observations = self._predictor.n_learned
            changes, self._changes = self._changes, 0
            covered, rotated = self.snapshot_sequence, False
            if self.obs_log is not None and self.obs_log.is_open:
                covered = self.obs_log.last_seq
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
            self._changes += changes
            raise
        self.last_snapshot_time = time.time()
        if own:
            self.snapshot_sequence = covered
            if rotated and self.obs_log is not None:
                self.obs_log.discard_through(covered)
        return Path(path)

    def state_payload(self) -> bytes:
        """The learned state as snapshot payload bytes (equal bytes: equal state)."""
        with self._lock:
            state = {
                "predictor": self._predictor,
                "calibrator": self._calibrator,
                "monitor": self._monitor,
                "devices": self.live.devices(),
                "gates": self._gates,
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
        gates = state.get("gates", self._new_gates())
        if gates is not None and not isinstance(gates, OutlierGates):
            raise snapshot.SnapshotError(f"{path}: payload holds no outlier gates")
        if (gates is None) != (not self.config.outlier_gate):
            gates = self._new_gates()
        with self._lock:
            self._predictor = predictor
            self._calibrator = calibrator
            self._monitor = monitor
            self._gates = gates
            self._changes = 0
            self.snapshot_sequence = int(header.get("log_sequence", 0))
        self.live.restore_devices(dict(state.get("devices", {})))
        self.last_snapshot_time = float(header.get("created", time.time()))
        return header

    def warm_start(self, path: str | Path, *, tolerant: bool = True) -> ReadReport:
        """Learn from a ``coloc/v1`` log, prequentially, as if it had been streamed."""
        report = ReadReport()
        for record in iter_records(path, tolerant=tolerant, report=report):
            try:
                self.observe(record)
            except OutlierRejected:
                pass  # counted in n_outliers
        return report

    # ------------------------------------------------------------------ learning
    def observe(self, record: Record, batch_id: str = "", *, client: str = "") -> float:
        """Learn from one observed record: score it (prequentially), then update the model.

        Returns the latency predicted for it before learning. With an observation log, the record
        is logged first (:class:`Unavailable` when it cannot be: then it is not learned). Raises
        :class:`OutlierRejected` when the outlier gate refuses it (``client``, else the record's
        source, is who reported it).
        """
        if record.latency_ms is None:
            raise InvalidArgument("record.latency_ms", "required in an observation")
        if len(batch_id) > MAX_NAME_LENGTH:
            raise InvalidArgument("batch_id", f"longer than {MAX_NAME_LENGTH} characters")
        check_magnitudes(record, self.config.max_value)
        kind = record.device_kind or self.live.kind_of(record.device)
        if kind != record.device_kind:
            record = dataclasses.replace(record, device_kind=kind)
        self.live.touch(record.device, kind)
        try:
            with self._lock:
                if self.obs_log is not None and self.obs_log.is_open:
                    try:
                        self.obs_log.append(record, client, batch_id)
                    except wal.LogError as exc:
                        raise Unavailable(f"observation not logged, so not learned: {exc}") from None
                predicted = self._learn(record, kind, client or record.source)
        finally:
            if batch_id:
                self.live.end(record.device, batch_id, required=False)
        return predicted

    def _learn(self, record: Record, kind: str, source: str) -> float:
        """One prequential step, under the lock, of a record already logged.

        The prediction is made before the model learns the record, and the bound from the
        residuals before this one. An outlier is neither learned, nor calibrated, nor scored.
        """
        actual = record.latency_ms
        assert actual is not None
        if self._gates is None or not self._predictor.knows_solo(record):
            # Without a solo latency to stand on, the prediction is a guess: nothing to gate against.
            predicted = self._predictor.predict_learn_one(record)
        else:
            predicted = self._predictor.predict_one(record)
            reason = self._gates.check(kind, predicted, actual, source)
            if reason is not None:
                self._changes += 1  # the gate's own state moved
                self.n_outliers += 1
                raise OutlierRejected(reason)
            self._predictor.learn_one(record)
        bound = self._calibrator.upper_bound(predicted, kind, self.config.coverage_confidence)
        self._calibrator.add(kind, actual, predicted)
        self._monitor.update(
            kind,
            actual=actual,
            predicted=predicted,
            covered=actual <= bound.upper_ms,
            calibrated=bound.source is not BoundSource.FALLBACK,
        )
        self._changes += 1
        return predicted

    def report_observations(
        self, items: Iterable[tuple[RecordLike, str]], *, client: str = "", peer: str = ""
    ) -> ObservationReport:
        """Learn from a stream of ``(record, batch_id)``.

        A record may be a :class:`Record`, a decoded ``coloc/v1`` object, or a callable
        returning a :class:`Record` (or raising :class:`RecordError`).

        A bad record is rejected with the path of its field (``record.<field>``), the rest learned;
        so are records refused by the outlier gate or beyond the caller's rate. ``client`` is the
        caller's authenticated identity ("" when none), ``peer`` its address. The answer comes
        once the learned records are in the observation log (synced per the fsync policy).
        """
        self._require_ready()
        report = ObservationReport()
        limit = self.config.max_stream_records
        for index, (item, batch_id) in enumerate(items):
            if index >= limit:
                raise ResourceExhausted(
                    "records", f"a stream may carry at most {limit} records; the first {limit} were processed"
                )
            try:
                if isinstance(item, Record):
                    record = item
                elif callable(item):  # a deferred conversion, e.g. from a protobuf message
                    record = item()
                else:
                    record = parse_record(item)
                self._rate_limit(record, client or (f"peer:{peer}" if peer else ""))
                self.observe(record, batch_id, client=client)
            except RecordError as exc:
                self._reject(report, Rejection(index, f"record.{exc.field}", exc.message))
            except RateLimited as exc:
                report.rate_limited += 1
                self._reject(report, Rejection(index, exc.field, exc.message))
            except OutlierRejected as exc:
                report.outliers += 1
                self._reject(report, Rejection(index, exc.field, exc.message))
            except InvalidArgument as exc:
                self._reject(report, Rejection(index, exc.field, exc.message))
            else:
                report.accepted += 1
        report.observations_learned = self._predictor.n_learned
        if self.obs_log is not None and self.obs_log.is_open:
            report.log_sequence = self.obs_log.last_seq
            try:
                self.obs_log.sync(report.log_sequence)  # the answer is the acknowledgement
            except wal.LogError as exc:
                raise Unavailable(f"observations learned but not synced to the log: {exc}") from None
        return report

    def _rate_limit(self, record: Record, client: str) -> None:
        limiter = self.rate_limiter
        if limiter is None:
            return
        key = client if client and self.config.rate_limit_by == "client" else f"source:{record.source}"
        if not limiter.allow(key):
            with self._lock:
                self.n_rate_limited += 1
            raise RateLimited(
                f"{key} sends more than {limiter.rate:g} observations/s (burst {limiter.burst}); "
                "not learned, send it again later"
            )

    def _reject(self, report: ObservationReport, rejection: Rejection) -> None:
        report.rejected += 1
        with self._lock:
            self.n_rejected += 1
        if len(report.rejections) < self.config.max_rejections_reported:
            report.rejections.append(rejection)

    # ------------------------------------------------------------------ live view
    def batch_start(
        self,
        device: str,
        device_kind: str,
        batch_id: str,
        batch: BatchSpec,
        elapsed_ms: float | None = None,
    ) -> tuple[float, int]:
        """A batch started on ``device``; returns its predicted latency and how many run there now."""
        self._require_ready()
        if elapsed_ms is not None and not (math.isfinite(elapsed_ms) and elapsed_ms >= 0):
            raise InvalidArgument("elapsed_ms", f"must be finite and >= 0, got {elapsed_ms!r}")
        if not batch_id:
            raise InvalidArgument("batch_id", "must be a non-empty string")
        if len(batch_id) > MAX_NAME_LENGTH:
            raise InvalidArgument("batch_id", f"longer than {MAX_NAME_LENGTH} characters")
        # An unknown device is idle; a known one is predicted from its live view.
        source = CoRunnerSource.AUTO if self.live.knows(device) else CoRunnerSource.EXPLICIT
        query = Query(device, batch, device_kind=device_kind, co_runner_source=source)
        prediction = self.predict(query, prefix="")
        running = self.live.start(
            device, device_kind, batch_id, batch, prediction.latency_ms, elapsed_ms or 0.0
        )
        return prediction.latency_ms, running

    def batch_end(self, device: str, batch_id: str) -> tuple[bool, int]:
        """A batch ended on ``device``; returns whether it was running and how many still run."""
        self._require_ready()
        if not device:
            raise InvalidArgument("device", "must be a non-empty string")
        if not batch_id:
            raise InvalidArgument("batch_id", "must be a non-empty string")
        return self.live.end(device, batch_id)

    # ------------------------------------------------------------------ answering
    def predict(self, query: Query, confidence: float | None = None, *, prefix: str = "query.") -> Prediction:
        """Predicted latency and calibrated upper bound of a planned batch."""
        self._require_ready()
        confidence = self._confidence(confidence)
        planned = self._plan(query, prefix)
        predictions, _ = self._answer([planned], confidence)
        return predictions[0]

    def check_deadline(
        self, query: Query, deadline: Deadline, confidence: float | None = None
    ) -> DeadlineAnswer:
        """Whether a planned batch finishes within ``deadline`` at ``confidence``."""
        self._require_ready()
        confidence = self._confidence(confidence)
        deadline_ms = deadline.relative_ms()
        planned = self._plan(query, "query.")
        predictions, probabilities = self._answer([planned], confidence, np.array([deadline_ms]))
        prediction = predictions[0]
        slack = deadline_ms - prediction.upper_bound_ms
        return DeadlineAnswer(slack >= 0, slack, float(probabilities[0]), deadline_ms, prediction)

    def rank_placements(
        self,
        batch: BatchSpec,
        candidates: list[Candidate] | CandidateColumns,
        deadline: Deadline,
        confidence: float | None = None,
        solo_latency_ms: float | None = None,
    ) -> Ranking:
        """Answers for one batch on many candidate devices, most slack first."""
        if not isinstance(candidates, CandidateColumns):
            candidates = CandidateColumns.from_candidates(candidates)
        return self.rank_columns(batch, candidates, deadline, confidence, solo_latency_ms).to_ranking()

    def rank_columns(
        self,
        batch: BatchSpec,
        candidates: CandidateColumns,
        deadline: Deadline,
        confidence: float | None = None,
        solo_latency_ms: float | None = None,
    ) -> RankingColumns:
        """:meth:`rank_placements`, answered column-wise: features and predictions of all
        candidates at once (what the RPC layer turns into its response)."""
        self._require_ready()
        confidence = self._confidence(confidence)
        if not len(candidates):
            raise InvalidArgument("candidates", "give at least one candidate device")
        if len(candidates) > self.config.max_candidates:
            raise ResourceExhausted(
                "candidates", f"{len(candidates)} candidates, at most {self.config.max_candidates} allowed"
            )
        deadline_ms = deadline.relative_ms()
        rows, remaining = self._plan_columns(batch, candidates, solo_latency_ms)
        ranking = self._answer_columns(rows, remaining, confidence, deadline_ms)
        # The rows hold the candidates' own co-runners exactly when they were built on the same
        # columns (no live view, no per-candidate path).
        return dataclasses.replace(ranking, runners_as_given=rows.models is candidates.models)

    def _plan_columns(
        self, batch: BatchSpec, candidates: CandidateColumns, solo_latency_ms: float | None
    ) -> tuple[CoLocations, np.ndarray]:
        """Validated rows and each co-runner's remaining time (NaN: given by overlap).

        All candidates are checked at once; where that cannot vouch for every one, each goes
        through :meth:`_plan`, which raises for the first offending field as it always did.
        """
        live = candidates.uses_live_view()
        if (
            valid_columns(candidates, batch, solo_latency_ms)
            and self._valid_batch(batch)
            and all(self.live.knows(candidates.devices[i]) for i in live)
        ):
            devices = candidates.devices
            kinds = [k or self.live.kind_of(d) for k, d in zip(candidates.device_kinds, devices, strict=True)]
            overlaps = np.where(candidates.has_overlap, candidates.overlaps, 1.0)
            remaining = np.where(candidates.has_remaining, candidates.remaining, math.nan)
            rows = CoLocations(batch, devices, kinds, candidates.signals, candidates.offsets, candidates.models,
                               candidates.batch_sizes, candidates.attrs, overlaps, solo_latency_ms)
            if not live:
                return rows, remaining
            running = {i: self.live.running(devices[i]) for i in live}
            runners = [
                [(CoRunner(r.batch.model, r.batch.batch_size, r.batch.attrs), ms) for r, ms in running[i]]
                if i in running
                else [(c, float(ms)) for c, ms in zip(rows.co_runners(i), remaining[rows.offsets[i]:rows.offsets[i + 1]],
                                                      strict=True)]
                for i in range(len(rows))
            ]
        else:
            planned = [
                self._plan(Query.for_candidate(batch, candidates.candidate(i), solo_latency_ms),
                           f"candidates[{i}].", batch_prefix="")
                for i in range(len(candidates))
            ]
            first = planned[0].record
            batch, solo_latency_ms, kinds = first.batch, first.solo_latency_ms, [p.record.device_kind for p in planned]
            runners = [
                [(c, math.nan if ms is None else ms) for c, ms in zip(p.record.co_runners, p.remaining_ms, strict=True)]
                for p in planned
            ]
            devices, signals = [p.record.device for p in planned], [p.record.signals for p in planned]
            candidates = dataclasses.replace(candidates, signals=signals)
        rows = rows_of(batch, solo_latency_ms, devices, kinds, candidates.signals,
                       [[c for c, _ in row] for row in runners])
        return rows, np.array([ms for row in runners for _, ms in row], dtype=float)

    def _valid_batch(self, batch: BatchSpec) -> bool:
        try:
            parsed = parse_record(
                {"schema": SCHEMA, "device": "-", "batch": {"model": batch.model, "batch_size": batch.batch_size,
                                                             "attrs": dict(batch.attrs)}},
                require_latency=False,
            )
        except RecordError:
            return False
        return parsed.batch == batch

    def _answer_columns(
        self, rows: CoLocations, remaining: np.ndarray, confidence: float, deadline_ms: float
    ) -> RankingColumns:
        """Predictions, bounds and slack of every row, ranked; co-runners given by remaining time
        get their overlap from the predicted window, as in :meth:`_answer`."""
        n = len(rows)
        given = np.flatnonzero(~np.isnan(remaining))
        with self._lock:
            predictor = self._predictor
            solo = predictor.solo_latency(rows.record(0))
            if not given.size:
                latencies = predictor.predict_colocations(rows)
            else:
                # Every row is predicted at each step; rows without such co-runners get the same answer each time.
                row_of, left = rows.rows_of_runners()[given], remaining[given]
                window = np.full(n, solo)
                for _ in range(self.config.overlap_iterations):
                    w = window[row_of]
                    overlaps = rows.overlaps.copy()
                    with np.errstate(divide="ignore", invalid="ignore"):
                        overlaps[given] = np.where(w <= 0, 1.0, np.minimum(1.0, left / w))
                    rows = rows.with_overlaps(overlaps)
                    window = predictor.predict_colocations(rows)
                latencies = window
            kinds = rows.device_kinds
            bounds = self._calibrator.bound_factors(kinds, confidence)
            if len(bounds) == 1:
                uppers = latencies * next(iter(bounds.values())).upper_ms
            else:
                uppers = latencies * np.array([bounds[k].upper_ms for k in kinds])
            probabilities = self._calibrator.probabilities_within(latencies, np.full(n, deadline_ms), kinds, confidence)
            learned = predictor.n_learned
        slack = deadline_ms - uppers
        return RankingColumns(
            rows=rows,
            order=np.argsort(-slack, kind="stable"),
            latency_ms=latencies,
            solo_latency_ms=np.full(n, solo),
            upper_bound_ms=uppers,
            slack_ms=slack,
            probability=probabilities,
            bounds=bounds,
            confidence=confidence,
            predictor=self.config.predictor,
            observations_learned=learned,
            deadline_ms=deadline_ms,
        )

    def _confidence(self, confidence: float | None) -> float:
        if confidence is None or confidence == 0:
            return self.config.default_confidence
        try:
            return check_confidence(confidence)
        except ValueError as exc:
            raise InvalidArgument("confidence", str(exc).removeprefix("confidence ")) from None

    def _plan(self, query: Query, prefix: str, *, batch_prefix: str | None = None) -> _Planned:
        """Validate a query and resolve its co-runners (explicit or from the live view)."""
        batch_prefix = prefix if batch_prefix is None else batch_prefix
        runners: list[dict[str, Any]] = []
        remaining: list[float | None] = []
        for i, runner in enumerate(query.co_runners):
            path = f"{prefix}co_runners[{i}]"
            if runner.overlap is not None and runner.remaining_ms is not None:
                raise InvalidArgument(path, "give overlap or remaining_ms, not both")
            if runner.remaining_ms is not None and not (
                math.isfinite(runner.remaining_ms) and runner.remaining_ms >= 0
            ):
                raise InvalidArgument(
                    f"{path}.remaining_ms", f"must be finite and >= 0, got {runner.remaining_ms!r}"
                )
            runners.append(
                {
                    "model": runner.model,
                    "batch_size": runner.batch_size,
                    "attrs": dict(runner.attrs),
                    "overlap": runner.overlap,
                }
            )
            remaining.append(runner.remaining_ms)
        obj = {
            "schema": SCHEMA,
            "device": query.device,
            "device_kind": query.device_kind or None,
            "batch": {
                "model": query.batch.model,
                "batch_size": query.batch.batch_size,
                "attrs": dict(query.batch.attrs),
            },
            "solo_latency_ms": query.solo_latency_ms,
            "co_runners": runners,
            "signals": dict(query.signals),
        }
        try:
            record = parse_record(obj, require_latency=False)
        except RecordError as exc:
            where = (
                batch_prefix if exc.field.startswith("batch") or exc.field == "solo_latency_ms" else prefix
            )
            raise InvalidArgument(f"{where}{exc.field}", exc.message) from None
        source = query.co_runner_source
        if source is CoRunnerSource.LIVE_VIEW and query.co_runners:
            raise InvalidArgument(f"{prefix}co_runners", "must be empty when co_runner_source is LIVE_VIEW")
        if source is CoRunnerSource.LIVE_VIEW or (source is CoRunnerSource.AUTO and not query.co_runners):
            if not self.live.knows(query.device):
                raise NotFound(
                    f"{prefix}device",
                    f"unknown device {query.device!r}: nothing was reported on it; "
                    "give its co-runners with co_runner_source EXPLICIT",
                )
            running = self.live.running(query.device)
            record = dataclasses.replace(
                record,
                co_runners=tuple(
                    CoRunner(r.batch.model, r.batch.batch_size, r.batch.attrs) for r, _ in running
                ),
            )
            remaining = [ms for _, ms in running]
        kind = record.device_kind or self.live.kind_of(query.device)
        if kind != record.device_kind:
            record = dataclasses.replace(record, device_kind=kind)
        return _Planned(record, remaining)

    def _answer(
        self, planned: list[_Planned], confidence: float, limits_ms: np.ndarray | None = None
    ) -> tuple[list[Prediction], np.ndarray]:
        """Predictions (and probabilities of finishing within ``limits_ms``) for many planned batches."""
        with self._lock:
            predictor = self._predictor
            records = [p.record for p in planned]
            solos = np.array([predictor.solo_latency(r) for r in records])
            moving = [i for i, p in enumerate(planned) if any(ms is not None for ms in p.remaining_ms)]
            latencies = np.empty(len(records))
            moving_set = set(moving)
            fixed = [i for i in range(len(records)) if i not in moving_set]
            if fixed:
                latencies[fixed] = predictor.predict_many([records[i] for i in fixed])
            if moving:
                # Co-runners given by remaining time: their overlap depends on the predicted window.
                window = solos.copy()
                for _ in range(self.config.overlap_iterations):
                    for i in moving:
                        records[i] = _with_overlaps(planned[i], window[i])
                    predicted = predictor.predict_many([records[i] for i in moving])
                    window[moving] = predicted
                latencies[moving] = window[moving]
            kinds = [r.device_kind for r in records]
            uppers, bounds = self._calibrator.upper_bounds(latencies, kinds, confidence)
            if limits_ms is not None:
                probabilities = self._calibrator.probabilities_within(latencies, limits_ms, kinds, confidence)
            else:
                probabilities = np.full(len(records), math.nan)
            learned = predictor.n_learned
        predictions = [
            Prediction(
                latency_ms=float(latencies[i]),
                solo_latency_ms=float(solos[i]),
                slowdown=float(latencies[i] / solos[i]),
                upper_bound_ms=float(uppers[i]),
                confidence=confidence,
                bound_source=bounds[i].source,
                residuals=bounds[i].n,
                predictor=self.config.predictor,
                observations_learned=learned,
                co_runners=records[i].co_runners,
                device_kind=kinds[i],
            )
            for i in range(len(records))
        ]
        return predictions, probabilities

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

    def status(self) -> Status:
        """Observations learned, rolling error, coverage and drift alarms, per device kind."""
        with self._lock:
            monitor, calibrator = self._monitor, self._calibrator
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
            status = Status(
                ready=self._ready,
                predictor=self.config.predictor,
                observations_learned=self._predictor.n_learned,
                observations_rejected=self.n_rejected,
                rolling_mape=monitor.mape(),
                coverage=monitor.coverage(),
                coverage_confidence=self.config.coverage_confidence,
                device_kinds=kinds,
                drift_alarms=tuple(monitor.alarms),
                devices=len(self.live.devices()),
                batches_running=self.live.running_count(),
                uptime_s=time.time() - self.started,
                last_snapshot_time=self.last_snapshot_time,
                observations_outliers=self.n_outliers,
                observations_rate_limited=self.n_rate_limited,
                log=self._log_status(),
            )
        return status


def _with_overlaps(planned: _Planned, window_ms: float) -> Record:
    """The planned record with each remaining-time co-runner's overlap for a window of ``window_ms``."""
    runners = []
    for runner, remaining in zip(planned.record.co_runners, planned.remaining_ms, strict=True):
        if remaining is not None:
            overlap = 1.0 if window_ms <= 0 else min(1.0, remaining / window_ms)
            runner = dataclasses.replace(runner, overlap=overlap)
        runners.append(runner)
    return dataclasses.replace(planned.record, co_runners=tuple(runners))
