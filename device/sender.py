"""The sender: one thread owning a ZeroMQ DEALER to the edge node's ROUTER.

Frames leave as [FrameHeader, payload] (strata.shared.wire), the payload buffer handed to
ZeroMQ without a copy. ZMQ_IMMEDIATE keeps ZeroMQ from queueing frames for an edge that is
not connected: while it is away, sends fail at once and frames wait in our own bounded,
counted spool instead of an invisible socket buffer.

Delivery: a frame is freed only by a final ack (see strata.device.outbox). The acks' credits
set each camera's in-flight window, their degradation level drives the camera's
SourceDegrader, and a new `edge_session` in an ack's EdgeInfo (the edge restarted) sends
everything in flight again at once. Every frame given up is counted per camera and reason
(`strata_device_frames_dropped_total{camera,reason}`) and logged, rate-limited.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from strata.shared.config.device import DegradeConfig, SenderConfig
from strata.shared.contracts import frame_pb2
from strata.shared.curve import CurveError, connect_curve
from strata.shared.wire import MalformedMessage, new_session_id, pack_frame, unpack_ack

from .degrade import REASON_POLICY, SourceDegrader
from .diskspool import DiskSpool
from .metrics import CameraMetrics, DeviceMetrics, DropLog
from .outbox import Outbox

PROCESSED = frame_pb2.ACK_STATUS_PROCESSED
DUPLICATE = frame_pb2.ACK_STATUS_DUPLICATE
REJECTED = frame_pb2.ACK_STATUS_REJECTED
SHED = frame_pb2.ACK_STATUS_SHED
QUEUED = frame_pb2.ACK_STATUS_QUEUED
BUSY = frame_pb2.ACK_STATUS_BUSY

log = logging.getLogger(__name__)

_POLL_MS = 5


# (camera id, the frame's header, the final ack) for each settled frame.
FinalHook = Callable[[str, frame_pb2.FrameHeader, frame_pb2.FrameAck], None]


class SenderError(RuntimeError):
    """The sender cannot start (e.g. a malformed edge endpoint)."""


class _Camera:
    __slots__ = ("box", "degrader", "drop_log", "m", "overflow_log")

    def __init__(
        self,
        box: Outbox,
        m: CameraMetrics,
        overflow_log: DropLog,
        drop_log: DropLog,
        degrader: SourceDegrader,
    ) -> None:
        self.box, self.m, self.overflow_log = box, m, overflow_log
        self.drop_log, self.degrader = drop_log, degrader


class Sender:
    """Sends kept frames to the edge, frees them on ack, resends after the ack timeout."""

    def __init__(
        self,
        endpoint: str,
        cfg: SenderConfig,
        metrics: DeviceMetrics,
        first_sequence: int | None = None,
        degrade: DegradeConfig | None = None,
        session_id: int | None = None,
        on_final: FinalHook | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.cfg = cfg
        self.metrics = metrics
        self.degrade_cfg = degrade or DegradeConfig()
        # Called (sender thread) with every frame settled by a final ack.
        self.on_final = on_final
        # Sequences start at the agent's start time in microseconds, so that a restarted
        # agent continues above what the edge saw from the previous run.
        self.first_sequence = first_sequence or time.time_ns() // 1000
        # The sender session: sequences and duplicates belong to (session, camera).
        self.session_id = session_id or new_session_id()
        # The edge's process session (from EdgeInfo); a change means it restarted.
        self.edge_session = 0
        self._cams: dict[str, _Camera] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._drain_deadline = float("inf")
        self._thread = threading.Thread(target=self._run, name="sender", daemon=True)
        self._ready = threading.Event()
        self.started = False
        self.error: str | None = None
        # Hooks (sender thread, or the submitting thread for on_lost): every ack as it
        # arrives, and frames given up on before the edge had them (an H.264 stream needs
        # a keyframe after that).
        self.on_ack: Callable[[frame_pb2.FrameAck], None] | None = None
        self.on_lost: Callable[[str], None] | None = None

    def add_camera(self, camera_id: str) -> Outbox:
        """Register a camera (before start or while running)."""
        disk = DiskSpool(self.cfg.spool_dir, camera_id) if self.cfg.spool_dir else None
        box = Outbox(
            camera_id,
            self.cfg.window,
            self.cfg.spool_frames,
            int(self.cfg.spool_mb * 1024 * 1024),
            self.first_sequence,
            disk,
            self.session_id,
        )
        if box.restored:
            log.info(
                "camera %s: %d unacked frame(s) from a previous run in %s go first",
                camera_id,
                box.restored,
                disk.dir if disk else "",
            )
        cam = _Camera(
            box,
            self.metrics.camera(camera_id),
            DropLog(log, camera_id, "spool full, dropped the oldest", logging.WARNING),
            DropLog(log, camera_id, "gave up on", logging.WARNING),
            SourceDegrader(self.degrade_cfg),
        )
        with self._lock:
            self._cams = {**self._cams, camera_id: cam}
        return box

    def outbox(self, camera_id: str) -> Outbox:
        """The camera's outbox (spool and window)."""
        return self._cams[camera_id].box

    def degrader(self, camera_id: str) -> SourceDegrader:
        """The camera's source degradation (the camera thread reads it)."""
        return self._cams[camera_id].degrader

    def submit(self, camera_id: str, header: frame_pb2.FrameHeader, payload: Any) -> int:
        """Queue a frame for sending (any thread); returns its sequence number."""
        cam = self._cams[camera_id]
        header.session_id = self.session_id
        res = cam.box.put(header, payload)
        if res.waited:
            cam.m.spooled.inc()
        if res.overflowed:
            self._overflowed(cam, res.overflowed)
        cam.m.spool_frames.set(cam.box.spooled)
        return res.sequence

    def _overflowed(self, cam: _Camera, seqs: tuple[int, ...]) -> None:
        if self.on_lost is not None:
            self.on_lost(cam.box.camera_id)
        cam.m.overflowed.inc(len(seqs))
        cam.m.dropped("spool_full").inc(len(seqs))
        cam.overflow_log.add(len(seqs), f"last sequence {seqs[-1]}")

    def pending(self) -> int:
        """Frames not yet acked, over all cameras."""
        return sum(c.box.pending for c in self._cams.values())

    def start(self) -> None:
        """Start the sender thread; SenderError if it cannot connect its socket."""
        self.started = True
        self._thread.start()
        self._ready.wait(10.0)
        if self.error is not None:
            raise SenderError(self.error)

    def stop(self, drain_timeout_s: float = 0.0) -> None:
        """Stop after every frame is acked or `drain_timeout_s` has passed; then close."""
        self._drain_deadline = time.monotonic() + drain_timeout_s
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for cam in self._cams.values():
            cam.overflow_log.flush()
            cam.drop_log.flush()
            left = cam.box.pending
            if left:
                log.warning(
                    "camera %s: %d frame(s) not acked by the edge at shutdown (%s)",
                    cam.box.camera_id,
                    left,
                    f"kept in {cam.box.disk.dir} for the next run" if cam.box.disk else "lost",
                )

    def _run(self) -> None:
        import zmq

        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        curve = self.cfg.curve
        try:
            if curve.secret_key:
                connect_curve(sock, curve.secret_key, curve.server_key)
            sock.connect(self.endpoint)
        except CurveError as exc:
            self.error = f"cannot use the CURVE keys: {exc}"
            sock.close(0)
            self._ready.set()
            return
        except zmq.ZMQError as exc:
            self.error = f"cannot use edge endpoint {self.endpoint!r}: {exc}"
            sock.close(0)
            self._ready.set()
            return
        self._ready.set()
        log.info("sending to edge %s", self.endpoint)
        try:
            while True:
                if self._stop.is_set() and (
                    self.pending() == 0 or time.monotonic() >= self._drain_deadline
                ):
                    break
                if sock.poll(_POLL_MS, zmq.POLLIN):
                    self._read_acks(sock)
                self._send_ready(sock)
        finally:
            sock.close(0)

    def _read_acks(self, sock: Any) -> None:
        import zmq

        now = time.monotonic()
        while True:
            try:
                parts = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                ack = unpack_ack(parts)
            except MalformedMessage as exc:
                log.warning("ignored a malformed ack from the edge: %s", exc.detail)
                continue
            cam = self._cams.get(ack.camera_id)
            if cam is None:
                log.warning("ack for unknown camera %r ignored", ack.camera_id)
                continue
            if self.on_ack is not None:
                self.on_ack(ack)
            if ack.HasField("edge") and ack.edge.edge_session:
                self._edge_seen(ack.edge.edge_session)
            self._apply(cam, ack, now)
            cam.m.inflight_frames.set(cam.box.inflight)

    def _edge_seen(self, edge_session: int) -> None:
        if edge_session == self.edge_session:
            return
        restarted = self.edge_session != 0
        self.edge_session = edge_session
        if not restarted:
            return
        for cam in self._cams.values():
            back, overflowed = cam.box.resend_all()
            if back:
                log.info(
                    "camera %s: the edge restarted; resending %d frame(s) it never settled",
                    cam.box.camera_id,
                    back,
                )
            if overflowed:
                self._overflowed(cam, overflowed)

    def _apply(self, cam: _Camera, ack: frame_pb2.FrameAck, now: float) -> None:
        box = cam.box
        box.set_window(ack.credits)
        if ack.credits:
            cam.m.credits.set(box.window)
        cam.degrader.set_level(ack.degrade_level)
        status = ack.status
        if status == QUEUED:
            box.queued(ack.sequence, now)
            return
        if status == BUSY:
            if box.busy(ack.sequence, now, ack.retry_after_ms / 1e3):
                cam.m.busy.inc()
            return
        if status not in (PROCESSED, DUPLICATE, REJECTED, SHED):
            log.warning(
                "camera %s: ack with unexpected status %d for frame %d ignored",
                box.camera_id,
                status,
                ack.sequence,
            )
            return
        item = box.ack(ack.sequence)
        if item is None:
            return  # a late ack for a frame already settled
        if self.on_final is not None:
            self.on_final(box.camera_id, item.header, ack)
        if status == PROCESSED:
            cam.m.acked.inc()
            cam.m.processed.inc()
            cam.degrader.rate.add()
        elif status == DUPLICATE:
            cam.m.acked.inc()
            cam.m.duplicate.inc()
        elif status == REJECTED:
            cam.m.rejected.inc()
            cam.m.dropped("rejected").inc()
            log.warning(
                "camera %s: edge rejected frame %d: %s",
                ack.camera_id,
                ack.sequence,
                ack.reason or "no reason given",
            )
        else:
            reason = ack.reason or "unspecified"
            cam.m.dropped(f"shed_{reason}").inc()
            cam.drop_log.add(1, f"the edge shed it: {reason}")

    def _send_ready(self, sock: Any) -> None:
        import zmq

        now = time.monotonic()
        for cam in self._cams.values():
            box = cam.box
            cam.degrader.rate.tick()
            back, overflowed = box.expire(now, self.cfg.ack_timeout_s)
            if back:
                log.info(
                    "camera %s: no word from the edge for %.1fs, resending %d frame(s)",
                    box.camera_id,
                    self.cfg.ack_timeout_s,
                    back,
                )
            if overflowed:
                self._overflowed(cam, overflowed)
            cam.degrader.observe_backlog(box.spooled, box.window)
            cam.m.degrade_level.set(cam.degrader.level)
            limit = cam.degrader.waiting_limit(box.window)
            if limit is not None:
                dropped = box.limit_waiting(limit, self.degrade_cfg.drop_policy)
                if dropped:
                    if self.on_lost is not None:
                        self.on_lost(box.camera_id)
                    cam.m.dropped(REASON_POLICY).inc(len(dropped))
                    cam.drop_log.add(
                        len(dropped),
                        f"edge overloaded, level 3: {self.degrade_cfg.drop_policy} waiting dropped",
                    )
            while (item := box.take(now)) is not None:
                item.header.send_ns = time.time_ns()
                try:
                    sock.send_multipart(
                        pack_frame(item.header, item.payload), zmq.NOBLOCK, copy=False
                    )
                except zmq.Again:
                    box.unsend(item)  # edge not connected (or its queue full): keep it
                    break
                if item.sends == 1 and item.header.kind == frame_pb2.FRAME_KIND_SKIPPED:
                    cam.m.skipped_sent.inc()
                elif item.sends == 1:
                    cam.m.sent.inc()
                    cam.m.bytes_sent.inc(item.nbytes)
                else:
                    cam.m.retransmitted.inc()
            cam.m.spool_frames.set(box.spooled)
            cam.m.inflight_frames.set(box.inflight)
