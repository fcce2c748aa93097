"""The optional disk spool: unacked frames survive an agent restart."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import CollectorRegistry
from strata.device.agent import Agent
from strata.device.metrics import CameraCounts
from strata.device.transport.diskspool import DiskSpool
from strata.device.transport.outbox import Outbox, OutboxLimits
from strata.device.transport.sink import FrameSink
from strata.shared.config.device import CameraConfig, SenderConfig
from strata.shared.contracts import frame_pb2

from .conftest import fast_config


def test_frames_round_trip_and_damage_is_dropped(tmp_path: Path) -> None:
    disk = DiskSpool(tmp_path, "cam/1")
    box = Outbox(
        "cam/1",
        OutboxLimits(window=2, max_frames=10, max_bytes=10_000),
        first_sequence=5,
        disk=disk,
    )
    for i in range(3):
        box.put(frame_pb2.FrameHeader(camera_id="cam/1", frame_index=i), bytes([i]) * 10)
    item = box.take(0.0)
    assert item is not None and box.ack(item.header.sequence) is item
    (disk.dir / "00000000000000000099.frame").write_bytes(b"\x00\x00\x00\xffjunk")
    (disk.dir / "x.part").write_bytes(b"half")
    loaded = disk.load()
    assert [(h.sequence, h.frame_index, p) for h, p in loaded] == [
        (6, 1, bytes([1]) * 10),
        (7, 2, bytes([2]) * 10),
    ]
    assert sorted(p.name for p in disk.dir.iterdir()) == [
        "00000000000000000006.frame",
        "00000000000000000007.frame",
    ]
    again = Outbox(
        "cam/1",
        OutboxLimits(window=2, max_frames=10, max_bytes=10_000),
        first_sequence=1,
        disk=disk,
    )
    assert again.restored == 2
    nxt = again.put(frame_pb2.FrameHeader(camera_id="cam/1"), b"new")
    assert nxt.sequence == 8  # continues above what was restored


def test_a_restarted_agent_resends_the_previous_runs_frames_first(
    tmp_path: Path, port: int
) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    spool = tmp_path / "spool"

    def agent(seed: int) -> Agent:
        src = f"synthetic://?frames=30&seed={seed}&width=160&height=120"
        cfg = fast_config(
            edge,
            None,
            cameras=[CameraConfig(id="cam", source=src)],
            sender=SenderConfig(spool_dir=str(spool)),
        )
        return Agent(cfg, registry=CollectorRegistry())

    first = agent(1)
    first.start()
    assert first.wait(20.0)
    first.stop(drain_timeout_s=0.0)  # no edge: everything is still unacked
    c1 = CameraCounts.read(first.metrics.registry, "cam")
    kept1 = c1.decoded - c1.dropped_motion
    assert kept1 > 0 and len(list((spool / "cam").glob("*.frame"))) == kept1

    time.sleep(0.01)  # the new run's sequences start at its own (later) start time
    second = agent(2)
    with FrameSink(edge) as sink:
        second.start()
        assert second.wait(20.0)
        second.stop(drain_timeout_s=5.0)
        got = sink.received()
    c2 = CameraCounts.read(second.metrics.registry, "cam")
    kept2 = c2.decoded - c2.dropped_motion
    assert len(got) == kept1 + kept2 and not any(r.duplicate for r in got)
    seqs = [r.sequence for r in got]
    assert seqs == sorted(seqs)
    assert [r.frame_index for r in got[:kept1]] == sorted(r.frame_index for r in got[:kept1])
    assert list((spool / "cam").glob("*.frame")) == []


def test_camera_ids_never_share_a_folder_or_leave_the_spool(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    ids = ["..", ".", "a/b", "a_b", "a%2Fb", "../../etc", "/abs", "x" * 300, "é", ""]
    spools = {cam: DiskSpool(root, cam) for cam in ids}
    dirs = [s.dir.resolve() for s in spools.values()]
    assert len(set(dirs)) == len(ids)  # one folder each
    for d in dirs:
        assert d.parent == root.resolve() and len(d.name) <= 255
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spool"]  # nothing written above
    for seq, (cam, spool) in enumerate(spools.items(), 1):
        spool.save(frame_pb2.FrameHeader(camera_id=cam, sequence=seq, payload_size=1), b"x")
    for seq, (cam, spool) in enumerate(spools.items(), 1):
        assert [(h.camera_id, h.sequence) for h, _ in spool.load()] == [(cam, seq)]


def test_a_frame_of_another_camera_is_not_reloaded(tmp_path: Path) -> None:
    a, b = DiskSpool(tmp_path, "a"), DiskSpool(tmp_path, "b")
    b.save(frame_pb2.FrameHeader(camera_id="b", sequence=1, payload_size=1), b"x")
    (b.dir / "00000000000000000001.frame").rename(a.dir / "00000000000000000001.frame")
    assert a.load() == []
