from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AckStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_STATUS_UNSPECIFIED: _ClassVar[AckStatus]
    ACK_STATUS_ACCEPTED: _ClassVar[AckStatus]
    ACK_STATUS_DUPLICATE: _ClassVar[AckStatus]
    ACK_STATUS_REJECTED: _ClassVar[AckStatus]
ACK_STATUS_UNSPECIFIED: AckStatus
ACK_STATUS_ACCEPTED: AckStatus
ACK_STATUS_DUPLICATE: AckStatus
ACK_STATUS_REJECTED: AckStatus

class FrameHeader(_message.Message):
    __slots__ = ("version", "agent_id", "camera_id", "sequence", "capture_ns", "send_ns", "width", "height", "encoding", "payload_size", "motion_score", "gate_score", "frame_index")
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
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., agent_id: _Optional[str] = ..., camera_id: _Optional[str] = ..., sequence: _Optional[int] = ..., capture_ns: _Optional[int] = ..., send_ns: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., encoding: _Optional[_Union[_common_pb2.Encoding, str]] = ..., payload_size: _Optional[int] = ..., motion_score: _Optional[float] = ..., gate_score: _Optional[float] = ..., frame_index: _Optional[int] = ...) -> None: ...

class FrameAck(_message.Message):
    __slots__ = ("version", "camera_id", "sequence", "status", "reason")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    camera_id: str
    sequence: int
    status: AckStatus
    reason: str
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., camera_id: _Optional[str] = ..., sequence: _Optional[int] = ..., status: _Optional[_Union[AckStatus, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class FrameDetections(_message.Message):
    __slots__ = ("version", "edge_id", "camera_id", "sequence", "frame_index", "width", "height", "detections", "timing", "model")
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
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., edge_id: _Optional[str] = ..., camera_id: _Optional[str] = ..., sequence: _Optional[int] = ..., frame_index: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., detections: _Optional[_Iterable[_Union[_common_pb2.Detection, _Mapping]]] = ..., timing: _Optional[_Union[_common_pb2.Timing, _Mapping]] = ..., model: _Optional[str] = ...) -> None: ...
