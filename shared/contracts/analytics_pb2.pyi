from . import common_pb2 as _common_pb2
from . import clips_pb2 as _clips_pb2
from . import events_pb2 as _events_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CropStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CROP_STATUS_UNSPECIFIED: _ClassVar[CropStatus]
    CROP_STATUS_STORED: _ClassVar[CropStatus]
    CROP_STATUS_INVALID: _ClassVar[CropStatus]
    CROP_STATUS_RETRY: _ClassVar[CropStatus]
CROP_STATUS_UNSPECIFIED: CropStatus
CROP_STATUS_STORED: CropStatus
CROP_STATUS_INVALID: CropStatus
CROP_STATUS_RETRY: CropStatus

class Crop(_message.Message):
    __slots__ = ("crop_id", "edge_id", "camera_id", "sequence", "detection", "encoding", "width", "height", "image", "timing", "track_id")
    CROP_ID_FIELD_NUMBER: _ClassVar[int]
    EDGE_ID_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    DETECTION_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    TRACK_ID_FIELD_NUMBER: _ClassVar[int]
    crop_id: str
    edge_id: str
    camera_id: str
    sequence: int
    detection: _common_pb2.Detection
    encoding: _common_pb2.Encoding
    width: int
    height: int
    image: bytes
    timing: _common_pb2.Timing
    track_id: int
    def __init__(self, crop_id: _Optional[str] = ..., edge_id: _Optional[str] = ..., camera_id: _Optional[str] = ..., sequence: _Optional[int] = ..., detection: _Optional[_Union[_common_pb2.Detection, _Mapping]] = ..., encoding: _Optional[_Union[_common_pb2.Encoding, str]] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., image: _Optional[bytes] = ..., timing: _Optional[_Union[_common_pb2.Timing, _Mapping]] = ..., track_id: _Optional[int] = ...) -> None: ...

class CropBatch(_message.Message):
    __slots__ = ("version", "crops", "events", "snapshots")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CROPS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    crops: _containers.RepeatedCompositeFieldContainer[Crop]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.TrackEvent]
    snapshots: _containers.RepeatedCompositeFieldContainer[_events_pb2.Snapshot]
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., crops: _Optional[_Iterable[_Union[Crop, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[_events_pb2.TrackEvent, _Mapping]]] = ..., snapshots: _Optional[_Iterable[_Union[_events_pb2.Snapshot, _Mapping]]] = ...) -> None: ...

class LabelScore(_message.Message):
    __slots__ = ("class_id", "label", "score")
    CLASS_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    class_id: int
    label: str
    score: float
    def __init__(self, class_id: _Optional[int] = ..., label: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class CropAck(_message.Message):
    __slots__ = ("crop_id", "status", "reason", "event_id", "labels", "retry_after_ms", "model_version", "verdict")
    CROP_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    crop_id: str
    status: CropStatus
    reason: str
    event_id: int
    labels: _containers.RepeatedCompositeFieldContainer[LabelScore]
    retry_after_ms: int
    model_version: int
    verdict: _events_pb2.Verdict
    def __init__(self, crop_id: _Optional[str] = ..., status: _Optional[_Union[CropStatus, str]] = ..., reason: _Optional[str] = ..., event_id: _Optional[int] = ..., labels: _Optional[_Iterable[_Union[LabelScore, _Mapping]]] = ..., retry_after_ms: _Optional[int] = ..., model_version: _Optional[int] = ..., verdict: _Optional[_Union[_events_pb2.Verdict, str]] = ...) -> None: ...

class UplinkResponse(_message.Message):
    __slots__ = ("version", "acks", "event_acks", "snapshot_acks")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    EVENT_ACKS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ACKS_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    acks: _containers.RepeatedCompositeFieldContainer[CropAck]
    event_acks: _containers.RepeatedCompositeFieldContainer[_events_pb2.TrackEventAck]
    snapshot_acks: _containers.RepeatedCompositeFieldContainer[_events_pb2.SnapshotAck]
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., acks: _Optional[_Iterable[_Union[CropAck, _Mapping]]] = ..., event_acks: _Optional[_Iterable[_Union[_events_pb2.TrackEventAck, _Mapping]]] = ..., snapshot_acks: _Optional[_Iterable[_Union[_events_pb2.SnapshotAck, _Mapping]]] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("version", "encoding", "width", "height", "image", "top_k")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    encoding: _common_pb2.Encoding
    width: int
    height: int
    image: bytes
    top_k: int
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., encoding: _Optional[_Union[_common_pb2.Encoding, str]] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., image: _Optional[bytes] = ..., top_k: _Optional[int] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("version", "labels", "model", "model_version")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    labels: _containers.RepeatedCompositeFieldContainer[LabelScore]
    model: str
    model_version: int
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., labels: _Optional[_Iterable[_Union[LabelScore, _Mapping]]] = ..., model: _Optional[str] = ..., model_version: _Optional[int] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("event_id", "edge_id", "camera_id", "sequence", "capture_ns", "edge_detection", "label", "score", "stored_ns", "crop_id", "track_id", "track_events", "model_version", "verdict", "model", "support")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    EDGE_ID_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_NS_FIELD_NUMBER: _ClassVar[int]
    EDGE_DETECTION_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    STORED_NS_FIELD_NUMBER: _ClassVar[int]
    CROP_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_EVENTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    edge_id: str
    camera_id: str
    sequence: int
    capture_ns: int
    edge_detection: _common_pb2.Detection
    label: str
    score: float
    stored_ns: int
    crop_id: str
    track_id: int
    track_events: int
    model_version: int
    verdict: _events_pb2.Verdict
    model: str
    support: float
    def __init__(self, event_id: _Optional[int] = ..., edge_id: _Optional[str] = ..., camera_id: _Optional[str] = ..., sequence: _Optional[int] = ..., capture_ns: _Optional[int] = ..., edge_detection: _Optional[_Union[_common_pb2.Detection, _Mapping]] = ..., label: _Optional[str] = ..., score: _Optional[float] = ..., stored_ns: _Optional[int] = ..., crop_id: _Optional[str] = ..., track_id: _Optional[int] = ..., track_events: _Optional[int] = ..., model_version: _Optional[int] = ..., verdict: _Optional[_Union[_events_pb2.Verdict, str]] = ..., model: _Optional[str] = ..., support: _Optional[float] = ...) -> None: ...

class QueryEventsRequest(_message.Message):
    __slots__ = ("version", "camera_id", "start_ns", "end_ns", "label", "page_size", "page_token", "group_by_track", "types", "zone", "line", "rule", "track_id", "track_uid", "identity_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_TRACK_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    TRACK_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_UID_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    camera_id: str
    start_ns: int
    end_ns: int
    label: str
    page_size: int
    page_token: str
    group_by_track: bool
    types: _containers.RepeatedScalarFieldContainer[_events_pb2.TrackEventType]
    zone: str
    line: str
    rule: str
    track_id: int
    track_uid: str
    identity_id: int
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., camera_id: _Optional[str] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., label: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., group_by_track: _Optional[bool] = ..., types: _Optional[_Iterable[_Union[_events_pb2.TrackEventType, str]]] = ..., zone: _Optional[str] = ..., line: _Optional[str] = ..., rule: _Optional[str] = ..., track_id: _Optional[int] = ..., track_uid: _Optional[str] = ..., identity_id: _Optional[int] = ...) -> None: ...

class QueryEventsResponse(_message.Message):
    __slots__ = ("version", "events", "next_page_token")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    events: _containers.RepeatedCompositeFieldContainer[Event]
    next_page_token: str
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ("version", "camera_id", "label", "types", "zone", "line", "rule", "track_id", "track_uid")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    TRACK_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_UID_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    camera_id: str
    label: str
    types: _containers.RepeatedScalarFieldContainer[_events_pb2.TrackEventType]
    zone: str
    line: str
    rule: str
    track_id: int
    track_uid: str
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., camera_id: _Optional[str] = ..., label: _Optional[str] = ..., types: _Optional[_Iterable[_Union[_events_pb2.TrackEventType, str]]] = ..., zone: _Optional[str] = ..., line: _Optional[str] = ..., rule: _Optional[str] = ..., track_id: _Optional[int] = ..., track_uid: _Optional[str] = ...) -> None: ...

