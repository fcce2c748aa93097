from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FrameKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FRAME_KIND_UNSPECIFIED: _ClassVar[FrameKind]
    FRAME_KIND_FRAME: _ClassVar[FrameKind]
    FRAME_KIND_SKIPPED: _ClassVar[FrameKind]
    FRAME_KIND_HEARTBEAT: _ClassVar[FrameKind]

class AckStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_STATUS_UNSPECIFIED: _ClassVar[AckStatus]
    ACK_STATUS_QUEUED: _ClassVar[AckStatus]
    ACK_STATUS_DUPLICATE: _ClassVar[AckStatus]
    ACK_STATUS_REJECTED: _ClassVar[AckStatus]
    ACK_STATUS_PROCESSED: _ClassVar[AckStatus]
    ACK_STATUS_BUSY: _ClassVar[AckStatus]
    ACK_STATUS_SHED: _ClassVar[AckStatus]
    ACK_STATUS_HEARTBEAT: _ClassVar[AckStatus]
FRAME_KIND_UNSPECIFIED: FrameKind
FRAME_KIND_FRAME: FrameKind
FRAME_KIND_SKIPPED: FrameKind
FRAME_KIND_HEARTBEAT: FrameKind
ACK_STATUS_UNSPECIFIED: AckStatus
ACK_STATUS_QUEUED: AckStatus
ACK_STATUS_DUPLICATE: AckStatus
ACK_STATUS_REJECTED: AckStatus
ACK_STATUS_PROCESSED: AckStatus
ACK_STATUS_BUSY: AckStatus
ACK_STATUS_SHED: AckStatus
ACK_STATUS_HEARTBEAT: AckStatus

class FrameHeader(_message.Message):
    __slots__ = ("version", "agent_id", "camera_id", "sequence", "capture_ns", "send_ns", "width", "height", "encoding", "payload_size", "motion_score", "gate_score", "frame_index", "session_id", "kind", "skip_reason", "keyframe", "resent", "model", "calibration", "source_width", "source_height", "priority", "stream_index", "previous_edge", "scene_change", "unchanged", "earlier_skipped", "codec_probe_quality")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_NS_FIELD_NUMBER: _ClassVar[int]
    SEND_NS_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SIZE_FIELD_NUMBER: _ClassVar[int]
    MOTION_SCORE_FIELD_NUMBER: _ClassVar[int]
    GATE_SCORE_FIELD_NUMBER: _ClassVar[int]
    FRAME_INDEX_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SKIP_REASON_FIELD_NUMBER: _ClassVar[int]
    KEYFRAME_FIELD_NUMBER: _ClassVar[int]
    RESENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_WIDTH_FIELD_NUMBER: _ClassVar[int]
    SOURCE_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    STREAM_INDEX_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_EDGE_FIELD_NUMBER: _ClassVar[int]
    SCENE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    EARLIER_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    CODEC_PROBE_QUALITY_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    agent_id: str
    camera_id: str
    sequence: int
    capture_ns: int
    send_ns: int
    width: int
    height: int
    encoding: _common_pb2.Encoding
    payload_size: int
    motion_score: float
    gate_score: float
    frame_index: int
    session_id: int
    kind: FrameKind
    skip_reason: str
    keyframe: bool
    resent: bool
    model: str
    calibration: bool
    source_width: int
    source_height: int
    priority: int
    stream_index: int
    previous_edge: str
    scene_change: bool
    unchanged: bool
    earlier_skipped: _containers.RepeatedCompositeFieldContainer[SkippedFrame]
    codec_probe_quality: int
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., agent_id: _Optional[str] = ..., camera_id: _Optional[str] = ..., sequence: _Optional[int] = ..., capture_ns: _Optional[int] = ..., send_ns: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., encoding: _Optional[_Union[_common_pb2.Encoding, str]] = ..., payload_size: _Optional[int] = ..., motion_score: _Optional[float] = ..., gate_score: _Optional[float] = ..., frame_index: _Optional[int] = ..., session_id: _Optional[int] = ..., kind: _Optional[_Union[FrameKind, str]] = ..., skip_reason: _Optional[str] = ..., keyframe: _Optional[bool] = ..., resent: _Optional[bool] = ..., model: _Optional[str] = ..., calibration: _Optional[bool] = ..., source_width: _Optional[int] = ..., source_height: _Optional[int] = ..., priority: _Optional[int] = ..., stream_index: _Optional[int] = ..., previous_edge: _Optional[str] = ..., scene_change: _Optional[bool] = ..., unchanged: _Optional[bool] = ..., earlier_skipped: _Optional[_Iterable[_Union[SkippedFrame, _Mapping]]] = ..., codec_probe_quality: _Optional[int] = ...) -> None: ...

