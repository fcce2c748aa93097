"""An edge taking over a failed edge's cameras restores that edge's checkpoint for them.

Real `strata edge` processes sharing a checkpoint directory: one is killed with SIGKILL,
the frames its cameras resend to the survivor (marked with the edge they come from) are
answered DUPLICATE when the dead edge had published them and processed when it had not;
trackers and per-camera counters carry over. With the real `strata device` and the ring:
kill -9, every moved camera's checkpoint restored by the edge it moved to, every frame
published. A corrupt peer checkpoint: one clear line, the camera starts clean.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from strata.edge.build import build_node
from strata.edge.flow.ledger import DeliveryLedger, SettledRun, SettledStream
from strata.edge.state.journal import SettleJournal, read_journal
from strata.edge.tracking.tracker import Tracker
from strata.shared.config.edge import EdgeConfig, TrackingConfig
from strata.shared.contracts import frame_pb2
from strata.shared.loopback import free_port
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip
from strata.shared.vision import FrameBoxes
from strata.tools.fleet import DeviceProc, EdgeProc, Results, gaps, synthetic_source, wait_until

pytestmark = pytest.mark.timeout(120)
SESSION = 7
PROCESSED = frame_pb2.ACK_STATUS_PROCESSED
DUPLICATE = frame_pb2.ACK_STATUS_DUPLICATE
QUEUED = frame_pb2.ACK_STATUS_QUEUED


def scrape(port: int, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def scraped(port: int, name: str) -> float | None:
    """`scrape`, or None while nothing answers on the port (a daemon starting)."""
    try:
        return scrape(port, name)
    except OSError:
        return None


def final_acks(agent: RawAgent, n: int, timeout_s: float = 20.0) -> dict[int, int]:
    """Sequence -> final status of camera cam's next `n` final acks."""
    out: dict[int, int] = {}
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        for ack in agent.acks(1, timeout_s=0.5):
            if ack.camera_id == "cam" and ack.status != QUEUED:
                out[ack.sequence] = ack.status
    return out


def edge_extra(shared: Path, mport: int) -> str:
    return (
        "  batching:\n    max_queue_delay_ms: 2\n    queue_per_camera: 64\n"
        "    delay_target_ms: 60000\n"
        "  flow:\n    initial_credits: 64\n"
        f"  checkpoint:\n    dir: {shared}\n    interval_s: 0.3\n"
        f"  metrics:\n    port: {mport}\n"
    )


def test_the_survivor_restores_a_killed_edges_checkpoint_for_its_camera(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip, tmp_path: Path
) -> None:
    shared = tmp_path / "checkpoints"
    ports = {"a": free_port(), "b": free_port()}
    edges = {
        n: EdgeProc(
            f"edge-{n}", tmp_path, str(colour_model), MODEL_SIZE, extra=edge_extra(shared, p)
        )
        for n, p in ports.items()
    }
    # EdgeProc's config already has a batching section: the extra one replaces it.
    for e in edges.values():
        text = e.cfg.read_text().replace("  batching:\n    max_queue_delay_ms: 2\n", "", 1)
        e.cfg.write_text(text)
    image = synthetic_clip.frame(30).image
    try:
        for e in edges.values():
            e.start()
        a, b = edges["a"], edges["b"]
        sub_a = Listener(zctx, a.publish)
        agent = RawAgent(zctx, a.listen)
        wait_until_subscribed(agent, sub_a, image, timeout_s=60)
        for seq in range(1, 21):
            agent.send_image("cam", seq, image, frame_index=seq, session_id=SESSION)
        got = final_acks(agent, 20)
        assert got == dict.fromkeys(range(1, 21), PROCESSED)
        results_a = {r.sequence: r for r in sub_a.collect(20, timeout_s=20)}
        assert set(results_a) == set(range(1, 21))
        ids_a = {d.track_id for d in results_a[20].detections}
        assert ids_a and 0 not in ids_a
        # Its checkpoint has the tracker; the journal has every frame after it.
        assert wait_until((shared / "edge-a.checkpoint.json").exists, 10)
        time.sleep(0.5)
        a.kill()

        # The camera moves to b: the device resends what it holds (here: 15-20 as if their
        # final acks were lost in the kill) and sends on, naming the edge it comes from.
        sub_b = Listener(zctx, b.publish)
        agent_b = RawAgent(zctx, b.listen, "agent-1")
        wait_until_subscribed(agent_b, sub_b, image, timeout_s=60, camera="probe-b")
        for seq in range(15, 26):
            agent_b.send_image(
                "cam", seq, image, frame_index=seq, resent=seq <= 20, previous_edge="edge-a"
            )
        got = final_acks(agent_b, 11)
        assert got == {**dict.fromkeys(range(15, 21), DUPLICATE),
                       **dict.fromkeys(range(21, 26), PROCESSED)}  # fmt: skip
        results_b = [r for r in sub_b.collect(11, timeout_s=5) if r.camera_id == "cam"]
        # Only the new frames were processed: nothing published twice.
        assert sorted(r.sequence for r in results_b) == list(range(21, 26))
        assert not any(r.redelivery for r in results_b)
        # The tracker carried over: the same objects keep their ids.
        assert {d.track_id for d in results_b[0].detections} == ids_a
        mb = ports["b"]
        assert scrape(mb, "strata_edge_takeover_cameras_total", result="checkpoint") == 1
        assert scrape(mb, "strata_edge_takeover_settled_frames_total") >= 20
        # Its per-camera counter continues from a's (20 published there, 5 here).
        assert scrape(mb, "strata_edge_camera_frames_total", camera="cam") >= 25
        assert scrape(mb, "strata_edge_frames_total", status="duplicate") == 6

        # b marked the camera handed over, beside a's checkpoint it restored it from.
        marker = shared / "edge-a.checkpoint.json.handed-over.edge-b"
        assert json.loads(marker.read_text())["cameras"] == ["cam"]
        # a restarts from the same checkpoint: its own counters come back, the moved
        # camera's stay with b (counted once across the fleet: 25, all on b).
        a.start()
        ma = ports["a"]
        assert wait_until(lambda: scraped(ma, "strata_edge_checkpoint_restored") == 1, 30)
        assert scrape(ma, "strata_edge_camera_frames_total", camera="cam") == 0
        assert scrape(ma, "strata_edge_frames_total", status="accepted") >= 20
        # Its next checkpoint holds no counter of that camera, and the marker is gone.
        assert wait_until(lambda: not marker.exists(), 10)
        body = json.loads((shared / "edge-a.checkpoint.json").read_text())["body"]
        assert not [c for c in body["counters"] if c["labels"].get("camera") == "cam"]
        assert any(c["name"] == "strata_edge_frames" for c in body["counters"])
    finally:
        for e in edges.values():
            e.stop()
    log_b = edges["b"].log.read_text()
    assert re.search(r"camera cam moved here from edge edge-a: restored its checkpoint", log_b)
    log_a = edges["a"].log.read_text()
    assert re.search(r"camera\(s\) cam were taken over from it by edge-b", log_a)


