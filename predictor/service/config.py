"""The service's configuration: one validated, immutable dataclass.

Examples
--------
>>> ServiceConfig(max_candidates=0)
Traceback (most recent call last):
...
ValueError: max_candidates must be >= 1, got 0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from predictor.predictors.registry import DEFAULT as DEFAULT_PREDICTOR
from predictor.records.rules import MAX_MAGNITUDE, check_confidence
from predictor.service.live.topology import Topology


@dataclass(frozen=True)
class ServiceConfig:
    """Everything the service can be tuned by.

    Parameters
    ----------
    predictor
        Registry spec of the predictor, e.g. ``"rls"`` or ``"rls:forgetting=0.99"``.
    default_confidence
        Confidence of bounds and deadline checks when a request gives none.
    coverage_confidence
        Confidence at which the status tracks the coverage of the bounds.
    calibration_window
        Residuals kept per device kind by the conformal calibrator.
    min_residuals
        Residuals a device kind needs before its own window calibrates its bounds.
    fallback_sigma
        Log-normal spread of the wide bound used before any residuals exist.
    adapt
        Step of the one-sided adaptive-conformal adjustment, which widens the bounds of a
        device kind whose recent misses exceed ``1 - coverage_confidence`` (0 disables it).
    error_window
        Recent observations the rolling MAPE is computed over (per device kind).
    coverage_window
        Recent observations the status coverage is computed over (per device kind).
    max_candidates
        Most candidate devices in one ``RankPlacements`` call.
    max_stream_records
        Most records in one ``ReportObservations`` stream.
    max_rejections_reported
        Rejections listed (all are counted) in one ``ReportObservations`` answer.
    max_devices, max_running_per_device
        Bounds on the live view.
    stale_after_s
        A batch running longer than this without an end report leaves the live view.
    overrun_remaining_fraction
        A running batch already past its predicted latency is assumed to need this
        fraction of its prediction more.
    overlap_iterations
        Unused since the window of co-runners given by remaining time is solved exactly on a
        grid (:func:`predictor.service.estimates.monotone.fixed_point`, monotone in crowding); kept so
        that configurations naming it still load.
    snapshot_every_s
        Period of snapshots when a state directory is given (0 disables periodic ones).
    observation_log
        With a state directory, append every observation to a write-ahead log before learning it
        and acknowledge a stream only once its records are logged (see :mod:`predictor.service.durability.wal`).
    fsync, fsync_interval_s
        When the log is fsynced: ``always`` (before each acknowledgement; survives a machine
        crash), ``batch`` (every ``fsync_interval_s``) or ``never`` (both survive a process kill).
    outlier_gate
        Refuse to learn observations whose latency is absurdly far from the prediction
        (:class:`~predictor.service.guards.robust.OutlierGate`, one per device kind).
    outlier_k, outlier_min_ratio, outlier_warmup
        The gate's threshold in MADs, the factor within which nothing is refused (4: above the
        slowdowns co-location causes, so a predictor that misses a co-runner is still taught),
        and the observations admitted (per device kind) before it closes. Observations whose solo
        latency is neither given nor profiled are not gated: their prediction is a guess.
    rate_limit, rate_burst, rate_limit_by
        Observations per second (0: unlimited) and burst allowed per client identity
        (``"client"``; the peer address, else the record's ``source``, when there is none) or per
        ``source``. An authenticated caller (tokens or client certificates configured) is always
        limited, and seen by the outlier gate, as its identity: a record's ``source`` is then
        only a label.
    max_device_kinds
        Device kinds with their own outlier gate.
    admission_replay
        At ingest, also answer the admission-time questions about each observed batch
        (co-runners without overlaps, no signals) and calibrate each query shape on them
        (:mod:`predictor.service.admission`).
    replay_every_records
        The admission-time questions about the record at sequence position ``n`` (records that
        reached the learner, counted from the first) are answered by the model as it stood after
        record ``K * floor(n / K)``, ``K`` this value: the boundaries come from the sequence,
        never from messages or time (``docs/design.md``, One truth). The smaller, the closer the
        replayed answers are to the ones a scheduler gets, and the dearer a block's ingest.
    shape_window, shape_min_residuals
        Residuals kept per calibration cell (query shape, device kind, co-runner count), and
        the fewest a cell needs to answer on its own (:mod:`predictor.calibration.shape`).
    shape_gamma
        Step of adaptive conformal inference per cell (0 disables it).
    spread_rate
        Weight of a new residual in the running centre and spread that scale the bounds.
    monotone_bounds
        Keep the calibrated prediction and the bound non-decreasing in the number of co-runners
        (where the predictor's own prediction is).
    shape_scaling
        Scale each residual by the running centre and spread of its query shape, device kind,
        co-runner count and model (``False``: one multiplier per cell; for comparison).
    point_correction
        Answer the prediction times its query shape's calibrated centre (removes the bias of an
        information gap); the bound is unchanged by it.
    answer_memory, answer_ttl_s
        Answers remembered by batch id until their observation arrives: at most this many,
        for at most this long.
    unseen_sigma
        Log-normal spread of the fallback bound of a model whose solo latency is unknown or of
        a device kind never seen (1.0: the 0.99 bound is about 10 times the guess).
    fill_missing
        Estimate what a query leaves out (:mod:`predictor.service.estimates.filling`): missing signals from
        the device's smoothed recent signals, missing overlaps from the observed mean overlap
        per (device kind, co-runner count). Off: signals absent, overlaps 1.
    signal_alpha
        EWMA weight of the newest observation in the devices' smoothed signals, in (0, 1].
    dedup_window, dedup_max_producers, dedup_max_record_ids
        The retained window of exactly-once learning (:mod:`predictor.service.durability.dedup`): sequence
        numbers tracked behind each producer's highest, producers kept, record ids kept.
    live_log
        With a state directory, log batch starts and ends to a side log so that a restart restores
        the live view (:mod:`predictor.service.durability.livelog`).
    live_horizon_s
        A batch restored after a restart is dropped when it started longer ago than this
        (wall-clock seconds; its batch has long ended). Default: ``stale_after_s``.
    topology
        Devices' hosts and racks and the links between them (:mod:`predictor.service.live.topology`); ``None``:
        no device placed, default links (an input's transfer then counts as remote).
    transfer_alpha
        EWMA weight of the newest observed transfer in its link class's correction, in (0, 1].
    delay_quantile
        Quantile of the observed queue waits that sets the delay limit of delay scheduling, in (0, 1).
    max_clock_skew_ms
        Largest distance, ms, between a report's ``client_time`` (the client's wall clock when the
        event happened) and the service's wall clock when the report arrives; beyond it the report is
        refused (``INVALID_ARGUMENT`` naming ``client_time``): the two clocks disagree too much for the
        time to be trusted.
    publish_every_records, publish_every_s
        Answers are computed from a published copy of the model and calibrators
        (:mod:`predictor.service.published`); while it learns, the learner publishes a new
        one after this many records or this many seconds, whichever comes first (and at the
        end of every observation stream, before acknowledging it).
    max_value
        Largest magnitude of a number (latency, attribute, signal) in an observation learned
        from or a query answered; latencies must also be at least ``1 / max_value`` ms
        (:func:`predictor.records.rules.check_magnitudes`).
    """

    predictor: str = DEFAULT_PREDICTOR
    default_confidence: float = 0.99
    coverage_confidence: float = 0.99
    calibration_window: int = 2000
    min_residuals: int = 50
    fallback_sigma: float = 0.5
    adapt: float = 0.002
    error_window: int = 500
    coverage_window: int = 2000
    max_candidates: int = 8192
    max_stream_records: int = 1_000_000
    max_rejections_reported: int = 100
    max_devices: int = 10_000
    max_running_per_device: int = 256
    stale_after_s: float = 60.0
    overrun_remaining_fraction: float = 0.1
    overlap_iterations: int = 3
    snapshot_every_s: float = 60.0
    observation_log: bool = True
    fsync: str = "always"
    fsync_interval_s: float = 1.0
    outlier_gate: bool = True
    outlier_k: float = 8.0
    outlier_min_ratio: float = 4.0
    outlier_warmup: int = 50
    rate_limit: float = 0.0
    rate_burst: int = 1000
    rate_limit_by: str = "client"
    max_device_kinds: int = 256
    max_value: float = MAX_MAGNITUDE
    admission_replay: bool = True
    replay_every_records: int = 16
    shape_window: int = 1000
    shape_min_residuals: int = 30
    shape_gamma: float = 0.005
    spread_rate: float = 0.1
    monotone_bounds: bool = True
    point_correction: bool = True
    shape_scaling: bool = True
    answer_memory: int = 100_000
    answer_ttl_s: float = 600.0
    unseen_sigma: float = 1.0
    fill_missing: bool = True
    signal_alpha: float = 0.3
    dedup_window: int = 100_000
    dedup_max_producers: int = 10_000
    dedup_max_record_ids: int = 100_000
    live_log: bool = True
    live_horizon_s: float | None = None
    topology: Topology | None = None
    transfer_alpha: float = 0.2
    delay_quantile: float = 0.9
    publish_every_records: int = 256
    publish_every_s: float = 0.005
    max_clock_skew_ms: float = 2000.0

    def __post_init__(self) -> None:
        check_confidence(self.default_confidence)
        check_confidence(self.coverage_confidence)
        for name in (
            "calibration_window",
            "min_residuals",
            "error_window",
            "coverage_window",
            "max_candidates",
            "max_stream_records",
            "max_devices",
            "max_running_per_device",
            "overlap_iterations",
            "rate_burst",
            "max_device_kinds",
            "shape_window",
            "shape_min_residuals",
            "answer_memory",
            "dedup_window",
            "dedup_max_producers",
            "dedup_max_record_ids",
            "publish_every_records",
            "replay_every_records",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        if self.max_rejections_reported < 0:
            raise ValueError(f"max_rejections_reported must be >= 0, got {self.max_rejections_reported!r}")
        for name in ("fallback_sigma", "stale_after_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if not 0.0 < self.overrun_remaining_fraction <= 1.0:
            raise ValueError(
                f"overrun_remaining_fraction must lie in (0, 1], got {self.overrun_remaining_fraction!r}"
            )
        if not (math.isfinite(self.snapshot_every_s) and self.snapshot_every_s >= 0):
            raise ValueError(f"snapshot_every_s must be >= 0, got {self.snapshot_every_s!r}")
        if self.fsync not in ("always", "batch", "never"):
            raise ValueError(f"fsync must be always, batch or never, got {self.fsync!r}")
        if not (math.isfinite(self.fsync_interval_s) and self.fsync_interval_s > 0):
            raise ValueError(f"fsync_interval_s must be > 0, got {self.fsync_interval_s!r}")
        if not (math.isfinite(self.rate_limit) and self.rate_limit >= 0):
            raise ValueError(f"rate_limit must be >= 0 (0: unlimited), got {self.rate_limit!r}")
        if self.rate_limit_by not in ("client", "source"):
            raise ValueError(f"rate_limit_by must be client or source, got {self.rate_limit_by!r}")
        if not (math.isfinite(self.outlier_k) and self.outlier_k > 0):
            raise ValueError(f"outlier_k must be > 0, got {self.outlier_k!r}")
        if not (math.isfinite(self.outlier_min_ratio) and self.outlier_min_ratio > 1):
            raise ValueError(f"outlier_min_ratio must be > 1, got {self.outlier_min_ratio!r}")
        if not isinstance(self.outlier_warmup, int) or self.outlier_warmup < 0:
            raise ValueError(f"outlier_warmup must be >= 0, got {self.outlier_warmup!r}")
        if not (math.isfinite(self.max_value) and self.max_value > 1):
            raise ValueError(f"max_value must be finite and > 1, got {self.max_value!r}")
        for name in ("answer_ttl_s", "unseen_sigma", "publish_every_s", "max_clock_skew_ms"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if not 0.0 <= self.shape_gamma < 1.0:
            raise ValueError(f"shape_gamma must lie in [0, 1), got {self.shape_gamma!r}")
        if not 0.0 < self.spread_rate <= 1.0:
            raise ValueError(f"spread_rate must lie in (0, 1], got {self.spread_rate!r}")
        if not 0.0 < self.transfer_alpha <= 1.0:
            raise ValueError(f"transfer_alpha must lie in (0, 1], got {self.transfer_alpha!r}")
        if not 0.0 < self.delay_quantile < 1.0:
            raise ValueError(f"delay_quantile must lie in (0, 1), got {self.delay_quantile!r}")
        if not 0.0 < self.signal_alpha <= 1.0:
            raise ValueError(f"signal_alpha must lie in (0, 1], got {self.signal_alpha!r}")
        if self.live_horizon_s is not None and not (
            math.isfinite(self.live_horizon_s) and self.live_horizon_s > 0
        ):
            raise ValueError(f"live_horizon_s must be > 0, got {self.live_horizon_s!r}")
        if not 0.0 <= self.adapt < 1.0:
            raise ValueError(f"adapt must lie in [0, 1), got {self.adapt!r}")
