"""Check an image payload before any pixel is decoded (edge ingest and cloud share it).

A JPEG states its own size in its frame header (SOF marker); a decoder allocates the full
image from that before it reads one pixel, so a 631-byte file claiming 23170x23170 costs
1.6 GB. Reading the SOF here costs microseconds and bounds what a decode may allocate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .contracts import common_pb2

# SOF markers carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) share the range but do not.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})
# Segments (and fill bytes) walked before giving up: a real JPEG's SOF comes after a
# handful (APPn, DQT, ICC chunks); a crafted run of tiny segments must not cost O(bytes).
_MAX_STEPS = 1024


class InvalidImageError(ValueError):
    """A payload that cannot become an image; `reason` is a short metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """The largest image accepted."""

    max_width: int
    max_height: int
    max_pixels: int

    def check(self, width: int, height: int) -> None:
        """Raise InvalidImageError when width x height is outside the limits."""
        if width <= 0 or height <= 0:
            raise InvalidImageError("bad_dimensions", f"image has no pixels ({width}x{height})")
        if width > self.max_width or height > self.max_height:
            raise InvalidImageError(
                "too_large",
                f"image is {width}x{height}; limit {self.max_width}x{self.max_height}",
            )
        if width * height > self.max_pixels:
            raise InvalidImageError(
                "too_large",
                f"image has {width * height} pixels ({width}x{height}); limit {self.max_pixels}",
            )


def jpeg_size(data: Any) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header, or None when there is none before the
    scan (or within the first segments). `data`: bytes or any buffer (zmq.Frame)."""
    if not isinstance(data, bytes | bytearray):
        data = memoryview(data).cast("B")
    n = len(data)
    if n < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return None
    i = 2
    for _ in range(_MAX_STEPS):
        if i + 4 > n or data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _STANDALONE:
            i += 2
            continue
        length = (data[i + 2] << 8) | data[i + 3]
        if length < 2:
            return None
        if marker in _SOF:
            if i + 9 > n:
                return None
            height = (data[i + 5] << 8) | data[i + 6]
            width = (data[i + 7] << 8) | data[i + 8]
            return width, height
        if marker == 0xDA:  # start of scan without a frame header
            return None
        i += 2 + length
    return None


def check_image(
    data: Any,
    encoding: int,
    width: int,
    height: int,
    limits: ImageLimits,
    exact: bool = False,
) -> tuple[int, int]:
    """(width, height) the payload will decode to, without decoding it.

    JPEG: the SOF's size, checked against `limits` (and equal to `width` x `height` when
    `exact`). BGR: `width` x `height`, checked against `limits` and the payload's length.
    Raises InvalidImageError naming what is wrong.
    """
    size = memoryview(data).nbytes
    if size == 0:
        raise InvalidImageError("empty", "image payload is empty")
    if encoding == common_pb2.ENCODING_JPEG:
        found = jpeg_size(data)
        if found is None:
            raise InvalidImageError("undecodable", "payload is not a JPEG (no frame header found)")
        w, h = found
        limits.check(w, h)
        if exact and (w, h) != (width, height):
            raise InvalidImageError(
                "jpeg_dimensions",
                f"JPEG says it is {w}x{h}, the frame header says {width}x{height}",
            )
        return w, h
    if encoding == common_pb2.ENCODING_BGR:
        limits.check(width, height)
        if size != width * height * 3:
            raise InvalidImageError(
                "bad_dimensions",
                f"BGR payload has {size} bytes; {width}x{height}x3 needs {width * height * 3}",
            )
        return width, height
    if encoding == common_pb2.ENCODING_H264:
        # An access unit's size is in its SPS; the decoder checks it against the header
        # when it decodes (strata.edge.inference.h264), so only the header's claim is checked here.
        limits.check(width, height)
        return width, height
    raise InvalidImageError("bad_encoding", f"unsupported image encoding {encoding}")


__all__ = ["ImageLimits", "InvalidImageError", "check_image", "jpeg_size"]
