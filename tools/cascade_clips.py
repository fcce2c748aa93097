"""Clips for the cascade bench made from vtest: quiet footage, and a camera that pans and cuts.

- `quiet`: vtest's passages of people separated by long stretches of its own empty street,
  as a camera sees between rush hours. The empty street is the per-pixel median of frames
  sampled over the clip (walkers never stay, so the median is the background), with sensor
  noise on every frame and a slow change of light over the whole clip.
- `pans`: vtest seen through a crop window that stays, pans, and jumps: segments of still
  and panning views joined by hard cuts to a shifted crop, so every pixel moves at a pan
  and at a cut (the motion gate's scene changes).

Both are written H.264 (libx264, yuv420p) with PyAV at the source's frame rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np


@dataclass(frozen=True, slots=True)
class QuietRecipe:
    """Passages of the source between stretches of empty street (seconds at its rate)."""

    passages: int = 3
    passage_s: float = 10.0
    gap_s: float = 45.0
    # Sensor noise (grey levels, standard deviation) added to every empty frame.
    noise: float = 2.0
    # Light changes by up to this share (a slow sine over the whole clip).
    light: float = 0.06
    seed: int = 0


@dataclass(frozen=True, slots=True)
class PanRecipe:
    """A crop window of `crop` of the source's size: still, then panning, by segment."""

    crop: float = 0.8
    segment_s: float = 6.0
    # Pan speed in source pixels per frame.
    pan_px: int = 4


def _rate(src: Path) -> tuple[Fraction, int, int, int]:
    import av

    with av.open(str(src)) as f:
        s = f.streams.video[0]
        rate = Fraction(s.average_rate) if s.average_rate else Fraction(10)
        frames = s.frames or sum(1 for p in f.demux(s) if p.size)
        return rate, frames, s.width, s.height


def _frames(src: Path) -> Iterator[np.ndarray]:
    import av

    with av.open(str(src)) as f:
        for frame in f.decode(video=0):
            yield frame.to_ndarray(format="bgr24")


class _Writer:
    """An H.264 file written frame by frame (BGR in)."""

    def __init__(self, path: Path, rate: Fraction, width: int, height: int) -> None:
        import av

        path.parent.mkdir(parents=True, exist_ok=True)
        self._out = av.open(str(path), "w")
        self._stream = self._out.add_stream("libx264", rate=rate)
        self._stream.width, self._stream.height = width, height
        self._stream.pix_fmt = "yuv420p"
        self._stream.options = {"g": "10", "preset": "veryfast"}
        self.frames = 0

    def write(self, bgr: np.ndarray) -> None:
        import av

        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(bgr), format="bgr24")
        self._out.mux(self._stream.encode(frame))
        self.frames += 1

    def close(self) -> None:
        self._out.mux(self._stream.encode(None))
        self._out.close()


