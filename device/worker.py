"""After the motion gate: the gate worker and the payload worker, each in its own thread.

The gate worker batches frames across cameras, converts them to BGR, runs the relevance
gate and passes the frames it keeps to the payload worker, which encodes them (JPEG, raw
BGR, or H.264 through device/encoder.py's H264Encoder; only kept frames are ever encoded)
and hands them to the sender. Decoding, gating and encoding run
in three threads, overlapping on separate cores (PyAV, OpenCV and ONNX Runtime release
the GIL while they work). Order is kept per camera all the way to the sender.

If the gate itself fails on a batch, the frames are sent ungated (and logged): a broken
gate must not silently eat frames.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np
from strata.shared.config.device import CascadeConfig, GateConfig, PayloadConfig, SenderConfig
from strata.shared.contracts import common_pb2, frame_pb2

from .encoder import H264Encoder, ScaleTarget
from .frames import BgrScaler
from .gate import RelevanceGate
from .inbox import GateInbox, GateItem
from .metrics import CameraMetrics, DeviceMetrics, DropLog
from .sender import Sender
from .versions import GateSwitcher

log = logging.getLogger(__name__)

# Kept frames waiting for the payload worker; when full, the gate worker waits (backpressure
# reaches the cameras' inbox, where live cameras drop and count).
_ENCODE_QUEUE = 32


@dataclass(frozen=True, slots=True)
class _Kept:
    item: GateItem
    # None: the frame was dropped (item.skip_reason says why); a header-only message.
    image: np.ndarray | None
    gate_score: float


class PayloadWorker:
    """A thread that turns kept frames into payloads (JPEG, raw BGR or H.264) and submits
    them to the sender, in order with the header-only messages of dropped frames."""

    def __init__(
        self,
        cfg: SenderConfig,
        sender: Sender,
        agent_id: str,
        payload: PayloadConfig | None = None,
    ) -> None:
        self.sender = sender
        self.agent_id = agent_id
        self.encoding = cfg.encoding
        self.payload = payload or PayloadConfig()
        self._params = [cv2.IMWRITE_JPEG_QUALITY, cfg.jpeg_quality]
        self._queue: queue.Queue[_Kept | None] = queue.Queue(_ENCODE_QUEUE)
        self._thread = threading.Thread(target=self._run, name="payload", daemon=True)
        self._h264: dict[str, H264Encoder] = {}
        self._stream_index: dict[str, int] = {}
        # Keyframe requests from other threads (acks, lost frames), taken by this one.
        self._lock = threading.Lock()
        self._want_key: dict[str, str] = {}

    def start(self) -> None:
        """Start the payload thread."""
        self._thread.start()

    def put(self, kept: _Kept) -> None:
        """Queue a kept frame (waits while the payload worker is behind)."""
        self._queue.put(kept)

    def finish(self) -> None:
        """Encode what is queued, then stop."""
        self._queue.put(None)
        self._thread.join()

    def request_keyframe(self, camera_id: str, why: str) -> None:
        """The next H.264 frame of `camera_id` starts a GOP (any thread)."""
        with self._lock:
            self._want_key.setdefault(camera_id, why)

    def request_keyframes(self, why: str) -> None:
        """Every camera's next H.264 frame starts a GOP (a new edge session)."""
        with self._lock:
            for cam in self._h264:
                self._want_key.setdefault(cam, why)

    def _run(self) -> None:
        while (kept := self._queue.get()) is not None:
            try:
                self._send(kept)
            except Exception:  # keep the agent alive; the frame is logged as lost
                log.exception("camera %s: frame lost to an encoding error", kept.item.camera_id)
                self.request_keyframe(kept.item.camera_id, "encoding error")

    def _send(self, kept: _Kept) -> None:
        item, image = kept.item, kept.image
        src_w, src_h = item.frame.width, item.frame.height
        header = frame_pb2.FrameHeader(
            agent_id=self.agent_id,
            camera_id=item.camera_id,
            capture_ns=item.capture_ns,
            motion_score=item.motion_score,
            gate_score=kept.gate_score,
            frame_index=item.index,
            calibration=item.calibration,
            scene_change=item.scene_change,
            source_width=src_w,
            source_height=src_h,
        )
        if image is None:
            header.kind = frame_pb2.FRAME_KIND_SKIPPED
            header.skip_reason = item.skip_reason
            header.width, header.height = src_w, src_h
            self.sender.submit(item.camera_id, header, b"")
            return
        header.width, header.height = image.shape[1], image.shape[0]
        payload: Any
        if self.encoding == "h264":
            payload = self._h264_unit(item.camera_id, image, header)
        elif self.encoding == "jpeg":
            ok, payload = cv2.imencode(".jpg", image, self._params)
            if not ok:
                log.error("camera %s: JPEG encoding failed; frame lost", item.camera_id)
                return
            header.encoding = common_pb2.ENCODING_JPEG
        else:
            payload = np.ascontiguousarray(image)
            header.encoding = common_pb2.ENCODING_BGR
        self.sender.submit(item.camera_id, header, payload)

    def _h264_unit(self, camera_id: str, image: np.ndarray, header: frame_pb2.FrameHeader) -> bytes:
        enc = self._h264.get(camera_id)
        if enc is None:
            p = self.payload
            enc = self._h264[camera_id] = H264Encoder(p.keyframe_interval, p.crf, p.preset)
        with self._lock:
            why = self._want_key.pop(camera_id, "")
        if why:
            enc.request_keyframe(why)
        unit = enc.encode(np.ascontiguousarray(image))
        index = self._stream_index.get(camera_id, 0) + 1
        self._stream_index[camera_id] = index
        header.encoding = common_pb2.ENCODING_H264
        header.keyframe = unit.keyframe
        header.stream_index = index
        return unit.data


