import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CoRunnerSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CO_RUNNER_SOURCE_UNSPECIFIED: _ClassVar[CoRunnerSource]
    CO_RUNNER_SOURCE_EXPLICIT: _ClassVar[CoRunnerSource]
    CO_RUNNER_SOURCE_LIVE_VIEW: _ClassVar[CoRunnerSource]

class BoundSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BOUND_SOURCE_UNSPECIFIED: _ClassVar[BoundSource]
    BOUND_SOURCE_DEVICE_KIND: _ClassVar[BoundSource]
    BOUND_SOURCE_POOLED: _ClassVar[BoundSource]
    BOUND_SOURCE_FALLBACK: _ClassVar[BoundSource]
CO_RUNNER_SOURCE_UNSPECIFIED: CoRunnerSource
CO_RUNNER_SOURCE_EXPLICIT: CoRunnerSource
CO_RUNNER_SOURCE_LIVE_VIEW: CoRunnerSource
BOUND_SOURCE_UNSPECIFIED: BoundSource
BOUND_SOURCE_DEVICE_KIND: BoundSource
BOUND_SOURCE_POOLED: BoundSource
BOUND_SOURCE_FALLBACK: BoundSource

class Batch(_message.Message):
    __slots__ = ("model", "batch_size", "attrs")
    class AttrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    ATTRS_FIELD_NUMBER: _ClassVar[int]
    model: str
    batch_size: int
    attrs: _containers.ScalarMap[str, float]
    def __init__(self, model: _Optional[str] = ..., batch_size: _Optional[int] = ..., attrs: _Optional[_Mapping[str, float]] = ...) -> None: ...

class CoRunner(_message.Message):
    __slots__ = ("model", "batch_size", "attrs", "overlap", "remaining_ms")
    class AttrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    ATTRS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    model: str
    batch_size: int
    attrs: _containers.ScalarMap[str, float]
    overlap: float
    remaining_ms: float
    def __init__(self, model: _Optional[str] = ..., batch_size: _Optional[int] = ..., attrs: _Optional[_Mapping[str, float]] = ..., overlap: _Optional[float] = ..., remaining_ms: _Optional[float] = ...) -> None: ...

class BatchQuery(_message.Message):
    __slots__ = ("device", "device_kind", "batch", "co_runners", "co_runner_source", "signals", "solo_latency_ms")
    class SignalsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    CO_RUNNERS_FIELD_NUMBER: _ClassVar[int]
    CO_RUNNER_SOURCE_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    SOLO_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    device: str
    device_kind: str
    batch: Batch
    co_runners: _containers.RepeatedCompositeFieldContainer[CoRunner]
    co_runner_source: CoRunnerSource
    signals: _containers.ScalarMap[str, float]
    solo_latency_ms: float
    def __init__(self, device: _Optional[str] = ..., device_kind: _Optional[str] = ..., batch: _Optional[_Union[Batch, _Mapping]] = ..., co_runners: _Optional[_Iterable[_Union[CoRunner, _Mapping]]] = ..., co_runner_source: _Optional[_Union[CoRunnerSource, str]] = ..., signals: _Optional[_Mapping[str, float]] = ..., solo_latency_ms: _Optional[float] = ...) -> None: ...

class Prediction(_message.Message):
    __slots__ = ("latency_ms", "solo_latency_ms", "slowdown", "upper_bound_ms", "confidence", "bound_source", "residuals", "predictor", "observations_learned", "co_runners", "device_kind")
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    SOLO_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    SLOWDOWN_FIELD_NUMBER: _ClassVar[int]
    UPPER_BOUND_MS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    BOUND_SOURCE_FIELD_NUMBER: _ClassVar[int]
    RESIDUALS_FIELD_NUMBER: _ClassVar[int]
    PREDICTOR_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_LEARNED_FIELD_NUMBER: _ClassVar[int]
    CO_RUNNERS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    latency_ms: float
    solo_latency_ms: float
    slowdown: float
    upper_bound_ms: float
    confidence: float
    bound_source: BoundSource
    residuals: int
    predictor: str
    observations_learned: int
    co_runners: _containers.RepeatedCompositeFieldContainer[CoRunner]
    device_kind: str
    def __init__(self, latency_ms: _Optional[float] = ..., solo_latency_ms: _Optional[float] = ..., slowdown: _Optional[float] = ..., upper_bound_ms: _Optional[float] = ..., confidence: _Optional[float] = ..., bound_source: _Optional[_Union[BoundSource, str]] = ..., residuals: _Optional[int] = ..., predictor: _Optional[str] = ..., observations_learned: _Optional[int] = ..., co_runners: _Optional[_Iterable[_Union[CoRunner, _Mapping]]] = ..., device_kind: _Optional[str] = ...) -> None: ...

class PredictLatencyRequest(_message.Message):
    __slots__ = ("query", "confidence")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    query: BatchQuery
    confidence: float
    def __init__(self, query: _Optional[_Union[BatchQuery, _Mapping]] = ..., confidence: _Optional[float] = ...) -> None: ...

