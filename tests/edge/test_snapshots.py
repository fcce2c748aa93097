"""Track snapshots (edge/publish/snapshots.py): the quality that prefers a whole object to
one cut off by the frame's border, and a real edge node over loopback with the real cloud
service: every track's best crop and full frame arrive, decode, show the object, and its
events name them.

The scene (as tests/edge/test_rules_stage.py): a red person (20x40 px) walks right along the
bottom, a green car (40x20 px) drives left along the top, 10 px per frame, in a 320x240
frame; both vanish after frame 25 and their tracks end."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import grpc
import numpy as np
import pytest
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from strata.edge.build import NodeOptions, build_node
from strata.edge.node import EdgeNode
from strata.edge.publish.snapshots import quality
from strata.shared.config.edge import EdgeConfig, SnapshotsConfig
from strata.shared.contracts import (
    analytics_pb2,
    analytics_pb2_grpc,
    common_pb2,
    current_version,
    events_pb2,
    frame_pb2,
)
from strata.shared.metrics import sample
from strata.shared.wire import pack_frame

_CLOUD_TESTS = str(Path(__file__).resolve().parents[1] / "cloud")
if _CLOUD_TESTS not in sys.path:
    sys.path.append(_CLOUD_TESTS)

from cloud_helpers import make_config  # noqa: E402
from cloud_models import LABELS, build_colour_classifier  # noqa: E402
from strata.cloud.server import CloudServer  # noqa: E402

pytestmark = pytest.mark.timeout(120)

W, H = 320, 240
T0 = 1_700_000_000 * 10**9
STEP_NS = 100_000_000
SESSION = 9
RED, GREEN = (0, 0, 255), (0, 255, 0)
S = events_pb2


def test_quality_prefers_a_whole_object_to_one_cut_off() -> None:
    boxes = np.array(
        [[100, 100, 140, 180], [0, 100, 40, 180], [0, 0, 40, 240], [100, 100, 140, 180]],
        np.float32,
    )
    scores = np.array([0.8, 0.9, 0.95, 0.5], np.float32)
    q, sides = quality(boxes, scores, (W, H), SnapshotsConfig(edge_penalty=0.3))
    assert sides.tolist() == [0, 1, 3, 0]
    assert np.allclose(q, [0.8, 0.9 * 0.7, 0.95 * 0.7**3, 0.5])
    # The whole person at 0.8 beats the same person cut off at 0.9.
    assert q[0] > q[1] > q[3] > q[2]


def scene(i: int) -> np.ndarray:
    img = np.full((H, W, 3), 128, np.uint8)
    if i <= 25:
        x = 20 + 10 * i
        img[160:200, x : x + 20] = RED
        x = 260 - 10 * i
        img[60:80, x : x + 40] = GREEN
    return img


def send(agent: RawAgent, i: int, image: np.ndarray) -> None:
    h = frame_pb2.FrameHeader(
        agent_id=agent.agent_id,
        camera_id="cam",
        sequence=i + 1,
        frame_index=i,
        session_id=SESSION,
        capture_ns=T0 + i * STEP_NS,
        send_ns=time.time_ns(),
        width=W,
        height=H,
        encoding=common_pb2.ENCODING_BGR,
    )
    agent.sock.send_multipart(pack_frame(h, np.ascontiguousarray(image)), copy=False)


@pytest.fixture
def cloud(tmp_path: Path, port: int) -> Iterator[CloudServer]:
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(LABELS) + "\n")
    model = build_colour_classifier(tmp_path / "colour.onnx", size=32)
    cfg = make_config(model, tmp_path / "events.sqlite", labels, listen=f"127.0.0.1:{port}")
    server = CloudServer(cfg)
    server.start()
    yield server
    server.stop(0.5)


@pytest.fixture
def node(colour_model: Path, cloud: CloudServer, tmp_path: Path) -> Iterator[EdgeNode]:
    cfg = EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "cloud": cloud.address,
            "model": {"input_size": MODEL_SIZE},
            "batching": {"max_batch": 4, "max_queue_delay_ms": 5, "delay_target_ms": 60_000},
            "flow": {"initial_credits": 64},
            "overload": {"gpu_pressure": {"enabled": False}},
            "tracking": {"max_lost": 3},
            "crops": {"max_per_frame": 0},
            "uplink": {"spool_path": str(tmp_path / "spool.sqlite"), "connect_timeout_s": 1},
            "snapshots": {"max_width": 160, "update_every_s": 0.5},
        }
    )
    n = build_node(cfg, colour_model, "colour", NodeOptions())
    n.start()
    yield n
    n.stop()


def wait_for(cond: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.1)
    return cond()


def stored_events(stub: Any) -> list[events_pb2.TrackEvent]:
    req = analytics_pb2.QueryEventsRequest(version=current_version(), page_size=1000)
    return [s.event for page in stub.QueryTrackEvents(req, timeout=10) for s in page.events]


def colour_share(jpeg: bytes, bgr: tuple[int, int, int]) -> float:
    img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None, "the snapshot does not decode"
    near = np.abs(img.astype(np.int16) - np.array(bgr, np.int16)).max(axis=2) < 60
    return float(near.mean())


def test_every_tracks_snapshots_reach_the_cloud_and_decode(
    node: EdgeNode, cloud: CloudServer, zctx: Any
) -> None:
    sub = Listener(zctx, node.endpoints.publish)
    probe = RawAgent(zctx, node.endpoints.listen, "probe", session_id=SESSION + 1)
    wait_until_subscribed(probe, sub, np.full((H, W, 3), 128, np.uint8))
    agent = RawAgent(zctx, node.endpoints.listen, session_id=SESSION)
    for i in range(31):
        send(agent, i, scene(i))
    assert len(sub.collect(31, timeout_s=60)) == 31
    channel = grpc.insecure_channel(cloud.address)
    stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
    try:
        assert wait_for(
            lambda: sum(e.type == S.TRACK_EVENT_TYPE_END for e in stored_events(stub)) == 2
        )
        assert wait_for(lambda: node.uplink is not None and node.uplink.snapshots_waiting == 0)
        events = stored_events(stub)
        assert cloud.store.count_snapshots() == 4  # two tracks, a best crop and a full frame each
        ends = [e for e in events if e.type == S.TRACK_EVENT_TYPE_END]
        news = [e for e in events if e.type == S.TRACK_EVENT_TYPE_NEW]
        assert all(e.crop_snapshot_id and e.frame_snapshot_id for e in news + ends)
        for end in ends:
            colour = RED if end.after.label == "person" else GREEN
            get = analytics_pb2.GetSnapshotRequest(
                version=current_version(), event_key=end.idempotency_key
            )
            crop = stub.GetSnapshot(get, timeout=10).snapshot
            assert crop.snapshot_id == end.crop_snapshot_id  # the end names the final one
            assert crop.kind == S.SNAPSHOT_KIND_BEST_CROP and crop.label == end.after.label
            assert not crop.touches_edge and crop.quality > 0
            # The object fills most of its best crop (padding aside).
            assert colour_share(crop.jpeg, colour) > 0.4
            get.kind = S.SNAPSHOT_KIND_FULL_FRAME
            frame = stub.GetSnapshot(get, timeout=10).snapshot
            assert (frame.width, frame.height) == (160, 120)  # scaled to max_width
            assert (frame.frame_width, frame.frame_height) == (W, H)
            assert 0.01 < colour_share(frame.jpeg, colour) < 0.2
            assert frame.revision == crop.revision and frame.capture_ns == crop.capture_ns
            # The box in the JPEG's pixels is the source box scaled by 1/2.
            assert frame.box.x1 == pytest.approx(frame.frame_box.x1 / 2, abs=1.5)
    finally:
        channel.close()
    m = node.metrics.registry
    assert sample(m, "strata_edge_snapshots_chosen_total", {"reason": "first"}) == 2
    stored = sample(m, "strata_edge_uplink_snapshots_total", {"status": "stored"}) or 0
    offered = sample(m, "strata_edge_uplink_snapshots_total", {"status": "offered"}) or 0
    assert stored == offered >= 4
