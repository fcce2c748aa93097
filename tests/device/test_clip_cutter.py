"""device/clips/cutter.py on real media (H.264 and HEVC files from vtest, a real RTSP camera):
clips cover their request with pre- and post-roll, are the source's own packets (no
re-encode), decode from their first frame, play when cut short, and end with a reason."""

from __future__ import annotations

import time
import zlib
from pathlib import Path

import av
import pytest
from prometheus_client import CollectorRegistry
from required_testkit import missing
from strata.device.capture.packet_ring import PacketRing
from strata.device.capture.sources import AvSource, SourceError
from strata.device.clips.cutter import Clip, ClipCutter, ClipRequest
from strata.device.metrics import ClipMetrics, DeviceMetrics
from strata.shared.config.device import ClipsConfig, SourceConfig

from .clip_media import (
    FPS,
    Decoded,
    codec_of,
    decode,
    encode_vtest,
    mp4_boxes,
    rtsp_missing,
    start_rtsp,
)

FRAME_S = 1 / FPS
Plan = dict[int, list[tuple[int, int, str]]]


@pytest.fixture(scope="module")
def h264(vtest_mp4: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return encode_vtest(vtest_mp4, tmp_path_factory.mktemp("clips") / "gop10.mp4", "libx264", 10)


@pytest.fixture(scope="module")
def hevc(vtest_mp4: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if "libx265" not in av.codecs_available:
        pytest.skip("this FFmpeg has no HEVC encoder (libx265) to make the HEVC file with")
    return encode_vtest(vtest_mp4, tmp_path_factory.mktemp("clips") / "gop10.mkv", "libx265", 10)


class Run:
    """A file read through the real source with a ring and a cutter; clips asked for at
    chosen frames, in the capture clock of the frames the source delivered."""

    def __init__(self, path: Path, cfg: ClipsConfig) -> None:
        self.registry = CollectorRegistry()
        metrics = ClipMetrics(DeviceMetrics(self.registry), "cam")
        self.ring = PacketRing("cam", cfg, metrics)
        self.cutter = ClipCutter(self.ring, cfg, metrics)
        self.path = path
        self.capture: list[int] = []
        self.times: list[float] = []

    def play(self, plan: Plan, stop_at: int = 0) -> None:
        src = AvSource(str(self.path), SourceConfig(), tap=self.ring)
        try:
            for frame in src.frames():
                self.capture.append(frame.capture_ns)
                self.times.append(frame.ts)
                for start, end, key in plan.get(frame.index, []):
                    self.cutter.request(ClipRequest(self.capture[start], self.capture[end], key))
                if stop_at and frame.index == stop_at:
                    break
        finally:
            src.close()

    def outcome_count(self, outcome: str) -> float | None:
        return self.registry.get_sample_value(
            "strata_device_clips_total", {"camera": "cam", "outcome": outcome}
        )


def _check_fmp4(clip: Path, source: Path) -> None:
    """The clip is a fragmented MP4 (an empty moov, then a moof and mdat per fragment) of
    the source's codec: stream-copied, not re-encoded into another."""
    boxes = mp4_boxes(clip)
    assert boxes[:2] == ["ftyp", "moov"] and boxes.count("moof") >= 2, boxes
    assert boxes.count("moof") == boxes.count("mdat"), boxes
    assert codec_of(clip) == codec_of(source)


def _check_clip(clip: Clip, source: Decoded, wanted: tuple[float, float], cfg: ClipsConfig) -> None:
    """The clip is a run of the source's own frames, from a keyframe at or before the
    wanted start minus the pre-roll to the wanted end plus the post-roll (within a frame),
    and about as many bytes as the source spends on that time."""
    assert clip.path is not None
    got = decode(clip.path)
    assert not got.broken and got.crcs, clip
    assert got.keys[0], "the clip decodes from its first frame, a keyframe"
    k = source.crcs.index(got.crcs[0])
    assert got.crcs == source.crcs[k : k + len(got.crcs)], "the source's frames, bit for bit"
    first, last = source.times[k], source.times[k + len(got.crcs) - 1]
    assert first <= wanted[0] - cfg.pre_roll_s + 1e-6
    assert last >= wanted[1] + cfg.post_roll_s - FRAME_S - 1e-6
    assert clip.start_ts == pytest.approx(first) and clip.end_ts == pytest.approx(last)
    seconds = len(got.crcs) * FRAME_S
    bitrate = source.packet_bytes / (len(source.crcs) * FRAME_S)
    assert clip.bytes == clip.path.stat().st_size
    assert abs(clip.bytes - bitrate * seconds) <= 0.10 * bitrate * seconds, (clip.bytes, seconds)


@pytest.mark.parametrize("media", ["h264", "hevc"])
def test_clips_cover_their_request_with_the_sources_own_packets(
    media: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    path: Path = request.getfixturevalue(media)
    cfg = ClipsConfig(enabled=True, dir=str(tmp_path), pre_roll_s=1.55, post_roll_s=1.0, ring_s=12)
    run = Run(path, cfg)
    # Frame 100: a clip of frames 30-80, all in the past (cut from the ring at once);
    # frame 170: a clip of frames 120-170 whose post-roll is still to come (fed live).
    run.play({100: [(30, 80, "past")], 170: [(120, 170, "live")]})
    source = decode(path)
    past, live = run.cutter.finished
    for clip, (start, end) in ((past, (30, 80)), (live, (120, 170))):
        assert clip.outcome == "complete" and clip.reason == "" and clip.notes == (), clip
        _check_clip(clip, source, (run.times[start], run.times[end]), cfg)
        assert clip.path is not None
        _check_fmp4(clip.path, path)
        # Its times in the capture clock are those of the frames delivered.
        assert clip.start_ns == run.capture[run.times.index(clip.start_ts)]
    assert past.keys == ("past",) and live.keys == ("live",)
    assert run.outcome_count("complete") == 2


def test_overlapping_requests_each_get_a_clip_of_their_own_span_and_max_s_caps_one(
    h264: Path, tmp_path: Path
) -> None:
    """Issue 39: overlapping tracks were merged into one clip (a 20 s track's clip was the
    whole 79 s file on a busy scene): each track's clip is its own span plus the rolls."""
    cfg = ClipsConfig(
        enabled=True, dir=str(tmp_path), pre_roll_s=1.5, post_roll_s=1.0, ring_s=8, max_s=7.0
    )
    run = Run(h264, cfg)
    # Track a (frames 85-110) is still in its post-roll when track b starts (frame 114);
    # b's end moves on with every frame until 130, as a live track's does.
    plan: Plan = {112: [(85, 110, "a")]}
    plan.update({i: [(114, i, "b")] for i in range(116, 131)})
    run.play(plan)
    by_key = {c.keys: c for c in run.cutter.finished}
    assert set(by_key) == {("a",), ("b",)}, run.cutter.finished
    source = decode(h264)
    gop_s = 10 * FRAME_S
    for key, (start, end) in (("a", (85, 110)), ("b", (114, 130))):
        clip = by_key[(key,)]
        assert clip.outcome == "complete", clip
        _check_clip(clip, source, (run.times[start], run.times[end]), cfg)
        # Its own span: from the keyframe at or before its start minus the pre-roll (at
        # most a GOP earlier) to a frame past its end plus the post-roll, no further.
        assert clip.start_ts > run.times[start] - cfg.pre_roll_s - gop_s - 1e-6, clip
        assert clip.end_ts <= run.times[end] + cfg.post_roll_s + 2 * FRAME_S, clip
    # The two overlap (b's pre-roll reaches into a's clip) and neither holds the other.
    a, b = by_key[("a",)], by_key[("b",)]
    assert b.start_ts < a.end_ts and a.start_ts < b.start_ts and a.end_ts < b.end_ts
    # Then one longer than max_s: cut at max_s from its first keyframe, and said so.
    capped = Run(h264, cfg)
    capped.play({180: [(100, 170, "long")]})
    (clip,) = capped.cutter.finished
    assert clip.outcome == "complete" and "capped at max_s (7s)" in clip.notes
    assert cfg.max_s - FRAME_S <= clip.end_ts - clip.start_ts <= cfg.max_s + 3 * FRAME_S


def test_a_file_that_ends_under_a_live_track_ends_its_clip_as_ended(
    h264: Path, tmp_path: Path
) -> None:
    """Issue 39: a file that simply ended was a clip "disconnected" (shown in red as the
    camera's stream closing mid-clip): a file reaching its end is "ended", not an error."""
    cfg = ClipsConfig(enabled=True, dir=str(tmp_path), pre_roll_s=1.0, post_roll_s=1.0, ring_s=8)
    run = Run(h264, cfg)
    src = AvSource(str(h264), SourceConfig(), tap=run.ring)
    try:
        for frame in src.frames():
            if frame.index == 150:  # a track still live when the file ends
                run.cutter.open_track("walker", frame.capture_ns)
    finally:
        src.close()
    (clip,) = run.cutter.finished
    assert clip.outcome == "ended" and clip.keys == ("walker",), clip
    assert clip.reason.startswith("the file ended before the clip's end"), clip.reason
    assert clip.path is not None and decode(clip.path).crcs, "what was written plays"
    assert run.outcome_count("ended") == 1 and not run.outcome_count("disconnected")


def play_tracks(run: Run, opens: dict[int, str], ends: dict[int, tuple[str, int]]) -> None:
    """The whole file through the real source; at frame i, `opens` opens a live track's
    clip, `ends` ends one as last seen at an earlier frame (as the demand tells it)."""
    src = AvSource(str(run.path), SourceConfig(), tap=run.ring)
    try:
        for frame in src.frames():
            run.capture.append(frame.capture_ns)
            run.times.append(frame.ts)
            if frame.index in opens:
                run.cutter.open_track(opens[frame.index], frame.capture_ns)
            if frame.index in ends:
                key, seen = ends[frame.index]
                assert run.cutter.end_track(key, run.capture[seen])
    finally:
        src.close()


def test_a_track_ended_late_has_its_clip_cut_back_to_its_end_plus_the_post_roll(
    h264: Path, tmp_path: Path
) -> None:
    """Issue 39: the edge tells the device a track ended only its lost-track wait after it
    was last seen; the clip, written live, had run on. It ends at the first fragment
    boundary at or past last seen + post_roll (at most a GOP more), the file cut back to
    it; another track's live clip is untouched."""
    cfg = ClipsConfig(enabled=True, dir=str(tmp_path), pre_roll_s=1.0, post_roll_s=1.0, ring_s=8)
    run = Run(h264, cfg)
    # "a" from frame 40, last seen at frame 83, its end heard at frame 143 (6 s later);
    # "b" from frame 50, live until the file ends (frame 199).
    play_tracks(run, {40: "a", 50: "b"}, {143: ("a", 83)})
    by_key = {c.keys: c for c in run.cutter.finished}
    a, b = by_key[("a",)], by_key[("b",)]
    source = decode(h264)
    gop_s = 10 * FRAME_S
    end = run.times[83] + cfg.post_roll_s
    assert a.outcome == "complete" and a.reason == "" and a.notes == (), a
    _check_clip(a, source, (run.times[40], run.times[83]), cfg)  # the rolls and bytes
    assert end - 1e-6 <= a.end_ts <= end + gop_s, (a.end_ts, end)
    assert a.path is not None
    boxes = mp4_boxes(a.path)
    assert boxes[-1] == "mdat" and boxes.count("moof") == boxes.count("mdat"), boxes
    # Cut back, not cut off: the file played to frame 143 before its end was heard.
    assert a.end_ts < run.times[143] - 4.0
    assert a.packets == len(decode(a.path).crcs)
    cut = run.registry.get_sample_value(
        "strata_device_clip_bytes_cut_back_total", {"camera": "cam"}
    )
    assert cut and cut > 4 * a.bytes / (a.end_ts - a.start_ts)  # over 4 s of bytes went
    # The live track's clip runs on to the file's end, whole.
    assert b.outcome == "ended" and b.start_ts <= run.times[50] - cfg.pre_roll_s + 1e-6
    assert b.path is not None and b.end_ts == pytest.approx(max(run.times))
    got = decode(b.path)
    k = source.crcs.index(got.crcs[0])
    assert got.crcs == source.crcs[k:], "every frame from its keyframe to the file's end"


def test_a_track_end_heard_within_its_post_roll_ends_its_clip_as_it_comes(
    h264: Path, tmp_path: Path
) -> None:
    """An end heard before the clip reached it (or within the fragment being written)
    cuts nothing back: the clip ends at the first frame at or after it, as before."""
    cfg = ClipsConfig(enabled=True, dir=str(tmp_path), pre_roll_s=1.0, post_roll_s=1.0, ring_s=8)
    run = Run(h264, cfg)
    # "a" last seen at frame 83, heard at 95: past its end (frame 93), in the fragment
    # being written (frames 90-99); "c" last seen at 95, heard at 96: its end ahead.
    play_tracks(run, {40: "a", 45: "c"}, {95: ("a", 83), 96: ("c", 95)})
    by_key = {c.keys: c for c in run.cutter.finished}
    source = decode(h264)
    # How far past its end a clip may run: "c" a frame or two (B-frames); "a" the packets
    # the ring had past frame 95 when its end was heard, within that fragment.
    for key, seen, over_s in (("a", 83, 10.0 - 9.3), ("c", 95, 2 * FRAME_S)):
        clip = by_key[(key,)]
        end = run.times[seen] + cfg.post_roll_s
        assert clip.outcome == "complete", clip
        assert end - 1e-6 <= clip.end_ts < end + over_s, (key, clip.end_ts, end)
        _check_clip(clip, source, (run.times[40], run.times[seen]), cfg)
    assert not run.registry.get_sample_value(
        "strata_device_clip_bytes_cut_back_total", {"camera": "cam"}
    )


def test_a_clip_cut_short_still_decodes_its_first_fragments(h264: Path, tmp_path: Path) -> None:
    cfg = ClipsConfig(enabled=True, dir=str(tmp_path), pre_roll_s=1.0, post_roll_s=1.0, ring_s=8)
    run = Run(h264, cfg)
    run.play({190: [(100, 180, "t")]})
    (clip,) = run.cutter.finished
    assert clip.path is not None
    whole = decode(clip.path)
    data = clip.path.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) * 6 // 10])  # a crash mid-write
    part = decode(cut)
    assert len(whole.crcs) // 2 <= len(part.crcs) < len(whole.crcs)
    assert part.crcs == whole.crcs[: len(part.crcs)]


def test_a_codec_mp4_cannot_carry_ends_the_clip_with_a_reason(
    vtest_mp4: Path, tmp_path: Path
) -> None:
    if "libvpx" not in av.codecs_available:
        pytest.skip("this FFmpeg has no VP8 encoder (libvpx) to make the file with")
    vp8 = encode_vtest(vtest_mp4, tmp_path / "vp8.webm", "libvpx", 10, frames=40)
    run = Run(vp8, ClipsConfig(enabled=True, dir=str(tmp_path / "clips"), pre_roll_s=1))
    run.play({30: [(10, 20, "t")]})
    assert len(run.capture) == 40  # the camera reads on
    (clip,) = run.cutter.finished
    assert clip.outcome == "codec" and clip.path is None
    assert "vp8 cannot be stream-copied into MP4" in clip.reason
    assert run.outcome_count("codec") == 1
    assert run.ring.packet_count == 0  # nothing held for clips that cannot be cut


def test_bad_requests_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match=r"ends .* before it starts"):
        ClipRequest(10, 5)


_RTSP = rtsp_missing()


@pytest.mark.rtsp
def test_rtsp_camera_clips_live_and_a_disconnect_ends_the_open_one(
    h264: Path, port: int, tmp_path: Path
) -> None:
    if _RTSP:
        missing(f"GStreamer RTSP server unavailable ({_RTSP}); .ci/system-deps installs it")
    cfg = ClipsConfig(enabled=True, dir=str(tmp_path), pre_roll_s=1.55, post_roll_s=1.0, ring_s=8)
    registry = CollectorRegistry()
    metrics = ClipMetrics(DeviceMetrics(registry), "cam")
    ring = PacketRing("cam", cfg, metrics)
    cutter = ClipCutter(ring, cfg, metrics)
    server = start_rtsp(port, h264)
    source = decode(h264)
    delivered: dict[int, tuple[int, float]] = {}  # crc -> (capture_ns, ts)
    capture: list[int] = []
    url = f"rtsp://127.0.0.1:{port}/cam"
    src = AvSource(url, SourceConfig(open_timeout_s=5, read_timeout_s=2), tap=ring)
    deadline = time.monotonic() + 30
    try:
        for frame in src.frames():
            assert time.monotonic() < deadline
            capture.append(frame.capture_ns)
            delivered[zlib.crc32(frame.bgr().tobytes())] = (frame.capture_ns, frame.ts)
            if frame.index == 90:  # frames 50-90, the post-roll still to come
                cutter.request(ClipRequest(capture[50], capture[90], "live"))
            if frame.index == 120:  # a clip that will never see its end
                cutter.request(ClipRequest(capture[120], capture[120] + 60 * 10**9, "cut"))
            if frame.index == 130:
                server.kill()  # mid-clip, no goodbye
    except SourceError:
        pass  # the camera's read fails (or the stream just ends): either way, it is gone
    finally:
        src.close()
        server.kill()
        server.wait(5)
    live, cut = cutter.finished
    assert live.outcome == "complete" and live.notes == (), live
    assert live.path is not None
    got = decode(live.path)
    assert got.keys[0] and not got.broken
    k = source.crcs.index(got.crcs[0])
    assert got.crcs == source.crcs[k : k + len(got.crcs)], "the camera's frames, bit for bit"
    first_ns = delivered[got.crcs[0]][0]
    last_ns = delivered[got.crcs[-1]][0]
    assert first_ns <= capture[50] - cfg.pre_roll_s * 1e9
    assert last_ns >= capture[90] + (cfg.post_roll_s - FRAME_S) * 1e9
    seconds = len(got.crcs) * FRAME_S
    bitrate = source.packet_bytes / (len(source.crcs) * FRAME_S)
    assert abs(live.bytes - bitrate * seconds) <= 0.10 * bitrate * seconds
    # The camera went mid-clip: the clip ends, says why, and what was written plays.
    assert cut.outcome == "disconnected" and cut.keys == ("cut",)
    assert cut.reason.startswith("the source closed mid-clip: ")
    assert cut.path is not None and decode(cut.path).crcs
    value = registry.get_sample_value
    assert value("strata_device_clips_total", {"camera": "cam", "outcome": "disconnected"}) == 1
    assert cutter.open_clips == 0