class SkippedFrame(_message.Message):
    __slots__ = ("frame_index", "capture_ns", "motion_score", "skip_reason")
    FRAME_INDEX_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_NS_FIELD_NUMBER: _ClassVar[int]
    MOTION_SCORE_FIELD_NUMBER: _ClassVar[int]
    SKIP_REASON_FIELD_NUMBER: _ClassVar[int]
    frame_index: int
    capture_ns: int
    motion_score: float
    skip_reason: str
    def __init__(self, frame_index: _Optional[int] = ..., capture_ns: _Optional[int] = ..., motion_score: _Optional[float] = ..., skip_reason: _Optional[str] = ...) -> None: ...

class EdgeInfo(_message.Message):
    __slots__ = ("edge_id", "edge_session", "capacity_fps", "weight", "models", "model_input_width", "model_input_height", "accepting")
    EDGE_ID_FIELD_NUMBER: _ClassVar[int]
    EDGE_SESSION_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FPS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    MODEL_INPUT_WIDTH_FIELD_NUMBER: _ClassVar[int]
    MODEL_INPUT_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    ACCEPTING_FIELD_NUMBER: _ClassVar[int]
    edge_id: str
    edge_session: int
    capacity_fps: float
    weight: float
    models: _containers.RepeatedScalarFieldContainer[str]
    model_input_width: int
    model_input_height: int
    accepting: bool
    def __init__(self, edge_id: _Optional[str] = ..., edge_session: _Optional[int] = ..., capacity_fps: _Optional[float] = ..., weight: _Optional[float] = ..., models: _Optional[_Iterable[str]] = ..., model_input_width: _Optional[int] = ..., model_input_height: _Optional[int] = ..., accepting: _Optional[bool] = ...) -> None: ...

class CascadeFeedback(_message.Message):
    __slots__ = ("burst_frames", "motion_threshold", "max_interval_s", "estimated_accuracy", "tracked_objects", "max_gap_frames", "send_next", "f1_by_gap", "counting_by_gap", "estimated_counting", "moving_objects", "codec_boxes")
    BURST_FRAMES_FIELD_NUMBER: _ClassVar[int]
    MOTION_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    MAX_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    TRACKED_OBJECTS_FIELD_NUMBER: _ClassVar[int]
    MAX_GAP_FRAMES_FIELD_NUMBER: _ClassVar[int]
    SEND_NEXT_FIELD_NUMBER: _ClassVar[int]
    F1_BY_GAP_FIELD_NUMBER: _ClassVar[int]
    COUNTING_BY_GAP_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_COUNTING_FIELD_NUMBER: _ClassVar[int]
    MOVING_OBJECTS_FIELD_NUMBER: _ClassVar[int]
    CODEC_BOXES_FIELD_NUMBER: _ClassVar[int]
    burst_frames: int
    motion_threshold: float
    max_interval_s: float
    estimated_accuracy: float
    tracked_objects: int
    max_gap_frames: int
    send_next: bool
    f1_by_gap: _containers.RepeatedScalarFieldContainer[float]
    counting_by_gap: _containers.RepeatedScalarFieldContainer[float]
    estimated_counting: float
    moving_objects: int
    codec_boxes: int
    def __init__(self, burst_frames: _Optional[int] = ..., motion_threshold: _Optional[float] = ..., max_interval_s: _Optional[float] = ..., estimated_accuracy: _Optional[float] = ..., tracked_objects: _Optional[int] = ..., max_gap_frames: _Optional[int] = ..., send_next: _Optional[bool] = ..., f1_by_gap: _Optional[_Iterable[float]] = ..., counting_by_gap: _Optional[_Iterable[float]] = ..., estimated_counting: _Optional[float] = ..., moving_objects: _Optional[int] = ..., codec_boxes: _Optional[int] = ...) -> None: ...

