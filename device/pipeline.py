"""One camera's frames after the motion decision, on the camera's own thread, to the sender.

    camera thread: decode -> motion score (luma plane) -> keep or drop (cascade, motion,
        degradation) -> CameraPipeline.put:
            the relevance gate can drop: GateInbox -> gate worker (batches across cameras)
                -> CameraPipeline.emit on the gate worker's thread
            else (the default): JPEG straight from YUV 4:2:0 (FFmpeg's scale, libjpeg-turbo)
                or scale + BGR (FFmpeg) -> JPEG / raw / H.264 -> Sender.submit
    sender thread: owns the ZeroMQ sockets, takes what the outboxes hold

A kept frame crosses no thread between its decoder and the sender's outbox (a lock, a
deque append): handing each frame through a gate inbox and an encoder queue cost more
Python than converting and encoding it (docs/device.md, "A frame's path"). The relevance gate
is the one stage that gains from a thread of its own (a batch across cameras per
inference), and only where it can drop a frame; whether it can is fixed for the agent's
life (its threshold), so each camera's frames take one route and its scaler and H.264
stream are only ever touched by one thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import cv2
import numpy as np
import simplejpeg
from strata.shared.config.device import PayloadConfig, SenderConfig
from strata.shared.contracts import common_pb2, frame_pb2

from .capture.frames import BgrScaler, Yuv420Scaler
from .filters.inbox import GateInbox, GateItem
from .metrics import CameraMetrics
from .transport.encoder import H264Encoder, ScaleTarget

log = logging.getLogger(__name__)

# A codec probe goes raw only at about a detector's input (1024 x 1024 at most): a frame
# sent before the edge announced its input is the source's size, 6 MB raw at 1080p.
PROBE_MAX_VALUES = 1024 * 1024 * 3


class FrameOutlet(Protocol):
    """Where a camera thread puts the frames it keeps (and dropped frames' notices)."""

    def put(
        self, item: GateItem, wait: bool, stop: threading.Event | None = None
    ) -> GateItem | None:
        """Take `item`; returns a frame given up to make room (the oldest waiting, counted
        by the caller as overload), or `item` itself when stopping while waiting."""
        ...

    def flush(self) -> None:
        """The camera's frames have stopped (ended, failed, reopening): nothing it was
        told may wait for a frame that is not coming."""
        ...


class Submit(Protocol):
    """The sender's entry (transport.sender.Sender.submit): thread-safe, never blocks."""

    def __call__(self, camera_id: str, header: frame_pb2.FrameHeader, payload: Any) -> int: ...


class KeyframeRequests:
    """Cameras whose next H.264 frame must start a GOP, asked from any thread (acks, lost
    frames, moves) and taken by the thread encoding that camera."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._want: dict[str, str] = {}
        # Cameras with an H.264 stream open: "every stream restarts" reaches these.
        self._streams: set[str] = set()
        # Read without the lock on every frame: most frames find nothing asked.
        self._any = False

    def request_keyframe(self, camera_id: str, why: str) -> None:
        """The next H.264 frame of `camera_id` starts a GOP (any thread)."""
        with self._lock:
            self._want.setdefault(camera_id, why)
            self._any = True

    def request_keyframes(self, why: str) -> None:
        """Every open stream's next frame starts a GOP (a new edge session)."""
        with self._lock:
            for cam in self._streams:
                self._want.setdefault(cam, why)
            self._any = bool(self._want)

    def opened(self, camera_id: str) -> None:
        """`camera_id` has an H.264 stream now."""
        with self._lock:
            self._streams.add(camera_id)

    def take(self, camera_id: str) -> str:
        """Why the camera's next frame must be a keyframe ("": it need not)."""
        if not self._any:
            return ""
        with self._lock:
            why = self._want.pop(camera_id, "")
            self._any = bool(self._want)
            return why


@dataclass(frozen=True, slots=True)
class PipelineSetup:
    """What every camera's pipeline is built with: the agent's id stamped on headers, the
    payload sections of the config, the size frames are scaled to (shared with the edge
    link, which sets it from the edge's EdgeInfo) and the keyframe requests."""

    agent_id: str
    sender: SenderConfig = field(default_factory=SenderConfig)
    payload: PayloadConfig = field(default_factory=PayloadConfig)
    scale: ScaleTarget = field(default_factory=ScaleTarget)
    keyframes: KeyframeRequests = field(default_factory=KeyframeRequests)
    # Dropped frames' notices told in one message (cascade.notice_run; 1: one each), and
    # the longest the first of a run waits (s).
    notice_run: int = 1
    notice_run_s: float = 0.2


# Frames that passed a relevance gate that cannot drop, for the canary of a new gate
# version: each as BGR, or as the JPEG it was sent as (decoded only if a canary runs);
# None when no version switch is watched.
PassedHook = Callable[[np.ndarray | bytes], None]


class CameraPipeline:
    """One camera's route from its kept frames to the sender (see the module docstring).

    Not thread-safe: `put` runs on the camera's thread, `emit` on the thread that owns the
    camera's frames at that point (the camera's, or the gate worker's when `inbox` is set).
    """

    def __init__(
        self,
        camera_id: str,
        setup: PipelineSetup,
        submit: Submit,
        metrics: CameraMetrics,
        inbox: GateInbox | None = None,
        passed: PassedHook | None = None,
    ) -> None:
        self.camera_id = camera_id
        self.agent_id = setup.agent_id
        self.encoding = setup.sender.encoding
        self.payload = setup.payload
        self.scale = setup.scale
        self.keyframes = setup.keyframes
        self.submit = submit
        self.m = metrics
        # Set: frames go through the relevance gate's worker (it can drop them).
        self.inbox = inbox
        self.passed = passed
        self._quality = setup.sender.jpeg_quality
        self._params = [cv2.IMWRITE_JPEG_QUALITY, self._quality]
        self._scaler = BgrScaler()
        # JPEG from the decoder's YUV where this route encodes (not through the gate's
        # worker, which converts its own BGR); the canary's BGR comes from the small frame.
        self._yuv = Yuv420Scaler() if self.encoding == "jpeg" and inbox is None else None
        self._h264: H264Encoder | None = None
        self._stream_index = 0
        # Dropped frames' notices waiting to go as one message (`_notice`). Only on the
        # camera's own route: on the gate's, the worker's thread sends what the camera
        # thread can no longer flush when its frames stop.
        self._run_max = setup.notice_run if inbox is None else 1
        self._run_s = setup.notice_run_s
        self._run: list[frame_pb2.SkippedFrame] = []
        self._run_started = 0.0
        self._run_size = (0, 0)
        self._run_gate = 0.0
        # The camera's last frame interval (s), so a run goes before its first notice would
        # wait past notice_run_s for the next frame (0 until a second frame comes).
        self._last_at: float | None = None
        self._interval = 0.0

    def put(
        self, item: GateItem, wait: bool, stop: threading.Event | None = None
    ) -> GateItem | None:
        """A frame the camera kept, or a dropped frame's notice: to the gate's inbox when
        it can drop frames, else converted, encoded and submitted now."""
        if self.inbox is not None:
            return self.inbox.put(item, wait, stop)
        if self._last_at is not None:
            self._interval = item.queued_at - self._last_at
        self._last_at = item.queued_at
        if item.skip_reason:
            self.emit(item, None, 0.0)
            return None
        # A codec probe goes as BGR (raw pixels), not as the JPEG of its planes.
        if self._yuv is not None and not item.codec_probe and self._jpeg_from_yuv(item):
            return None
        try:
            image = self.bgr(item)
            if self.passed is not None:
                self.passed(image)
        except Exception:  # a frame that cannot be converted must not end the camera
            self._lost("a conversion error")
            return None
        self.emit(item, image, 1.0)  # gate_score 1.0: as ungated
        return None

    def _jpeg_from_yuv(self, item: GateItem) -> bool:
        """Encode and submit a kept 4:2:0 frame's JPEG from its YUV planes (no BGR); False
        when the frame has another format (the caller goes through BGR)."""
        assert self._yuv is not None
        frame = item.frame
        size = self.scale.size_for(frame.width, frame.height)
        try:
            # cv2's halvings (cheaper); FFmpeg's scaler for sizes the halvings do not take.
            planes = frame.jpeg_planes(size, self._yuv)
            if planes is None:
                small = frame.yuv420(size, self._yuv)
                if small is None:
                    return False
                planes = self._yuv.planes(small)
            data = simplejpeg.encode_jpeg_yuv_planes(*planes, quality=self._quality)
            if self.passed is not None:
                self.passed(data)  # no BGR for a canary that may never run
            header = self._header(item, 1.0)  # gate_score 1.0: as ungated
            header.width, header.height = size
            header.encoding = common_pb2.ENCODING_JPEG
            self.flush()  # the frames dropped before it go first
            self.submit(self.camera_id, header, data)
        except Exception:  # as `emit`: the camera goes on, the frame is counted
            self._lost("an encoding error")
        return True

    def bgr(self, item: GateItem) -> np.ndarray:
        """The frame as BGR at the payload size (scaled by FFmpeg while converting)."""
        frame = item.frame
        return frame.bgr(self.scale.size_for(frame.width, frame.height), self._scaler)

    def emit(self, item: GateItem, image: np.ndarray | None, gate_score: float) -> None:
        """Encode and submit one frame (`image` None: the header-only notice of a dropped
        frame, `item.skip_reason` says why). A frame the encoder fails on is counted as
        given up (`encode_error`) and its camera's H.264 stream restarts."""
        try:
            self._emit(item, image, gate_score)
        except Exception:  # keep the camera alive; the frame is counted and logged
            self._lost("an encoding error")

    def _lost(self, why: str) -> None:
        """A kept frame that never reached the sender: counted (`encode_error`), logged
        with its traceback; the camera's H.264 stream restarts after it."""
        self.m.dropped("encode_error").inc()
        log.exception("camera %s: frame lost to %s", self.camera_id, why)
        self.keyframes.request_keyframe(self.camera_id, why)

    def _header(self, item: GateItem, gate_score: float) -> frame_pb2.FrameHeader:
        src_w, src_h = item.frame.width, item.frame.height
        return frame_pb2.FrameHeader(
            agent_id=self.agent_id,
            camera_id=self.camera_id,
            capture_ns=item.capture_ns,
            motion_score=item.motion_score,
            gate_score=gate_score,
            frame_index=item.index,
            calibration=item.calibration,
            scene_change=item.scene_change,
            unchanged=item.unchanged,
            source_width=src_w,
            source_height=src_h,
        )

    def _notice(self, item: GateItem, gate_score: float) -> None:
        """A dropped frame's notice joins the camera's run; the run goes when it is full or
        when the next frame, a frame interval away, would find its first waiting longer
        than notice_run_s (so a camera slower than that sends each notice alone); else
        before the next kept frame, or when the camera's frames stop: `flush`."""
        size = (item.frame.width, item.frame.height)
        if self._run and size != self._run_size:
            self.flush()  # a run tells frames of one size (the carrier's)
        run = self._run
        if not run:
            self._run_started = item.queued_at
        run.append(
            frame_pb2.SkippedFrame(
                frame_index=item.index,
                capture_ns=item.capture_ns,
                motion_score=item.motion_score,
                skip_reason=item.skip_reason,
            )
        )
        self._run_size = size
        self._run_gate = gate_score
        waited = item.queued_at - self._run_started
        if len(run) >= self._run_max or waited + self._interval > self._run_s:
            self.flush()

    def flush(self) -> None:
        """Send the waiting run of dropped frames' notices as one header-only message: the
        last frame's header, the others in `earlier_skipped` (protos/strata/v1/frame.proto)."""
        run = self._run
        if not run:
            return
        last = run[-1]
        w, h = self._run_size
        header = frame_pb2.FrameHeader(
            agent_id=self.agent_id,
            camera_id=self.camera_id,
            capture_ns=last.capture_ns,
            motion_score=last.motion_score,
            gate_score=self._run_gate,
            frame_index=last.frame_index,
            source_width=w,
            source_height=h,
            width=w,
            height=h,
            kind=frame_pb2.FRAME_KIND_SKIPPED,
            skip_reason=last.skip_reason,
            earlier_skipped=run[:-1],
        )
        self._run = []
        self.submit(self.camera_id, header, b"")

    def _emit(self, item: GateItem, image: np.ndarray | None, gate_score: float) -> None:
        if image is None:
            self._notice(item, gate_score)
            return
        header = self._header(item, gate_score)
        header.width, header.height = image.shape[1], image.shape[0]
        payload: Any
        if self.encoding == "jpeg" and item.codec_probe and image.size <= PROBE_MAX_VALUES:
            # Raw pixels, and the quality its JPEG would have had: the edge measures on it
            # what the codec costs the detector.
            payload = np.ascontiguousarray(image)
            header.encoding = common_pb2.ENCODING_BGR
            header.codec_probe_quality = self._quality
        elif self.encoding == "jpeg":
            ok, payload = cv2.imencode(".jpg", image, self._params)
            if not ok:
                raise RuntimeError("JPEG encoding failed")
            header.encoding = common_pb2.ENCODING_JPEG
        elif self.encoding == "h264":
            payload = self._h264_unit(image, header)
        else:
            payload = np.ascontiguousarray(image)
            header.encoding = common_pb2.ENCODING_BGR
        self.flush()  # the frames dropped before it go first
        self.submit(self.camera_id, header, payload)

    def _h264_unit(self, image: np.ndarray, header: frame_pb2.FrameHeader) -> bytes:
        enc = self._h264
        if enc is None:
            p = self.payload
            enc = self._h264 = H264Encoder(p.keyframe_interval, p.crf, p.preset)
            self.keyframes.opened(self.camera_id)
        why = self.keyframes.take(self.camera_id)
        if why:
            enc.request_keyframe(why)
        unit = enc.encode(np.ascontiguousarray(image))
        self._stream_index += 1
        header.encoding = common_pb2.ENCODING_H264
        header.keyframe = unit.keyframe
        header.stream_index = self._stream_index
        return unit.data
