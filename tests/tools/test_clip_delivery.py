"""The real daemons end to end (issue 26): the edge asks the device for clips of the tracks
it sees on an H.264 camera, the device cuts them from the camera's own stream and uploads
them to the cloud, and the cloud's GetClip serves the very bytes: a clip of the camera's
own frames that decodes from its first one, found by its id and by its track."""

from __future__ import annotations

import os
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

# Seconds of vtest the camera plays: the test needs a track that ends (last seen, then
# edge.tracking.max_lost frames more) while one it overlaps lives on. vtest's people cross
# its street slowly: in 15 s, with the real detector, no track ended in 7 of 8 runs; in
# 30 s 4 did. STRATA_CLIP_SECONDS=60 measures more tracks' clips.
SECONDS = float(os.environ.get("STRATA_CLIP_SECONDS", "30"))


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


def track_spans(db: Path) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    """From the cloud's store: ended tracks' (first, last seen) from their END events, and
    every track's first seen (a track live when the file ended has no END)."""
    from strata.shared.contracts import events_pb2

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT track_uid, type, first_seen_ns, event FROM track_events")
        ended: dict[str, tuple[int, int]] = {}
        first: dict[str, int] = {}
        for uid, kind, first_ns, blob in rows.fetchall():
            first[str(uid)] = min(int(first_ns), first.get(str(uid), int(first_ns)))
            if kind == events_pb2.TRACK_EVENT_TYPE_END:
                ev = events_pb2.TrackEvent.FromString(blob)
                ended[str(uid)] = (ev.path.first_seen_ns, ev.path.last_seen_ns)
    finally:
        conn.close()
    return ended, first


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
        # Issue 39: a clip follows its own track. vtest's street has people walking at
        # once: their tracks overlap, and each gets a clip of its own span plus the rolls
        # (merged, a track's clip ran until the last overlapping one ended).
        ended, first_seen = track_spans(workdir / "events.sqlite")
        infos = [get_clip(stub, clip_id=c)[0] for c, _, _ in clips]
        assert all(len(i.track_uids) == 1 for i in infos), [list(i.track_uids) for i in infos]
        own = {i.track_uids[0]: i for i in infos if i.track_uids[0] in ended}
        # The edge learns a track ended only edge.tracking.max_lost source frames (60 at
        # 10 fps) after it was last seen, and the device hears it on a later ack (seconds
        # more on a loaded machine); its clip, written live, has run on until then and is
        # cut back to the first fragment boundary past last seen + post_roll: at most a
        # GOP more (issue 39; it was up to 9 s more).
        gop_s, slack_s = 1.0, 0.5  # the camera's keyframe interval; frames and clocks
        # A track that ended while one it overlaps lived on past its clip's end: merged, its
        # clip would have run until the other's end (or the file's).
        outlived = [
            (a, b)
            for a in own
            for b in first_seen
            if b != a
            and first_seen[b] < ended[a][1]
            and (b not in ended or ended[b][1] > own[a].end_ns)
        ]
        assert outlived, f"no track outlived by one it overlaps: {ended}, {first_seen}"
        # The overrun measured (pytest -s shows it): how far past its track's last seen
        # position plus the post-roll each ended track's clip runs.
        over = sorted((i.end_ns - ended[u][1]) / 1e9 - 1.0 for u, i in own.items())
        print(f"clip overrun past last seen + post_roll (s), {len(over)} tracks: {over}")
        print(f"outcomes: {sorted(clips_pb2.ClipOutcome.Name(i.outcome) for i in own.values())}")
        for uid, info in own.items():
            first, last = ended[uid]
            why = (uid, ended[uid], info.start_ns, info.end_ns)
            # From the keyframe at or before the track's start minus the pre-roll ...
            assert info.start_ns >= first - (1.0 + gop_s + slack_s) * 1e9, why
            # ... to its end plus the post-roll, to the next keyframe at most: not to where
            # the device heard the end, nor to the end of another track. A clip the file
            # ended under before the device heard the end (ENDED) had nothing to cut back:
            # it runs to the file's end, at most the lost wait and an ack (9 s) past it.
            lag_s = 9.0 if info.outcome == clips_pb2.CLIP_OUTCOME_ENDED else 0.0
            if not lag_s:  # never short of the track's own span and the post-roll
                assert info.end_ns >= last + (1.0 - slack_s) * 1e9, why
            assert info.end_ns <= last + (1.0 + gop_s + lag_s + slack_s) * 1e9, why
            span_s = (info.end_ns - info.start_ns) / 1e9
            assert span_s <= (last - first) / 1e9 + 2.0 + 2 * gop_s + lag_s + 2 * slack_s, why
        channel.close()
        # Nothing waits on the device: every clip went up and its file was deleted.
        assert not list((workdir / "clips").glob("*/*.mp4"))
    finally:
        stack.stop()
