"""A stand-in edge for testing the capacity search: a real process, one detector's worth of
queueing and nothing else.

    python -m strata.tools.bench.capacity_standin --listen tcp://127.0.0.1:P \
        --publish tcp://127.0.0.1:Q --service-ms 25 [--credits 4]

It speaks the edge's wire protocol (frames in on a ROUTER, acks back, FrameDetections on a
PUB) and serves frames one at a time in arrival order, each taking `service_ms` of wall
time (a single server: its capacity is 1000 / service_ms frames a second, whatever the
cameras). Each frame it serves is answered with one `person` box at BOX, and every dropped
frame's notice at once with no box (`predicted`). A camera over its `credits` frames in the
queue gets BUSY (retry after the service time), as the real node's credit check answers.
"""

from __future__ import annotations

import argparse
import signal
import time
from collections import deque

import zmq
from strata.shared.contracts import frame_pb2
from strata.shared.wire import (
    detections_topic,
    heartbeat_of,
    make_ack,
    new_session_id,
    pack_ack,
    unfold_run,
    unpack_frame,
)

BOX = (10.0, 10.0, 60.0, 110.0)


def _detections(hdr: frame_pb2.FrameHeader, predicted: bool) -> list[bytes]:
    msg = frame_pb2.FrameDetections(
        edge_id="stand-in",
        camera_id=hdr.camera_id,
        sequence=hdr.sequence,
        frame_index=hdr.frame_index,
        width=hdr.width,
        height=hdr.height,
        session_id=hdr.session_id,
        predicted=predicted,
    )
    if not predicted:
        d = msg.detections.add(label="person", score=0.9, class_id=0)
        d.box.x1, d.box.y1, d.box.x2, d.box.y2 = BOX
    return [detections_topic(hdr.camera_id), msg.SerializeToString()]


def serve(listen: str, publish: str, service_s: float, credits: int) -> None:
    """Run until SIGTERM or SIGINT."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind(listen)
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.bind(publish)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    queue: deque[tuple[bytes, frame_pb2.FrameHeader]] = deque()
    per_camera: dict[str, int] = {}
    done_at = 0.0
    session = new_session_id()

    def ack(ident: bytes, hdr: frame_pb2.FrameHeader, status: int, retry_ms: int = 0) -> None:
        a = make_ack(hdr.camera_id, hdr.sequence, status, "", hdr.session_id, retry_ms)
        a.credits = credits
        router.send_multipart([ident, *pack_ack(a)])

    while not stop:
        now = time.monotonic()
        if queue and now >= done_at:
            ident, hdr = queue.popleft()
            per_camera[hdr.camera_id] -= 1
            pub.send_multipart(_detections(hdr, False))
            ack(ident, hdr, frame_pb2.ACK_STATUS_PROCESSED)
            done_at = now + service_s if queue else 0.0
        wait = max(0.0, done_at - now) if queue else 0.05
        if not router.poll(max(1, int(wait * 1e3))):
            continue
        ident, *parts = router.recv_multipart()
        beat = heartbeat_of(parts)
        if beat is not None:  # an agent's heartbeat: answered, nothing else
            a = make_ack("", 0, frame_pb2.ACK_STATUS_HEARTBEAT, "", beat.session_id)
            a.edge.edge_id, a.edge.edge_session, a.edge.accepting = "stand-in", session, True
            a.edge.capacity_fps = 1.0 / service_s
            router.send_multipart([ident, *pack_ack(a)])
            continue
        hdr = unpack_frame(parts).header
        if hdr.kind == frame_pb2.FRAME_KIND_SKIPPED:
            for h in [*unfold_run(hdr), hdr]:
                pub.send_multipart(_detections(h, True))
            ack(ident, hdr, frame_pb2.ACK_STATUS_PROCESSED)
            continue
        if per_camera.get(hdr.camera_id, 0) >= credits:
            ack(ident, hdr, frame_pb2.ACK_STATUS_BUSY, max(1, int(service_s * 1e3)))
            continue
        per_camera[hdr.camera_id] = per_camera.get(hdr.camera_id, 0) + 1
        if not queue:
            done_at = time.monotonic() + service_s
        queue.append((ident, hdr))
        ack(ident, hdr, frame_pb2.ACK_STATUS_QUEUED)
    ctx.destroy(linger=0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", required=True)
    p.add_argument("--publish", required=True)
    p.add_argument("--service-ms", type=float, default=25.0)
    p.add_argument("--credits", type=int, default=4)
    a = p.parse_args()
    serve(a.listen, a.publish, a.service_ms / 1e3, a.credits)


if __name__ == "__main__":
    main()
