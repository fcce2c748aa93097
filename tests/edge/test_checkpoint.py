"""Checkpoints of edge state: written by a real `strata edge`, the process killed with
SIGKILL, a new one restored from it; corrupt or other-version files start clean."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from prometheus_client import CollectorRegistry
from strata.edge.build import build_node
from strata.edge.state.checkpoint import Checkpointer, CheckpointMetrics
from strata.edge.state.checkpoint_file import (
    VERSION,
    CheckpointBody,
    CounterCheckpoint,
    read,
    write,
)
from strata.edge.state.journal import read_journal
from strata.shared.config.edge import CheckpointConfig, EdgeConfig
from strata.shared.contracts import frame_pb2
from strata.shared.loopback import free_port
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip

pytestmark = pytest.mark.timeout(120)
STRATA = [sys.executable, "-m", "strata.tools.cli"]
SESSION = 7


def daemon(cfg: Path, listen: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*STRATA, "edge", "--listen", listen, "--config", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def scrape(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def send_until_answered(agent: RawAgent, sub: Listener, image: Any, seqs: range) -> None:
    """Send `seqs` of camera cam (resending the first until the node is up)."""
    deadline = time.monotonic() + 60
    first = seqs[0]
    while time.monotonic() < deadline:
        agent.send_image("cam", first, image, session_id=SESSION)
        if sub.collect(1, timeout_s=0.5):
            break
    for seq in seqs[1:]:
        agent.send_image("cam", seq, image, session_id=SESSION)
    got = sub.collect(len(seqs) - 1, timeout_s=30)
    assert len(got) == len(seqs) - 1


def acks_of(agent: RawAgent, seq: int, timeout_s: float = 10.0) -> list[int]:
    """The statuses of the acks for camera cam's frame `seq` arriving within the timeout
    (stops at its first final one)."""
    out: list[int] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for ack in agent.acks(1, timeout_s=0.5):
            if ack.camera_id == "cam" and ack.sequence == seq:
                out.append(ack.status)
                if ack.status != frame_pb2.ACK_STATUS_QUEUED:
                    return out
    return out


@pytest.mark.parametrize("interval_s", [0.3, 3600.0], ids=["checkpoint", "journal-only"])
def test_checkpoint_written_node_killed_state_restored(
    interval_s: float, colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip, tmp_path: Path
) -> None:
    ckpt = tmp_path / "state" / "edge.checkpoint.json"
    journal = tmp_path / "state" / "edge.checkpoint.json.journal"
    listen_addr = f"tcp://127.0.0.1:{free_port()}"
    publish = f"tcp://127.0.0.1:{free_port()}"
    mport = free_port()
    cfg = tmp_path / "strata.yaml"
    cfg.write_text(
        f"edge:\n  publish: {publish}\n  model:\n    path: {colour_model}\n"
        f"    input_size: {MODEL_SIZE}\n  batching:\n    max_queue_delay_ms: 2\n"
        "    queue_per_camera: 64\n    delay_target_ms: 60000\n"
        "  flow:\n    initial_credits: 64\n"  # the raw agent's burst fits its credit
        f"  checkpoint:\n    path: {ckpt}\n    interval_s: {interval_s}\n"
        # Journal-only: no write for track events either (checkpoint.on_events), so the
        # restore below rests on the journal alone.
        f"    on_events: {str(interval_s < 60).lower()}\n"
        f"  metrics:\n    port: {mport}\n"
    )
    image = synthetic_clip.frame(30).image
    proc = daemon(cfg, listen_addr)
    try:
        sub = Listener(zctx, publish)
        agent = RawAgent(zctx, listen_addr)
        send_until_answered(agent, sub, image, range(1, 21))
        # Sequence 20 on disk: in a periodic checkpoint, or (an hour between checkpoints)
        # in the settle journal alone.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if interval_s < 60 and ckpt.exists():
                body = read(ckpt)
                runs = [r for st in body.streams if st.camera_id == "cam" for r in st.runs]
                if runs and runs[-1][1] == 20:
                    break
            if interval_s > 60 and any(
                r.last == 20 for st in read_journal(journal).streams for r in st.runs
            ):
                break
            time.sleep(0.1)
        else:
            pytest.fail("sequence 20 never reached the checkpoint or the journal")
        assert interval_s < 60 or not ckpt.exists()
        processed = scrape(mport, "strata_edge_frames_processed_total")
        assert processed >= 20
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)

    proc = daemon(cfg, listen_addr)
    try:
        sub2 = Listener(zctx, publish)
        agent2 = RawAgent(zctx, listen_addr, "agent-2")
        wait_until_subscribed(agent2, sub2, image, timeout_s=60)  # up, results flowing
        # A frame published before the kill and resent is answered DUPLICATE, not processed
        # again: the restored checkpoint and journal say it was published.
        agent2.send_image("cam", 15, image, session_id=SESSION, resent=True)
        assert acks_of(agent2, 15) == [frame_pb2.ACK_STATUS_DUPLICATE]
        assert not [r for r in sub2.collect(1, timeout_s=1.0) if r.camera_id == "cam"]
        # A new one is answered (and, from a checkpoint, counted on top of its totals).
        send_until_answered(agent2, sub2, image, range(21, 24))
        if interval_s < 60:
            written = {c.name: c.value for c in body.counters if not c.labels}
            assert (
                scrape(mport, "strata_edge_frames_processed_total")
                >= written["strata_edge_frames_processed"] + 2
            )
            assert scrape(mport, "strata_edge_checkpoint_restored") == 1
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    if interval_s < 60:
        assert "restored checkpoint of edge edge-1" in out
    else:
        assert "no checkpoint at" in out and "its journal holds" in out
    # The clean stop wrote a last checkpoint with the new frames, and emptied the journal.
    runs = [r for st in read(ckpt).streams if st.camera_id == "cam" for r in st.runs]
    assert runs[-1][1] == 23
    assert journal.stat().st_size == 0


def node_cfg(path: Path) -> EdgeConfig:
    return EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "checkpoint": {"path": str(path)},
        }
    )


def signed(body: dict[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return json.dumps({"sha256": hashlib.sha256(text.encode()).hexdigest(), "body": body})


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "unreadable"),
        (json.dumps({"sha256": "0" * 64, "body": {"format": "strata-edge-checkpoint"}}),
         "checksum mismatch"),
        (signed({"format": "strata-edge-checkpoint", "version": 99, "edge_id": "edge-1"}),
         "format version 99, this node reads version 2"),
        (signed({"format": "strata-edge-checkpoint", "version": 1, "edge_id": "edge-1",
                 "written_unix": 1.0, "cameras": []}),
         "format version 1, this node reads version 2"),
        (signed({"format": "strata-edge-checkpoint", "version": 2, "edge_id": "edge-1",
                 "written_unix": 1.0, "counters": [{"name": "x", "value": -5}]}),
         "invalid"),
    ],
)  # fmt: skip
def test_a_bad_checkpoint_is_logged_and_the_node_starts_clean(
    content: str, why: str, colour_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "edge.checkpoint.json"
    path.write_text(content)
    node = build_node(node_cfg(path), colour_model, "colour")
    reg = node.metrics.registry
    assert sample(reg, "strata_edge_checkpoints_refused_total") == 1
    assert sample(reg, "strata_edge_checkpoint_restored") == 0
    assert sample(reg, "strata_edge_frames_processed_total") == 0
    line = next(r.getMessage() for r in caplog.records if "not used" in r.getMessage())
    assert why in line and "starting clean" in line
    assert (tmp_path / "edge.checkpoint.json.refused").read_text() == content
    node.start()
    node.stop()
    # The clean stop writes a good one in its place.
    assert read(path).edge_id == "edge-1"


class Counting:
    """A part kept in the checkpoint (what the tracker would register)."""

    name = "counting"

    def __init__(self) -> None:
        self.n = 0

    def snapshot(self) -> Any:
        return {"n": self.n}

    def restore(self, data: Any) -> None:
        self.n = int(data["n"])


def test_registered_parts_travel_in_the_checkpoint(colour_model: Path, tmp_path: Path) -> None:
    path = tmp_path / "edge.checkpoint.json"
    node = build_node(node_cfg(path), colour_model, "colour")
    part = Counting()
    assert not node.checkpointer.register(part)  # nothing to restore yet
    part.n = 41
    node.start()
    node.stop()
    # Beside the node's own other parts: the rules stage's and the clip demand's (no
    # camera seen).
    assert read(path).parts == {"rules": {}, "clip_demand": {}, "counting": {"n": 41}}
    again = build_node(node_cfg(path), colour_model, "colour")
    restored = Counting()
    assert again.checkpointer.register(restored) and restored.n == 41
    # A part whose saved state it cannot read starts clean, with a log line.
    broken = Counting()
    broken.name = "broken"
    again.checkpointer._restored_parts["broken"] = {"no": "n"}
    assert not again.checkpointer.register(broken) and broken.n == 0


def test_handover_markers_keep_moved_cameras_counters_off_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The peer's marker of the same checkpoint drops those cameras' counters from the
    restore; a marker of an older checkpoint or a corrupt one is ignored; a checkpoint
    written afterwards removes them."""
    cfg = CheckpointConfig(dir=str(tmp_path), journal=False)
    counters = [
        CounterCheckpoint(name="strata_edge_camera_frames", labels={"camera": c}, value=v)
        for c, v in (("x", 20.0), ("y", 7.0), ("z", 3.0))
    ] + [CounterCheckpoint(name="strata_edge_frames", labels={"status": "accepted"}, value=30.0)]
    body = CheckpointBody(version=VERSION, edge_id="a", written_unix=1234.5, counters=counters)
    write(tmp_path / "a.checkpoint.json", body)

    def node(edge: str) -> Checkpointer:
        return Checkpointer(cfg, edge, lambda: body, CheckpointMetrics(CollectorRegistry()))

    # b took x and y from this checkpoint (two takeovers: one marker, rewritten), c took z
    # from an older one; d's marker is garbage.
    b, c = node("b"), node("c")
    b.mark_handed_over("a", 1234.5, "x")
    b.mark_handed_over("a", 1234.5, "y")
    c.mark_handed_over("a", 1000.0, "z")
    (tmp_path / "a.checkpoint.json.handed-over.d").write_text("{not json")
    marker_b = tmp_path / "a.checkpoint.json.handed-over.b"
    assert json.loads(marker_b.read_text())["cameras"] == ["x", "y"]
    assert not list(tmp_path.glob(".*part"))

    a = node("a")
    loaded = a.load()
    assert loaded is not None
    kept = {(s.name, s.labels.get("camera", "")) for s in loaded[0].counters}
    assert kept == {("strata_edge_camera_frames", "z"), ("strata_edge_frames", "")}
    assert any("x, y were taken over from it by b" in r.getMessage() for r in caplog.records)
    assert any("handover marker" in r.getMessage() for r in caplog.records)  # d's
    # A crash before its own next checkpoint restores the same way (markers still there).
    again = node("a").load()
    assert again is not None and len(again[0].counters) == 2
    assert a.save()
    assert not list(tmp_path.glob("a.checkpoint.json.handed-over.*"))
