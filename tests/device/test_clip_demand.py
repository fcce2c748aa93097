"""device/clips/demand.py and device/clips/spool.py on real media: the edge's demand drives
the cutter (a live track opens a clip, an overlapping one opens its own, an end closes it
post_roll_s later, a track that vanishes ends at the last frame seen with it), every clip
has a sidecar, and a clip cut short by a stop is found at the next start as CUT_SHORT."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from strata.device.capture.packet_ring import PacketRing
from strata.device.capture.sources import AvSource
from strata.device.clips.cutter import ClipCutter
from strata.device.clips.demand import DemandFollower
from strata.device.clips.spool import CUT_SHORT, ClipSpool, read_sidecar
from strata.device.metrics import ClipMetrics, DeviceMetrics
from strata.shared.config.device import ClipsConfig, SourceConfig
from strata.shared.contracts import clips_pb2, frame_pb2

from .clip_media import FPS, decode, encode_vtest

FRAME_S = 1 / FPS
# At a frame index: the demand then, as (uid, start frame, end frame or None: live).
Plan = dict[int, list[tuple[str, int, int | None]]]


@pytest.fixture(scope="module")
def h264(vtest_mp4: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return encode_vtest(vtest_mp4, tmp_path_factory.mktemp("demand") / "gop10.mp4", "libx264", 10)


class Run:
    """A file through the real source, ring, cutter and spool; the demand applied at
    chosen frames, in the capture clock of the frames delivered."""

    def __init__(self, path: Path, cfg: ClipsConfig, served: tuple[str, ...] = ()) -> None:
        self.registry = CollectorRegistry()
        metrics = DeviceMetrics(self.registry)
        self.spool = ClipSpool(cfg, "agent", metrics)
        self.recovered = self.spool.recover()
        cam = ClipMetrics(metrics, "cam")
        self.ring = PacketRing("cam", cfg, cam)
        self.cutter = ClipCutter(self.ring, cfg, cam, self.spool, "s1")
        self.follower = DemandFollower(self.cutter, served or self.spool.served.get("cam", ()))
        self.path = path
        self.capture: list[int] = []
        self.times: list[float] = []

    def play(self, plan: Plan, crash_at: int = 0) -> None:
        """Read the file; at frame `crash_at` the process dies: nothing ends a clip."""
        src = AvSource(str(self.path), SourceConfig(), tap=self.ring)
        try:
            for frame in src.frames():
                self.capture.append(frame.capture_ns)
                self.times.append(frame.ts)
                if frame.index in plan:
                    self.follower.apply([self._demand(*d) for d in plan[frame.index]])
                if crash_at and frame.index == crash_at:
                    self.ring.listener = None
                    return
        finally:
            src.close()

    def _demand(self, uid: str, start: int, end: int | None) -> frame_pb2.ClipDemand:
        end_ns = self.capture[end] if end is not None else 0
        return frame_pb2.ClipDemand(track_uid=uid, start_ns=self.capture[start], end_ns=end_ns)


def _covers(run: Run, path: Path, span: tuple[int, int], cfg: ClipsConfig) -> None:
    """The file decodes from its first frame (a keyframe) and covers the span's frames
    with pre- and post-roll, within one frame."""
    got = decode(path)
    assert not got.broken and got.keys[0]
    source = decode(run.path)
    k = source.crcs.index(got.crcs[0])
    assert got.crcs == source.crcs[k : k + len(got.crcs)]
    first, last = source.times[k], source.times[k + len(got.crcs) - 1]
    assert first <= run.times[span[0]] - cfg.pre_roll_s + 1e-6
    assert last >= run.times[span[1]] + cfg.post_roll_s - FRAME_S - 1e-6


def test_overlapping_live_tracks_each_get_a_clip_that_ends_post_roll_after_their_end(
    h264: Path, tmp_path: Path
) -> None:
    """Issue 39: a clip follows its own track, overlapping tracks included."""
    cfg = ClipsConfig(enabled=True, dir=str(tmp_path), pre_roll_s=1.5, post_roll_s=1.0, ring_s=8)
    run = Run(h264, cfg)
    # a lives from frame 40; b starts at 60 while a lives; a ends at 70, b at 90.
    plan: Plan = {i: [("a", 40, None)] for i in range(42, 60, 5)}
    plan.update({i: [("a", 40, None), ("b", 60, None)] for i in range(62, 72, 5)})
    plan.update({i: [("a", 40, 70), ("b", 60, None)] for i in range(72, 92, 5)})
    plan.update({i: [("a", 40, 70), ("b", 60, 90)] for i in range(92, 130, 5)})
    run.play(plan)
    by_key = {c.keys: c for c in run.cutter.finished}
    assert set(by_key) == {("a",), ("b",)}, run.cutter.finished
    gop_s = 10 * FRAME_S
    for n, (uid, span) in enumerate((("a", (40, 70)), ("b", (60, 90)))):
        clip = by_key[(uid,)]
        assert clip.outcome == "complete" and clip.path is not None, clip
        _covers(run, clip.path, span, cfg)
        # Its own span: it starts at most a GOP before start - pre_roll and ends within a
        # frame of its end + post_roll (a's is not stretched to b's end).
        assert clip.start_ts > run.times[span[0]] - cfg.pre_roll_s - gop_s - 1e-6, clip
        assert clip.end_ts <= run.times[span[1]] + cfg.post_roll_s + 2 * FRAME_S, clip
        info = read_sidecar(clip.path)
        assert info is not None and info.final
        assert list(info.track_uids) == [uid] and info.agent_id == "agent"
        assert info.outcome == clips_pb2.CLIP_OUTCOME_COMPLETE and info.codec == "h264"
        assert info.size_bytes == clip.path.stat().st_size == clip.bytes
        assert (info.width, info.height) == (384, 288)
        assert info.clip_id == f"cam/s1/{n}"
    # A repeated demand cuts nothing twice.
    assert run.follower.handled.keys() == {"a", "b"}
    assert len(run.cutter.finished) == 2


def test_a_track_that_vanishes_while_live_ends_at_the_last_frame_seen_with_it(
    h264: Path, tmp_path: Path
) -> None:
    cfg = ClipsConfig(enabled=True, dir=str(tmp_path), pre_roll_s=1.0, post_roll_s=1.0, ring_s=8)
    run = Run(h264, cfg)
    plan: Plan = {i: [("gone", 50, None)] for i in range(52, 80, 5)}
    plan[82] = []  # the edge forgot it (the last demand naming it came at frame 77)
    run.play(plan)
    (clip,) = run.cutter.finished
    assert clip.outcome == "complete" and clip.path is not None
    _covers(run, clip.path, (50, 77), cfg)
    assert clip.end_ts <= run.times[77] + cfg.post_roll_s + 2 * FRAME_S
    assert run.follower.vanished == 1


def test_an_ended_track_new_to_the_device_is_cut_whole_and_one_older_than_the_ring_says_so(
    h264: Path, tmp_path: Path
) -> None:
    cfg = ClipsConfig(enabled=True, dir=str(tmp_path), pre_roll_s=1.0, post_roll_s=1.0, ring_s=4)
    run = Run(h264, cfg)
    run.play({150: [("old", 10, 30), ("recent", 130, 140)]})
    by_key = {c.keys: c for c in run.cutter.finished}
    old, recent = by_key[("old",)], by_key[("recent",)]
    assert old.outcome == "no_keyframe" and old.path is None
    assert old.reason.startswith("the ring no longer holds it")
    assert recent.outcome == "complete" and recent.path is not None
    _covers(run, recent.path, (130, 140), cfg)
    # The clip with no bytes still has its final sidecar: its reason reaches the cloud.
    old_info = next(c.info for c in run.spool.pending() if list(c.info.track_uids) == ["old"])
    assert old_info.final and old_info.outcome == clips_pb2.CLIP_OUTCOME_NO_KEYFRAME


def test_a_clip_cut_short_by_a_crash_is_found_at_the_next_start(h264: Path, tmp_path: Path) -> None:
    cfg = ClipsConfig(
        enabled=True, dir=str(tmp_path / "run"), pre_roll_s=1.0, post_roll_s=1.0, ring_s=8
    )
    first = Run(h264, cfg)
    # "done" is served in full; "live" is mid-clip at frame 190, when the device dies.
    plan: Plan = {i: [("done", 20, 30)] for i in range(45, 50)}
    plan[120] = [("live", 100, None)]
    first.play(plan, crash_at=190)
    (done,) = first.cutter.finished
    assert first.cutter.open_clips == 1
    # The folder as the crash left it (the open muxer never closes).
    shutil.copytree(tmp_path / "run", tmp_path / "after")
    again = Run(h264, cfg.model_copy(update={"dir": str(tmp_path / "after")}))
    short = [c for c in again.recovered if c.info.outcome == clips_pb2.CLIP_OUTCOME_CUT_SHORT]
    (cut,) = short
    assert cut.info.final and cut.info.reason == CUT_SHORT
    assert list(cut.info.track_uids) == ["live"]
    assert cut.info.size_bytes == cut.path.stat().st_size > 0
    # Its end is read from the file: from frame 90 (100 - pre-roll) to the last fragment
    # that ended before the crash at frame 190: 179, or 189 when the demuxer had read the
    # keyframe at 190 (decode order runs ahead of the frames delivered).
    span_s = (cut.info.end_ns - cut.info.start_ns) / 1e9
    assert 8.9 - 1e-3 <= span_s <= 9.9 + 1e-3, span_s
    assert decode(cut.path).crcs and decode(cut.path).keys[0]
    # The track served in full is not cut again; the one cut short is, if still live.
    assert again.follower.handled.keys() == {"done"}
    assert done.path is not None and read_sidecar(done.path) is not None
    assert len(again.spool.pending()) == 2
