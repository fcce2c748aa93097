"""cloud/classify/images.py: JPEG header parsing and the checks before decoding."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from cloud_helpers import jpeg
from strata.cloud.classify.images import ImageLimits, InvalidImageError, decode, jpeg_size
from strata.shared.contracts import common_pb2

LIMITS = ImageLimits(4096, 4096, 16_000_000)


def test_jpeg_size_reads_the_frame_header() -> None:
    assert jpeg_size(jpeg((1, 2, 3), w=123, h=45)) == (123, 45)
    assert jpeg_size(b"\xff\xd8\xff\xda\x00\x02") is None  # scan before any frame header
    assert jpeg_size(b"GIF89a") is None
    assert jpeg_size(b"") is None


def test_decode_rejects_before_decoding() -> None:
    with pytest.raises(InvalidImageError) as err:
        decode(
            jpeg((0, 0, 0), w=64, h=64),
            common_pb2.ENCODING_JPEG,
            0,
            0,
            ImageLimits(32, 4096, 10**9),
            224,
        )
    assert err.value.reason == "too_large"
    with pytest.raises(InvalidImageError) as err:
        decode(b"x" * 10, common_pb2.ENCODING_UNSPECIFIED, 0, 0, LIMITS, 224)
    assert err.value.reason == "bad_encoding"
    with pytest.raises(InvalidImageError) as err:
        decode(b"", common_pb2.ENCODING_JPEG, 0, 0, LIMITS, 224)
    assert err.value.reason == "empty"


def test_large_jpeg_decodes_reduced() -> None:
    img = np.full((1000, 1600, 3), 200, np.uint8)
    ok, buf = cv2.imencode(".jpg", img)
    assert ok
    out = decode(bytes(buf), common_pb2.ENCODING_JPEG, 0, 0, LIMITS, 224)
    assert out.shape == (250, 400, 3)  # 1/4 scale still covers 224
