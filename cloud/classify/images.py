"""Crop payloads to model-sized BGR images, with limits checked before any pixel is decoded
(the check itself is strata.shared.imagecheck, shared with the edge's ingest)."""

from __future__ import annotations

import numpy as np
from strata.shared.contracts import common_pb2
from strata.shared.imagecheck import ImageLimits, InvalidImageError, check_image, jpeg_size


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

    w, h = check_image(data, encoding, width, height, limits)
    if encoding == common_pb2.ENCODING_JPEG:
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
    return np.frombuffer(data, np.uint8).reshape(h, w, 3)


def to_model_size(img: np.ndarray, size: int) -> np.ndarray:
    """Resize to size x size (uint8 BGR); shrinking uses area averaging."""
    import cv2

    h, w = img.shape[:2]
    if h == size and w == size:
        return img
    interp = cv2.INTER_AREA if h > size or w > size else cv2.INTER_LINEAR
    return np.asarray(cv2.resize(img, (size, size), interpolation=interp))


__all__ = ["ImageLimits", "InvalidImageError", "decode", "jpeg_size", "to_model_size"]
