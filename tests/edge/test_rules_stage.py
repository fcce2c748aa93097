"""The rules stage in a real edge node over loopback (strata.edge.rules.stage): a scene whose
ground truth crosses a known line and enters a known zone, counted exactly on the PUB copy
of the events and on /metrics; a parked object; a crossing between two kept frames on the
tracker's predicted positions; the rule state through a restart from the checkpoint; and,
as a real `strata edge` process, a bad rules file and SIGHUP with new rules.

The scene: a red person (20x40 px) walks right along the bottom, a green car (40x20 px)
drives left along the top, 10 px per frame at 10 frames a second of capture time, in a
320x240 frame. The line `door` is vertical at x = 0.52 (166.4 px): the car's centre
(280 - 10 i) crosses it between frames 11 and 12, the person's (30 + 10 i) between 13 and
14. The zone `yard` (x > 0.6, y > 0.5) holds the person from frame 17 on, never the car.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from prometheus_client import generate_latest
from strata.edge.build import NodeOptions, build_node
from strata.edge.node import EdgeNode
from strata.shared.config.edge import EdgeConfig
from strata.shared.config.rules import RulesConfig
from strata.shared.contracts import common_pb2, events_pb2, frame_pb2
from strata.shared.loopback import free_port
from strata.shared.metrics import sample
from strata.shared.wire import pack_frame

pytestmark = pytest.mark.timeout(120)

W, H = 320, 240
T0 = 1_700_000_000 * 10**9
STEP_NS = 100_000_000  # 10 frames a second of capture time
SESSION = 5
RED, GREEN = (0, 0, 255), (0, 255, 0)
E = events_pb2
RULES: dict[str, Any] = {
    "cameras": {
        "cam": {
            "lines": [{"name": "door", "points": [[0.52, 0.0], [0.52, 1.0]]}],
            "zones": [{"name": "yard", "points": [[0.6, 0.5], [1, 0.5], [1, 1], [0.6, 1]]}],
        },
        "lot": {"stationary": {"seconds": 1.0}},
    }
}


def scene(i: int, person: bool = True, car: bool = True) -> np.ndarray:
    """Frame i of the scene (objects only for i <= 25)."""
    img = np.full((H, W, 3), 128, np.uint8)
    if i <= 25:
        if person:
            x = 20 + 10 * i
            img[160:200, x : x + 20] = RED
        if car:
            x = 260 - 10 * i
            img[60:80, x : x + 40] = GREEN
    return img


def parked(i: int) -> np.ndarray:
    """A car still for frames 0..19, then driving right 10 px a frame."""
    img = np.full((H, W, 3), 128, np.uint8)
    x = 100 + max(0, i - 19) * 10
    img[100:120, x : x + 40] = GREEN
    return img


class Camera:
    """A raw agent's camera: kept frames (BGR) and skipped ones (header only), with
    capture times 100 ms apart."""

    def __init__(self, agent: RawAgent, camera: str, previous_edge: str = "") -> None:
        self.agent, self.camera, self.previous_edge = agent, camera, previous_edge

    def send(self, i: int, image: np.ndarray | None) -> None:
        h = frame_pb2.FrameHeader(
            agent_id=self.agent.agent_id,
            camera_id=self.camera,
            sequence=i + 1,  # goes on across a restart of the node
            frame_index=i,
            session_id=SESSION,
            capture_ns=T0 + i * STEP_NS,
            send_ns=time.time_ns(),
            width=W,
            height=H,
            previous_edge=self.previous_edge,
        )
        payload: Any = b""
        if image is None:
            h.kind = frame_pb2.FRAME_KIND_SKIPPED
            h.skip_reason = "min_gap"
        else:
            h.encoding = common_pb2.ENCODING_BGR
            payload = np.ascontiguousarray(image)
        self.agent.sock.send_multipart(pack_frame(h, payload), copy=False)


def edge_cfg(**over: Any) -> EdgeConfig:
    return EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "batching": {"max_batch": 4, "max_queue_delay_ms": 5, "delay_target_ms": 60_000},
            "flow": {"initial_credits": 64},
            "overload": {"gpu_pressure": {"enabled": False}},
            # Tracks end 3 frames after their last detection: the end events come soon.
            "tracking": {"max_lost": 3},
            **over,
        }
    )


@pytest.fixture
def start(colour_model: Path) -> Iterator[Any]:
    nodes: list[EdgeNode] = []

    def make(rules: dict[str, Any] | None = None, **over: Any) -> EdgeNode:
        opts = NodeOptions(rules=RulesConfig.model_validate(rules or RULES))
        node = build_node(edge_cfg(**over), colour_model, "colour", opts)
        node.start()
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        n.stop()


def run_clip(
    node: EdgeNode,
    zctx: Any,
    frames: list[tuple[str, int, np.ndarray | None]],
    previous_edge: str = "",
) -> Any:
    """Send (camera, index, image or None: skipped) in order; every result and event."""
    sub = Listener(zctx, node.endpoints.publish)
    agent = RawAgent(zctx, node.endpoints.listen, session_id=SESSION)
    subscribe(zctx, node.endpoints.listen, sub)
    cams: dict[str, Camera] = {}
    for cam, i, image in frames:
        cams.setdefault(cam, Camera(agent, cam, previous_edge)).send(i, image)
    results = sub.collect(len(frames), timeout_s=60)
    sub.collect(10**6, timeout_s=1.0)  # the last frames' events follow their results
    assert len(results) == len(frames)
    return sub


def subscribe(zctx: Any, listen: str, sub: Listener) -> None:
    """Probe until results reach `sub` (a probe session of its own: a restarted node knows
    the earlier probes' sequences)."""
    probe = RawAgent(zctx, listen, "probe", session_id=time.time_ns() % 10**12)
    wait_until_subscribed(probe, sub, np.full((H, W, 3), 128, np.uint8))
    sub.events.clear()


def crossings(events: list[events_pb2.TrackEvent]) -> Counter[tuple[str, str, int]]:
    return Counter(
        (e.line, e.after.label, e.direction)
        for e in events
        if e.type == E.TRACK_EVENT_TYPE_LINE_CROSSED
    )


def test_a_scene_is_counted_exactly_on_the_pub_copy_and_metrics(start: Any, zctx: Any) -> None:
    # A budget of one ask per answered frame: every ask the rules want is made.
    node = start({**RULES, "ask_budget": 1.0})
    sub = run_clip(node, zctx, [("cam", i, scene(i)) for i in range(31)])
    events = [e for e in sub.events if e.camera_id == "cam"]
    # Person walks right (towards x+), car drives left: one crossing each, opposite ways.
    assert crossings(events) == {
        ("door", "person", E.CROSSING_DIRECTION_IN): 1,
        ("door", "car", E.CROSSING_DIRECTION_OUT): 1,
    }
    entered = [(e.zone, e.after.label) for e in events if e.type == E.TRACK_EVENT_TYPE_ZONE_ENTERED]
    assert entered == [("yard", "person")]
    types = Counter(e.type for e in events)
    assert types[E.TRACK_EVENT_TYPE_NEW] == 2 and types[E.TRACK_EVENT_TYPE_END] == 2
    assert types[E.TRACK_EVENT_TYPE_UPDATE] == 0
    # Every frame was detected: each result rests on detections.
    assert all(e.observed for e in events)
    # In order per camera, no gap in the camera's sequence.
    seqs = [e.sequence for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    # /metrics: the same counts.
    reg = node.metrics.registry
    base = {"camera": "cam", "line": "door"}
    assert (
        sample(
            reg, "strata_edge_rule_crossings_total", {**base, "direction": "in", "label": "person"}
        )
        == 1
    )
    assert (
        sample(
            reg, "strata_edge_rule_crossings_total", {**base, "direction": "out", "label": "car"}
        )
        == 1
    )
    assert (
        sample(
            reg, "strata_edge_rule_crossings_total", {**base, "direction": "out", "label": "person"}
        )
        == 0
    )
    zone = {"camera": "cam", "zone": "yard", "label": "person"}
    assert sample(reg, "strata_edge_rule_zone_entries_total", zone) == 1
    assert sample(reg, "strata_edge_track_events_total", {"camera": "cam", "type": "end"}) == 2
    # Near the line and the zone's edge the edge asked the device for its next frames.
    assert sample(reg, "strata_edge_send_next_total", {"reason": "line"}) > 0
    assert sample(reg, "strata_edge_send_next_total", {"reason": "zone"}) > 0
    text = generate_latest(reg).decode()
    assert (
        "strata_edge_rule_crossings_total"
        '{camera="cam",direction="in",label="person",line="door"} 1.0' in text
    )


def test_a_parked_object_is_new_once_and_silent_until_it_moves(start: Any, zctx: Any) -> None:
    node = start()
    sub = run_clip(node, zctx, [("lot", i, parked(i)) for i in range(26)])
    events = [e for e in sub.events if e.camera_id == "lot"]
    assert [e.type for e in events] == [
        E.TRACK_EVENT_TYPE_NEW,
        E.TRACK_EVENT_TYPE_STATIONARY,
        E.TRACK_EVENT_TYPE_ACTIVE,
    ]
    new, still, moved = events
    # Stationary after 1 s still; nothing while parked; active at its first move (frame 20).
    assert still.capture_ns - new.capture_ns >= 10 * STEP_NS
    assert moved.capture_ns == T0 + 20 * STEP_NS
    assert still.after.stationary and not moved.after.stationary
    assert not node.rules.is_stationary("lot", new.track_id)


def test_a_crossing_between_two_kept_frames_is_found_on_predicted_positions(
    start: Any, zctx: Any
) -> None:
    node = start()
    # The device dropped frames 11 to 14: both crossings fall in the gap.
    frames = [("cam", i, None if 11 <= i <= 14 else scene(i)) for i in range(31)]
    sub = run_clip(node, zctx, frames)
    events = [e for e in sub.events if e.camera_id == "cam"]
    assert crossings(events) == {
        ("door", "person", E.CROSSING_DIRECTION_IN): 1,
        ("door", "car", E.CROSSING_DIRECTION_OUT): 1,
    }
    crossed = [e for e in events if e.type == E.TRACK_EVENT_TYPE_LINE_CROSSED]
    # Flagged predicted: not both ends of the step were detections.
    assert all(not e.observed and e.positions == 2 and e.observed_positions < 2 for e in crossed)
    assert all(any(not p.observed for p in e.path.points) for e in crossed)


def test_the_checkpoint_carries_rule_state_across_a_restart(
    start: Any, zctx: Any, tmp_path: Path
) -> None:
    ckpt = {"checkpoint": {"path": str(tmp_path / "edge.checkpoint.json")}}
    first = start(**ckpt)
    # Up to frame 15: the car's crossing counted, the person's still in its debounce.
    sub1 = run_clip(first, zctx, [("cam", i, scene(i)) for i in range(16)])
    before = [e for e in sub1.events if e.camera_id == "cam"]
    assert crossings(before) == {("door", "car", E.CROSSING_DIRECTION_OUT): 1}
    first.stop()
    second = start(**ckpt)
    sub2 = run_clip(second, zctx, [("cam", i, scene(i)) for i in range(16, 31)])
    after = [e for e in sub2.events if e.camera_id == "cam"]
    # The person's crossing commits on the restored state; no track is new again.
    assert crossings(after) == {("door", "person", E.CROSSING_DIRECTION_IN): 1}
    assert not [e for e in after if e.type == E.TRACK_EVENT_TYPE_NEW]
    assert after[0].sequence == before[-1].sequence + 1
    reg = second.metrics.registry
    base = {"camera": "cam", "line": "door"}
    assert (
        sample(
            reg, "strata_edge_rule_crossings_total", {**base, "direction": "out", "label": "car"}
        )
        == 1
    )
    assert (
        sample(
            reg, "strata_edge_rule_crossings_total", {**base, "direction": "in", "label": "person"}
        )
        == 1
    )


def test_a_camera_moved_to_another_edge_keeps_its_rule_state(
    start: Any, zctx: Any, tmp_path: Path
) -> None:
    shared = {"checkpoint": {"dir": str(tmp_path)}}
    a = start(edge_id="edge-a", **shared)
    before = list(run_clip(a, zctx, [("cam", i, scene(i)) for i in range(16)]).events)
    a.stop()  # its last checkpoint holds the camera's rule state
    b = start(edge_id="edge-b", **shared)
    frames = [("cam", i, scene(i)) for i in range(16, 31)]
    after = list(run_clip(b, zctx, frames, previous_edge="edge-a").events)
    assert crossings(after) == {("door", "person", E.CROSSING_DIRECTION_IN): 1}
    assert not [e for e in after if e.type == E.TRACK_EVENT_TYPE_NEW]
    assert after[0].sequence == before[-1].sequence + 1
    assert {e.edge_id for e in after} == {"edge-b"}
    assert {e.track_uid for e in after} <= {e.track_uid for e in before}
    reg = b.metrics.registry
    car = {"camera": "cam", "line": "door", "direction": "out", "label": "car"}
    assert sample(reg, "strata_edge_rule_crossings_total", car) == 1


# ---- `strata edge` as a process ----------------------------------------------------------

STRATA = [sys.executable, "-m", "strata.tools.cli"]


def rules_yaml(line_x: float, label: str = "person") -> str:
    return (
        "rules:\n  cameras:\n    cam:\n      lines:\n"
        f"        - {{name: door, points: [[{line_x}, 0.0], [{line_x}, 1.0]], labels: [{label}]}}\n"
    )


def edge_yaml(model: Path, publish: str, rules: str) -> str:
    return (
        f"edge:\n  publish: {publish}\n  model:\n    path: {model}\n    input_size: {MODEL_SIZE}\n"
        "  batching:\n    max_queue_delay_ms: 2\n    delay_target_ms: 60000\n"
        "  flow:\n    initial_credits: 64\n  tracking:\n    max_lost: 3\n" + rules
    )


def test_a_rule_on_an_unknown_label_refuses_to_start(colour_model: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "strata.yaml"
    cfg.write_text(edge_yaml(colour_model, "tcp://127.0.0.1:0", rules_yaml(0.52, "dog")))
    out = subprocess.run(
        [*STRATA, "edge", "--listen", "tcp://127.0.0.1:0", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "rules name labels the detector does not have" in out.stderr
    assert "rules.cameras.cam.lines.0.labels: 'dog'" in out.stderr
    assert "frames on" not in out.stderr  # never started serving


class Lines:
    """A process's output lines, read on a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        stdout = proc.stdout
        self._t = threading.Thread(target=lambda: self.lines.extend(iter(stdout.readline, "")))
        self._t.start()

    def wait_for(self, text: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(text in line for line in list(self.lines)):
                return
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not in the output:\n{''.join(self.lines)}")


def test_sighup_changes_the_rules_without_dropping_a_frame(
    colour_model: Path, tmp_path: Path, zctx: Any
) -> None:
    listen, publish = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    cfg = tmp_path / "strata.yaml"
    # First the line is where nobody crosses it.
    cfg.write_text(edge_yaml(colour_model, publish, rules_yaml(0.02)))
    proc = subprocess.Popen(
        [*STRATA, "edge", "--listen", listen, "--config", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out = Lines(proc)
    try:
        out.wait_for("frames on", 60)
        sub = Listener(zctx, publish)
        agent = RawAgent(zctx, listen, session_id=SESSION)
        subscribe(zctx, listen, sub)
        cam = Camera(agent, "cam")
        for i in range(8):
            cam.send(i, scene(i, car=False))
        first = sub.collect(8)
        # A bad new file is refused; the rules stay.
        cfg.write_text(edge_yaml(colour_model, publish, rules_yaml(0.52, "dog")))
        proc.send_signal(signal.SIGHUP)
        out.wait_for("new rules refused, the old rules stay")
        # The line moves into the person's way while frames keep coming.
        cfg.write_text(edge_yaml(colour_model, publish, rules_yaml(0.52)))
        for i in range(8, 12):
            cam.send(i, scene(i, car=False))
        proc.send_signal(signal.SIGHUP)  # with frames in flight
        out.wait_for("rules reloaded")
        for i in range(12, 31):
            cam.send(i, scene(i, car=False))
        rest = sub.collect(23, timeout_s=30)
        sub.collect(10**6, timeout_s=1.0)
        assert sorted(r.sequence for r in first + rest) == list(range(1, 32))
        assert crossings(sub.events) == {("door", "person", E.CROSSING_DIRECTION_IN): 1}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0, "".join(out.lines)


def test_asks_for_frames_stay_within_the_budget(start: Any, zctx: Any) -> None:
    """rules.ask_budget 0: the bucket's first asks only; the rest refused and counted, so
    boundaries never spend what the cascade saves."""
    node = start({**RULES, "ask_budget": 0.0})
    run_clip(node, zctx, [("cam", i, scene(i)) for i in range(31)])
    reg = node.metrics.registry
    asked = sum(
        sample(reg, "strata_edge_send_next_total", {"reason": r}) or 0.0
        for r in ("line", "zone", "dwell")
    )
    assert 1 <= asked <= 3 * 2  # at most 3 asks (ASK_BURST), each naming line and/or zone
    assert (sample(reg, "strata_edge_send_next_refused_total") or 0) > 0
