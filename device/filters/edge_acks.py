"""What the edge says in its acks, applied to the device: the model's input size, keyframe
requests, a new edge session, calibration feedback, and frames given up before it had them."""

from __future__ import annotations

import logging
from typing import Any

from strata.shared.contracts import frame_pb2

from .cascade import CascadePolicy

log = logging.getLogger(__name__)


class EdgeLink:
    """What the edge says in its acks, applied: the model's input size (frames are scaled
    to it), keyframe requests and a new edge session (the H.264 streams restart), and
    calibration feedback (each camera's policy)."""

    def __init__(
        self,
        policies: dict[str, CascadePolicy],
        scale: Any,
        encoder: Any,
        scale_to_model: bool,
    ) -> None:
        self.policies = policies
        self.scale = scale
        self.encoder = encoder
        self.scale_to_model = scale_to_model
        self.edge_session = 0
        self.edge_sessions: dict[str, int] = {}

    def on_ack(self, ack: frame_pb2.FrameAck) -> None:
        """Sender thread: one ack."""
        if ack.HasField("edge"):
            e = ack.edge
            size = (e.model_input_width, e.model_input_height)
            if self.scale_to_model and all(size) and self.scale.get() != size:
                log.info("edge model input %dx%d: frames are scaled to fit it", *size)
                self.scale.set(*size)
            # Per edge: with several edges (routing) acks of different nodes interleave.
            last = self.edge_sessions.get(e.edge_id, 0)
            if e.edge_session and e.edge_session != last:
                if last:
                    # A restarted node has no decoder state: every stream restarts.
                    self.encoder.request_keyframes("new edge session")
                self.edge_sessions[e.edge_id] = e.edge_session
                self.edge_session = e.edge_session
        if ack.keyframe_request:
            self.encoder.request_keyframe(ack.camera_id, "the edge asked")
        policy = self.policies.get(ack.camera_id)
        if policy is not None and ack.HasField("feedback"):
            policy.feedback(ack.feedback)

    def on_lost(self, camera_id: str, frames: int) -> None:
        """Frames were given up before the edge had them: the camera's H.264 stream
        restarts, and its estimate must not speak for them."""
        self.encoder.request_keyframe(camera_id, "a frame was given up")
        policy = self.policies.get(camera_id)
        if policy is not None:
            policy.lost(frames)
