"""GreyScaler: the motion gate's grey image from a decoded frame's luma plane."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from strata.device.capture.frames import GreyScaler


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
    [(None, 0.002), ((1280, 720), 0.02), ((1920, 1080), 0.02), ((641, 479), 0.02)],
)
def test_grey_scores_like_ffmpegs_area_scale(vtest_mp4: Path, size, rel) -> None:  # type: ignore[no-untyped-def]
    """Halving then area-scaling the luma gives the motion scores FFmpeg's area scale gave:
    equal where the factor is a power of two (vtest 768x576), within 2% elsewhere."""
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


@pytest.mark.parametrize(
    ("source", "size", "fmt"),
    [
        (None, (320, 240), "yuv420p"),  # vtest 768x576: one halving, then 1.2x
        ((1280, 720), (320, 180), "yuv420p"),  # two exact halvings
        ((1280, 720), (320, 180), "yuvj420p"),  # full range already: no stretch
        ((640, 480), (640, 480), "yuv420p"),  # the size itself: the range stretch only
    ],
)
def test_jpeg_planes_match_ffmpegs_area_scale(vtest_mp4: Path, source, size, fmt) -> None:  # type: ignore[no-untyped-def]
    """The kept frame's JPEG planes by cv2's halvings are FFmpeg's (area scale to full-range
    yuvj420p) within a grey level or two on average, with the same brightness."""
    from strata.device.capture.frames import Yuv420Scaler

    scaler = Yuv420Scaler()
    for decoded in _frames(vtest_mp4, 4, source):
        frame = decoded.reformat(format=fmt) if fmt != decoded.format.name else decoded
        ours = scaler.jpeg_planes(frame, size)
        assert ours is not None
        theirs = Yuv420Scaler.planes(scaler.scale(frame, size))
        for a, b in zip(ours, theirs, strict=True):
            assert a.shape == b.shape
            diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
            assert float(diff.mean()) < 2.0
            assert abs(float(a.mean()) - float(b.mean())) < 1.0


def test_jpeg_planes_leave_odd_sizes_and_other_formats_to_ffmpeg(vtest_mp4: Path) -> None:
    from strata.device.capture.frames import Yuv420Scaler

    frame = _frames(vtest_mp4, 1)[0]
    scaler = Yuv420Scaler()
    assert scaler.jpeg_planes(frame, (321, 240)) is None
    assert scaler.jpeg_planes(frame.reformat(format="rgb24"), (320, 240)) is None


@pytest.mark.parametrize("shape", [(479, 641), (1080, 1920), (720, 1280), (601, 1203)])
def test_every_pixel_counts_in_the_grey(shape: tuple[int, int]) -> None:
    """Past the exact halvings no step scales by 2x or more (a bilinear step there would
    skip pixels): a lone bright pixel anywhere moves the grey."""
    from strata.device.capture.frames import _Halver

    halver = _Halver()
    rng = np.random.default_rng(7)
    flat = np.zeros(shape, np.uint8)
    base = halver.scale(flat, (192, 144), None).copy()
    for y, x in zip(rng.integers(0, shape[0], 40), rng.integers(0, shape[1], 40), strict=True):
        img = flat.copy()
        img[y, x] = 255
        assert np.any(halver.scale(img, (192, 144), None) != base), (y, x)
