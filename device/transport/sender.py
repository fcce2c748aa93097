"""The sender: one thread owning a ZeroMQ DEALER to the edge node's ROUTER.

Frames leave as [FrameHeader, payload] (strata.shared.wire), the payload buffer handed to
ZeroMQ without a copy. ZMQ_IMMEDIATE keeps ZeroMQ from queueing frames for an edge that is
not connected: while it is away, sends fail at once and frames wait in our own bounded,
counted spool instead of an invisible socket buffer.

Delivery: a frame is freed only by a final ack (see transport/outbox.py). The acks' credits
set each camera's in-flight window, their degradation level drives the camera's
SourceDegrader, and a new `edge_session` in an ack's EdgeInfo (the edge restarted) sends
everything in flight again at once. Every frame given up is counted per camera and reason
(`strata_device_frames_dropped_total{camera,reason}`) and logged, rate-limited.

Several edges (transport/edges.py, transport/routing.py): one DEALER per edge, all owned
by this thread. Each camera sends to the edge the ring gives it; when it moves (its edge went
silent, or membership changed) its unsettled frames go back to its spool and are resent to
the new edge, marked `resent`. Final acks count from whichever edge sends them (the result
was published there); QUEUED, BUSY and credits only from the camera's current edge.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from strata.shared.config.device import DegradeConfig, SenderConfig
from strata.shared.contracts import frame_pb2
from strata.shared.curve import CurveError, connect_curve
from strata.shared.wire import (
    MalformedMessage,
    is_final,
    new_session_id,
    pack_frame,
    unpack_ack,
)

from ..metrics import DeviceMetrics, DropLog
from .degrade import REASON_POLICY, SourceDegrader
from .diskspool import DiskSpool
from .edges import Directory, EdgeConnectError, EdgeLink, EdgePool, heartbeat_header
from .outbox import Outbox, OutboxLimits
from .routing import CameraRouter
from .sender_parts import SenderCamera, SenderHooks, SenderSetup

log = logging.getLogger(__name__)

_POLL_MS = 5
_NOBLOCK = 1  # zmq.NOBLOCK (zmq.DONTWAIT)
_MORE = 1 | 2  # zmq.NOBLOCK | zmq.SNDMORE


# How often the placement is recomputed (membership, liveness, progressive moves).
_ROUTE_S = 0.1
# How often a camera with nothing waiting to be sent has its timers looked at (ack timeout,
# degradation's calm time, the processed rate: all of them seconds long). A camera with
# frames waiting, or still marked backlogged, is looked at on every pass. Every 20 ms cost
# 0.07 ms a frame at 16 cameras of 10 fps (each look: a lock, five calls).
_CHORES_S = 0.1


class SenderError(RuntimeError):
    """The sender cannot start (e.g. a malformed edge endpoint)."""


class Sender:
    """Sends kept frames to the edge, frees them on ack, resends after the ack timeout."""

    def __init__(
        self,
        endpoint: str | Sequence[str],
        cfg: SenderConfig,
        metrics: DeviceMetrics,
        degrade: DegradeConfig | None = None,
        *,
        setup: SenderSetup | None = None,
        hooks: SenderHooks | None = None,
    ) -> None:
        self.endpoints = [endpoint] if isinstance(endpoint, str) else list(endpoint)
        if not self.endpoints:
            raise SenderError("no edge endpoint")
        self.endpoint = self.endpoints[0]
        self.cfg = cfg
        setup = setup or SenderSetup()
        self.routing = setup.routing
        self.agent_id = setup.agent_id
        self.hooks = hooks or SenderHooks()
        self.router = CameraRouter(self.routing)
        self._models: dict[str, str] = {}
        # Heartbeats and liveness only matter with a choice of edges.
        self.multi = len(self.endpoints) > 1 or any(e.startswith("dns://") for e in self.endpoints)
        self.pool: EdgePool | None = None
        self.metrics = metrics
        self.degrade_cfg = degrade or DegradeConfig()
        self.first_sequence = setup.first_sequence or time.time_ns() // 1000
        self.session_id = setup.session_id or new_session_id()
        self._cams: dict[str, SenderCamera] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._drain_deadline = float("inf")
        self._thread = threading.Thread(target=self._run, name="sender", daemon=True)
        self._ready = threading.Event()
        self._next_chores = 0.0
        self.started = False
        self.error: str | None = None

    def add_camera(self, camera_id: str, model: str = "") -> Outbox:
        """Register a camera (before start or while running); `model`: what it asks the
        edge for (routing affinity)."""
        disk = DiskSpool(self.cfg.spool_dir, camera_id) if self.cfg.spool_dir else None
        # A camera added at run time (perhaps one removed before) starts its sequences at
        # now in microseconds: above anything it sent earlier in this session.
        first = time.time_ns() // 1000 if self.started else self.first_sequence
        box = Outbox(camera_id, OutboxLimits.from_config(self.cfg), first, disk, self.session_id)
        if box.restored:
            log.info(
                "camera %s: %d unacked frame(s) from a previous run in %s go first",
                camera_id,
                box.restored,
                disk.dir if disk else "",
            )
        # The model the camera asks for rides in every header (FrameHeader.model).
        self._models[camera_id] = model or self.routing.model
        cam = SenderCamera(
            box,
            self.metrics.camera(camera_id),
            DropLog(log, camera_id, "spool full, dropped the oldest", logging.WARNING),
            DropLog(log, camera_id, "gave up on", logging.WARNING),
            SourceDegrader(self.degrade_cfg),
        )
        with self._lock:
            self._cams = {**self._cams, camera_id: cam}
            self.router.add_camera(camera_id, model)
        return box

    def remove_camera(self, camera_id: str) -> int:
        """Forget a camera (after its frames are settled); returns frames it still held."""
        with self._lock:
            cam = self._cams.get(camera_id)
            if cam is None:
                return 0
            self._cams = {k: v for k, v in self._cams.items() if k != camera_id}
            self.router.remove_camera(camera_id)
        cam.overflow_log.flush()
        cam.drop_log.flush()
        return cam.box.pending_frames()

    def edge_of(self, camera_id: str) -> str | None:
        """The edge a camera sends to now (None: none up)."""
        cam = self._cams.get(camera_id)
        return cam.edge if cam is not None else None

    def outbox(self, camera_id: str) -> Outbox:
        """The camera's outbox (spool and window)."""
        return self._cams[camera_id].box

    def degrader(self, camera_id: str) -> SourceDegrader:
        """The camera's source degradation (the camera thread reads it)."""
        return self._cams[camera_id].degrader

    def submit(self, camera_id: str, header: frame_pb2.FrameHeader, payload: Any) -> int:
        """Queue a frame for sending (any thread); returns its sequence number (0: the
        camera was removed meanwhile; counted and logged)."""
        cam = self._cams.get(camera_id)
        if cam is None:
            self.metrics.dropped_reason.labels(camera_id, "removed").inc()
            log.warning("camera %s: a frame arrived after the camera was removed", camera_id)
            return 0
        header.session_id = self.session_id
        if not header.model:
            header.model = self._models.get(camera_id, "")
        res = cam.box.put(header, payload)
        if res.waited:
            cam.m.spooled.inc()
        if res.overflowed:
            self._overflowed(cam, res.overflowed)
        return res.sequence

    def _overflowed(self, cam: SenderCamera, seqs: tuple[int, ...]) -> None:
        if self.hooks.on_lost is not None:
            self.hooks.on_lost(cam.box.camera_id, len(seqs))
        cam.m.overflowed.inc(len(seqs))
        cam.m.dropped("spool_full").inc(len(seqs))
        pool, edge = self.pool, cam.edge
        link = pool.links.get(edge) if pool is not None and edge is not None else None
        why = "edge unreachable, " if link is not None and not link.reachable else ""
        cam.overflow_log.add(len(seqs), f"{why}last sequence {seqs[-1]}")

    def pending_of(self, camera_id: str) -> int:
        """Frames of one camera not yet settled (0 for an unknown camera)."""
        cam = self._cams.get(camera_id)
        return cam.box.pending if cam is not None else 0

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

    def _connect(self, endpoint: str) -> Any:
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
            sock.connect(endpoint)
        except CurveError as exc:
            sock.close(0)
            raise EdgeConnectError(f"cannot use the CURVE keys: {exc}") from None
        except zmq.ZMQError as exc:
            sock.close(0)
            raise EdgeConnectError(f"cannot use edge endpoint {endpoint!r}: {exc}") from None
        log.info("connected to edge %s", endpoint)
        return sock

    def _run(self) -> None:
        try:
            directory = Directory(self.endpoints, self.routing.resolve_interval_s)
            beat = heartbeat_header(self.agent_id, self.session_id) if self.multi else None
            pool = EdgePool(directory, self.routing, self._connect, beat)
            pool.sync()
        except (EdgeConnectError, ValueError) as exc:
            self.error = str(exc)
            self._ready.set()
            return
        self.pool = pool
        self._ready.set()
        next_route = 0.0
        try:
            while True:
                if self._stop.is_set() and (
                    self.pending() == 0 or time.monotonic() >= self._drain_deadline
                ):
                    break
                for link in pool.poll(_POLL_MS):
                    self._read_acks(link)
                now = time.monotonic()
                routed = now >= next_route
                if routed:
                    next_route = now + _ROUTE_S
                    self._route(pool, now)
                self._send_ready(pool, chores=routed)
        finally:
            for cam in self._cams.values():  # what is left at the end, as it is
                self._show(cam)
            pool.close()

    def _route(self, pool: EdgePool, now: float) -> None:
        """Membership, heartbeats, liveness, then the moves the ring asks for."""
        try:
            _, removed = pool.sync()
        except EdgeConnectError as exc:
            removed = []
            log.warning("%s", exc)
        for link in removed:
            log.warning("edge %s is no longer listed; its cameras move", link.endpoint)
        gone_links = {link.endpoint: link for link in removed}
        pool.beat(now)
        came, went = pool.liveness(now)
        for link in came:
            log.info("edge %s is up (%s)", link.endpoint, link.info.edge_id or "no EdgeInfo yet")
        for link in went:
            self.metrics.edge_down.labels(link.endpoint).inc()
            log.warning(
                "edge %s: nothing heard for %.1fs; it leaves the ring, its cameras move",
                link.endpoint,
                self.routing.edge_timeout_s,
            )
        self._reachability(pool, now)
        with self._lock:
            members = pool.members(self.routing.use_capacity)
            moves = self.router.update(members, now, pool.starting(now))
        for mv in moves:
            cam = self._cams.get(mv.camera_id)
            if cam is None:
                continue
            cam.edge = mv.new
            if mv.old is not None:
                old = pool.links.get(mv.old) or gone_links.get(mv.old)
                old_id = old.info.edge_id if old is not None else ""
                # The same edge under another address: nothing to restore.
                new = pool.links.get(mv.new)
                cam.previous_edge = "" if new is not None and new.info.edge_id == old_id else old_id
            back, overflowed = cam.box.resend_all()
            if overflowed:
                self._overflowed(cam, overflowed)
            if mv.old is not None:
                self.metrics.moves.labels("failover" if mv.forced else "rebalance").inc()
                log.info(
                    "camera %s: %s -> %s (%s), resending %d unsettled frame(s)",
                    mv.camera_id,
                    mv.old,
                    mv.new,
                    "its edge is gone" if mv.forced else "rebalance",
                    back,
                )
            # A camera's first edge needs no hook: its stream starts there anyway (an H.264
            # encoder opens with a keyframe); only a move from another edge restarts it.
            if self.hooks.on_move is not None and mv.old is not None:
                self.hooks.on_move(mv.camera_id, mv.new)
        if moves or came or went or removed:
            per: dict[str, int] = dict.fromkeys(pool.links, 0)
            for cam in self._cams.values():
                if cam.edge in per:
                    per[cam.edge] += 1
            for ep, n in per.items():
                self.metrics.edge_cameras.labels(ep).set(n)
                self.metrics.edge_up.labels(ep).set(1 if pool.links[ep].up else 0)

    def _reachability(self, pool: EdgePool, now: float) -> None:
        """Say and count an edge gone silent to what it was sent, and its return (a
        single edge too, which stays the place to send: its frames wait in the spool)."""
        lost, back = pool.reachability(now)
        for link in lost:
            if link.lost_unheard:
                log.warning(
                    "edge %s has not answered in %.1fs (not started yet, or unreachable); "
                    "frames wait in the spool",
                    link.endpoint,
                    now - link.asked_at,
                )
                continue
            log.warning(
                "edge %s unreachable: no answer for %.1fs to what was sent (killed, crashed "
                "or cut off); frames wait in the spool and go again when it answers",
                link.endpoint,
                now - link.asked_at,
            )
        for link in back:
            if link.lost_unheard:
                log.info("edge %s answers", link.endpoint)
                continue
            log.info(
                "edge %s answers again after %.1fs unreachable", link.endpoint, now - link.lost_at
            )
        gone = {link.endpoint for link in lost if not link.lost_unheard}
        returned = {link.endpoint for link in back if not link.lost_unheard}
        if not gone and not returned:
            return
        for cam in self._cams.values():
            if cam.edge in gone:
                cam.m.edge_unreachable.inc()
                # The level its last ack asked for is no one's now: a dead edge is not an
                # overloaded one (what overflows the spool meanwhile is counted as such).
                cam.degrader.set_level(0)
            elif cam.edge in returned:
                cam.m.edge_reconnects.inc()

    def _read_acks(self, link: EdgeLink) -> None:
        import zmq

        now = time.monotonic()
        sock = link.sock
        # Read while the socket says a message is there: no zmq.Again raised per pass.
        while sock.get(zmq.EVENTS) & zmq.POLLIN:
            parts = sock.recv_multipart(zmq.NOBLOCK)
            try:
                ack = unpack_ack(parts)
            except MalformedMessage as exc:
                log.warning("ignored a malformed ack from the edge: %s", exc.detail)
                continue
            if link.heard(now, ack.edge if ack.HasField("edge") else None):
                self._edge_restarted(link)
            if self.hooks.on_ack is not None:
                self.hooks.on_ack(ack)  # heartbeat answers too: their EdgeInfo sizes frames
            if ack.status == frame_pb2.ACK_STATUS_HEARTBEAT:
                continue
            cam = self._cams.get(ack.camera_id)
            if cam is None:
                log.warning("ack for unknown camera %r ignored", ack.camera_id)
                continue
            if cam.edge != link.endpoint and not is_final(ack.status):
                continue  # QUEUED/BUSY/credits from an edge the camera has left
            self._apply(cam, ack, now)

    def _edge_restarted(self, link: EdgeLink) -> None:
        for cam in self._cams.values():
            if cam.edge != link.endpoint:
                continue
            back, overflowed = cam.box.resend_all()
            if back:
                log.info(
                    "camera %s: the edge restarted; resending %d frame(s) it never settled",
                    cam.box.camera_id,
                    back,
                )
            if overflowed:
                self._overflowed(cam, overflowed)

    def _apply(self, cam: SenderCamera, ack: frame_pb2.FrameAck, now: float) -> None:
        box = cam.box
        box.set_window(ack.credits)
        if ack.credits and box.window != cam.shown_credits:
            cam.shown_credits = box.window
            cam.m.credits.set(box.window)
        cam.degrader.set_level(ack.degrade_level)
        status = ack.status
        if status == frame_pb2.ACK_STATUS_QUEUED:
            box.queued(ack.sequence, now)
            return
        if status == frame_pb2.ACK_STATUS_BUSY:
            if box.busy(ack.sequence, now, ack.retry_after_ms / 1e3):
                cam.m.busy.inc()
            return
        if not is_final(status):
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
        if self.hooks.on_final is not None:
            self.hooks.on_final(box.camera_id, item.header, ack)
        # A run of dropped frames' notices is settled as the frames it tells.
        n = 1 + len(item.header.earlier_skipped)
        if status == frame_pb2.ACK_STATUS_PROCESSED:
            cam.m.acked.inc(n)
            cam.m.processed.inc(n)
            cam.degrader.rate.add(n)
        elif status == frame_pb2.ACK_STATUS_DUPLICATE:
            cam.m.acked.inc(n)
            cam.m.duplicate.inc(n)
        elif status == frame_pb2.ACK_STATUS_REJECTED:
            cam.m.rejected.inc(n)
            cam.m.dropped("rejected").inc(n)
            log.warning(
                "camera %s: edge rejected frame %d: %s",
                ack.camera_id,
                ack.sequence,
                ack.reason or "no reason given",
            )
        else:
            reason = ack.reason or "unspecified"
            cam.m.dropped(f"shed_{reason}").inc(n)
            cam.drop_log.add(n, f"the edge shed it: {reason}")

    def _send_ready(self, pool: EdgePool, chores: bool = True) -> None:
        """Every camera: expiry, degradation, then what its window lets go; its gauges
        where they changed (this thread alone sets them). This loop runs for every ack: a
        camera with nothing waiting is passed over but every _CHORES_S (or on `chores`),
        so that many cameras do not cost every pass a look at each of them."""
        now = time.monotonic()
        chores = chores or now >= self._next_chores
        if chores:
            self._next_chores = now + _CHORES_S
        for cam in self._cams.values():
            box = cam.box
            if not chores and not box.spooled and not cam.degrader.backlogged:
                continue
            link = pool.links.get(cam.edge) if cam.edge is not None else None
            # No edge up for it: its frames wait in the spool (bounded, counted).
            sock = link.sock if link is not None and link.up else None
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
            limit = cam.degrader.waiting_limit(box.window)
            if limit is not None:
                dropped = box.limit_waiting(limit, self.degrade_cfg.drop_policy)
                if dropped:
                    if self.hooks.on_lost is not None:
                        self.hooks.on_lost(box.camera_id, len(dropped))
                    cam.m.dropped(REASON_POLICY).inc(len(dropped))
                    cam.drop_log.add(
                        len(dropped),
                        f"edge overloaded, level 3: {self.degrade_cfg.drop_policy} waiting dropped",
                    )
            if sock is not None and link is not None and self._send(cam, sock, now):
                link.asked(now)
            self._show(cam)

    def _send(self, cam: SenderCamera, sock: Any, now: float) -> bool:
        """What the camera's window lets go, to `sock`; whether it tried to send any (a
        send ZeroMQ could not take, the edge not connected, counts as tried)."""
        import zmq

        box = cam.box
        tried = False
        while (item := box.take(now)) is not None:
            tried = True
            item.header.send_ns = time.time_ns()
            if item.header.previous_edge != cam.previous_edge:
                item.header.previous_edge = cam.previous_edge
            head, payload = pack_frame(item.header, item.payload)
            try:
                # Two sends with plain int flags: send_multipart's per-part flag
                # arithmetic went through enum objects. ZeroMQ queues a multipart message
                # whole or not at all: only the first part can meet a full queue.
                sock.send(head, _MORE)
            except zmq.Again:
                box.unsend(item)  # edge not connected (or its queue full): keep it
                return True
            sock.send(payload, _NOBLOCK, copy=False)
            if item.sends == 1 and item.header.kind == frame_pb2.FRAME_KIND_SKIPPED:
                cam.m.skipped_sent.inc(1 + len(item.header.earlier_skipped))
            elif item.sends == 1:
                cam.m.sent.inc()
                cam.m.bytes_sent.inc(item.nbytes)
            else:
                cam.m.retransmitted.inc()
        return tried

    @staticmethod
    def _show(cam: SenderCamera) -> None:
        """Set the camera's gauges that changed."""
        box, level = cam.box, cam.degrader.level
        if level != cam.shown_level:
            cam.shown_level = level
            cam.m.degrade_level.set(level)
        if box.spooled != cam.shown_spooled:
            cam.shown_spooled = box.spooled
            cam.m.spool_frames.set(cam.shown_spooled)
        if box.inflight != cam.shown_inflight:
            cam.shown_inflight = box.inflight
            cam.m.inflight_frames.set(cam.shown_inflight)