class FrameAck(_message.Message):
    __slots__ = ("version", "camera_id", "sequence", "status", "reason", "session_id", "retry_after_ms", "credits", "pressure", "degrade_level", "edge", "keyframe_request", "feedback", "clips", "clips_set", "moving_objects")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_FIELD_NUMBER: _ClassVar[int]
    DEGRADE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    EDGE_FIELD_NUMBER: _ClassVar[int]
    KEYFRAME_REQUEST_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    CLIPS_FIELD_NUMBER: _ClassVar[int]
    CLIPS_SET_FIELD_NUMBER: _ClassVar[int]
    MOVING_OBJECTS_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    camera_id: str
    sequence: int
    status: AckStatus
    reason: str
    session_id: int
    retry_after_ms: int
    credits: int
    pressure: float
    degrade_level: int
    edge: EdgeInfo
    keyframe_request: bool
    feedback: CascadeFeedback
    clips: _containers.RepeatedCompositeFieldContainer[ClipDemand]
    clips_set: bool
    moving_objects: int
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., camera_id: _Optional[str] = ..., sequence: _Optional[int] = ..., status: _Optional[_Union[AckStatus, str]] = ..., reason: _Optional[str] = ..., session_id: _Optional[int] = ..., retry_after_ms: _Optional[int] = ..., credits: _Optional[int] = ..., pressure: _Optional[float] = ..., degrade_level: _Optional[int] = ..., edge: _Optional[_Union[EdgeInfo, _Mapping]] = ..., keyframe_request: _Optional[bool] = ..., feedback: _Optional[_Union[CascadeFeedback, _Mapping]] = ..., clips: _Optional[_Iterable[_Union[ClipDemand, _Mapping]]] = ..., clips_set: _Optional[bool] = ..., moving_objects: _Optional[int] = ...) -> None: ...

class ClipDemand(_message.Message):
    __slots__ = ("track_uid", "start_ns", "end_ns")
    TRACK_UID_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    track_uid: str
    start_ns: int
    end_ns: int
    def __init__(self, track_uid: _Optional[str] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ...) -> None: ...

class FrameDetections(_message.Message):
    __slots__ = ("version", "edge_id", "camera_id", "sequence", "frame_index", "width", "height", "detections", "timing", "model", "session_id", "predicted", "redelivery", "note", "model_version")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EDGE_ID_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    FRAME_INDEX_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    DETECTIONS_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_FIELD_NUMBER: _ClassVar[int]
    REDELIVERY_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    edge_id: str
    camera_id: str
    sequence: int
    frame_index: int
    width: int
    height: int
    detections: _containers.RepeatedCompositeFieldContainer[_common_pb2.Detection]
    timing: _common_pb2.Timing
    model: str
    session_id: int
    predicted: bool
    redelivery: bool
    note: str
    model_version: int
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., edge_id: _Optional[str] = ..., camera_id: _Optional[str] = ..., sequence: _Optional[int] = ..., frame_index: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., detections: _Optional[_Iterable[_Union[_common_pb2.Detection, _Mapping]]] = ..., timing: _Optional[_Union[_common_pb2.Timing, _Mapping]] = ..., model: _Optional[str] = ..., session_id: _Optional[int] = ..., predicted: _Optional[bool] = ..., redelivery: _Optional[bool] = ..., note: _Optional[str] = ..., model_version: _Optional[int] = ...) -> None: ...
