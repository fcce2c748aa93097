"""Checking and acknowledging frames from device agents (ZeroMQ ROUTER side).

Each message is [identity, header, payload]. The ingest thread does no O(pixels) work: it
parses the header, checks the payload's size and the JPEG's own dimensions (its SOF
marker) against the header and the limits, and queues the still-encoded payload. Whatever
is wrong turns into a REJECTED ack with a reason, a counter and a rate-limited log line;
the node never raises on input.

Whether a checked frame is taken is delivery's call (`precheck`, strata.edge.flow.delivery):
duplicates are recognised per (sender session, camera, sequence), so a bogus sequence
concerns only itself. A camera silent for `camera_idle_s` is forgotten, freeing its slot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from strata.edge.ingest.frames import QueuedFrame
from strata.edge.metrics import EdgeMetrics
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import frame_pb2
from strata.shared.imagecheck import ImageLimits, InvalidImageError, check_image
from strata.shared.logs import RateLimitedLog
from strata.shared.wire import MalformedMessage, make_ack, unpack_frame

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """The ack to send back and, when accepted, the frame to queue."""

    ack: frame_pb2.FrameAck
    frame: QueuedFrame | None


# Most dropped frames one message may tell (device.cascade.notice_run is far below).
MAX_RUN = 1000


def _check_run(h: frame_pb2.FrameHeader) -> None:
    """A run of dropped frames' notices (`earlier_skipped`): only on a SKIPPED header, at
    most MAX_RUN, frame indices increasing up to the header's own; MalformedMessage if not."""
    run = h.earlier_skipped
    if h.kind != frame_pb2.FRAME_KIND_SKIPPED:
        raise MalformedMessage("run", "earlier_skipped on a frame that is not SKIPPED", h)
    if len(run) > MAX_RUN:
        raise MalformedMessage("run", f"{len(run)} earlier_skipped, over {MAX_RUN}", h)
    last = -1
    for s in run:
        if s.frame_index <= last:
            raise MalformedMessage("run", "earlier_skipped frame indices not increasing", h)
        last = s.frame_index
    if last >= h.frame_index:
        raise MalformedMessage("run", "earlier_skipped not before the header's frame", h)


class _Camera:
    """Per-camera state: last sequence per sender session (least recent first), last seen."""

    __slots__ = ("last_seen", "sessions")

    def __init__(self, now: float) -> None:
        self.sessions: dict[int, int] = {}
        self.last_seen = now


