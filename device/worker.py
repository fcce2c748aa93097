"""After the motion gate: the gate worker and the encoder, each in its own thread.

The gate worker batches frames across cameras, converts them to BGR, runs the relevance
gate and passes the frames it keeps to the encoder, which JPEG-encodes them (only kept
frames are ever encoded) and hands them to the sender. Decoding, gating and encoding run
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
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from strata.shared.config.device import GateConfig, SenderConfig
from strata.shared.contracts import common_pb2, frame_pb2

from .gate import RelevanceGate
from .inbox import GateInbox, GateItem
from .metrics import CameraMetrics, DeviceMetrics, DropLog
from .sender import Sender

log = logging.getLogger(__name__)

# Kept frames waiting for the encoder; when full, the gate worker waits (backpressure
# reaches the cameras' inbox, where live cameras drop and count).
_ENCODE_QUEUE = 32


@dataclass(frozen=True, slots=True)
class _Kept:
    item: GateItem
    image: np.ndarray
    gate_score: float


class Encoder:
    """Encodes kept frames (JPEG or raw BGR) and submits them to the sender, in order."""

    def __init__(self, cfg: SenderConfig, sender: Sender, agent_id: str) -> None:
        self.sender = sender
        self.agent_id = agent_id
        self.jpeg = cfg.encoding == "jpeg"
        self._params = [cv2.IMWRITE_JPEG_QUALITY, cfg.jpeg_quality]
        self._queue: queue.Queue[_Kept | None] = queue.Queue(_ENCODE_QUEUE)
        self._thread = threading.Thread(target=self._run, name="encoder", daemon=True)

    def start(self) -> None:
        """Start the encoder thread."""
        self._thread.start()

    def put(self, kept: _Kept) -> None:
        """Queue a kept frame (waits while the encoder is behind)."""
        self._queue.put(kept)

    def finish(self) -> None:
        """Encode what is queued, then stop."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (kept := self._queue.get()) is not None:
            try:
                self._send(kept)
            except Exception:  # keep the agent alive; the frame is logged as lost
                log.exception("camera %s: frame lost to an encoder error", kept.item.camera_id)

    def _send(self, kept: _Kept) -> None:
        item, image = kept.item, kept.image
        payload: Any
        if self.jpeg:
            ok, payload = cv2.imencode(".jpg", image, self._params)
            if not ok:
                log.error("camera %s: JPEG encoding failed; frame lost", item.camera_id)
                return
            encoding = common_pb2.ENCODING_JPEG
        else:
            payload = np.ascontiguousarray(image)
            encoding = common_pb2.ENCODING_BGR
        header = frame_pb2.FrameHeader(
            agent_id=self.agent_id,
            camera_id=item.camera_id,
            capture_ns=item.capture_ns,
            width=image.shape[1],
            height=image.shape[0],
            encoding=encoding,
            motion_score=item.motion_score,
            gate_score=kept.gate_score,
            frame_index=item.index,
        )
        self.sender.submit(item.camera_id, header, payload)


class GateWorker:
    """Inbox -> BGR -> relevance gate -> encoder."""

    def __init__(
        self,
        inbox: GateInbox,
        gate: RelevanceGate | None,
        gate_cfg: GateConfig,
        sender_cfg: SenderConfig,
        sender: Sender,
        metrics: DeviceMetrics,
        agent_id: str,
    ) -> None:
        self.inbox = inbox
        self.gate = gate
        self.gate_cfg = gate_cfg
        self.metrics = metrics
        self.encoder = Encoder(sender_cfg, sender, agent_id)
        self._cams: dict[str, tuple[CameraMetrics, DropLog]] = {}
        self._finish = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gate", daemon=True)
        self.batches = 0

    def add_camera(self, camera_id: str) -> None:
        """Register a camera's metrics and drop log."""
        self._cams[camera_id] = (
            self.metrics.camera(camera_id),
            DropLog(log, camera_id, "relevance gate dropped"),
        )

    def start(self) -> None:
        """Start the gate and encoder threads."""
        self.encoder.start()
        self._thread.start()

    def finish(self, timeout: float | None = None) -> bool:
        """Process what is queued, then stop; True when both threads have ended."""
        self._finish.set()
        self._thread.join(timeout)
        done = not self._thread.is_alive()
        if done:
            self.encoder.finish()
        for _, drop_log in self._cams.values():
            drop_log.flush()
        return done

    def _run(self) -> None:
        max_batch = self.gate_cfg.max_batch if self.gate else 64
        delay = self.gate_cfg.max_delay_ms / 1000.0 if self.gate else 0.0
        while True:
            batch = self.inbox.take(max_batch, delay, timeout_s=0.05)
            if not batch:
                if self._finish.is_set() and len(self.inbox) == 0:
                    return
                continue
            try:
                self._process(batch)
            except Exception:  # keep the agent alive; these frames are logged as lost
                log.exception("gate worker: %d frame(s) lost to an unexpected error", len(batch))

    def _process(self, batch: list[GateItem]) -> None:
        images = [item.frame.bgr() for item in batch]
        scores: np.ndarray | None = None
        keep: np.ndarray | None = None
        if self.gate is not None:
            try:
                scores = self.gate.score(images)
                keep = self.gate.decide(scores)
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
                if not keep[i]:
                    m.dropped_gate.inc()
                    drop_log.add(1, f"score {gate_score:.3f} < {self.gate_cfg.threshold:g}")
                    continue
            self.encoder.put(_Kept(item, images[i], gate_score))