class PredictLatencyResponse(_message.Message):
    __slots__ = ("prediction",)
    PREDICTION_FIELD_NUMBER: _ClassVar[int]
    prediction: Prediction
    def __init__(self, prediction: _Optional[_Union[Prediction, _Mapping]] = ...) -> None: ...

class CheckDeadlineRequest(_message.Message):
    __slots__ = ("query", "deadline_ms", "deadline_time", "confidence")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_TIME_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    query: BatchQuery
    deadline_ms: float
    deadline_time: _timestamp_pb2.Timestamp
    confidence: float
    def __init__(self, query: _Optional[_Union[BatchQuery, _Mapping]] = ..., deadline_ms: _Optional[float] = ..., deadline_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., confidence: _Optional[float] = ...) -> None: ...

class CheckDeadlineResponse(_message.Message):
    __slots__ = ("feasible", "slack_ms", "probability", "deadline_ms", "prediction")
    FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    SLACK_MS_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    PREDICTION_FIELD_NUMBER: _ClassVar[int]
    feasible: bool
    slack_ms: float
    probability: float
    deadline_ms: float
    prediction: Prediction
    def __init__(self, feasible: _Optional[bool] = ..., slack_ms: _Optional[float] = ..., probability: _Optional[float] = ..., deadline_ms: _Optional[float] = ..., prediction: _Optional[_Union[Prediction, _Mapping]] = ...) -> None: ...

class PlacementCandidate(_message.Message):
    __slots__ = ("device", "device_kind", "co_runners", "co_runner_source", "signals")
    class SignalsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    CO_RUNNERS_FIELD_NUMBER: _ClassVar[int]
    CO_RUNNER_SOURCE_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    device: str
    device_kind: str
    co_runners: _containers.RepeatedCompositeFieldContainer[CoRunner]
    co_runner_source: CoRunnerSource
    signals: _containers.ScalarMap[str, float]
    def __init__(self, device: _Optional[str] = ..., device_kind: _Optional[str] = ..., co_runners: _Optional[_Iterable[_Union[CoRunner, _Mapping]]] = ..., co_runner_source: _Optional[_Union[CoRunnerSource, str]] = ..., signals: _Optional[_Mapping[str, float]] = ...) -> None: ...

