"""The real daemons end to end (issue 26): the edge asks the device for clips of the tracks
it sees on an H.264 camera, the device cuts them from the camera's own stream and uploads
them to the cloud, and the cloud's GetClip serves the very bytes: a clip of the camera's
own frames that decodes from its first one, found by its id and by its track."""

from __future__ import annotations

import sqlite3
import time
import zlib
from pathlib import Path
from typing import Any

import grpc
import pytest
from clip_testkit import first_seconds
from strata.shared.contracts import analytics_pb2_grpc, clips_pb2, current_version
from strata.tools.demo.stack import Camera, Stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SECONDS = 15.0


def frame_crcs(path: Path) -> list[int]:
    """Checksums of every decoded frame (a stream copy decodes to the same pixels)."""
    import av

    with av.open(str(path)) as c:
        return [zlib.crc32(f.to_ndarray(format="bgr24").tobytes()) for f in c.decode(video=0)]


def stored_clips(db: Path) -> list[tuple[str, int, str]]:
    """(clip_id, final, one track uid) of every clip in the cloud's SQLite store."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT c.clip_id, c.is_final, min(t.track_uid) FROM clips c "
            "JOIN clip_tracks t ON t.clip_id = c.clip_id GROUP BY c.clip_id"
        ).fetchall()
    finally:
        conn.close()
    return [(str(a), int(b), str(c)) for a, b, c in rows]


def get_clip(stub: Any, **key: str) -> tuple[clips_pb2.ClipInfo, bytes]:
    got = list(stub.GetClip(clips_pb2.GetClipRequest(version=current_version(), **key), timeout=30))
    return got[0].info, b"".join(c.data for c in got)


def test_clips_of_the_edges_tracks_reach_the_cloud_and_getclip_serves_them(
    tmp_path: Path, vtest_mp4: Path
) -> None:
    camera = first_seconds(vtest_mp4, tmp_path / "cam.mp4", SECONDS)
    workdir = tmp_path / "run"
    stack = Stack(
        workdir=workdir,
        cameras=[Camera("cam", str(camera))],
        extra_config={
            "device": {
                "source": {"realtime": True},
                "sender": {"drain_timeout_s": 30.0},
                "clips": {
                    "enabled": True,
                    "dir": str(workdir / "clips"),
                    "pre_roll_s": 1.0,
                    "post_roll_s": 1.0,
                    "ring_s": 8.0,
                },
            },
        },
    )
    stack.extra_config["device"]["clips"]["upload"] = {
        "target": stack.cloud_address,
        "poll_s": 0.2,
    }
    try:
        stack.start_servers(timeout=120)
        stack.start_device()
        device = stack.procs["device"]
        deadline = time.monotonic() + 150
        while device.returncode() is None:  # the file ends; the agent drains its clips
            assert time.monotonic() < deadline, "the device did not finish its file"
            time.sleep(0.5)
        assert device.returncode() == 0, device.tail()
        clips = stored_clips(workdir / "events.sqlite")
        assert clips, "no clip reached the cloud"
        assert all(final for _, final, _ in clips), clips
        source = frame_crcs(camera)
        channel = grpc.insecure_channel(stack.cloud_address)
        stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
        for n, (clip_id, _, uid) in enumerate(clips):
            info, data = get_clip(stub, clip_id=clip_id)
            assert info.final and len(data) == info.size_bytes > 0, info
            assert info.camera_id == "cam" and info.codec == "h264"
            path = tmp_path / f"got-{n}.mp4"
            path.write_bytes(data)
            got = frame_crcs(path)
            assert got, "the clip decodes from its first frame"
            k = source.index(got[0])
            assert got == source[k : k + len(got)], "the camera's own frames, bit for bit"
            # The same clip by its track.
            by_track, again = get_clip(stub, camera_id="cam", track_uid=uid)
            assert by_track.clip_id == clip_id and again == data
        channel.close()
        # Nothing waits on the device: every clip went up and its file was deleted.
        assert not list((workdir / "clips").glob("*/*.mp4"))
    finally:
        stack.stop()