class Ingest:
    """Turns received parts into acks and queued frames; keeps per-camera session state."""

    def __init__(
        self,
        cfg: EdgeConfig,
        metrics: EdgeMetrics,
        precheck: Callable[[frame_pb2.FrameHeader], frame_pb2.FrameAck | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        ing = cfg.ingest
        self.metrics = metrics
        # Delivery's answer for frames the node will not take (already settled, still
        # queued, over credit); None: take it.
        self.precheck = precheck
        self.max_payload = cfg.max_payload_mib << 20
        # Bounds the per-camera state (queues, sequences) a peer can make the node keep.
        self.max_cameras = cfg.batching.max_cameras
        self.limits = ImageLimits(ing.max_width, ing.max_height, ing.max_pixels)
        self.camera_idle_s = ing.camera_idle_s
        self.sessions_per_camera = ing.sessions_per_camera
        self._clock = clock
        self._cams: dict[str, _Camera] = {}
        self._log = RateLimitedLog(log)

    @property
    def cameras(self) -> int:
        """Cameras holding a slot."""
        return len(self._cams)

    def handle(self, parts: Sequence[Any], identity: Any = None) -> IngestResult:
        """Check one message (without its identity part); never raises."""
        header: frame_pb2.FrameHeader | None = None
        try:
            if len(parts) == 2 and memoryview(parts[1]).nbytes > self.max_payload:
                raise MalformedMessage(
                    "payload", f"payload of {memoryview(parts[1]).nbytes} bytes is over the limit"
                )
            msg = unpack_frame(parts)
            header = msg.header
            if header.earlier_skipped:
                _check_run(header)
            try:
                if header.kind != frame_pb2.FRAME_KIND_SKIPPED:
                    check_image(
                        msg.payload, header.encoding, header.width, header.height, self.limits, True
                    )
            except InvalidImageError as exc:
                raise MalformedMessage(exc.reason, str(exc), header) from None
            cam_id, seq, session = header.camera_id, header.sequence, header.session_id
            now = self._clock()
            cam = self._cams.get(cam_id)
            if cam is None:
                if len(self._cams) >= self.max_cameras:
                    raise MalformedMessage(
                        "cameras",
                        f"camera {cam_id!r} would be number {self.max_cameras + 1}; this node "
                        f"serves at most {self.max_cameras} (batching.max_cameras; silent ones "
                        f"are forgotten after ingest.camera_idle_s)",
                        header,
                    )
                cam = self._cams[cam_id] = _Camera(now)
            cam.last_seen = now
            last = cam.sessions.pop(session, 0)
            cam.sessions[session] = max(last, seq)  # most recent session last
            if len(cam.sessions) > self.sessions_per_camera:
                del cam.sessions[next(iter(cam.sessions))]
            if self.precheck is not None and (ack := self.precheck(header)) is not None:
                return IngestResult(ack, None)
        except MalformedMessage as exc:
            return self._reject(exc, identity)
        except Exception as exc:  # a parser bug must not take the node down
            return self._reject(
                MalformedMessage("header", f"cannot check: {exc}", header), identity
            )
        self.metrics.frames.labels("accepted").inc()
        frame = QueuedFrame(header, msg.payload, time.time_ns(), time.monotonic())
        return IngestResult(self._ack(header, frame_pb2.ACK_STATUS_QUEUED), frame)

    def restore(self, cameras: dict[str, list[tuple[int, int]]]) -> int:
        """Seed the session state of cameras from a checkpoint (before the node starts):
        (session, last sequence) pairs, oldest first. Returns the cameras restored."""
        now = self._clock()
        n = 0
        for cid, sessions in cameras.items():
            if cid not in self._cams and len(self._cams) >= self.max_cameras:
                break
            cam = self._cams[cid] = _Camera(now)
            for session, seq in sessions[-self.sessions_per_camera :]:
                cam.sessions[session] = seq
            n += 1
        return n

    def sessions(self, camera_id: str) -> list[int]:
        """The sender sessions remembered for a camera, least recent first."""
        cam = self._cams.get(camera_id)
        return list(cam.sessions) if cam is not None else []

    def idle_cameras(self) -> list[str]:
        """Cameras silent for longer than camera_idle_s."""
        horizon = self._clock() - self.camera_idle_s
        return [cid for cid, cam in self._cams.items() if cam.last_seen < horizon]

    def forget(self, camera_ids: Iterable[str]) -> None:
        """Free the slots and session state of these cameras."""
        for cid in camera_ids:
            self._cams.pop(cid, None)

    @staticmethod
    def _ack(header: frame_pb2.FrameHeader, status: int, reason: str = "") -> frame_pb2.FrameAck:
        ack = make_ack(header.camera_id, header.sequence, status, reason)
        ack.session_id = header.session_id
        return ack

    def _reject(self, exc: MalformedMessage, identity: Any) -> IngestResult:
        self.metrics.frames.labels("rejected").inc()
        self.metrics.rejected.labels(exc.reason).inc()
        # Name the frame in the ack when the header got far enough to be parsed.
        h = exc.header or frame_pb2.FrameHeader()
        self._log.warn(
            exc.reason,
            "rejected frame from peer %s camera=%r session=%d seq=%d (%s): %s",
            bytes(memoryview(identity)).hex() if identity is not None else "?",
            h.camera_id,
            h.session_id,
            h.sequence,
            exc.reason,
            exc.detail,
        )
        return IngestResult(
            self._ack(h, frame_pb2.ACK_STATUS_REJECTED, f"{exc.reason}: {exc.detail}"), None
        )