@dataclass(frozen=True, slots=True)
class GateSetup:
    """What the gate worker is built with besides its collaborators: the device config's
    sections it reads, the agent's id stamped on every header, and the size frames are
    scaled to (shared with the edge link, which sets it from the edge's EdgeInfo)."""

    agent_id: str
    gate: GateConfig = field(default_factory=GateConfig)
    sender: SenderConfig = field(default_factory=SenderConfig)
    payload: PayloadConfig = field(default_factory=PayloadConfig)
    cascade: CascadeConfig | None = None
    scale: ScaleTarget = field(default_factory=ScaleTarget)


class GateWorker:
    """Inbox -> BGR -> relevance gate -> payload worker.

    `gate` None: every frame passes ungated. `switcher`: run-time gate versions
    (device/versions.py), swapped in between two batches on this worker's thread.
    """

    def __init__(
        self,
        inbox: GateInbox,
        sender: Sender,
        metrics: DeviceMetrics,
        setup: GateSetup,
        gate: RelevanceGate | None = None,
        switcher: GateSwitcher | None = None,
    ) -> None:
        self.inbox = inbox
        self.gate = gate
        self.gate_cfg = setup.gate
        self.metrics = metrics
        self.payloads = PayloadWorker(setup.sender, sender, setup.agent_id, setup.payload)
        self.scale = setup.scale
        # Dropped frames travel as header-only messages when the cascade says so.
        cascade = setup.cascade
        self.send_skipped = cascade is not None and cascade.enabled and cascade.send_skipped
        self.switcher = switcher
        self._cams: dict[str, tuple[CameraMetrics, DropLog]] = {}
        # Each camera's scaler contexts for the conversion out of the decoder.
        self._scalers: dict[str, BgrScaler] = {}
        self._finish = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gate", daemon=True)
        self.batches = 0

    def add_camera(self, camera_id: str) -> None:
        """Register a camera's metrics and drop log."""
        self._cams[camera_id] = (
            self.metrics.camera(camera_id),
            DropLog(log, camera_id, "relevance gate dropped"),
        )
        self._scalers[camera_id] = BgrScaler()

    def start(self) -> None:
        """Start the gate and payload threads."""
        if self.gate is not None and not self.gate.can_drop:
            log.info(
                "relevance gate: threshold 0 keeps every frame, so its classifier is not run "
                "(set device.gate.threshold above 0 to gate)"
            )
        self.payloads.start()
        self._thread.start()

    def finish(self, timeout: float | None = None) -> bool:
        """Process what is queued, then stop; True when both threads have ended."""
        self._finish.set()
        self._thread.join(timeout)
        done = not self._thread.is_alive()
        if done:
            self.payloads.finish()
        for _, drop_log in self._cams.values():
            drop_log.flush()
        return done

    def _run(self) -> None:
        max_batch = self.gate_cfg.max_batch if self.gate else 64
        while True:
            if self.switcher is not None:
                self._maybe_switch(self.switcher)
            # Waiting for a batch to fill only pays for a classifier that runs.
            gating = self.gate is not None and self.gate.can_drop
            delay = self.gate_cfg.max_delay_ms / 1000.0 if gating else 0.0
            batch = self.inbox.take(max_batch, delay, timeout_s=0.05)
            if not batch:
                if self._finish.is_set() and len(self.inbox) == 0:
                    return
                continue
            try:
                self._process(batch)
            except Exception:  # keep the agent alive; these frames are logged as lost
                log.exception("gate worker: %d frame(s) lost to an unexpected error", len(batch))

    def _maybe_switch(self, switcher: GateSwitcher) -> None:
        """Between two batches (this thread runs them all): serve a ready version."""
        switcher.poll()
        loaded = switcher.ready()
        if loaded is None or self.gate is None:
            return
        old, self.gate = self.gate, loaded.model
        switcher.switched(loaded, old.version)
        old.close()

    def _process(self, batch: list[GateItem]) -> None:
        # Frames are scaled to the edge model's input while converting out of the decoder
        # and gated together; dropped frames' messages keep their place in the order.
        frames = [item for item in batch if not item.skip_reason]
        images = [
            item.frame.bgr(
                self.scale.size_for(item.frame.width, item.frame.height),
                self._scalers.get(item.camera_id),
            )
            for item in frames
        ]
        gated = iter(self._gate(frames, images) if frames else [])
        for item in batch:
            k = _Kept(item, None, 0.0) if item.skip_reason else next(gated)
            if k is not None:
                self.payloads.put(k)

    def _gate(self, batch: list[GateItem], images: list[np.ndarray]) -> list[_Kept | None]:
        """Per frame: what goes to the payload worker (a frame, a dropped frame's message, None)."""
        out: list[_Kept | None] = []
        scores: np.ndarray | None = None
        keep: np.ndarray | None = None
        if self.gate is not None and not self.gate.can_drop:
            # Every frame passes (gate_score 1.0, as ungated); a canary still needs them.
            if self.switcher is not None:
                self.switcher.remember(images, self.gate, np.ones(len(images), bool))
        elif self.gate is not None:
            try:
                scores = self.gate.score(images)
                keep = self.gate.decide(scores)
                if self.switcher is not None:
                    self.switcher.remember(images, self.gate, keep)
            except Exception as exc:  # ORT errors are untyped
                log.error(
                    "relevance gate failed on a batch of %d, sent ungated: %s", len(batch), exc
                )
                scores = keep = None
            self.batches += 1
            self.metrics.gate_batch.observe(len(batch))
        now = time.monotonic()
        for i, item in enumerate(batch):
            m, drop_log = self._cams[item.camera_id]
            gate_score = 1.0
            if scores is not None and keep is not None:
                m.gate_latency.observe(now - item.queued_at)
                gate_score = float(scores[i])
                # A scene change is kept: the edge must see the new scene to re-seed.
                if not keep[i] and not item.calibration and not item.scene_change:
                    m.dropped_gate.inc()
                    drop_log.add(1, f"score {gate_score:.3f} < {self.gate_cfg.threshold:g}")
                    if self.send_skipped:
                        item.skip_reason = "gate"
                        out.append(_Kept(item, None, gate_score))
                    else:
                        out.append(None)
                    continue
            out.append(_Kept(item, images[i], gate_score))
        return out
