"""The ingest thread: the ROUTER socket's owner.

It answers heartbeats, checks each frame (strata.edge.ingest.intake) and hands it to
delivery (admission, credits) and on: a skipped frame to tracking, which answers it when
its turn comes, a kept one to its camera's queue for the worker (full: BUSY after all).
It forwards the worker's final acks (an inproc PULL socket) to the agents, since only
this thread may write to the ROUTER, and once a second forgets cameras gone silent in
every stage that keeps something per camera.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import zmq
from strata.edge.flow.delivery import Delivery
from strata.edge.flow.queues import CameraQueues
from strata.edge.ingest.frames import QueuedFrame
from strata.edge.ingest.intake import Ingest
from strata.edge.ingest.peers import PeerMonitor
from strata.edge.metrics import EdgeMetrics
from strata.edge.tracking.cascade import EdgeCascade
from strata.shared.contracts import frame_pb2
from strata.shared.logs import RateLimitedLog
from strata.shared.wire import heartbeat_of, unfold_run

log = logging.getLogger(__name__)

POLL_MS = 100
# How often ingest looks for cameras gone silent.
SWEEP_S = 1.0
# Frames read per wake-up, so final acks (and the credits they free) are not starved.
RECEIVE_BURST = 256

# Something a stage forgets about cameras gone silent.
Forget = Callable[[list[str]], None]
# Something a stage adds to a camera's QUEUED acks (the clip demand), ingest thread.
Decorate = Callable[[frame_pb2.FrameAck, frame_pb2.FrameHeader], None]


# Built by keyword only: too many fields to match by position.
@dataclass(frozen=True, slots=True, kw_only=True)
class IngestStages:
    """What the ingest thread hands frames to, and who forgets idle cameras."""

    ingest: Ingest
    delivery: Delivery
    cascade: EdgeCascade
    queues: CameraQueues
    metrics: EdgeMetrics
    # Beyond ingest, delivery and the queues: every other stage with per-camera state.
    forget: Sequence[Forget] = ()
    # Beyond the cascade's: what other stages tell a camera's device on its acks.
    decorate: Sequence[Decorate] = ()


class IngestLoop:
    """Runs the ingest thread until `stop` is set and the worker is done."""

    def __init__(
        self,
        stages: IngestStages,
        camera_idle_s: float,
        stop: threading.Event,
        worker_done: threading.Event,
    ) -> None:
        self.s = stages
        self.m = stages.metrics
        self.camera_idle_s = camera_idle_s
        self._stop = stop
        self._worker_done = worker_done
        self._busy_log = RateLimitedLog(log)

    def run(self, router: Any, acks_in: Any) -> None:
        """The thread's body."""
        monitor = PeerMonitor(router, self.m)
        poller = zmq.Poller()
        for sock in (router, acks_in, monitor.sock):
            poller.register(sock, zmq.POLLIN)
        next_sweep = time.monotonic() + SWEEP_S
        try:
            while not self._stop.is_set():
                ready = dict(poller.poll(POLL_MS))
                if time.monotonic() >= next_sweep:
                    self.forget_idle()
                    next_sweep = time.monotonic() + SWEEP_S
                if monitor.sock in ready:
                    monitor.poll()
                if acks_in in ready:
                    self._forward_final_acks(router, acks_in)
                if router in ready:
                    self._receive(router)
                    self.m.queue_depth.set(len(self.s.queues))
                    self.m.cameras.set(self.s.queues.cameras)
            # Stopping: no new frames, but the batches in flight still finish, and their
            # final acks must reach the agents (an unsent one is a needless resend).
            while not self._worker_done.wait(POLL_MS / 1e3):
                self._forward_final_acks(router, acks_in)
            self._forward_final_acks(router, acks_in)
        finally:
            monitor.close()

    def _forward_final_acks(self, router: Any, acks_in: Any) -> None:
        while True:
            try:
                parts = acks_in.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                router.send_multipart(parts, flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:  # the agent's pipe is full: it resends, and hears then
                self.m.drops.labels("ack_unsent").inc()

    def _receive(self, router: Any) -> None:
        for _ in range(RECEIVE_BURST):
            try:
                parts = router.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            identity = parts[0]
            if len(parts) == 3 and not len(parts[2]) and self._heartbeat(router, parts):
                continue
            ack = self._take(parts, identity)
            if ack.status == frame_pb2.ACK_STATUS_BUSY:
                self._busy_log.warn(
                    "busy",
                    "camera %s over its credit of %d: BUSY (retry after %d ms)",
                    ack.camera_id,
                    ack.credits,
                    ack.retry_after_ms,
                )
            self._send(router, [identity, ack.SerializeToString()])

    def _take(self, parts: Sequence[Any], identity: Any) -> frame_pb2.FrameAck:
        """Check, admit and route one frame; the ack it gets now."""
        result = self.s.ingest.handle(parts[1:], identity)
        if result.frame is None:
            return result.ack
        h = result.frame.header
        admitted = self.s.delivery.admit(h)
        ack = admitted.ack
        if ack.status == frame_pb2.ACK_STATUS_QUEUED:
            self.s.cascade.decorate(ack, h)
            for decorate in self.s.decorate:
                decorate(ack, h)
            frame = replace(
                result.frame,
                identity=bytes(memoryview(identity)),
                redelivery=admitted.redelivery,
            )
            if not self._route(frame):
                ack = self.s.delivery.refuse(h)
        return ack

    def _route(self, frame: QueuedFrame) -> bool:
        """A skipped frame waits for its answer from tracking; a kept one for the detector.
        False: the camera's queue is full (the frame is not taken)."""
        h = frame.header
        cascade = self.s.cascade
        if h.kind == frame_pb2.FRAME_KIND_SKIPPED:
            # A run's earlier frames are answered as notices of their own would be, without
            # an ack: the message's final ack follows its last frame's answer (answers go
            # out in frame order), so it settles the whole run.
            for early in unfold_run(h):
                cascade.skipped(early, frame.received, frame.receive_ns)
            cascade.skipped(h, frame.received, frame.receive_ns, frame)
            return True
        cascade.expect(h)
        if self.s.queues.put(frame):
            return True
        cascade.abandon(h)
        return False

    def _heartbeat(self, router: Any, parts: Sequence[Any]) -> bool:
        """Answer an agent's heartbeat (header only, FRAME_KIND_HEARTBEAT) with EdgeInfo;
        False for anything else, which ingest checks as usual."""
        header = heartbeat_of(parts[1:])
        if header is None:
            return False
        ack = self.s.delivery.heartbeat(header)
        self._send(router, [parts[0], ack.SerializeToString()])
        return True

    def _send(self, router: Any, parts: list[Any]) -> None:
        try:
            router.send_multipart(parts, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self.m.drops.labels("ack_unsent").inc()

    def forget_idle(self) -> None:
        """Forget cameras silent for `camera_idle_s` in every stage."""
        s = self.s
        s.cascade.forget_idle(self.camera_idle_s)
        idle = s.ingest.idle_cameras()
        if not idle:
            return
        # A camera whose frames still wait in its queue keeps its slot until they leave.
        gone = s.queues.forget(idle)
        s.ingest.forget(gone)
        s.delivery.forget_cameras(gone)
        for forget in s.forget:
            forget(gone)
        for cam in gone:
            self.m.forget_camera(cam)
        if gone:
            self.m.cameras_forgotten.inc(len(gone))
            self.m.cameras.set(s.queues.cameras)
            log.info(
                "forgot %d camera(s) silent for over %.0f s (e.g. %r)",
                len(gone),
                self.camera_idle_s,
                gone[0],
            )
