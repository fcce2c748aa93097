"""device/capture/packet_ring.py on real media: bounded, starts at a keyframe, counts what it drops,
hears every packet the camera reads, maps the capture clock to stream time."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from strata.device.camera import CameraState, CameraWorker
from strata.device.capture.packet_ring import CaptureClock, PacketRing
from strata.device.capture.sources import AvSource
from strata.device.clips.cutter import ClipCutter, ClipRequest
from strata.device.filters.inbox import GateInbox
from strata.device.metrics import ClipMetrics, DeviceMetrics
from strata.shared.config.device import ClipsConfig, MotionConfig, SourceConfig

from .clip_media import FPS, encode_vtest


@pytest.fixture(scope="module")
def gop10(vtest_mp4: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return encode_vtest(vtest_mp4, tmp_path_factory.mktemp("ring") / "gop10.mp4", "libx264", 10)


@pytest.fixture(scope="module")
def one_keyframe(vtest_mp4: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("ring") / "onekey.mp4"
    return encode_vtest(vtest_mp4, dest, "libx264", 1000, frames=120)


def _packets(path: Path) -> list[tuple[int, bool]]:
    import av

    with av.open(str(path)) as c:
        return [(p.size, p.is_keyframe) for p in c.demux(video=0) if p.size]


def _held(ring: PacketRing) -> list[tuple[int, bool]]:
    return [(len(p.data), p.key) for p in ring.packets_from(0)]


def _ring(cfg: ClipsConfig) -> tuple[PacketRing, CollectorRegistry]:
    registry = CollectorRegistry()
    return PacketRing("cam", cfg, ClipMetrics(DeviceMetrics(registry), "cam")), registry


def test_ring_keeps_ring_s_from_a_keyframe_and_frees_whole_gops(gop10: Path) -> None:
    cfg = ClipsConfig(enabled=True, pre_roll_s=1.0, ring_s=3.0)
    ring, registry = _ring(cfg)
    src = AvSource(str(gop10), SourceConfig(), tap=ring)
    freed_seen = False
    try:
        for frame in src.frames():
            held = _held(ring)
            assert held and held[0][1], "the ring starts at a keyframe"
            assert ring.bytes == sum(size for size, _ in held)
            first = ring.first_key_ts()
            assert first is not None
            if first > 0:  # a GOP was freed: the ring covers ring_s, and at most a GOP more
                freed_seen = True
                assert cfg.ring_s <= ring.seconds < cfg.ring_s + 10 / FPS + 1e-6, frame.ts
    finally:
        src.close()
    assert freed_seen
    assert ring.dropped == {}  # freed by age is not a drop
    assert registry.get_sample_value("strata_device_clip_ring_bytes", {"camera": "cam"}) == (
        ring.bytes
    )
    assert not ring.live and ring.end_reason == "source ended"
    # The bytes held are the demuxed packets, not re-encoded ones: the file's last ones.
    source = _packets(gop10)
    assert _held(ring) == source[len(source) - ring.packet_count :]


def test_byte_cap_frees_the_oldest_gops_and_counts_them(gop10: Path) -> None:
    gop_bytes = max(sum(s for s, _ in _packets(gop10)[i : i + 10]) for i in range(0, 200, 10))
    cap_mib = 3 * gop_bytes / 2**20  # three GOPs: far less than ring_s holds
    ring, registry = _ring(ClipsConfig(enabled=True, ring_s=10.0, ring_mib=cap_mib))
    src = AvSource(str(gop10), SourceConfig(), tap=ring)
    try:
        for _ in src.frames():
            assert ring.bytes <= ring.cap_bytes
            assert next(ring.packets_from(0)).key
    finally:
        src.close()
    assert ring.dropped["cap"] > 0 and not ring.starved
    dropped = registry.get_sample_value(
        "strata_device_clip_ring_dropped_packets_total", {"camera": "cam", "reason": "cap"}
    )
    assert dropped == ring.dropped["cap"]


def test_no_keyframe_for_longer_than_the_ring_stays_bounded_and_says_why(
    one_keyframe: Path, tmp_path: Path
) -> None:
    cfg = ClipsConfig(enabled=True, dir=str(tmp_path), pre_roll_s=1, ring_s=3, ring_mib=0.05)
    ring, registry = _ring(cfg)
    cutter = ClipCutter(ring, cfg)
    src = AvSource(str(one_keyframe), SourceConfig(), tap=ring)
    frames = []
    try:
        for frame in src.frames():
            frames.append(frame.capture_ns)
            assert ring.bytes <= ring.cap_bytes
            if len(frames) == 100:
                cutter.request(ClipRequest(frames[90], frames[95], "t"))
    finally:
        src.close()
    assert ring.starved and ring.packet_count == 0
    assert ring.dropped["no_keyframe"] > 0
    dropped = registry.get_sample_value(
        "strata_device_clip_ring_dropped_packets_total", {"camera": "cam", "reason": "no_keyframe"}
    )
    assert dropped == ring.dropped["no_keyframe"]
    (clip,) = cutter.finished
    assert clip.outcome == "no_keyframe" and clip.path is None
    assert "no keyframe" in clip.reason and clip.notes


def test_the_camera_sends_every_packet_it_reads_to_the_ring(gop10: Path) -> None:
    registry = CollectorRegistry()
    metrics = DeviceMetrics(registry)
    ring = PacketRing("cam", ClipsConfig(enabled=True, ring_s=1000.0, ring_mib=1000))
    inbox = GateInbox(1000)
    inbox.add_camera("cam")
    cam = CameraWorker(
        "cam",
        str(gop10),
        SourceConfig(),
        MotionConfig(enabled=False),
        inbox,
        metrics.camera("cam"),
        ring=ring,
    )
    cam.start()
    assert cam.join(60)
    assert cam.state is CameraState.ENDED and cam.frames == 200
    assert _held(ring) == _packets(gop10)
    assert not ring.live and ring.end_reason == "source ended"


def test_a_reopen_starts_the_ring_over(gop10: Path) -> None:
    ring = PacketRing("cam", ClipsConfig(enabled=True, ring_s=1000.0, ring_mib=1000))
    for _ in range(2):
        src = AvSource(str(gop10), SourceConfig(), tap=ring)
        try:
            for frame in src.frames():
                if frame.index == 49:
                    break
        finally:
            src.close()
        assert ring.first_key_ts() == 0.0 and ring.packet_count < 80
        assert ring.end_reason == "source closed"


def test_capture_clock_maps_delivered_frames_exactly_and_interpolates_between() -> None:
    clock = CaptureClock()
    with pytest.raises(ValueError, match="no frame delivered"):
        clock.to_stream(0)
    # A file decoded faster than real time: 0.1 s of stream every 10 ms of capture clock.
    for i in range(10):
        clock.mark(i * 0.1, 1_000_000_000 + i * 10_000_000)
    for i in range(10):
        assert clock.to_stream(1_000_000_000 + i * 10_000_000) == pytest.approx(i * 0.1)
        assert clock.to_capture(i * 0.1) == 1_000_000_000 + i * 10_000_000
    # Between two anchors: never past the next one.
    assert clock.to_stream(1_005_000_000) == pytest.approx(0.005)
    assert clock.to_stream(1_009_999_999) <= 0.1
    # After the last one, time runs on as a camera's does.
    assert clock.to_stream(1_090_000_000 + 2_000_000_000) == pytest.approx(0.9 + 2.0)
    # The stream starting over (a reconnect) starts the clock over.
    clock.mark(0.0, 2_000_000_000)
    assert clock.to_stream(2_000_000_000) == 0.0
