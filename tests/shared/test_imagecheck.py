"""The check-before-decode shared by the edge's ingest and the cloud."""

from __future__ import annotations

import time

import cv2
import numpy as np
import pytest
from hostile_testkit import BOMB_SIDE, decode_bomb
from strata.shared.contracts import common_pb2
from strata.shared.imagecheck import ImageLimits, InvalidImageError, check_image, jpeg_size

JPEG, BGR = common_pb2.ENCODING_JPEG, common_pb2.ENCODING_BGR
LIMITS = ImageLimits(8192, 8192, 7680 * 4320)


def jpeg(w: int, h: int) -> bytes:
    return bytes(cv2.imencode(".jpg", np.zeros((h, w, 3), np.uint8))[1])


def test_sof_size_from_bytes_and_buffers() -> None:
    data = jpeg(123, 45)
    assert jpeg_size(data) == (123, 45)
    assert jpeg_size(memoryview(data)) == (123, 45)
    assert jpeg_size(np.frombuffer(data, np.uint8)) == (123, 45)
    assert jpeg_size(decode_bomb()) == (BOMB_SIDE, BOMB_SIDE)


def test_bomb_is_refused_whatever_the_header_says() -> None:
    bomb = decode_bomb()
    for w, h in ((320, 240), (BOMB_SIDE, BOMB_SIDE), (0, 0)):
        with pytest.raises(InvalidImageError) as err:
            check_image(bomb, JPEG, w, h, LIMITS, exact=True)
        assert err.value.reason == "too_large"


def test_jpeg_must_be_the_size_its_frame_header_says() -> None:
    data = jpeg(64, 48)
    assert check_image(data, JPEG, 64, 48, LIMITS, exact=True) == (64, 48)
    with pytest.raises(InvalidImageError) as err:
        check_image(data, JPEG, 32, 24, LIMITS, exact=True)
    assert err.value.reason == "jpeg_dimensions" and "64x48" in str(err.value)
    assert check_image(data, JPEG, 0, 0, LIMITS) == (64, 48)  # the cloud's lenient use


def test_bgr_and_other_refusals() -> None:
    assert check_image(bytes(2 * 3 * 3), BGR, 3, 2, LIMITS) == (3, 2)
    for data, enc, w, h, reason in (
        (bytes(10), BGR, 3, 2, "bad_dimensions"),
        (b"", JPEG, 1, 1, "empty"),
        (b"GIF89a....", JPEG, 1, 1, "undecodable"),
        (b"\xff\xd8\xff\xda\x00\x02", JPEG, 1, 1, "undecodable"),  # scan before any SOF
        (bytes(9000 * 3), BGR, 9000, 1, "too_large"),
        (b"x", 99, 1, 1, "bad_encoding"),
    ):
        with pytest.raises(InvalidImageError) as err:
            check_image(data, enc, w, h, LIMITS)
        assert err.value.reason == reason


def test_a_crafted_run_of_tiny_segments_costs_bounded_time() -> None:
    # 8 MB of 4-byte COM segments before any SOF: walking them all would take seconds.
    data = b"\xff\xd8" + b"\xff\xfe\x00\x02" * (2 << 20) + jpeg(8, 8)[2:]
    t0 = time.perf_counter()
    assert jpeg_size(data) is None
    assert time.perf_counter() - t0 < 0.05
    fill = b"\xff\xd8" + b"\xff" * (4 << 20)
    assert jpeg_size(fill) is None