def test_a_corrupt_peer_checkpoint_is_logged_and_the_camera_starts_clean(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    shared = tmp_path / "checkpoints"
    shared.mkdir()
    (shared / "edge-a.checkpoint.json").write_text('{"sha256": "00", "body": {}}')
    cfg = EdgeConfig.model_validate(
        {
            "edge_id": "edge-b",
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "batching": {"max_queue_delay_ms": 2},
            "checkpoint": {"dir": str(shared)},
        }
    )
    node = build_node(cfg, colour_model, "colour")
    ep = node.start()
    try:
        sub = Listener(zctx, ep.publish)
        agent = RawAgent(zctx, ep.listen)
        image = synthetic_clip.frame(30).image
        wait_until_subscribed(agent, sub, image, timeout_s=30)
        agent.send_image("cam", 5, image, session_id=SESSION, resent=True, previous_edge="edge-a")
        assert final_acks(agent, 1) == {5: PROCESSED}
        got = [r for r in sub.collect(1, timeout_s=10) if r.camera_id == "cam"]
        # Not known here: processed, flagged as maybe published before.
        assert got and got[0].redelivery
        reg = node.metrics.registry
        assert sample(reg, "strata_edge_takeover_cameras_total", {"result": "refused"}) == 1
    finally:
        node.stop()
    line = next(r.getMessage() for r in caplog.records if "moved here" in r.getMessage())
    assert "edge-a" in line and "checksum mismatch" in line and "starts clean" in line
    # The peer's file is left as it was (it is the peer's to refuse when it restarts).
    assert (shared / "edge-a.checkpoint.json").exists()


@pytest.mark.slow
def test_kill_9_the_moved_cameras_restore_their_edges_checkpoint(
    colour_model: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "checkpoints"
    extra = f"  checkpoint:\n    dir: {shared}\n    interval_s: 0.5\n"
    edges = [
        EdgeProc(f"e{i}", tmp_path, str(colour_model), MODEL_SIZE, extra=extra) for i in range(3)
    ]
    for e in edges:
        e.start()
    res = Results([e.publish for e in edges])
    cams = {f"cam{i}": synthetic_source(i, 4, 110) for i in range(6)}
    # No warm-up, quick moves: the ring settles soon after the three edges are up, so the
    # kill finds no camera on its way between two edges (its placement would be ambiguous).
    routing = {"warmup_s": 0.0, "ramp_s": 0.0, "moves_per_s": 20.0}
    dev = DeviceProc(tmp_path, [e.listen for e in edges], cams, routing)

    def all_up() -> bool:
        log = dev.log.read_text() if dev.log.exists() else ""
        return all(f"edge {e.listen} is up" in log for e in edges)

    def settled() -> bool:
        first = res.placement(time.monotonic() - 1.0)
        time.sleep(1.0)
        return first == res.placement(time.monotonic() - 1.0) and len(first) == len(cams)

    try:
        dev.start()
        assert wait_until(all_up, 30), dev.log.read_text()[-3000:]
        assert wait_until(settled, 30), res.placement(time.monotonic() - 1.0)
        per: dict[str, list[str]] = {}
        for cam, edge in res.placement(time.monotonic() - 1.0).items():
            per.setdefault(edge, []).append(cam)
        name = max(per, key=lambda k: len(per[k]))
        victim = next(e for e in edges if e.name == name)
        moved = per[name]
        killed_at = time.monotonic()
        # To the log's milliseconds: a start-up move off the victim a moment before the kill
        # restored its checkpoint too, and is not one of the cameras it held.
        killed_wall = datetime.now()
        victim.kill()

        def served_elsewhere() -> bool:
            after = [r for r in res.snapshot() if r.at > killed_at and r.edge != name]
            return set(moved) <= {r.camera for r in after}

        assert wait_until(served_elsewhere, 20), dev.log.read_text()[-3000:]
        assert dev.wait(60) == 0
        time.sleep(0.5)
        # Every frame sent was published, none lost; a frame published twice is one the
        # dead edge published but had not yet journaled, and says so (redelivery).
        seen: set[tuple[str, int]] = set()
        for r in res.snapshot():
            key = (r.camera, r.sequence)
            assert key not in seen or r.redelivery, r
            seen.add(key)
        seqs = res.sequences()
        for cam in cams:
            sent = dev.metric("strata_device_frames_sent_total", camera=cam)
            assert not gaps(seqs[cam]) and len(seqs[cam]) == sent, cam
        assert dev.metric("strata_device_frames_dropped_total") == 0
    finally:
        if dev.proc is not None and dev.proc.poll() is None:
            dev.stop()
        res.close()
        for e in edges:
            e.stop()
    logs = "".join(e.log.read_text() for e in edges if e.name != name)
    # Cameras that moved off the victim while it lived (start-up rebalancing) restored
    # its state too; the ones it held when killed must all have, after the kill.
    restored = {
        cam
        for stamp, cam in re.findall(
            rf"^(\S+ \S+) edge WARNING \S+ camera (\S+) moved here from edge {name}: restored",
            logs,
            re.M,
        )
        if datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f") >= killed_wall
    }
    assert restored == set(moved), logs[-3000:]


# -- units ---------------------------------------------------------------------------------


def test_the_ledger_round_trips_settled_frames_as_runs() -> None:
    led = DeliveryLedger(settled_per_stream=100)
    for seq in [1, 2, 3, 5, 6]:
        led.add((7, "c"), seq)
        led.settle((7, "c"), seq, PROCESSED)
    led.add((7, "c"), 4)
    led.settle((7, "c"), 4, frame_pb2.ACK_STATUS_SHED, "stale")
    snap = led.snapshot()
    assert snap == [
        SettledStream(
            7,
            "c",
            (
                SettledRun(1, 3, PROCESSED),
                SettledRun(4, 4, frame_pb2.ACK_STATUS_SHED, "stale"),
                SettledRun(5, 6, PROCESSED),
            ),
        )
    ]
    other = DeliveryLedger(settled_per_stream=100)
    assert other.restore(snap) == 6
    assert other.lookup((7, "c"), 2).status == PROCESSED
    assert other.lookup((7, "c"), 4).reason == "stale"
    # A run of a million costs only the bound.
    huge = DeliveryLedger(settled_per_stream=10)
    assert huge.restore([SettledStream(1, "h", (SettledRun(1, 10**6, PROCESSED),))]) == 10
    assert huge.lookup((1, "h"), 10**6).status == PROCESSED
    assert huge.lookup((1, "h"), 5).status != PROCESSED


def test_the_journal_survives_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "j"
    j = SettleJournal(path)
    j.add(7, "c", 1, PROCESSED, "")
    j.add(7, "c", 2, PROCESSED, "")
    j.flush()
    j.close()
    with open(path, "a") as fh:
        fh.write('[7,"c",3,4')  # killed mid-line (a power cut)
    read = read_journal(path)
    assert read.frames == 2 and read.bad_lines == 1
    assert [r.first for s in read.streams for r in s.runs] == [1, 2]


def test_a_restored_tracker_keeps_ids_and_never_repeats_one() -> None:
    cfg = TrackingConfig()
    box = FrameBoxes(
        np.array([[10, 10, 30, 50]], np.float32), np.array([0.9], np.float32), np.zeros(1, np.int32)
    )
    t = Tracker(cfg)
    for f in range(3):
        first = t.update(f, box).track_ids[0]
    u = Tracker(cfg)
    u.restore(t.snapshot())
    assert u.update(3, box).track_ids[0] == first
    far = FrameBoxes(
        np.array([[10, 10, 30, 50], [200, 200, 220, 240]], np.float32),
        np.array([0.9, 0.9], np.float32),
        np.zeros(2, np.int32),
    )
    assert u.update(4, far).track_ids[1] > first
    bad = t.snapshot().model_copy(update={"hits": []})
    with pytest.raises(ValueError, match="other lengths"):
        Tracker(cfg).restore(bad)
