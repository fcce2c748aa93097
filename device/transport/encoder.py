"""Payloads sized for the edge's model: the scale to decode to, and an H.264 stream per camera.

Scaling: the edge announces its detector's input size (EdgeInfo); a frame bigger than that
is scaled to fit inside it (aspect kept, even sides for 4:2:0) by FFmpeg's scaler as part
of the conversion out of the decoder (PyAV `reformat`), never as full-resolution BGR first.

H.264: only the kept frames, one access unit per frame (libx264, `tune=zerolatency`, so a
frame comes out as soon as it goes in, no B-frames). The stream restarts with a keyframe
when asked: a new edge session, a frame the agent gave up on (the edge's decoder would be
missing a reference), the edge's `keyframe_request`, a new frame size, and every
`keyframe_interval` frames.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def fit_size(width: int, height: int, max_width: int, max_height: int) -> tuple[int, int]:
    """The size of a `width` x `height` frame scaled to fit `max_width` x `max_height`.

    Never enlarges; keeps the aspect; both sides even (4:2:0 chroma). 0 limits: no scaling.
    """
    if max_width <= 0 or max_height <= 0 or (width <= max_width and height <= max_height):
        w, h = width, height
    else:
        s = min(max_width / width, max_height / height)
        w, h = round(width * s), round(height * s)
    return max(2, w - (w & 1)), max(2, h - (h & 1))


class ScaleTarget:
    """The size frames are scaled to fit, shared by the agent's threads (set from EdgeInfo)."""

    def __init__(self, max_width: int = 0, max_height: int = 0) -> None:
        self._lock = threading.Lock()
        self._size = (max_width, max_height)

    def set(self, max_width: int, max_height: int) -> None:
        """A new bound (0, 0: none)."""
        with self._lock:
            self._size = (max_width, max_height)

    def get(self) -> tuple[int, int]:
        """The current bound."""
        with self._lock:
            return self._size

    def size_for(self, width: int, height: int) -> tuple[int, int]:
        """The payload size for a source frame of `width` x `height`."""
        mw, mh = self.get()
        if not mw or not mh:
            return width, height
        return fit_size(width, height, mw, mh)


@dataclass(frozen=True, slots=True)
class EncodedFrame:
    """One H.264 access unit (Annex B) and whether it starts a GOP."""

    data: bytes
    keyframe: bool


class H264Encoder:
    """One camera's stream of kept frames. Not thread-safe (the encoder thread owns it)."""

    def __init__(
        self,
        keyframe_interval: int = 250,
        crf: int = 18,
        preset: str = "veryfast",
        threads: int = 1,
    ) -> None:
        self.keyframe_interval = keyframe_interval
        self.crf = crf
        self.preset = preset
        self.threads = threads
        self._ctx: Any = None
        self._size = (0, 0)
        self._pts = 0
        self._since_key = 0
        self._force_key = True
        self.keyframes = 0
        self.frames = 0

    def request_keyframe(self, why: str) -> None:
        """The next frame starts a GOP."""
        if not self._force_key:
            log.debug("keyframe requested: %s", why)
        self._force_key = True

    def _open(self, width: int, height: int) -> None:
        import av

        ctx = av.CodecContext.create("libx264", "w")
        ctx.width, ctx.height = width, height
        ctx.pix_fmt = "yuv420p"
        ctx.time_base = Fraction(1, 1000)
        # GOPs are ours to start (pict_type I); x264's own scene cuts stay on.
        ctx.gop_size = max(self.keyframe_interval, 1) if self.keyframe_interval else 1 << 30
        ctx.thread_count = self.threads
        ctx.options = {
            "tune": "zerolatency",
            "preset": self.preset,
            "crf": str(self.crf),
            # Annex B with SPS/PPS repeated before each IDR, so any keyframe decodes alone.
            "x264-params": "repeat-headers=1",
        }
        self._ctx = ctx
        self._size = (width, height)

    def encode(self, image: np.ndarray) -> EncodedFrame:
        """Encode one BGR frame (H x W x 3, even sides); a new size restarts the stream."""
        import av
        from av.video.frame import PictureType

        h, w = int(image.shape[0]), int(image.shape[1])
        if (w, h) != self._size:
            if self._ctx is not None:
                log.info("H.264 stream restarts at %dx%d (was %dx%d)", w, h, *self._size)
            self._open(w, h)
            self._force_key = True
        frame = av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format="yuv420p")
        key = self._force_key or (
            self.keyframe_interval > 0 and self._since_key >= self.keyframe_interval
        )
        frame.pict_type = PictureType.I if key else PictureType.NONE
        frame.pts = self._pts
        self._pts += 1
        packets = self._ctx.encode(frame)
        if len(packets) != 1:
            # zerolatency means one packet per frame; anything else breaks the 1:1 contract.
            self._ctx = None
            self._size = (0, 0)
            raise RuntimeError(f"H.264 encoder gave {len(packets)} packets for one frame")
        packet = packets[0]
        keyframe = bool(packet.is_keyframe)
        if keyframe:
            self.keyframes += 1
            self._since_key = 0
            self._force_key = False
        self._since_key += 1
        self.frames += 1
        return EncodedFrame(bytes(packet), keyframe)
