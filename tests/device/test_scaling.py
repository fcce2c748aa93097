"""Frames scaled to the edge model's input size in the decoder's conversion."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from strata.device.capture.frames import Frame
from strata.device.transport.encoder import ScaleTarget, fit_size


def test_fit_size_keeps_aspect_even_and_never_enlarges() -> None:
    assert fit_size(768, 576, 320, 320) == (320, 240)
    assert fit_size(1920, 1080, 640, 640) == (640, 360)
    assert fit_size(320, 240, 640, 640) == (320, 240)
    assert fit_size(321, 241, 640, 640) == (320, 240)
    assert fit_size(1000, 10, 100, 100) == (100, 2)
    assert fit_size(768, 576, 0, 0) == (768, 576)
    t = ScaleTarget()
    assert t.size_for(768, 576) == (768, 576)
    t.set(320, 320)
    assert t.size_for(768, 576) == (320, 240)


def test_decoded_frame_scales_in_ffmpeg_close_to_a_full_size_resize(
    synthetic_mp4: Path,
) -> None:
    import cv2

    with av.open(str(synthetic_mp4)) as c:
        f = next(c.decode(video=0))
        full = f.to_ndarray(format="bgr24")
        frame = Frame(0, 0.0, 0, av_frame=f)
        small = frame.bgr((160, 120))
    assert small.shape == (120, 160, 3) and small.flags["C_CONTIGUOUS"]
    ref = cv2.resize(full, (160, 120), interpolation=cv2.INTER_AREA)
    assert float(np.abs(small.astype(np.int16) - ref.astype(np.int16)).mean()) < 4.0
    # Cached: a second call is the same array.
    assert frame.bgr((160, 120)) is small


@pytest.mark.parametrize("size", [None, (64, 48)])
def test_bgr_frames_scale_with_opencv(size: tuple[int, int] | None) -> None:
    image = np.random.default_rng(0).integers(0, 255, (96, 128, 3), np.uint8)
    out = Frame(0, 0.0, 0, bgr=image).bgr(size)
    assert out.shape == ((48, 64, 3) if size else (96, 128, 3))


def test_a_cameras_kept_scaler_gives_the_same_pixels_frame_after_frame(
    synthetic_mp4: Path,
) -> None:
    from strata.device.capture.frames import BgrScaler

    scaler = BgrScaler()
    with av.open(str(synthetic_mp4)) as c:
        for i, f in enumerate(c.decode(video=0)):
            if i == 5:
                break
            # Two sizes in turn: a context kept across frames must follow a new size.
            size = (160, 120) if i % 2 else (96, 72)
            plain = Frame(0, 0.0, 0, av_frame=f).bgr(size)
            kept = Frame(0, 0.0, 0, av_frame=f).bgr(size, scaler)
            assert kept.shape == (size[1], size[0], 3) and kept.flags["C_CONTIGUOUS"]
            assert np.array_equal(kept, plain)
