"""H.264 payloads at the edge: one decoder per (sender session, camera), fed in order.

A P-frame only decodes after the frames it references, so a decoder that has lost its
state (node restart mid-GOP, a frame the agent gave up on, a corrupt access unit) cannot
decode anything until the next keyframe. Such a frame raises LostReferenceError: the caller
answers it as lost (counted, never silent) and asks the agent for a keyframe
(`FrameAck.keyframe_request`). Decoders of cameras idle for `idle_s` are closed.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


class H264Error(Exception):
    """A frame that could not be decoded; `reason` is a metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class LostReferenceError(H264Error):
    """The decoder needs a keyframe before it can decode this camera again."""


@dataclass
class _Stream:
    ctx: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    # True until a keyframe decodes: P-frames before it are lost.
    need_key: bool = True
    last_sequence: int = 0
    # FrameHeader.stream_index of the last access unit decoded (consecutive within a GOP).
    last_index: int = -1
    used: float = 0.0
    size: tuple[int, int] = (0, 0)


class H264Decoders:
    """Decoders by (session, camera). `decode` is safe to call from several worker threads
    (one lock per stream keeps each stream's frames in order and single-threaded)."""

    def __init__(self, idle_s: float = 60.0) -> None:
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._streams: dict[tuple[int, str], _Stream] = {}
        self.lost = 0
        self.keyframe_requests = 0

    def __len__(self) -> int:
        return len(self._streams)

    def _stream(self, key: tuple[int, str]) -> _Stream:
        import av

        with self._lock:
            s = self._streams.get(key)
            if s is None:
                ctx = av.CodecContext.create("h264", "r")
                ctx.thread_count = 1
                s = self._streams[key] = _Stream(ctx)
            return s

    def decode(
        self,
        session: int,
        camera: str,
        sequence: int,
        stream_index: int,
        payload: memoryview | bytes,
        keyframe: bool,
        width: int,
        height: int,
    ) -> np.ndarray:
        """The BGR image of one access unit; H264Error or LostReferenceError when it cannot be."""
        import av

        s = self._stream((session, camera))
        with s.lock:
            s.used = time.monotonic()
            if sequence <= s.last_sequence:
                raise H264Error("h264_order", f"sequence {sequence} after {s.last_sequence}")
            s.last_sequence = sequence
            if not keyframe and not s.need_key and stream_index != s.last_index + 1:
                # An access unit in between never arrived (the agent counts that one); the
                # references are gone, so this one is lost too (counted below).
                log.debug("camera %s: H.264 unit %d follows %d", camera, stream_index, s.last_index)
                self._reset(s)
            if s.need_key and not keyframe:
                self._lost(camera, "no keyframe since the decoder started or lost its state")
                raise LostReferenceError("h264_no_reference", "waiting for a keyframe")
            try:
                frames = s.ctx.decode(av.Packet(bytes(payload)))
            except (av.FFmpegError, ValueError) as exc:
                self._reset(s)
                self._lost(camera, f"decoder error: {exc}")
                raise LostReferenceError("h264_corrupt", str(exc)) from None
            if len(frames) != 1:
                self._reset(s)
                self._lost(camera, f"{len(frames)} pictures from one access unit")
                raise LostReferenceError("h264_corrupt", f"{len(frames)} pictures from one unit")
            f = frames[0]
            if (f.width, f.height) != (width, height):
                # A camera that changed size sends a keyframe at the new size; a mismatch
                # otherwise means the header is wrong: reject, but the stream is fine.
                raise H264Error(
                    "h264_dimensions", f"decoded {f.width}x{f.height}, header says {width}x{height}"
                )
            s.need_key = False
            s.last_index = stream_index
            s.size = (f.width, f.height)
            # Rows packed: PyAV 18.1.1 may return FFmpeg's padded buffer as a view.
            return np.ascontiguousarray(f.to_ndarray(format="bgr24"))

    def needs_keyframe(self, session: int, camera: str) -> bool:
        """True while this stream waits for a keyframe (ask the agent for one)."""
        with self._lock:
            s = self._streams.get((session, camera))
        return s is None or s.need_key

    def forget_idle(self, now: float | None = None) -> int:
        """Close the decoders of streams idle for `idle_s`; returns how many."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [k for k, s in self._streams.items() if now - s.used > self.idle_s]
            for k in idle:
                del self._streams[k]
        return len(idle)

    def _reset(self, s: _Stream) -> None:
        import av

        s.ctx = av.CodecContext.create("h264", "r")
        s.ctx.thread_count = 1
        s.need_key = True

    def _lost(self, camera: str, why: str) -> None:
        self.lost += 1
        log.debug("camera %s: H.264 frame lost (%s)", camera, why)
