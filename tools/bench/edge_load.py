"""`strata bench edge`'s load: DEALER senders and a SUB reader, in a process of their own.

The node under test is measured as it is deployed, alone in its process: senders and the
reader beside it in the same interpreter would take turns with its threads at the GIL,
and its CPU time would include theirs. The load still runs on the same machine's cores.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import zmq
from strata.shared.contracts import frame_pb2
from strata.shared.wire import is_events_topic, pack_frame, unpack_ack


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """What the load process needs: the node's sockets and the frames to send."""

    listen: str
    publish: str
    payloads: list[Any]
    width: int
    height: int
    cameras: int
    encoding: int
    inflight: int


@dataclass(frozen=True, slots=True)
class LoadRun:
    """One measurement: results between the warm-up and the last, as the SUB saw them."""

    fps: float
    latencies_s: list[float]
    seconds: float


_FINAL = frozenset(
    (
        frame_pb2.ACK_STATUS_PROCESSED,
        frame_pb2.ACK_STATUS_DUPLICATE,
        frame_pb2.ACK_STATUS_REJECTED,
        frame_pb2.ACK_STATUS_SHED,
    )
)


@dataclass(frozen=True, slots=True)
class _Sent:
    """A frame in flight, kept until its final ack so a BUSY answer can resend it."""

    camera: int
    header: frame_pb2.FrameHeader
    payload: Any


@dataclass(slots=True)
class _Flight:
    """What the sender, the ack drain and the SUB reader of one measurement share."""

    sent_at: dict[tuple[str, int], float] = field(default_factory=dict)
    frames: dict[tuple[str, int], _Sent] = field(default_factory=dict)
    # BUSY answers: (when to resend, frame); only the sender thread touches the sockets.
    busy: queue.Queue[tuple[float, _Sent]] = field(default_factory=queue.Queue)
    resent: int = 0
    # Per camera: frames sent and not yet finally acked, and the node's last credit grant.
    held: list[int] = field(default_factory=list)
    credits: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    room: threading.Condition = field(init=False)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.room = threading.Condition(self.lock)


