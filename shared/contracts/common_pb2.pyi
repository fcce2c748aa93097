from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Encoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENCODING_UNSPECIFIED: _ClassVar[Encoding]
    ENCODING_JPEG: _ClassVar[Encoding]
    ENCODING_BGR: _ClassVar[Encoding]
    ENCODING_H264: _ClassVar[Encoding]
ENCODING_UNSPECIFIED: Encoding
ENCODING_JPEG: Encoding
ENCODING_BGR: Encoding
ENCODING_H264: Encoding

class ProtocolVersion(_message.Message):
    __slots__ = ("major", "minor")
    MAJOR_FIELD_NUMBER: _ClassVar[int]
    MINOR_FIELD_NUMBER: _ClassVar[int]
    major: int
    minor: int
    def __init__(self, major: _Optional[int] = ..., minor: _Optional[int] = ...) -> None: ...

class Box(_message.Message):
    __slots__ = ("x1", "y1", "x2", "y2")
    X1_FIELD_NUMBER: _ClassVar[int]
    Y1_FIELD_NUMBER: _ClassVar[int]
    X2_FIELD_NUMBER: _ClassVar[int]
    Y2_FIELD_NUMBER: _ClassVar[int]
    x1: float
    y1: float
    x2: float
    y2: float
    def __init__(self, x1: _Optional[float] = ..., y1: _Optional[float] = ..., x2: _Optional[float] = ..., y2: _Optional[float] = ...) -> None: ...

class Timing(_message.Message):
    __slots__ = ("capture_ns", "device_send_ns", "edge_receive_ns", "inference_start_ns", "inference_end_ns", "edge_send_ns", "cloud_receive_ns", "cloud_done_ns")
    CAPTURE_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_SEND_NS_FIELD_NUMBER: _ClassVar[int]
    EDGE_RECEIVE_NS_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_START_NS_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_END_NS_FIELD_NUMBER: _ClassVar[int]
    EDGE_SEND_NS_FIELD_NUMBER: _ClassVar[int]
    CLOUD_RECEIVE_NS_FIELD_NUMBER: _ClassVar[int]
    CLOUD_DONE_NS_FIELD_NUMBER: _ClassVar[int]
    capture_ns: int
    device_send_ns: int
    edge_receive_ns: int
    inference_start_ns: int
    inference_end_ns: int
    edge_send_ns: int
    cloud_receive_ns: int
    cloud_done_ns: int
    def __init__(self, capture_ns: _Optional[int] = ..., device_send_ns: _Optional[int] = ..., edge_receive_ns: _Optional[int] = ..., inference_start_ns: _Optional[int] = ..., inference_end_ns: _Optional[int] = ..., edge_send_ns: _Optional[int] = ..., cloud_receive_ns: _Optional[int] = ..., cloud_done_ns: _Optional[int] = ...) -> None: ...

class Detection(_message.Message):
    __slots__ = ("box", "score", "class_id", "label", "track_id")
    BOX_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    CLASS_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    TRACK_ID_FIELD_NUMBER: _ClassVar[int]
    box: Box
    score: float
    class_id: int
    label: str
    track_id: int
    def __init__(self, box: _Optional[_Union[Box, _Mapping]] = ..., score: _Optional[float] = ..., class_id: _Optional[int] = ..., label: _Optional[str] = ..., track_id: _Optional[int] = ...) -> None: ...
