"""What the pipeline produced: the edge's FrameDetections (ZeroMQ SUB) and the cloud's events."""

from __future__ import annotations

import time
from dataclasses import dataclass

from strata.shared.config.root import StrataConfig
from strata.shared.contracts import analytics_pb2, current_version, frame_pb2
from strata.shared.curve import ClientKeys
from strata.tools.subscriber import ResultSubscriber


@dataclass(frozen=True, slots=True)
class Received:
    """One FrameDetections message and when the demo got it (wall-clock ns)."""

    message: frame_pb2.FrameDetections
    received_ns: int


class DetectionCollector(ResultSubscriber):
    """Keeps the latest message of every (camera, frame) an edge node publishes."""

    def __init__(self, address: str, curve: ClientKeys | None = None) -> None:
        self.address = address
        # (camera id, frame index) -> the latest message for that frame.
        self._frames: dict[tuple[str, int], Received] = {}
        super().__init__([address], start=False, name="demo-sub", curve=curve)

    def on_result(self, msg: frame_pb2.FrameDetections, received_ns: int) -> None:
        kept = frame_pb2.FrameDetections()
        kept.CopyFrom(msg)
        self._frames[(msg.camera_id, msg.frame_index)] = Received(kept, received_ns)

    def count(self) -> int:
        """Frames with results so far."""
        with self.lock:
            return len(self._frames)

    def frames(self) -> dict[tuple[str, int], Received]:
        """A snapshot of every frame's results."""
        with self.lock:
            return dict(self._frames)


def subscriber_keys(cfg: StrataConfig) -> ClientKeys | None:
    """The collector's CURVE keys when the edge's CURVE is on: the agent's own pair, which
    the edge admits already (its public key is in edge.curve.clients_dir)."""
    agent = cfg.device.sender.curve
    if not cfg.edge.curve.secret_key or not agent.secret_key:
        return None
    return ClientKeys(agent.secret_key, agent.server_key)


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
