"""Helpers of the edge tests: a raw DEALER agent, a SUB listener, ports."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import zmq
from strata.shared.contracts import common_pb2, events_pb2, frame_pb2
from strata.shared.curve import ClientKeys, connect_curve
from strata.shared.wire import detections_topic, is_events_topic, pack_frame

MODEL_SIZE = 256


class RawAgent:
    """A real ZeroMQ DEALER speaking the frame protocol (what a device agent does)."""

    def __init__(
        self, ctx: Any, address: str, agent_id: str = "agent-1", session_id: int = 7
    ) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(address)
        self.agent_id = agent_id
        self.session_id = session_id

    def send_image(
        self,
        camera: str,
        seq: int,
        image: np.ndarray,
        encoding: int = common_pb2.ENCODING_BGR,
        frame_index: int = 0,
        session_id: int | None = None,
        resent: bool = False,
        previous_edge: str = "",
    ) -> None:
        if encoding == common_pb2.ENCODING_JPEG:
            import cv2

            ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 95])
            assert ok
            payload: Any = buf.tobytes()
        else:
            payload = np.ascontiguousarray(image)
        header = frame_pb2.FrameHeader(
            agent_id=self.agent_id,
            camera_id=camera,
            sequence=seq,
            capture_ns=time.time_ns(),
            send_ns=time.time_ns(),
            width=image.shape[1],
            height=image.shape[0],
            encoding=encoding,  # type: ignore[arg-type]
            frame_index=frame_index,
            session_id=self.session_id if session_id is None else session_id,
            resent=resent,
            previous_edge=previous_edge,
        )
        self.sock.send_multipart(pack_frame(header, payload), copy=False)

    def send_parts(self, parts: list[bytes]) -> None:
        self.sock.send_multipart(parts)

    def acks(self, n: int, timeout_s: float = 10.0) -> list[frame_pb2.FrameAck]:
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            if self.sock.poll(100):
                ack = frame_pb2.FrameAck()
                ack.ParseFromString(self.sock.recv())
                out.append(ack)
        return out


FINAL = frozenset(
    {
        frame_pb2.ACK_STATUS_PROCESSED,
        frame_pb2.ACK_STATUS_DUPLICATE,
        frame_pb2.ACK_STATUS_REJECTED,
        frame_pb2.ACK_STATUS_SHED,
    }
)


def receipts(acks: list[frame_pb2.FrameAck]) -> list[frame_pb2.FrameAck]:
    """The first answer to each message (QUEUED, BUSY, or an immediate final one)."""
    seen: set[tuple[str, int]] = set()
    out = []
    for a in acks:
        key = (a.camera_id, a.sequence)
        if a.status == frame_pb2.ACK_STATUS_PROCESSED and key in seen:
            continue
        seen.add(key)
        out.append(a)
    return out


def deliver(
    agent: RawAgent,
    frames: list[tuple[str, int, np.ndarray]],
    timeout_s: float = 30.0,
    window: int = 1000,
) -> dict[tuple[str, int], frame_pb2.FrameAck]:
    """Send every (camera, sequence, image) until it has a final ack, like an agent does:
    BUSY frames again after retry_after_ms, at most `window` unsettled at once. Returns the
    final ack of each frame."""
    todo = list(frames)
    images = {(c, s): img for c, s, img in frames}
    waiting: dict[tuple[str, int], float] = {}  # sent, not settled -> when to resend
    final: dict[tuple[str, int], frame_pb2.FrameAck] = {}
    deadline = time.monotonic() + timeout_s
    while len(final) < len(frames) and time.monotonic() < deadline:
        now = time.monotonic()
        for key in [k for k, t in waiting.items() if t and t <= now]:
            todo.insert(0, (key[0], key[1], images[key]))
            del waiting[key]
        while todo and len(waiting) < window:
            cam, seq, img = todo.pop(0)
            agent.send_image(cam, seq, img)
            waiting[(cam, seq)] = 0.0
        if agent.sock.poll(20):
            while agent.sock.poll(0):
                ack = frame_pb2.FrameAck()
                ack.ParseFromString(agent.sock.recv())
                key = (ack.camera_id, ack.sequence)
                if ack.status in FINAL:
                    final[key] = ack
                    waiting.pop(key, None)
                elif ack.status == frame_pb2.ACK_STATUS_BUSY and key in waiting:
                    waiting[key] = time.monotonic() + ack.retry_after_ms / 1e3
    return final


class Listener:
    """A SUB socket on the node's results."""

    def __init__(
        self, ctx: Any, address: str, camera: str = "", curve: ClientKeys | None = None
    ) -> None:
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        if curve is not None:  # a node with edge.curve on admits keyed subscribers only
            connect_curve(self.sock, curve.secret_key, curve.server_key)
        # One camera's results, or (empty) every camera's.
        self.sock.setsockopt(zmq.SUBSCRIBE, detections_topic(camera) if camera else b"")
        self.sock.connect(address)

        # Track events (their own topics) that came with the results: `collect` keeps them.
        self.events: list[events_pb2.TrackEvent] = []

    def collect(self, n: int, timeout_s: float = 20.0) -> list[frame_pb2.FrameDetections]:
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            if self.sock.poll(100):
                topic, body = self.sock.recv_multipart()
                if is_events_topic(topic):
                    self.events.append(events_pb2.TrackEvent.FromString(body))
                    continue
                msg = frame_pb2.FrameDetections()
                msg.ParseFromString(body)
                assert topic == detections_topic(msg.camera_id)
                out.append(msg)
        return out


def wait_until_subscribed(
    agent: RawAgent,
    sub: Listener,
    image: np.ndarray,
    timeout_s: float = 30.0,
    camera: str = "probe",
) -> int:
    """Send probe frames (of `camera`, sequences from 1) until one comes back on the SUB
    socket, so no result of the test proper is lost to PUB/SUB's slow join. Returns probes
    sent."""
    deadline = time.monotonic() + timeout_s
    seq = 0
    while time.monotonic() < deadline:
        seq += 1
        agent.send_image(camera, seq, image)
        if sub.collect(1, timeout_s=0.5):
            break
    else:
        raise AssertionError("the node's results never reached the subscriber")
    agent.acks(2 * seq, timeout_s=5.0)  # QUEUED and PROCESSED of each probe
    while sub.collect(1, timeout_s=0.3):  # drain the other probes' results
        pass
    return seq
