"""What the pipeline produced: the edge's FrameDetections (ZeroMQ SUB) and the cloud's events."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from strata.shared.contracts import analytics_pb2, current_version, frame_pb2

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Received:
    """One FrameDetections message and when the demo got it (wall-clock ns)."""

    message: frame_pb2.FrameDetections
    received_ns: int


class DetectionCollector:
    """Subscribes to an edge node's results PUB socket on a thread and keeps every message."""

    def __init__(self, address: str) -> None:
        import zmq

        self.address = address
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._sock = ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.RCVHWM, 100_000)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._sock.connect(address)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # (camera id, frame index) -> the latest message for that frame.
        self._frames: dict[tuple[str, int], Received] = {}
        self.malformed = 0
        self._thread = threading.Thread(target=self._run, name="demo-sub", daemon=True)

    def start(self) -> None:
        """Start receiving."""
        self._thread.start()

    def _run(self) -> None:
        import zmq

        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(100):
                continue
            parts = self._sock.recv_multipart()
            msg = frame_pb2.FrameDetections()
            try:
                # [topic (camera id + NUL), FrameDetections]; the message is always the last part.
                msg.ParseFromString(parts[-1])
            except Exception as exc:  # a foreign publisher on the port: count and go on
                self.malformed += 1
                log.warning("demo: a results message did not parse (%s); skipped", exc)
                continue
            with self._lock:
                self._frames[(msg.camera_id, msg.frame_index)] = Received(msg, time.time_ns())

    def stop(self) -> None:
        """Stop the thread and close the socket."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        self._sock.close(0)

    def count(self) -> int:
        """Frames with results so far."""
        with self._lock:
            return len(self._frames)

    def frames(self) -> dict[tuple[str, int], Received]:
        """A snapshot of every frame's results."""
        with self._lock:
            return dict(self._frames)


def query_events(
    address: str, timeout: float = 10.0, page_size: int = 500
) -> list[analytics_pb2.Event]:
    """Every event stored in the cloud at `address` (HOST:PORT), all pages."""
    import grpc
    from strata.shared.contracts import analytics_pb2_grpc

    events: dict[int, analytics_pb2.Event] = {}
    with grpc.insecure_channel(address) as channel:
        stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
        token = ""
        deadline = time.monotonic() + timeout
        while True:
            req = analytics_pb2.QueryEventsRequest(
                version=current_version(), page_size=page_size, page_token=token
            )
            left = max(0.5, deadline - time.monotonic())
            token = ""
            # Pages may all come on one stream, or one per call with a token: take both.
            for page in stub.QueryEvents(req, timeout=left):
                for ev in page.events:
                    events[ev.event_id] = ev
                token = page.next_page_token
            if not token or time.monotonic() > deadline:
                break
    return sorted(events.values(), key=lambda e: e.event_id)
