"""A synthetic clip: saturated shapes moving over a static textured background, with truth.

Deterministic for a seed. Objects come and go, so the clip has quiet stretches (only sensor
noise) that a motion gate should drop, and busy ones it must keep. Object colours are pure
and saturated while the background is grey, so a simple colour test finds them exactly:
tests use that to build a detector whose right answer is known.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# (label, BGR colour). The background never reaches these colours.
CLASSES: tuple[tuple[str, tuple[int, int, int]], ...] = (
    ("person", (0, 0, 255)),
    ("car", (0, 255, 0)),
    ("bicycle", (255, 0, 0)),
)


@dataclass(frozen=True, slots=True)
class GroundTruthBox:
    """One object's box in pixel coordinates (x2, y2 exclusive)."""

    x1: int
    y1: int
    x2: int
    y2: int
    class_id: int
    label: str


@dataclass(frozen=True, slots=True)
class SyntheticFrame:
    """A frame and what is in it."""

    index: int
    image: np.ndarray
    boxes: tuple[GroundTruthBox, ...]


@dataclass(frozen=True, slots=True)
class _Track:
    class_id: int
    start: int
    end: int
    x0: float
    y0: float
    vx: float
    vy: float
    w: int
    h: int


class SyntheticClip:
    """Iterate frames of a deterministic synthetic scene; `write(path)` encodes it."""

    def __init__(
        self,
        width: int = 640,
        height: int = 480,
        frames: int = 120,
        fps: int = 10,
        objects: int = 4,
        seed: int = 0,
        noise: float = 2.0,
    ) -> None:
        if width < 64 or height < 64 or frames < 1:
            raise ValueError("a synthetic clip needs at least 64x64 pixels and one frame")
        self.width, self.height, self.frames, self.fps = width, height, frames, fps
        self.noise = noise
        self.seed = seed
        rng = np.random.default_rng(seed)
        self.background = self._background(rng)
        self.tracks = self._tracks(rng, objects)

    def _background(self, rng: np.random.Generator) -> np.ndarray:
        # Low-frequency grey texture plus a gradient: busy enough to look like a scene.
        small = rng.integers(70, 170, size=(self.height // 16 + 1, self.width // 16 + 1))
        import cv2

        tex = cv2.resize(
            small.astype(np.uint8), (self.width, self.height), interpolation=cv2.INTER_CUBIC
        )
        grad = np.linspace(-20, 20, self.width, dtype=np.float32)[None, :]
        grey = np.clip(tex.astype(np.float32) + grad, 40, 200).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)

    def _tracks(self, rng: np.random.Generator, n: int) -> tuple[_Track, ...]:
        tracks = []
        # The first and last ~15% of the clip stay empty: a still scene.
        lo, hi = int(self.frames * 0.15), max(int(self.frames * 0.85), int(self.frames * 0.15) + 1)
        for i in range(n):
            start = int(rng.integers(lo, max(lo + 1, (lo + hi) // 2)))
            end = int(rng.integers(min(start + 1, hi), hi + 1))
            w = int(rng.integers(self.width // 12, self.width // 5))
            h = int(rng.integers(self.height // 8, self.height // 3))
            tracks.append(
                _Track(
                    class_id=i % len(CLASSES),
                    start=start,
                    end=end,
                    x0=float(rng.uniform(0, self.width - w)),
                    y0=float(rng.uniform(0, self.height - h)),
                    vx=float(rng.uniform(-8, 8)),
                    vy=float(rng.uniform(-5, 5)),
                    w=w,
                    h=h,
                )
            )
        return tuple(tracks)

    def _position(self, t: _Track, index: int) -> tuple[int, int]:
        # Bounce inside the frame (triangle wave), so boxes never leave it.
        span_x, span_y = self.width - t.w, self.height - t.h
        step = index - t.start
        x = abs((t.x0 + t.vx * step) % (2 * span_x) - span_x) if span_x > 0 else 0.0
        y = abs((t.y0 + t.vy * step) % (2 * span_y) - span_y) if span_y > 0 else 0.0
        return round(span_x - x), round(span_y - y)

    def boxes(self, index: int) -> tuple[GroundTruthBox, ...]:
        """Ground truth of frame `index`."""
        out = []
        for t in self.tracks:
            if t.start <= index < t.end:
                x, y = self._position(t, index)
                label = CLASSES[t.class_id][0]
                out.append(GroundTruthBox(x, y, x + t.w, y + t.h, t.class_id, label))
        return tuple(out)

    def frame(self, index: int) -> SyntheticFrame:
        """Render frame `index`."""
        img = self.background.copy()
        if self.noise > 0:
            rng = np.random.default_rng((self.seed, index))
            n = rng.normal(0, self.noise, size=img.shape[:2]).astype(np.int16)
            img = np.clip(img.astype(np.int16) + n[:, :, None], 0, 255).astype(np.uint8)
        boxes = self.boxes(index)
        for b in boxes:
            img[b.y1 : b.y2, b.x1 : b.x2] = CLASSES[b.class_id][1]
        return SyntheticFrame(index, img, boxes)

    def __iter__(self) -> Iterator[SyntheticFrame]:
        for i in range(self.frames):
            yield self.frame(i)

    def __len__(self) -> int:
        return self.frames

    def write(self, path: str | Path, codec: str = "libx264", gop: int = 10) -> Path:
        """Encode the clip (H.264 MP4 by default) with PyAV and return the path."""
        import av

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with av.open(str(path), "w") as out:
            stream = out.add_stream(codec, rate=self.fps)
            stream.width, stream.height = self.width, self.height
            stream.pix_fmt = "yuv420p"
            stream.options = {"g": str(gop), "crf": "18", "preset": "veryfast"}
            for f in self:
                frame = av.VideoFrame.from_ndarray(f.image, format="bgr24")
                for packet in stream.encode(frame):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
        return path
