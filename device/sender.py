"""The sender: one thread owning a ZeroMQ DEALER to the edge node's ROUTER.

Frames leave as [FrameHeader, payload] (strata.shared.wire), the payload buffer handed to
ZeroMQ without a copy. ZMQ_IMMEDIATE keeps ZeroMQ from queueing frames for an edge that is
not connected: while it is away, sends fail at once and frames wait in our own bounded,
counted spool instead of an invisible socket buffer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from strata.shared.config.device import SenderConfig
from strata.shared.contracts import frame_pb2
from strata.shared.curve import CurveError, connect_curve
from strata.shared.wire import MalformedMessage, new_session_id, pack_frame, unpack_ack

from .diskspool import DiskSpool
from .metrics import CameraMetrics, DeviceMetrics, DropLog
from .outbox import Outbox

log = logging.getLogger(__name__)

_POLL_MS = 5


class SenderError(RuntimeError):
    """The sender cannot start (e.g. a malformed edge endpoint)."""


class _Camera:
    __slots__ = ("box", "m", "overflow_log")

    def __init__(self, box: Outbox, m: CameraMetrics, overflow_log: DropLog) -> None:
        self.box, self.m, self.overflow_log = box, m, overflow_log


class Sender:
    """Sends kept frames to the edge, frees them on ack, resends after the ack timeout."""

    def __init__(
        self,
        endpoint: str,
        cfg: SenderConfig,
        metrics: DeviceMetrics,
        first_sequence: int | None = None,
        session_id: int | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.cfg = cfg
        self.metrics = metrics
        # Sequences start at the agent's start time in microseconds, so that a restarted
        # agent continues above what the edge saw from the previous run.
        self.first_sequence = first_sequence or time.time_ns() // 1000
        # The edge keys duplicates by (session, camera): a new run is a new session.
        self.session_id = session_id or new_session_id()
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
        )
        with self._lock:
            self._cams = {**self._cams, camera_id: cam}
        return box

    def submit(self, camera_id: str, header: frame_pb2.FrameHeader, payload: Any) -> int:
        """Queue a frame for sending (any thread); returns its sequence number."""
        cam = self._cams[camera_id]
        header.session_id = self.session_id
        res = cam.box.put(header, payload)
        if res.waited:
            cam.m.spooled.inc()
        if res.overflowed:
            if self.on_lost is not None:
                self.on_lost(camera_id)
            cam.m.overflowed.inc(len(res.overflowed))
            cam.overflow_log.add(len(res.overflowed), f"last sequence {res.overflowed[-1]}")
        cam.m.spool_frames.set(cam.box.spooled)
        return res.sequence

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
            item = cam.box.ack(ack.sequence)
            if item is None:
                continue  # a late ack for a frame already resent and acked
            if ack.status == frame_pb2.ACK_STATUS_REJECTED:
                cam.m.rejected.inc()
                log.warning(
                    "camera %s: edge rejected frame %d: %s",
                    ack.camera_id,
                    ack.sequence,
                    ack.reason or "no reason given",
                )
            else:
                cam.m.acked.inc()
            cam.m.inflight_frames.set(cam.box.inflight)

    def _send_ready(self, sock: Any) -> None:
        import zmq

        now = time.monotonic()
        for cam in self._cams.values():
            box = cam.box
            back, overflowed = box.expire(now, self.cfg.ack_timeout_s)
            if back:
                log.info(
                    "camera %s: no ack for %.1fs, resending %d frame(s) from the oldest",
                    box.camera_id,
                    self.cfg.ack_timeout_s,
                    back,
                )
            if overflowed:
                if self.on_lost is not None:
                    self.on_lost(box.camera_id)
                cam.m.overflowed.inc(len(overflowed))
                cam.overflow_log.add(len(overflowed), f"last sequence {overflowed[-1]}")
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
