"""The prediction service: a plain object that the gRPC layer (or anything else) calls.

It owns the online predictor, the conformal calibrator, the error monitor and
the live view. Observations are scored prequentially (predict, bound, then
learn) under one lock, so answers never see a half-updated model. Every
answer for a planned batch goes through :meth:`Service._answer`, which handles
a whole list of planned batches at once, so ranking hundreds of candidate
devices costs one pass.

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
from predictor.logio import ReadReport, iter_records
from predictor.predictors import LatencyPredictor, create
from predictor.records import SCHEMA, BatchSpec, CoRunner, Record, RecordError, parse_record
from predictor.service import snapshot
from predictor.service.config import ServiceConfig
from predictor.service.errors import InvalidArgument, NotFound, ResourceExhausted, Unavailable
from predictor.service.liveview import LiveView
from predictor.service.monitor import ErrorMonitor
from predictor.service.types import (
    Candidate,
    CoRunnerSource,
    Deadline,
    DeadlineAnswer,
    KindStatus,
    ObservationReport,
    PlacementAnswer,
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
        if state_dir is not None:
            self.state_dir = Path(state_dir)
            self.state_dir.mkdir(parents=True, exist_ok=True)
            path = self.state_dir / snapshot.FILE_NAME
            if path.exists():
                header = self.restore_snapshot(path)
                said = f"restored {header['observations']} observations from {path}"
                warm_start = None
        if warm_start is not None:
            report = self.warm_start(warm_start)
            said = f"warm start from {warm_start}: {report.summary()}"
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
        with self._lock:
            state = {
                "predictor": self._predictor,
                "calibrator": self._calibrator,
                "monitor": self._monitor,
                "devices": self.live.devices(),
            }
            payload = snapshot.dump_state(state)
            observations = self._predictor.n_learned
            changes, self._changes = self._changes, 0
        try:
            snapshot.write_payload(path, payload, predictor=self.config.predictor, observations=observations)
        except BaseException:
            self._changes += changes
            raise
        self.last_snapshot_time = time.time()
        return Path(path)

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
        with self._lock:
            self._predictor = predictor
            self._calibrator = calibrator
            self._monitor = monitor
            self._changes = 0
        self.live.restore_devices(dict(state.get("devices", {})))
        self.last_snapshot_time = float(header.get("created", time.time()))
        return header

    def warm_start(self, path: str | Path, *, tolerant: bool = True) -> ReadReport:
        """Learn from a ``coloc/v1`` log, prequentially, as if it had been streamed."""
        report = ReadReport()
        for record in iter_records(path, tolerant=tolerant, report=report):
            self.observe(record)
        return report

    # ------------------------------------------------------------------ learning
    def observe(self, record: Record, batch_id: str = "") -> float:
        """Learn from one observed record: score it (prequentially), then update the model.

        Returns the latency predicted for it before learning.
        """
        if record.latency_ms is None:
            raise InvalidArgument("record.latency_ms", "required in an observation")
        kind = record.device_kind or self.live.kind_of(record.device)
        if kind != record.device_kind:
            record = dataclasses.replace(record, device_kind=kind)
        actual = record.latency_ms
        self.live.touch(record.device, kind)
        with self._lock:
            # One prequential step: the prediction is made before the model learns the record,
            # and the bound from the residuals before this one.
            predicted = self._predictor.predict_learn_one(record)
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
        if batch_id:
            self.live.end(record.device, batch_id, required=False)
        return predicted

    def report_observations(self, items: Iterable[tuple[RecordLike, str]]) -> ObservationReport:
        """Learn from a stream of ``(record, batch_id)``.

        A record may be a :class:`Record`, a decoded ``coloc/v1`` object, or a callable
        returning a :class:`Record` (or raising :class:`RecordError`).

        A bad record is rejected with the path of its field (``record.<field>``), the rest learned.
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
                self.observe(record, batch_id)
            except RecordError as exc:
                self._reject(report, Rejection(index, f"record.{exc.field}", exc.message))
            except InvalidArgument as exc:
                self._reject(report, Rejection(index, exc.field, exc.message))
            else:
                report.accepted += 1
        report.observations_learned = self._predictor.n_learned
        return report

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
        candidates: list[Candidate],
        deadline: Deadline,
        confidence: float | None = None,
        solo_latency_ms: float | None = None,
    ) -> Ranking:
        """Answers for one batch on many candidate devices, most slack first."""
        self._require_ready()
        confidence = self._confidence(confidence)
        if not candidates:
            raise InvalidArgument("candidates", "give at least one candidate device")
        if len(candidates) > self.config.max_candidates:
            raise ResourceExhausted(
                "candidates", f"{len(candidates)} candidates, at most {self.config.max_candidates} allowed"
            )
        deadline_ms = deadline.relative_ms()
        planned = []
        for i, candidate in enumerate(candidates):
            query = Query.for_candidate(batch, candidate, solo_latency_ms)
            planned.append(self._plan(query, f"candidates[{i}].", batch_prefix=""))
        limits = np.full(len(planned), deadline_ms)
        predictions, probabilities = self._answer(planned, confidence, limits)
        slack = deadline_ms - np.array([p.upper_bound_ms for p in predictions])
        order = sorted(range(len(planned)), key=lambda i: (-slack[i], i))
        placements = tuple(
            PlacementAnswer(
                device=candidates[i].device,
                rank=rank,
                feasible=bool(slack[i] >= 0),
                slack_ms=float(slack[i]),
                probability=float(probabilities[i]),
                prediction=predictions[i],
                candidate_index=i,
            )
            for rank, i in enumerate(order, start=1)
        )
        return Ranking(placements, deadline_ms)

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