class GetSnapshotRequest(_message.Message):
    __slots__ = ("version", "event_key", "snapshot_id", "camera_id", "track_uid", "kind")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EVENT_KEY_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_UID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    event_key: str
    snapshot_id: str
    camera_id: str
    track_uid: str
    kind: _events_pb2.SnapshotKind
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., event_key: _Optional[str] = ..., snapshot_id: _Optional[str] = ..., camera_id: _Optional[str] = ..., track_uid: _Optional[str] = ..., kind: _Optional[_Union[_events_pb2.SnapshotKind, str]] = ...) -> None: ...

class GetSnapshotResponse(_message.Message):
    __slots__ = ("version", "snapshot", "stored_ns")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    STORED_NS_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    snapshot: _events_pb2.Snapshot
    stored_ns: int
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., snapshot: _Optional[_Union[_events_pb2.Snapshot, _Mapping]] = ..., stored_ns: _Optional[int] = ...) -> None: ...

class SearchSimilarRequest(_message.Message):
    __slots__ = ("version", "camera_id", "track_uid", "limit", "min_similarity", "other_cameras")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_UID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    MIN_SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    OTHER_CAMERAS_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    camera_id: str
    track_uid: str
    limit: int
    min_similarity: float
    other_cameras: bool
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., camera_id: _Optional[str] = ..., track_uid: _Optional[str] = ..., limit: _Optional[int] = ..., min_similarity: _Optional[float] = ..., other_cameras: _Optional[bool] = ...) -> None: ...

class SimilarTrack(_message.Message):
    __slots__ = ("camera_id", "track_uid", "similarity", "first_seen_ns", "last_seen_ns", "identity_id", "label")
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_UID_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_NS_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    camera_id: str
    track_uid: str
    similarity: float
    first_seen_ns: int
    last_seen_ns: int
    identity_id: int
    label: str
    def __init__(self, camera_id: _Optional[str] = ..., track_uid: _Optional[str] = ..., similarity: _Optional[float] = ..., first_seen_ns: _Optional[int] = ..., last_seen_ns: _Optional[int] = ..., identity_id: _Optional[int] = ..., label: _Optional[str] = ...) -> None: ...

class SearchSimilarResponse(_message.Message):
    __slots__ = ("version", "tracks", "searched")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TRACKS_FIELD_NUMBER: _ClassVar[int]
    SEARCHED_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    tracks: _containers.RepeatedCompositeFieldContainer[SimilarTrack]
    searched: int
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., tracks: _Optional[_Iterable[_Union[SimilarTrack, _Mapping]]] = ..., searched: _Optional[int] = ...) -> None: ...