def background(src: Path, samples: int = 120) -> np.ndarray:
    """The per-pixel median of `samples` frames spread over the clip: its empty scene."""
    _, total, _, _ = _rate(src)
    step = max(1, total // samples)
    picked = [f for i, f in enumerate(_frames(src)) if i % step == 0][:samples]
    median: np.ndarray = np.median(np.stack(picked), axis=0).astype(np.uint8)
    return median


def quiet_clip(src: Path, out: Path, recipe: QuietRecipe = QuietRecipe()) -> int:
    """Write the quiet clip of `src` to `out`; returns its frame count."""
    rate, total, width, height = _rate(src)
    passage = max(1, round(recipe.passage_s * rate))
    gap = max(0, round(recipe.gap_s * rate))
    starts = [round(k * total / recipe.passages) for k in range(recipe.passages)]
    length = (recipe.passages + 1) * gap + recipe.passages * passage
    empty = background(src).astype(np.float32)
    rng = np.random.default_rng(recipe.seed)
    writer = _Writer(out, rate, width, height)
    n = 0

    def light(i: int) -> float:
        return 1.0 + recipe.light * math.sin(2 * math.pi * i / max(length, 1))

    def street(count: int) -> None:
        nonlocal n
        for _ in range(count):
            noise = rng.normal(0.0, recipe.noise, (height, width, 1)).astype(np.float32)
            writer.write(np.clip(empty * light(n) + noise, 0, 255).astype(np.uint8))
            n += 1

    try:
        street(gap)
        source = enumerate(_frames(src))
        for start in starts:
            for i, img in source:
                if i < start:
                    continue
                writer.write(np.clip(img * light(n), 0, 255).astype(np.uint8))
                n += 1
                if i >= start + passage - 1:
                    break
            street(gap)
    finally:
        writer.close()
    return writer.frames


def crop_offsets(frames: int, span: tuple[int, int], segment: int, pan_px: int) -> np.ndarray:
    """(frames, 2) top-left corners of the crop, within `span` (x, y) of free room:
    segments alternate still and panning, and each starts with a cut to another place."""
    out = np.zeros((frames, 2), np.int64)
    free_x, free_y = span
    places = [(0, 0), (free_x, free_y), (free_x, 0), (0, free_y), (free_x // 2, free_y // 2)]
    for i in range(frames):
        k, at = divmod(i, max(segment, 1))
        x0, y0 = places[k % len(places)]
        if k % 2:  # a panning segment: across the room and back (a triangle wave)
            travel = (at * pan_px) % (2 * max(free_x, 1))
            x = abs(travel - free_x) if x0 == free_x else min(travel, 2 * free_x - travel)
            out[i] = (x, y0)
        else:
            out[i] = (x0, y0)
    return out


def pans_clip(src: Path, out: Path, recipe: PanRecipe = PanRecipe()) -> int:
    """Write `src` seen through a panning and cutting crop to `out`; returns its frames."""
    rate, total, width, height = _rate(src)
    cw, ch = (round(width * recipe.crop) // 2) * 2, (round(height * recipe.crop) // 2) * 2
    offsets = crop_offsets(
        total, (width - cw, height - ch), max(1, round(recipe.segment_s * rate)), recipe.pan_px
    )
    writer = _Writer(out, rate, cw, ch)
    try:
        for i, img in enumerate(_frames(src)):
            x, y = offsets[min(i, total - 1)]
            writer.write(img[y : y + ch, x : x + cw])
    finally:
        writer.close()
    return writer.frames


def head(src: Path, out: Path, frames: int) -> int:
    """Write the first `frames` frames of `src` to `out` (a short run of the bench that
    still plays the clip as a camera would); returns the frames written."""
    rate, _total, width, height = _rate(src)
    writer = _Writer(out, rate, width, height)
    try:
        for i, img in enumerate(_frames(src)):
            if i >= frames:
                break
            writer.write(img)
    finally:
        writer.close()
    return writer.frames


def footage(src: Path, workdir: Path, frames: int = 0, fps: float = 0) -> Path:
    """`src` (any video PyAV reads) as the bench's H.264 clip in `workdir`, named
    footage-STEM (reused when already there); `frames` > 0: only its first `frames`; `fps`
    > 0: frames dropped evenly down to about that rate (a camera's stream set to it)."""
    if not src.is_file():
        raise FileNotFoundError(f"--footage {src}: no such file")
    rate, _total, width, height = _rate(src)
    step = max(1, round(rate / fps)) if fps > 0 else 1
    suffix = (f"-{fps:g}fps" if step > 1 else "") + (f"-first{frames}" if frames > 0 else "")
    out = workdir / f"footage-{src.stem}{suffix}.mp4"
    if out.is_file():
        return out
    writer = _Writer(out, rate / step, width, height)
    try:
        for i, img in enumerate(_frames(src)):
            if frames > 0 and writer.frames >= frames:
                break
            if i % step == 0:
                writer.write(img)
    finally:
        writer.close()
    return out


# Name -> recipe (source, output) -> frames written, for `strata bench cascade --clip`.
RECIPES: dict[str, Callable[[Path, Path], int]] = {"quiet": quiet_clip, "pans": pans_clip}


def make(name: str, src: Path, workdir: Path, frames: int = 0) -> Path:
    """The clip `name` made from `src` in `workdir` (reused when already there); `frames`
    > 0: only its first `frames` frames. `name` "vtest" is `src` itself."""
    # Not "vtest...": the report takes the clip named vtest as its headline.
    full = src if name == "vtest" else workdir / f"{name}-{src.stem}.mp4"
    if not full.is_file():
        RECIPES[name](src, full)
    if frames <= 0:
        return full
    # The first frames of vtest keep its name: the headline clip.
    out = workdir / f"{full.stem}-first{frames}.mp4"
    if not out.is_file():
        head(full, out, frames)
    return out
