"""Crop payloads to model-sized BGR images, with limits checked before any pixel is decoded."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from strata.shared.contracts import common_pb2

# SOF markers carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) share the range but do not.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})


class InvalidImageError(ValueError):
    """A payload that cannot become a model input; `reason` is a short metric label."""

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


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header, or None when there is none before the scan."""
    n = len(data)
    if n < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return None
    i = 2
    while i + 4 <= n:
        if data[i] != 0xFF:
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


def decode(
    data: bytes,
    encoding: int,
    width: int,
    height: int,
    limits: ImageLimits,
    target: int,
) -> np.ndarray:
    """A BGR uint8 image (H, W, 3) from a payload; InvalidImageError names what is wrong."""
    import cv2

    if not data:
        raise InvalidImageError("empty", "image payload is empty")
    if encoding == common_pb2.ENCODING_JPEG:
        size = jpeg_size(data)
        if size is None:
            raise InvalidImageError("undecodable", "payload is not a JPEG (no frame header found)")
        w, h = size
        limits.check(w, h)
        # A big crop decodes at 1/2, 1/4 or 1/8 scale for free when the model wants less.
        flag = cv2.IMREAD_COLOR
        for factor, reduced in (
            (8, cv2.IMREAD_REDUCED_COLOR_8),
            (4, cv2.IMREAD_REDUCED_COLOR_4),
            (2, cv2.IMREAD_REDUCED_COLOR_2),
        ):
            if min(w, h) >= target * factor:
                flag = reduced
                break
        img = cv2.imdecode(np.frombuffer(data, np.uint8), flag)
        if img is None or img.size == 0:
            raise InvalidImageError("undecodable", f"JPEG of {w}x{h} could not be decoded")
        return np.asarray(img)
    if encoding == common_pb2.ENCODING_BGR:
        limits.check(width, height)
        if len(data) != width * height * 3:
            raise InvalidImageError(
                "bad_dimensions",
                f"BGR payload has {len(data)} bytes; {width}x{height}x3 needs {width * height * 3}",
            )
        return np.frombuffer(data, np.uint8).reshape(height, width, 3)
    raise InvalidImageError("bad_encoding", f"unsupported image encoding {encoding}")


def to_model_size(img: np.ndarray, size: int) -> np.ndarray:
    """Resize to size x size (uint8 BGR); shrinking uses area averaging."""
    import cv2

    h, w = img.shape[:2]
    if h == size and w == size:
        return img
    interp = cv2.INTER_AREA if h > size or w > size else cv2.INTER_LINEAR
    return np.asarray(cv2.resize(img, (size, size), interpolation=interp))