class Load:
    """DEALER senders keeping `inflight` frames in the node, and the SUB that counts."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(spec.publish)
        self.dealers = []
        for _ in range(spec.cameras):
            d = self.ctx.socket(zmq.DEALER)
            d.setsockopt(zmq.LINGER, 0)
            d.connect(spec.listen)
            self.dealers.append(d)
        self.seq = 0
        time.sleep(0.3)  # PUB/SUB subscription settles

    def measure(self, warm: int, frames: int, timeout_s: float) -> LoadRun:
        """Send `warm` plus `frames` frames; frames/s between the warm-up and the last."""
        total = warm + frames
        cams = self.spec.cameras
        # Until the node's first grant, an even share of the frames in flight.
        share = max(1, self.spec.inflight // cams)
        flight = _Flight(held=[0] * cams, credits=[share] * cams)
        base_seq = self.seq
        self.seq += total + 1
        threads = [
            threading.Thread(target=self._send, args=(flight, total, base_seq)),
            threading.Thread(target=self._drain_acks, args=(flight,)),
        ]
        for t in threads:
            t.start()
        try:
            return self._receive(flight, warm, total, timeout_s)
        finally:
            flight.stop.set()
            for t in threads:
                t.join(timeout=5)

    def _send(self, flight: _Flight, total: int, base_seq: int) -> None:
        # As device agents do: a camera sends while it holds less than its credit (the
        # node's grant on its acks), all cameras together at most `inflight` frames; the
        # next frame goes to the next camera in turn with room. A frame the node
        # answers BUSY leaves flight and is sent again when it says, within the credit.
        sp = self.spec
        seqs = [base_seq] * sp.cameras
        turn = 0
        for i in range(total):
            cam = -1
            while cam < 0:
                self._resend_due(flight)
                with flight.room:
                    if sum(flight.held) < sp.inflight:
                        for k in range(sp.cameras):
                            c = (turn + k) % sp.cameras
                            if flight.held[c] < flight.credits[c]:
                                cam = c
                                break
                    if cam < 0:
                        flight.room.wait(0.005)
                if flight.stop.is_set():
                    return
            turn = cam + 1
            seqs[cam] += 1
            seq = seqs[cam]
            hdr = frame_pb2.FrameHeader(
                camera_id=f"cam{cam}",
                sequence=seq,
                width=sp.width,
                height=sp.height,
                encoding=sp.encoding,  # type: ignore[arg-type]
                capture_ns=time.time_ns(),
                send_ns=time.time_ns(),
                frame_index=i,
            )
            sent = _Sent(cam, hdr, sp.payloads[i % len(sp.payloads)])
            with flight.lock:
                flight.sent_at[(f"cam{cam}", seq)] = time.perf_counter()
                flight.frames[(f"cam{cam}", seq)] = sent
                flight.held[cam] += 1
            self.dealers[cam].send_multipart(pack_frame(hdr, sent.payload), copy=False)
        while not flight.stop.is_set():  # the last frames may still be answered BUSY
            self._resend_due(flight)
            time.sleep(0.005)

    def _resend_due(self, flight: _Flight) -> None:
        later: list[tuple[float, _Sent]] = []
        while True:
            try:
                due, sent = flight.busy.get_nowait()
            except queue.Empty:
                break
            with flight.room:
                # As an agent's spool does: back in flight only within the camera's credit.
                go = (
                    due <= time.monotonic()
                    and flight.held[sent.camera] < flight.credits[sent.camera]
                )
                if go:
                    flight.held[sent.camera] += 1
                    flight.frames[(f"cam{sent.camera}", sent.header.sequence)] = sent
            if not go:
                later.append((due, sent))
                continue
            sent.header.resent = True
            self.dealers[sent.camera].send_multipart(
                pack_frame(sent.header, sent.payload), copy=False
            )
            flight.resent += 1
        for item in later:
            flight.busy.put(item)

    def _drain_acks(self, flight: _Flight) -> None:
        poller = zmq.Poller()
        for d in self.dealers:
            poller.register(d, zmq.POLLIN)
        while not flight.stop.is_set():
            for sock, _ev in poller.poll(100):
                ack = unpack_ack(sock.recv_multipart())
                if ack.credits:
                    with flight.room:
                        flight.credits[int(ack.camera_id[3:])] = int(ack.credits)
                        flight.room.notify()
                key = (ack.camera_id, ack.sequence)
                if ack.status in _FINAL:
                    # As agents do, a frame leaves the camera's credit at its final ack, not
                    # at its result: the node frees the credit only once it has acked.
                    with flight.room:
                        if flight.frames.pop(key, None) is not None:
                            flight.held[int(ack.camera_id[3:])] -= 1
                            flight.room.notify()
                    continue
                if ack.status != frame_pb2.ACK_STATUS_BUSY:
                    continue
                # Not taken: out of flight (its credit free) until it is sent again.
                with flight.room:
                    sent = flight.frames.pop(key, None)
                    if sent is not None:
                        flight.held[sent.camera] -= 1
                if sent is not None:
                    flight.busy.put((time.monotonic() + ack.retry_after_ms / 1e3, sent))

    def _receive(self, flight: _Flight, warm: int, total: int, timeout_s: float) -> LoadRun:
        """Count published results; time between the warm-up and the last."""
        latencies: list[float] = []
        t_first = t_last = 0.0
        received = 0
        deadline = time.monotonic() + timeout_s
        while received < total and time.monotonic() < deadline:
            if not self.sub.poll(200):
                continue
            topic, body = self.sub.recv_multipart()
            if is_events_topic(topic):  # track events: not a frame's result
                continue
            now = time.perf_counter()
            msg = frame_pb2.FrameDetections()
            msg.ParseFromString(body)
            with flight.lock:
                t_sent = flight.sent_at.pop((msg.camera_id, msg.sequence), None)
            if t_sent is None:
                continue  # a resent frame's second result
            received += 1
            if received == warm:
                t_first = now
            elif received > warm and t_sent is not None:
                latencies.append(now - t_sent)
                t_last = now
        if received < total:
            raise RuntimeError(f"node published {received} of {total} frames in {timeout_s:.0f} s")
        return LoadRun((received - warm) / (t_last - t_first), latencies, t_last - t_first)

    def close(self) -> None:
        self.ctx.destroy(linger=0)


def _serve(spec: LoadSpec, conn: Connection) -> None:
    """The load process: measure on each request until told to stop (None)."""
    load = Load(spec)
    conn.send("ready")
    try:
        while (req := conn.recv()) is not None:
            warm, frames, timeout_s = req
            try:
                conn.send(load.measure(warm, frames, timeout_s))
            except RuntimeError as exc:
                conn.send(exc)
    finally:
        load.close()


class LoadProcess:
    """The load in a spawned process, driven over a pipe."""

    def __init__(self, spec: LoadSpec) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(spec, child), name="bench-edge-load")
        self.proc.start()
        child.close()
        if not self.conn.poll(60) or self.conn.recv() != "ready":
            self.close()
            raise RuntimeError("the bench's load process did not start in 60 s")

    def measure(self, warm: int, frames: int, timeout_s: float) -> LoadRun:
        """One measurement in the load process."""
        self.conn.send((warm, frames, timeout_s))
        if not self.conn.poll(timeout_s + 30):
            raise RuntimeError(f"the load process gave no answer in {timeout_s + 30:.0f} s")
        out = self.conn.recv()
        if isinstance(out, BaseException):
            raise out
        assert isinstance(out, LoadRun)
        return out

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


__all__ = ["Load", "LoadProcess", "LoadRun", "LoadSpec"]
