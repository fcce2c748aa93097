"""device/capture/sources.py: hardware decoding's choice and fallback, max_fps and skip_frame."""

from __future__ import annotations

import logging
import zlib
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from strata.device.camera import CameraState, CameraWorker
from strata.device.capture.decoding import (
    AUTO_ORDER,
    SOFTWARE,
    DecoderChoice,
    HeldAhead,
    RateGate,
    device_problem,
)
from strata.device.capture.frames import Frame
from strata.device.capture.sources import AvSource
from strata.device.filters.inbox import GateInbox
from strata.device.metrics import DeviceMetrics
from strata.shared.config import ConfigError, load_config
from strata.shared.config.device import MotionConfig, SourceConfig
from strata.shared.synthetic import SyntheticClip


class Events:
    """A source's reports, kept."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.skips: dict[str, int] = {}
        self.lags: list[float] = []

    def decoder(self, kind: str) -> None:
        self.kinds.append(kind)

    def skipped(self, reason: str, frames: int) -> None:
        self.skips[reason] = self.skips.get(reason, 0) + frames

    def lag(self, seconds: float) -> None:
        self.lags.append(seconds)


@pytest.fixture(scope="module")
def bframes_mp4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """90 frames at 25 fps, H.264 with non-reference B-frames (what skip_frame can skip)."""
    import av
    from av.video.frame import PictureType

    path = tmp_path_factory.mktemp("clips") / "bframes.mp4"
    clip = SyntheticClip(width=320, height=240, frames=90, fps=25, seed=3)
    with av.open(str(path), "w") as out:
        stream = out.add_stream(
            "libx264",
            rate=25,
            options={"preset": "veryfast", "x264-params": "bframes=2:b-pyramid=none:keyint=30"},
        )
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        for i in range(len(clip)):
            frame = av.VideoFrame.from_ndarray(clip.frame(i).image, format="bgr24")
            frame.pts, frame.time_base, frame.pict_type = i, Fraction(1, 25), PictureType.NONE
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def _delivered(path: Path, cfg: SourceConfig) -> tuple[list[tuple[float, int]], Events]:
    """(timestamp, pixel checksum) of every frame the source delivers, and its reports."""
    events = Events()
    src = AvSource(str(path), cfg, events=events)
    try:
        out = [(f.ts, zlib.crc32(f.bgr().tobytes())) for f in src.frames()]
    finally:
        src.close()
    return out, events


def test_rate_gate_spreads_frames_evenly_and_survives_a_jump_back() -> None:
    gate = RateGate(5.0)
    kept = [i for i in range(50) if gate.keep(i / 25)]  # 25 fps source, 2 s
    assert kept == list(range(0, 50, 5))
    gate = RateGate(10.0)
    assert [gate.keep(t) for t in (0.0, 0.04, 0.1, 0.14)] == [True, False, True, False]
    assert gate.passes_over(0.16) and not gate.passes_over(0.2)
    assert not gate.passes_over(0.1)  # before the latest frame seen: not sure, so not skipped
    assert gate.keep(0.0)  # timestamps went back (a restarted stream): re-anchored, delivered
    assert not gate.keep(0.05) and gate.keep(0.1)


@pytest.mark.parametrize("max_fps", [3.0, 7.0, 12.5, 24.0])
def test_skip_frame_never_skips_a_frame_max_fps_keeps(bframes_mp4: Path, max_fps: float) -> None:
    base = SourceConfig(max_fps=max_fps, skip_frame=False)
    plain, plain_events = _delivered(bframes_mp4, base)
    skipped, events = _delivered(bframes_mp4, base.model_copy(update={"skip_frame": True}))
    assert skipped == plain  # the same frames, the same pixels
    assert 0 < len(plain) < 90
    assert plain_events.skips == {"max_fps": 90 - len(plain)}
    # Frames that were never decoded, every one counted.
    assert events.skips.get("not_decoded", 0) > 0
    assert sum(events.skips.values()) == 90 - len(plain)


class _HoldFrom:
    """A camera that, from frame 12 on, keeps every 6th frame and holds back the 5 after."""

    def __init__(self, held: HeldAhead) -> None:
        self.held = held

    def decided(self, index: int, ts: float) -> None:
        ahead = 5 - index % 6 if index >= 12 else 0
        self.held.hold(ts, ts + (ahead + 0.5) / 25 if ahead else ts)


def test_held_frames_are_delivered_in_place_and_only_non_reference_ones_undecoded(
    bframes_mp4: Path,
) -> None:
    import av
    from av.video.frame import PictureType

    with av.open(str(bframes_mp4)) as c:
        plain = [
            (PictureType(f.pict_type).name, zlib.crc32(f.to_ndarray(format="bgr24").tobytes()))
            for f in c.decode(video=0)
        ]
    held = HeldAhead()
    camera = _HoldFrom(held)
    events = Events()
    src = AvSource(str(bframes_mp4), SourceConfig(), events=events, held=held)
    got: list[tuple[int, float, int | None]] = []
    try:
        for f in src.frames():
            pixels = zlib.crc32(f.bgr().tobytes()) if f.has_pixels else None
            got.append((f.index, f.ts, pixels))
            camera.decided(f.index, f.ts)  # as the camera does after each decision
    finally:
        src.close()
    # Every frame, in order, at its time; the decoded ones with the very same pixels.
    assert [i for i, _, _ in got] == list(range(90))
    assert [ts for _, ts, _ in got] == pytest.approx([i / 25 for i in range(90)])
    undecoded = [i for i, _, px in got if px is None]
    assert all(px == plain[i][1] for i, _, px in got if px is not None)
    # Only B-frames within a hold (the 5 frames after each 6th from the 12th), none else.
    holds = {i + k for i in range(12, 90, 6) for k in range(1, 6)}
    assert undecoded and set(undecoded) <= holds
    assert all(plain[i][0] == "B" for i in undecoded)
    assert events.skips == {"held": len(undecoded)}
    # Every held B-frame: each packet comes after the hold it falls in was told.
    assert len(undecoded) == sum(1 for i in holds if i < 90 and plain[i][0] == "B")
    with pytest.raises(ValueError, match="not decoded"):
        Frame.undecoded(7, 0.28, 0, (320, 240)).bgr()


def test_held_frames_are_all_decoded_with_skip_held_off(bframes_mp4: Path) -> None:
    held = HeldAhead()
    held.hold(0.0, 10.0)  # every frame held back
    frames, events = _delivered_held(bframes_mp4, SourceConfig(skip_held=False), held)
    assert frames == 90 and events.skips == {}
    frames, events = _delivered_held(bframes_mp4, SourceConfig(), held)
    assert frames < 90 and events.skips["held"] == 90 - frames


def _delivered_held(path: Path, cfg: SourceConfig, held: HeldAhead) -> tuple[int, Events]:
    """Frames delivered with pixels through `open_source` (which honours skip_held)."""
    from strata.device.capture.sources import open_source

    events = Events()
    src = open_source(str(path), cfg, events=events, held=held)
    try:
        n = sum(1 for f in src.frames() if f.has_pixels)
    finally:
        src.close()
    return n, events


def test_skip_frame_is_idle_without_max_fps(bframes_mp4: Path) -> None:
    frames, events = _delivered(bframes_mp4, SourceConfig(skip_frame=True))
    assert len(frames) == 90 and events.skips == {}
    assert events.kinds == [SOFTWARE]


def test_hwaccel_auto_without_hardware_decodes_in_software_and_says_so(
    vtest_mp4: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # What this host has: on one without hardware decoding, software.
    usable = [k for k in AUTO_ORDER if not device_problem(k, "h264")]
    expected = usable[0] if usable else SOFTWARE
    registry = CollectorRegistry()
    metrics = DeviceMetrics(registry)
    cfg = SourceConfig(hwaccel="auto", max_fps=2.0)
    inbox = GateInbox(1000)
    inbox.add_camera("cam")
    cam = CameraWorker("cam", str(vtest_mp4), cfg, MotionConfig(), inbox, metrics.camera("cam"))
    with caplog.at_level(logging.INFO, logger="strata.device.capture.sources"):
        cam.start()
        assert cam.join(60)
    assert cam.state is CameraState.ENDED and cam.frames > 0
    value = registry.get_sample_value
    assert value("strata_device_decoder", {"camera": "cam", "kind": expected}) == 1
    assert cam.decoder.kind == expected
    if expected == SOFTWARE:
        lines = [r.getMessage() for r in caplog.records if "decoding in software" in r.message]
        assert len(lines) == 1 and "hwaccel auto" in lines[0]
    # Frames vtest has beyond 2 a second were counted, not lost silently.
    skipped = value("strata_device_source_skipped_total", {"camera": "cam", "reason": "max_fps"})
    assert skipped is not None and skipped > 0
    assert cam.frames + skipped == 795


def test_a_named_device_the_host_lacks_falls_back_to_software(
    vtest_mp4: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kind = "videotoolbox"  # macOS only: absent here, so this test needs no hardware
    if not device_problem(kind, "h264"):
        pytest.skip("this host decodes on videotoolbox")
    choice = DecoderChoice("cam", SourceConfig(hwaccel=kind))
    events = Events()
    with caplog.at_level(logging.WARNING, logger="strata.device.capture.sources"):
        src = AvSource(str(vtest_mp4), SourceConfig(hwaccel=kind), choice, events)
        first = next(iter(src.frames()))
        src.close()
        again = AvSource(str(vtest_mp4), SourceConfig(hwaccel=kind), choice, events)
        again.close()
    assert events.kinds == [SOFTWARE, SOFTWARE] and choice.kind == SOFTWARE
    assert first.width == 768 and isinstance(first.bgr(), np.ndarray)
    warnings = [r for r in caplog.records if "decoding in software" in r.getMessage()]
    assert len(warnings) == 1  # probed once per camera, not at every reopen


def test_an_unknown_hwaccel_is_a_config_error_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("device:\n  source:\n    loop: false\n    hwaccel: nvdec\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}:4: device.source.hwaccel:" in str(err.value)


def test_a_file_played_at_its_rate_reports_its_lag(bframes_mp4: Path) -> None:
    events = Events()
    src = AvSource(str(bframes_mp4), SourceConfig(realtime=True), events=events)
    try:
        frames = [f for _, f in zip(range(10), src.frames(), strict=False)]
    finally:
        src.close()
    assert len(events.lags) == len(frames) == 10
    assert all(0.0 <= lag < 0.5 for lag in events.lags)  # an idle decoder keeps up