class RankPlacementsRequest(_message.Message):
    __slots__ = ("batch", "candidates", "deadline_ms", "deadline_time", "confidence", "solo_latency_ms")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_TIME_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    SOLO_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    batch: Batch
    candidates: _containers.RepeatedCompositeFieldContainer[PlacementCandidate]
    deadline_ms: float
    deadline_time: _timestamp_pb2.Timestamp
    confidence: float
    solo_latency_ms: float
    def __init__(self, batch: _Optional[_Union[Batch, _Mapping]] = ..., candidates: _Optional[_Iterable[_Union[PlacementCandidate, _Mapping]]] = ..., deadline_ms: _Optional[float] = ..., deadline_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., confidence: _Optional[float] = ..., solo_latency_ms: _Optional[float] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ("device", "rank", "feasible", "slack_ms", "probability", "prediction", "candidate_index")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    SLACK_MS_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    PREDICTION_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_INDEX_FIELD_NUMBER: _ClassVar[int]
    device: str
    rank: int
    feasible: bool
    slack_ms: float
    probability: float
    prediction: Prediction
    candidate_index: int
    def __init__(self, device: _Optional[str] = ..., rank: _Optional[int] = ..., feasible: _Optional[bool] = ..., slack_ms: _Optional[float] = ..., probability: _Optional[float] = ..., prediction: _Optional[_Union[Prediction, _Mapping]] = ..., candidate_index: _Optional[int] = ...) -> None: ...

class RankPlacementsResponse(_message.Message):
    __slots__ = ("placements", "deadline_ms")
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    placements: _containers.RepeatedCompositeFieldContainer[Placement]
    deadline_ms: float
    def __init__(self, placements: _Optional[_Iterable[_Union[Placement, _Mapping]]] = ..., deadline_ms: _Optional[float] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("schema", "device", "device_kind", "batch", "start_s", "latency_ms", "solo_latency_ms", "co_runners", "signals", "source")
    class SignalsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    START_S_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    SOLO_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    CO_RUNNERS_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    schema: str
    device: str
    device_kind: str
    batch: Batch
    start_s: float
    latency_ms: float
    solo_latency_ms: float
    co_runners: _containers.RepeatedCompositeFieldContainer[CoRunner]
    signals: _containers.ScalarMap[str, float]
    source: str
    def __init__(self, schema: _Optional[str] = ..., device: _Optional[str] = ..., device_kind: _Optional[str] = ..., batch: _Optional[_Union[Batch, _Mapping]] = ..., start_s: _Optional[float] = ..., latency_ms: _Optional[float] = ..., solo_latency_ms: _Optional[float] = ..., co_runners: _Optional[_Iterable[_Union[CoRunner, _Mapping]]] = ..., signals: _Optional[_Mapping[str, float]] = ..., source: _Optional[str] = ...) -> None: ...

class ReportObservationsRequest(_message.Message):
    __slots__ = ("record", "batch_id")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    record: Record
    batch_id: str
    def __init__(self, record: _Optional[_Union[Record, _Mapping]] = ..., batch_id: _Optional[str] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("index", "field", "reason")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    index: int
    field: str
    reason: str
    def __init__(self, index: _Optional[int] = ..., field: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReportObservationsResponse(_message.Message):
    __slots__ = ("accepted", "rejected", "rejections", "observations_learned")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_LEARNED_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    rejected: int
    rejections: _containers.RepeatedCompositeFieldContainer[Rejection]
    observations_learned: int
    def __init__(self, accepted: _Optional[int] = ..., rejected: _Optional[int] = ..., rejections: _Optional[_Iterable[_Union[Rejection, _Mapping]]] = ..., observations_learned: _Optional[int] = ...) -> None: ...

class ReportBatchStartRequest(_message.Message):
    __slots__ = ("device", "device_kind", "batch_id", "batch", "elapsed_ms")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    device: str
    device_kind: str
    batch_id: str
    batch: Batch
    elapsed_ms: float
    def __init__(self, device: _Optional[str] = ..., device_kind: _Optional[str] = ..., batch_id: _Optional[str] = ..., batch: _Optional[_Union[Batch, _Mapping]] = ..., elapsed_ms: _Optional[float] = ...) -> None: ...

class ReportBatchStartResponse(_message.Message):
    __slots__ = ("predicted_latency_ms", "running")
    PREDICTED_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    predicted_latency_ms: float
    running: int
    def __init__(self, predicted_latency_ms: _Optional[float] = ..., running: _Optional[int] = ...) -> None: ...

class ReportBatchEndRequest(_message.Message):
    __slots__ = ("device", "batch_id")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    device: str
    batch_id: str
    def __init__(self, device: _Optional[str] = ..., batch_id: _Optional[str] = ...) -> None: ...

class ReportBatchEndResponse(_message.Message):
    __slots__ = ("found", "running")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    found: bool
    running: int
    def __init__(self, found: _Optional[bool] = ..., running: _Optional[int] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeviceKindStatus(_message.Message):
    __slots__ = ("device_kind", "observations", "rolling_mape", "coverage", "residuals", "drift_alarms")
    DEVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    ROLLING_MAPE_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    RESIDUALS_FIELD_NUMBER: _ClassVar[int]
    DRIFT_ALARMS_FIELD_NUMBER: _ClassVar[int]
    device_kind: str
    observations: int
    rolling_mape: float
    coverage: float
    residuals: int
    drift_alarms: int
    def __init__(self, device_kind: _Optional[str] = ..., observations: _Optional[int] = ..., rolling_mape: _Optional[float] = ..., coverage: _Optional[float] = ..., residuals: _Optional[int] = ..., drift_alarms: _Optional[int] = ...) -> None: ...

class DriftAlarm(_message.Message):
    __slots__ = ("device_kind", "at_observation", "time", "rolling_mape")
    DEVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    AT_OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    ROLLING_MAPE_FIELD_NUMBER: _ClassVar[int]
    device_kind: str
    at_observation: int
    time: _timestamp_pb2.Timestamp
    rolling_mape: float
    def __init__(self, device_kind: _Optional[str] = ..., at_observation: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., rolling_mape: _Optional[float] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("ready", "predictor", "observations_learned", "observations_rejected", "rolling_mape", "coverage", "coverage_confidence", "device_kinds", "drift_alarms", "devices", "batches_running", "uptime_s", "last_snapshot_time")
    READY_FIELD_NUMBER: _ClassVar[int]
    PREDICTOR_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_LEARNED_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_REJECTED_FIELD_NUMBER: _ClassVar[int]
    ROLLING_MAPE_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_KINDS_FIELD_NUMBER: _ClassVar[int]
    DRIFT_ALARMS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    BATCHES_RUNNING_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    LAST_SNAPSHOT_TIME_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    predictor: str
    observations_learned: int
    observations_rejected: int
    rolling_mape: float
    coverage: float
    coverage_confidence: float
    device_kinds: _containers.RepeatedCompositeFieldContainer[DeviceKindStatus]
    drift_alarms: _containers.RepeatedCompositeFieldContainer[DriftAlarm]
    devices: int
    batches_running: int
    uptime_s: float
    last_snapshot_time: _timestamp_pb2.Timestamp
    def __init__(self, ready: _Optional[bool] = ..., predictor: _Optional[str] = ..., observations_learned: _Optional[int] = ..., observations_rejected: _Optional[int] = ..., rolling_mape: _Optional[float] = ..., coverage: _Optional[float] = ..., coverage_confidence: _Optional[float] = ..., device_kinds: _Optional[_Iterable[_Union[DeviceKindStatus, _Mapping]]] = ..., drift_alarms: _Optional[_Iterable[_Union[DriftAlarm, _Mapping]]] = ..., devices: _Optional[int] = ..., batches_running: _Optional[int] = ..., uptime_s: _Optional[float] = ..., last_snapshot_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
