from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TrackEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRACK_EVENT_TYPE_UNSPECIFIED: _ClassVar[TrackEventType]
    TRACK_EVENT_TYPE_NEW: _ClassVar[TrackEventType]
    TRACK_EVENT_TYPE_UPDATE: _ClassVar[TrackEventType]
    TRACK_EVENT_TYPE_END: _ClassVar[TrackEventType]
    TRACK_EVENT_TYPE_LINE_CROSSED: _ClassVar[TrackEventType]
    TRACK_EVENT_TYPE_ZONE_ENTERED: _ClassVar[TrackEventType]
    TRACK_EVENT_TYPE_ZONE_LEFT: _ClassVar[TrackEventType]
    TRACK_EVENT_TYPE_DWELL_EXCEEDED: _ClassVar[TrackEventType]
    TRACK_EVENT_TYPE_STATIONARY: _ClassVar[TrackEventType]
    TRACK_EVENT_TYPE_ACTIVE: _ClassVar[TrackEventType]

class CrossingDirection(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CROSSING_DIRECTION_UNSPECIFIED: _ClassVar[CrossingDirection]
    CROSSING_DIRECTION_IN: _ClassVar[CrossingDirection]
    CROSSING_DIRECTION_OUT: _ClassVar[CrossingDirection]

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_CONFIRM: _ClassVar[Verdict]
    VERDICT_REJECT: _ClassVar[Verdict]
    VERDICT_ABSTAIN: _ClassVar[Verdict]

class TrackEventStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRACK_EVENT_STATUS_UNSPECIFIED: _ClassVar[TrackEventStatus]
    TRACK_EVENT_STATUS_STORED: _ClassVar[TrackEventStatus]
    TRACK_EVENT_STATUS_DUPLICATE: _ClassVar[TrackEventStatus]
    TRACK_EVENT_STATUS_INVALID: _ClassVar[TrackEventStatus]
    TRACK_EVENT_STATUS_RETRY: _ClassVar[TrackEventStatus]

class SnapshotKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SNAPSHOT_KIND_UNSPECIFIED: _ClassVar[SnapshotKind]
    SNAPSHOT_KIND_BEST_CROP: _ClassVar[SnapshotKind]
    SNAPSHOT_KIND_FULL_FRAME: _ClassVar[SnapshotKind]

class SnapshotReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SNAPSHOT_REASON_UNSPECIFIED: _ClassVar[SnapshotReason]
    SNAPSHOT_REASON_FIRST: _ClassVar[SnapshotReason]
    SNAPSHOT_REASON_BETTER: _ClassVar[SnapshotReason]
    SNAPSHOT_REASON_FINAL: _ClassVar[SnapshotReason]

class SnapshotStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SNAPSHOT_STATUS_UNSPECIFIED: _ClassVar[SnapshotStatus]
    SNAPSHOT_STATUS_STORED: _ClassVar[SnapshotStatus]
    SNAPSHOT_STATUS_DUPLICATE: _ClassVar[SnapshotStatus]
    SNAPSHOT_STATUS_INVALID: _ClassVar[SnapshotStatus]
    SNAPSHOT_STATUS_RETRY: _ClassVar[SnapshotStatus]
TRACK_EVENT_TYPE_UNSPECIFIED: TrackEventType
TRACK_EVENT_TYPE_NEW: TrackEventType
TRACK_EVENT_TYPE_UPDATE: TrackEventType
TRACK_EVENT_TYPE_END: TrackEventType
TRACK_EVENT_TYPE_LINE_CROSSED: TrackEventType
TRACK_EVENT_TYPE_ZONE_ENTERED: TrackEventType
TRACK_EVENT_TYPE_ZONE_LEFT: TrackEventType
TRACK_EVENT_TYPE_DWELL_EXCEEDED: TrackEventType
TRACK_EVENT_TYPE_STATIONARY: TrackEventType
TRACK_EVENT_TYPE_ACTIVE: TrackEventType
CROSSING_DIRECTION_UNSPECIFIED: CrossingDirection
CROSSING_DIRECTION_IN: CrossingDirection
CROSSING_DIRECTION_OUT: CrossingDirection
VERDICT_UNSPECIFIED: Verdict
VERDICT_CONFIRM: Verdict
VERDICT_REJECT: Verdict
VERDICT_ABSTAIN: Verdict
TRACK_EVENT_STATUS_UNSPECIFIED: TrackEventStatus
TRACK_EVENT_STATUS_STORED: TrackEventStatus
TRACK_EVENT_STATUS_DUPLICATE: TrackEventStatus
TRACK_EVENT_STATUS_INVALID: TrackEventStatus
TRACK_EVENT_STATUS_RETRY: TrackEventStatus
SNAPSHOT_KIND_UNSPECIFIED: SnapshotKind
SNAPSHOT_KIND_BEST_CROP: SnapshotKind
SNAPSHOT_KIND_FULL_FRAME: SnapshotKind
SNAPSHOT_REASON_UNSPECIFIED: SnapshotReason
SNAPSHOT_REASON_FIRST: SnapshotReason
SNAPSHOT_REASON_BETTER: SnapshotReason
SNAPSHOT_REASON_FINAL: SnapshotReason
SNAPSHOT_STATUS_UNSPECIFIED: SnapshotStatus
SNAPSHOT_STATUS_STORED: SnapshotStatus
SNAPSHOT_STATUS_DUPLICATE: SnapshotStatus
SNAPSHOT_STATUS_INVALID: SnapshotStatus
SNAPSHOT_STATUS_RETRY: SnapshotStatus

class CloudVerdict(_message.Message):
    __slots__ = ("label", "score", "model_version", "event_id", "verdict", "detector_label", "model", "support")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    DETECTOR_LABEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_FIELD_NUMBER: _ClassVar[int]
    label: str
    score: float
    model_version: int
    event_id: int
    verdict: Verdict
    detector_label: str
    model: str
    support: float
    def __init__(self, label: _Optional[str] = ..., score: _Optional[float] = ..., model_version: _Optional[int] = ..., event_id: _Optional[int] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., detector_label: _Optional[str] = ..., model: _Optional[str] = ..., support: _Optional[float] = ...) -> None: ...

class PathPoint(_message.Message):
    __slots__ = ("x", "y", "capture_ns", "observed")
    X_FIELD_NUMBER: _ClassVar[int]
    Y_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_NS_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    x: float
    y: float
    capture_ns: int
    observed: bool
    def __init__(self, x: _Optional[float] = ..., y: _Optional[float] = ..., capture_ns: _Optional[int] = ..., observed: _Optional[bool] = ...) -> None: ...

class TrackPath(_message.Message):
    __slots__ = ("points", "first_seen_ns", "last_seen_ns", "count", "observed_count")
    POINTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_NS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_COUNT_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[PathPoint]
    first_seen_ns: int
    last_seen_ns: int
    count: int
    observed_count: int
    def __init__(self, points: _Optional[_Iterable[_Union[PathPoint, _Mapping]]] = ..., first_seen_ns: _Optional[int] = ..., last_seen_ns: _Optional[int] = ..., count: _Optional[int] = ..., observed_count: _Optional[int] = ...) -> None: ...

class TrackState(_message.Message):
    __slots__ = ("label", "class_id", "score", "top_score", "box", "current_zones", "entered_zones", "stationary", "start_time", "end_time", "frame_time", "observed")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    CLASS_ID_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    TOP_SCORE_FIELD_NUMBER: _ClassVar[int]
    BOX_FIELD_NUMBER: _ClassVar[int]
    CURRENT_ZONES_FIELD_NUMBER: _ClassVar[int]
    ENTERED_ZONES_FIELD_NUMBER: _ClassVar[int]
    STATIONARY_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    FRAME_TIME_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    label: str
    class_id: int
    score: float
    top_score: float
    box: _common_pb2.Box
    current_zones: _containers.RepeatedScalarFieldContainer[str]
    entered_zones: _containers.RepeatedScalarFieldContainer[str]
    stationary: bool
    start_time: float
    end_time: float
    frame_time: float
    observed: bool
    def __init__(self, label: _Optional[str] = ..., class_id: _Optional[int] = ..., score: _Optional[float] = ..., top_score: _Optional[float] = ..., box: _Optional[_Union[_common_pb2.Box, _Mapping]] = ..., current_zones: _Optional[_Iterable[str]] = ..., entered_zones: _Optional[_Iterable[str]] = ..., stationary: _Optional[bool] = ..., start_time: _Optional[float] = ..., end_time: _Optional[float] = ..., frame_time: _Optional[float] = ..., observed: _Optional[bool] = ...) -> None: ...

class TrackEvent(_message.Message):
    __slots__ = ("version", "idempotency_key", "type", "camera_id", "track_id", "track_uid", "sequence", "track_sequence", "capture_ns", "edge_id", "frame_width", "frame_height", "before", "after", "rule", "zone", "line", "direction", "dwell_s", "observed", "positions", "observed_positions", "path", "verdict", "crop_snapshot_id", "frame_snapshot_id", "appearance", "identity_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_UID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TRACK_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_NS_FIELD_NUMBER: _ClassVar[int]
    EDGE_ID_FIELD_NUMBER: _ClassVar[int]
    FRAME_WIDTH_FIELD_NUMBER: _ClassVar[int]
    FRAME_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    DWELL_S_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    CROP_SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    FRAME_SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    APPEARANCE_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    idempotency_key: str
    type: TrackEventType
    camera_id: str
    track_id: int
    track_uid: str
    sequence: int
    track_sequence: int
    capture_ns: int
    edge_id: str
    frame_width: int
    frame_height: int
    before: TrackState
    after: TrackState
    rule: str
    zone: str
    line: str
    direction: CrossingDirection
    dwell_s: float
    observed: bool
    positions: int
    observed_positions: int
    path: TrackPath
    verdict: CloudVerdict
    crop_snapshot_id: str
    frame_snapshot_id: str
    appearance: Appearance
    identity_id: int
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., type: _Optional[_Union[TrackEventType, str]] = ..., camera_id: _Optional[str] = ..., track_id: _Optional[int] = ..., track_uid: _Optional[str] = ..., sequence: _Optional[int] = ..., track_sequence: _Optional[int] = ..., capture_ns: _Optional[int] = ..., edge_id: _Optional[str] = ..., frame_width: _Optional[int] = ..., frame_height: _Optional[int] = ..., before: _Optional[_Union[TrackState, _Mapping]] = ..., after: _Optional[_Union[TrackState, _Mapping]] = ..., rule: _Optional[str] = ..., zone: _Optional[str] = ..., line: _Optional[str] = ..., direction: _Optional[_Union[CrossingDirection, str]] = ..., dwell_s: _Optional[float] = ..., observed: _Optional[bool] = ..., positions: _Optional[int] = ..., observed_positions: _Optional[int] = ..., path: _Optional[_Union[TrackPath, _Mapping]] = ..., verdict: _Optional[_Union[CloudVerdict, _Mapping]] = ..., crop_snapshot_id: _Optional[str] = ..., frame_snapshot_id: _Optional[str] = ..., appearance: _Optional[_Union[Appearance, _Mapping]] = ..., identity_id: _Optional[int] = ...) -> None: ...

class Appearance(_message.Message):
    __slots__ = ("model", "dim", "float16", "samples")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    FLOAT16_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    model: str
    dim: int
    float16: bytes
    samples: int
    def __init__(self, model: _Optional[str] = ..., dim: _Optional[int] = ..., float16: _Optional[bytes] = ..., samples: _Optional[int] = ...) -> None: ...

class StoredTrackEvent(_message.Message):
    __slots__ = ("event", "stored_id", "stored_ns")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    STORED_ID_FIELD_NUMBER: _ClassVar[int]
    STORED_NS_FIELD_NUMBER: _ClassVar[int]
    event: TrackEvent
    stored_id: int
    stored_ns: int
    def __init__(self, event: _Optional[_Union[TrackEvent, _Mapping]] = ..., stored_id: _Optional[int] = ..., stored_ns: _Optional[int] = ...) -> None: ...

class TrackEventAck(_message.Message):
    __slots__ = ("idempotency_key", "status", "reason", "retry_after_ms", "stored_id")
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    STORED_ID_FIELD_NUMBER: _ClassVar[int]
    idempotency_key: str
    status: TrackEventStatus
    reason: str
    retry_after_ms: int
    stored_id: int
    def __init__(self, idempotency_key: _Optional[str] = ..., status: _Optional[_Union[TrackEventStatus, str]] = ..., reason: _Optional[str] = ..., retry_after_ms: _Optional[int] = ..., stored_id: _Optional[int] = ...) -> None: ...

class QueryTrackEventsResponse(_message.Message):
    __slots__ = ("version", "events", "next_page_token")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    events: _containers.RepeatedCompositeFieldContainer[StoredTrackEvent]
    next_page_token: str
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., events: _Optional[_Iterable[_Union[StoredTrackEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ("version", "snapshot_id", "camera_id", "track_uid", "track_id", "kind", "revision", "edge_id", "jpeg", "width", "height", "box", "frame_box", "frame_width", "frame_height", "label", "score", "quality", "touches_edge", "capture_ns", "reason")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_UID_FIELD_NUMBER: _ClassVar[int]
    TRACK_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    EDGE_ID_FIELD_NUMBER: _ClassVar[int]
    JPEG_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    BOX_FIELD_NUMBER: _ClassVar[int]
    FRAME_BOX_FIELD_NUMBER: _ClassVar[int]
    FRAME_WIDTH_FIELD_NUMBER: _ClassVar[int]
    FRAME_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    TOUCHES_EDGE_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_NS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    snapshot_id: str
    camera_id: str
    track_uid: str
    track_id: int
    kind: SnapshotKind
    revision: int
    edge_id: str
    jpeg: bytes
    width: int
    height: int
    box: _common_pb2.Box
    frame_box: _common_pb2.Box
    frame_width: int
    frame_height: int
    label: str
    score: float
    quality: float
    touches_edge: bool
    capture_ns: int
    reason: SnapshotReason
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., snapshot_id: _Optional[str] = ..., camera_id: _Optional[str] = ..., track_uid: _Optional[str] = ..., track_id: _Optional[int] = ..., kind: _Optional[_Union[SnapshotKind, str]] = ..., revision: _Optional[int] = ..., edge_id: _Optional[str] = ..., jpeg: _Optional[bytes] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., box: _Optional[_Union[_common_pb2.Box, _Mapping]] = ..., frame_box: _Optional[_Union[_common_pb2.Box, _Mapping]] = ..., frame_width: _Optional[int] = ..., frame_height: _Optional[int] = ..., label: _Optional[str] = ..., score: _Optional[float] = ..., quality: _Optional[float] = ..., touches_edge: _Optional[bool] = ..., capture_ns: _Optional[int] = ..., reason: _Optional[_Union[SnapshotReason, str]] = ...) -> None: ...

class SnapshotAck(_message.Message):
    __slots__ = ("snapshot_id", "status", "reason", "retry_after_ms")
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    status: SnapshotStatus
    reason: str
    retry_after_ms: int
    def __init__(self, snapshot_id: _Optional[str] = ..., status: _Optional[_Union[SnapshotStatus, str]] = ..., reason: _Optional[str] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...
