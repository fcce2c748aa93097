"""The uplink against a small real gRPC server implementing the generated AnalyticsServicer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from strata.edge.metrics import EdgeMetrics
from strata.edge.uplink.breaker import BreakerState
from strata.edge.uplink.stream import Uplink
from strata.shared.config.edge import UplinkConfig
from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc, current_version
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip

pytestmark = pytest.mark.timeout(60)


class Cloud(analytics_pb2_grpc.AnalyticsServicer):
    """Stores every crop it gets; `delay_s` makes it slow."""

    def __init__(self, delay_s: float = 0.0, busy_first: int = 0) -> None:
        self.delay_s = delay_s
        self.busy_first = busy_first  # answer RETRY to this many batches first
        self.crops: list[analytics_pb2.Crop] = []
        self.times: list[float] = []
        self.lock = threading.Lock()

    def Uplink(
        self, request_iterator: Iterator[analytics_pb2.CropBatch], context: Any
    ) -> Iterator[analytics_pb2.UplinkResponse]:
        for batch in request_iterator:
            time.sleep(self.delay_s)
            with self.lock:
                self.times.append(time.monotonic())
                if self.busy_first > 0:
                    self.busy_first -= 1
                    yield analytics_pb2.UplinkResponse(
                        version=current_version(),
                        acks=[
                            analytics_pb2.CropAck(
                                crop_id=c.crop_id,
                                status=analytics_pb2.CROP_STATUS_RETRY,
                                retry_after_ms=300,
                            )
                            for c in batch.crops
                        ],
                    )
                    continue
                self.crops.extend(batch.crops)
            yield analytics_pb2.UplinkResponse(
                version=current_version(),
                acks=[
                    analytics_pb2.CropAck(
                        crop_id=c.crop_id, status=analytics_pb2.CROP_STATUS_STORED
                    )
                    for c in batch.crops
                ],
            )


def serve(cloud: Cloud, port: int) -> Any:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    analytics_pb2_grpc.add_AnalyticsServicer_to_server(cloud, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


def crops(n: int, start: int = 0) -> list[analytics_pb2.Crop]:
    return [
        analytics_pb2.Crop(crop_id=f"c{i}", camera_id="cam", sequence=i + 1, image=b"\xff\xd8")
        for i in range(start, start + n)
    ]


def wait_for(cond: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)
    return cond()


def make(port: int, **over: Any) -> tuple[Uplink, EdgeMetrics]:
    metrics = EdgeMetrics()
    cfg = UplinkConfig.model_validate(
        # Memory only unless a test gives a spool file.
        {"connect_timeout_s": 0.2, "open_s": 0.5, "failure_threshold": 2, "spool_path": "", **over}
    )
    up = Uplink(f"127.0.0.1:{port}", cfg, metrics)
    up.start()
    return up, metrics


def test_crops_reach_the_cloud_and_are_acked(port: int) -> None:
    cloud = Cloud()
    server = serve(cloud, port)
    up, m = make(port, batch=3)
    try:
        up.offer(crops(7))
        assert wait_for(lambda: len({c.crop_id for c in cloud.crops}) == 7, 30.0)
        assert wait_for(
            lambda: sample(m.registry, "strata_edge_crops_total", {"status": "stored"}) >= 7
        )
        assert sorted(c.crop_id for c in cloud.crops) == sorted(f"c{i}" for i in range(7))
        assert up.breaker.state is BreakerState.CLOSED
    finally:
        up.stop()
        server.stop(0)


def test_cloud_down_opens_breaker_then_half_open_probe_closes_it(port: int) -> None:
    up, m = make(port, queue=4)
    cloud = Cloud()
    server = None
    try:
        up.offer(crops(6))  # 2 over the bound: dropped and counted
        assert sample(m.registry, "strata_edge_drops_total", {"reason": "crop_buffer_full"}) == 2
        assert wait_for(lambda: up.breaker.state is BreakerState.OPEN)
        assert sample(m.registry, "strata_edge_breaker_state") == 2
        assert up.buffered == 4  # crops wait while the breaker is open
        server = serve(cloud, port)  # the cloud recovers
        assert wait_for(lambda: up.breaker.state is BreakerState.CLOSED, 15.0)
        assert wait_for(lambda: len(cloud.crops) == 4)
        assert sorted(c.crop_id for c in cloud.crops) == ["c2", "c3", "c4", "c5"]
        assert sample(m.registry, "strata_edge_breaker_state") == 0
    finally:
        up.stop()
        if server is not None:
            server.stop(0)


def test_busy_cloud_retry_after_is_honoured(port: int) -> None:
    cloud = Cloud(busy_first=1)
    server = serve(cloud, port)
    up, m = make(port, batch=4)
    try:
        up.offer(crops(2))
        assert wait_for(lambda: len({c.crop_id for c in cloud.crops}) == 2, 15.0)
        assert sample(m.registry, "strata_edge_crops_total", {"status": "retry"}) == 2
        assert cloud.times[1] - cloud.times[0] >= 0.28
    finally:
        up.stop()
        server.stop(0)


def test_slow_cloud_p99_opens_breaker(port: int) -> None:
    cloud = Cloud(delay_s=0.05)
    server = serve(cloud, port)
    up, m = make(
        port, batch=1, p99_limit_ms=20, latency_window=10, min_latency_samples=10, open_s=30
    )
    try:
        up.offer(crops(15))
        assert wait_for(lambda: up.breaker.state is BreakerState.OPEN)
        assert "p99" in up.breaker.reason
        assert sample(m.registry, "strata_edge_breaker_trips_total") == 1
    finally:
        up.stop()
        server.stop(0)


def test_node_sends_chosen_crops_to_the_cloud(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip, port: int, tmp_path: Path
) -> None:
    import cv2
    import numpy as np
    from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
    from strata.edge.build import build_node
    from strata.shared.config.edge import EdgeConfig

    cloud = Cloud()
    server = serve(cloud, port)
    cfg = EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "cloud": f"127.0.0.1:{port}",
            "uplink": {"spool_path": str(tmp_path / "spool.sqlite")},
            "model": {"input_size": MODEL_SIZE},
            # The burst fits the camera's credit (no BUSY answers to a raw agent).
            "batching": {"queue_per_camera": 64, "delay_target_ms": 60_000},
            "flow": {"initial_credits": 64},
            "crops": {
                "classes": ["person", "car"],
                "score_min": 0.5,
                "score_max": 1.0,
                "max_per_frame": 1,
                "pad": 0.0,
                # A crop of every frame, not one look per tracked object.
                "track_interval_s": 0.0,
                "track_change_iou": 1.0,
                "track_score_change": 0.0,
                "max_per_track": 1000,
            },
        }
    )
    node = build_node(cfg, colour_model)
    ep = node.start()
    try:
        sub = Listener(zctx, ep.publish)
        agent = RawAgent(zctx, ep.listen)
        wait_until_subscribed(agent, sub, synthetic_clip.frame(0).image)
        frames = [
            i
            for i in range(len(synthetic_clip))
            if {b.label for b in synthetic_clip.boxes(i)} & {"person", "car"}
        ]
        for seq, idx in enumerate(frames, start=1):
            agent.send_image("cam", seq, synthetic_clip.frame(idx).image, frame_index=idx)
        assert len(sub.collect(len(frames))) == len(frames)
        # Under load an ack may time out and the crop be sent again: the cloud stores by id.
        assert wait_for(lambda: len({c.crop_id for c in cloud.crops}) == len(frames), 30.0)
    finally:
        node.stop()
        server.stop(0)
    for c in cloud.crops:
        assert c.detection.label in ("person", "car") and c.camera_id == "cam"
        img = cv2.imdecode(np.frombuffer(c.image, np.uint8), cv2.IMREAD_COLOR)
        assert img is not None and (img.shape[1], img.shape[0]) == (c.width, c.height)
        b = c.detection.box
        assert abs(c.width - (b.x2 - b.x1)) <= 2 and abs(c.height - (b.y2 - b.y1)) <= 2
        assert c.timing.inference_end_ns >= c.timing.inference_start_ns > 0
