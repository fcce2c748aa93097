"""A minimal acking ZeroMQ ROUTER: the far end for the benchmark and the tests.

It is not the edge node (strata.edge is); it checks each frame with strata.shared.wire (a
run of dropped frames' notices counts as the frames it tells), acks it finally at once
(PROCESSED; a sequence at or below the last one seen from that (session, camera) is a
DUPLICATE), and records what arrived. `final=False` makes it answer QUEUED only, like an
edge that takes frames and never finishes them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strata.shared.contracts import frame_pb2
from strata.shared.wire import MalformedMessage, make_ack, pack_ack, unpack_frame

if TYPE_CHECKING:
    import zmq


@dataclass(frozen=True, slots=True)
class Received:
    """One frame as the sink saw it."""

    camera_id: str
    sequence: int
    frame_index: int
    nbytes: int
    duplicate: bool


@dataclass
class SinkStats:
    """Totals so far."""

    frames: int = 0
    duplicates: int = 0
    malformed: int = 0
    bytes: int = 0
    log: list[Received] = field(default_factory=list)


class FrameSink:
    """ROUTER bound to `endpoint` in its own thread; `ack=False` makes it a black hole.

    `model_input` (w, h): announced in the EdgeInfo of each camera's first ack, as the edge
    node announces its detector's input, so an agent with `payload.scale_to_model` (the
    default) scales its frames to fit it as it would against an edge; (0, 0): no EdgeInfo.
    `gap` > 0: the same first ack advises keeping 1 frame in `gap` with motion
    (CascadeFeedback.max_gap_frames), as an edge's calibration does once it has measured the
    scene, so an agent measured against the sink keeps the share it keeps in service; 0:
    no advice (the agent keeps every frame with motion, as before its first calibration).
    """

    def __init__(
        self,
        endpoint: str,
        ack: bool = True,
        keep_log: bool = True,
        final: bool = True,
        model_input: tuple[int, int] = (0, 0),
        gap: int = 0,
    ) -> None:
        self.endpoint = endpoint
        self.ack = ack
        self.final = final
        self.keep_log = keep_log
        self.model_input = model_input
        self.gap = gap
        self.stats = SinkStats()
        self._last: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sink", daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> FrameSink:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Bind and start receiving; returns once bound."""
        self._thread.start()
        if not self._ready.wait(5.0) or self.error is not None:
            raise RuntimeError(f"sink could not bind {self.endpoint}: {self.error}")

    def stop(self) -> None:
        """Stop and unbind."""
        self._stop.set()
        self._thread.join(5.0)

    def received(self) -> list[Received]:
        """Copy of the frames received so far."""
        with self._lock:
            return list(self.stats.log)

    def wait_for(self, frames: int, timeout: float) -> bool:
        """Wait until `frames` non-duplicate frames arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self.stats.frames - self.stats.duplicates >= frames:
                    return True
            time.sleep(0.01)
        return False

    def _run(self) -> None:
        import zmq

        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.bind(self.endpoint)
        except zmq.ZMQError as exc:
            self.error = exc
            sock.close(0)
            self._ready.set()
            return
        self._ready.set()
        # One poller for the socket's life (Socket.poll builds one per call), and every
        # message there on each wake-up.
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                if not poller.poll(20):
                    continue
                while int(sock.get(zmq.EVENTS)) & zmq.POLLIN:
                    ident, *parts = sock.recv_multipart(copy=False)
                    self._handle(sock, ident.bytes, parts)
        finally:
            sock.close(0)

    def _handle(self, sock: zmq.Socket[bytes], ident: bytes, parts: Sequence[zmq.Frame]) -> None:
        try:
            msg = unpack_frame(parts)
        except MalformedMessage as exc:
            with self._lock:
                self.stats.malformed += 1
            h = exc.header
            if self.ack and h is not None and h.camera_id and h.sequence:
                ack = make_ack(h.camera_id, h.sequence, frame_pb2.ACK_STATUS_REJECTED, exc.detail)
                sock.send_multipart([ident, *pack_ack(ack)])
            return
        h = msg.header
        key = (h.session_id, h.camera_id)
        first = key not in self._last
        dup = h.sequence <= self._last.get(key, 0)
        if not dup:
            self._last[key] = h.sequence
        # A run of dropped frames' notices is the frames it tells (earlier_skipped first).
        n = 1 + len(h.earlier_skipped)
        with self._lock:
            self.stats.frames += n
            self.stats.duplicates += dup * n
            self.stats.bytes += msg.payload.nbytes
            if self.keep_log:
                log = self.stats.log
                for s in h.earlier_skipped:
                    log.append(Received(h.camera_id, h.sequence, s.frame_index, 0, dup))
                log.append(
                    Received(h.camera_id, h.sequence, h.frame_index, msg.payload.nbytes, dup)
                )
        if self.ack:
            status = (
                frame_pb2.ACK_STATUS_QUEUED
                if not self.final
                else frame_pb2.ACK_STATUS_DUPLICATE
                if dup
                else frame_pb2.ACK_STATUS_PROCESSED
            )
            ack = make_ack(h.camera_id, h.sequence, status, session_id=h.session_id)
            if first and all(self.model_input):
                w, h_ = self.model_input
                ack.edge.model_input_width, ack.edge.model_input_height = w, h_
            if first and self.gap:
                ack.feedback.max_gap_frames = self.gap
            sock.send_multipart([ident, *pack_ack(ack)])
