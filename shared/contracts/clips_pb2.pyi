from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ClipOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLIP_OUTCOME_UNSPECIFIED: _ClassVar[ClipOutcome]
    CLIP_OUTCOME_COMPLETE: _ClassVar[ClipOutcome]
    CLIP_OUTCOME_DISCONNECTED: _ClassVar[ClipOutcome]
    CLIP_OUTCOME_NO_KEYFRAME: _ClassVar[ClipOutcome]
    CLIP_OUTCOME_CODEC: _ClassVar[ClipOutcome]
    CLIP_OUTCOME_ERROR: _ClassVar[ClipOutcome]
    CLIP_OUTCOME_CUT_SHORT: _ClassVar[ClipOutcome]
    CLIP_OUTCOME_ENDED: _ClassVar[ClipOutcome]

class ClipChunkStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLIP_CHUNK_STATUS_UNSPECIFIED: _ClassVar[ClipChunkStatus]
    CLIP_CHUNK_STATUS_STORED: _ClassVar[ClipChunkStatus]
    CLIP_CHUNK_STATUS_INVALID: _ClassVar[ClipChunkStatus]
    CLIP_CHUNK_STATUS_RETRY: _ClassVar[ClipChunkStatus]
CLIP_OUTCOME_UNSPECIFIED: ClipOutcome
CLIP_OUTCOME_COMPLETE: ClipOutcome
CLIP_OUTCOME_DISCONNECTED: ClipOutcome
CLIP_OUTCOME_NO_KEYFRAME: ClipOutcome
CLIP_OUTCOME_CODEC: ClipOutcome
CLIP_OUTCOME_ERROR: ClipOutcome
CLIP_OUTCOME_CUT_SHORT: ClipOutcome
CLIP_OUTCOME_ENDED: ClipOutcome
CLIP_CHUNK_STATUS_UNSPECIFIED: ClipChunkStatus
CLIP_CHUNK_STATUS_STORED: ClipChunkStatus
CLIP_CHUNK_STATUS_INVALID: ClipChunkStatus
CLIP_CHUNK_STATUS_RETRY: ClipChunkStatus

class ClipInfo(_message.Message):
    __slots__ = ("clip_id", "camera_id", "agent_id", "track_uids", "start_ns", "end_ns", "codec", "width", "height", "outcome", "reason", "notes", "size_bytes", "final")
    CLIP_ID_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_UIDS_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    clip_id: str
    camera_id: str
    agent_id: str
    track_uids: _containers.RepeatedScalarFieldContainer[str]
    start_ns: int
    end_ns: int
    codec: str
    width: int
    height: int
    outcome: ClipOutcome
    reason: str
    notes: _containers.RepeatedScalarFieldContainer[str]
    size_bytes: int
    final: bool
    def __init__(self, clip_id: _Optional[str] = ..., camera_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., track_uids: _Optional[_Iterable[str]] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., codec: _Optional[str] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., outcome: _Optional[_Union[ClipOutcome, str]] = ..., reason: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ..., size_bytes: _Optional[int] = ..., final: _Optional[bool] = ...) -> None: ...

class ClipChunk(_message.Message):
    __slots__ = ("version", "info", "offset", "data", "last", "cut_back")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    CUT_BACK_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    info: ClipInfo
    offset: int
    data: bytes
    last: bool
    cut_back: bool
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., info: _Optional[_Union[ClipInfo, _Mapping]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., last: _Optional[bool] = ..., cut_back: _Optional[bool] = ...) -> None: ...

class ClipChunkAck(_message.Message):
    __slots__ = ("clip_id", "status", "committed_bytes", "reason", "retry_after_ms", "complete")
    CLIP_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    clip_id: str
    status: ClipChunkStatus
    committed_bytes: int
    reason: str
    retry_after_ms: int
    complete: bool
    def __init__(self, clip_id: _Optional[str] = ..., status: _Optional[_Union[ClipChunkStatus, str]] = ..., committed_bytes: _Optional[int] = ..., reason: _Optional[str] = ..., retry_after_ms: _Optional[int] = ..., complete: _Optional[bool] = ...) -> None: ...

class GetClipRequest(_message.Message):
    __slots__ = ("version", "clip_id", "event_key", "camera_id", "track_uid")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CLIP_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_KEY_FIELD_NUMBER: _ClassVar[int]
    CAMERA_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_UID_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.ProtocolVersion
    clip_id: str
    event_key: str
    camera_id: str
    track_uid: str
    def __init__(self, version: _Optional[_Union[_common_pb2.ProtocolVersion, _Mapping]] = ..., clip_id: _Optional[str] = ..., event_key: _Optional[str] = ..., camera_id: _Optional[str] = ..., track_uid: _Optional[str] = ...) -> None: ...
