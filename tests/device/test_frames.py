"""GreyScaler: the motion gate's grey image from a decoded frame's luma plane."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from strata.device.frames import GreyScaler


def _ffmpeg_area(frame: object, size: tuple[int, int]) -> np.ndarray:
    """FFmpeg's area scale of the luma plane, what GreyScaler computed before."""
    from av.video.reformatter import ColorRange, Interpolation

    small = frame.reformat(  # type: ignore[attr-defined]
        width=size[0],
        height=size[1],
        format="gray",
        interpolation=Interpolation.AREA,
        src_color_range=ColorRange.JPEG,
        dst_color_range=ColorRange.JPEG,
    )
    return np.asarray(small.to_ndarray(), np.uint8)


def _rms(a: np.ndarray, b: np.ndarray) -> float:
    return float(cv2.norm(a, b, cv2.NORM_L2)) / float(np.sqrt(a.size))


def _frames(path: Path, count: int, size: tuple[int, int] | None = None) -> list[object]:
    import av

    out = []
    with av.open(str(path)) as container:
        for decoded in container.decode(video=0):
            frame = decoded
            if size is not None:
                frame = decoded.reformat(width=size[0], height=size[1], format="yuv420p")
            out.append(frame)
            if len(out) == count:
                break
    return out


@pytest.mark.parametrize(
    ("size", "rel"),
    [(None, 0.002), ((1280, 720), 0.04), ((1920, 1080), 0.04), ((641, 479), 0.04)],
)
def test_grey_scores_like_ffmpegs_area_scale(vtest_mp4: Path, size, rel) -> None:  # type: ignore[no-untyped-def]
    """Halving then area-scaling the luma gives the motion scores FFmpeg's area scale gave:
    equal where the factor is a power of two (vtest 768x576), within a few % elsewhere."""
    frames = _frames(vtest_mp4, 24, size)
    scaler = GreyScaler(192, 144)
    ours = [scaler.scale(f).copy() for f in frames]
    theirs = [_ffmpeg_area(f, (192, 144)) for f in frames]
    assert all(g.shape == (144, 192) for g in ours)
    for i in range(0, len(frames) - 4, 2):
        a, b = _rms(ours[i], ours[i + 4]), _rms(theirs[i], theirs[i + 4])
        assert a == pytest.approx(b, rel=rel, abs=0.05)


def test_grey_buffers_are_kept_from_frame_to_frame(vtest_mp4: Path) -> None:
    frames = _frames(vtest_mp4, 3)
    scaler = GreyScaler(192, 144)
    first = scaler.scale(frames[0])
    assert all(scaler.scale(f) is first for f in frames[1:])  # the same buffer, refilled
