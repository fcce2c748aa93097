"""A camera's route from its kept frames to the sender, on its own thread (device/pipeline.py):
order kept, every frame accounted for, nothing between the camera and the sender, a removed
camera's thread gone."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from strata.device.agent import Agent
from strata.device.capture.frames import Frame, Yuv420Scaler
from strata.device.filters.inbox import GateItem
from strata.device.metrics import CameraCounts, DeviceMetrics, dropped_by_reason
from strata.device.pipeline import CameraPipeline, KeyframeRequests, PipelineSetup
from strata.device.transport.encoder import ScaleTarget
from strata.device.transport.outbox import Outbox
from strata.device.transport.sender import Sender
from strata.device.transport.sink import FrameSink
from strata.edge.ingest.frames import QueuedFrame
from strata.shared.config.device import CameraConfig, SenderConfig, SourceConfig
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.imagecheck import ImageLimits, check_image

from .conftest import fast_config

SYNTH = "synthetic://?frames=60&seed=3&width=160&height=120"


def _item(index: int, image: np.ndarray, skip: str = "") -> GateItem:
    return GateItem("cam", index, index, Frame(index, index / 10, index, bgr=image), 1.0, 0.0, skip)


def _skipped_sent(agent: Agent) -> float | None:
    return agent.metrics.registry.get_sample_value(
        "strata_device_skipped_sent_total", {"camera": "cam"}
    )


def _wait(cond: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_frames_reach_the_edge_in_order_every_one_accounted_with_no_thread_between(
    port: int,
) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    cfg = fast_config(edge, None, cameras=[CameraConfig(id="cam", source=SYNTH)])
    with FrameSink(edge) as sink:
        agent = Agent(cfg, registry=CollectorRegistry())
        agent.start()
        names = {t.name for t in threading.enumerate()}
        assert agent.run_until_done(timeout=60) == 0
        got = sink.received()
    # The camera's thread, the sender and nothing else of the agent's between them.
    assert "camera-cam" in names or agent.cameras_done()
    assert not names & {"gate", "payload"}
    counts = CameraCounts.read(agent.metrics.registry, "cam")
    assert counts.decoded == 60
    # Offered = sent + dropped by reason: nothing unaccounted, nothing given up here.
    assert counts.sent + counts.dropped_motion == counts.decoded
    assert dropped_by_reason(agent.metrics.registry, "cam") == {}
    fresh = [r for r in got if not r.duplicate]
    assert len(fresh) == counts.sent > 10
    seqs = [r.sequence for r in fresh]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    indexes = [r.frame_index for r in fresh]
    assert indexes == sorted(indexes) and len(set(indexes)) == len(indexes)


def test_dropped_frames_notices_keep_their_place_in_the_order(port: int) -> None:
    # The default cascade sends a header-only notice for each frame it drops.
    edge = f"tcp://127.0.0.1:{port}"
    cfg = fast_config(edge, None, cameras=[CameraConfig(id="cam", source=SYNTH)])
    cfg = cfg.model_copy(update={"cascade": cfg.cascade.model_copy(update={"enabled": True})})
    with FrameSink(edge) as sink:
        agent = Agent(cfg, registry=CollectorRegistry())
        assert agent.run_until_done(timeout=60) == 0
        got = [r for r in sink.received() if not r.duplicate]
    assert [r.frame_index for r in got] == list(range(60))  # every frame, in order
    counts = CameraCounts.read(agent.metrics.registry, "cam")
    skipped = _skipped_sent(agent)
    assert skipped is not None and skipped > 0
    assert counts.sent + skipped == 60


def test_a_frame_that_cannot_be_encoded_is_counted_and_the_camera_goes_on(port: int) -> None:
    metrics = DeviceMetrics(CollectorRegistry())
    sender = Sender(f"tcp://127.0.0.1:{port}", SenderConfig(), metrics)  # never started
    box = sender.add_camera("cam")
    keys = KeyframeRequests()
    pipe = CameraPipeline(
        "cam", PipelineSetup("agent", keyframes=keys), sender.submit, metrics.camera("cam")
    )
    good = np.full((32, 48, 3), 90, np.uint8)
    bad = np.zeros((32, 48, 7), np.uint8)  # seven channels: no JPEG encoder takes it
    for i, image in enumerate((good, bad, good)):
        assert pipe.put(_item(i, image), wait=False) is None
    assert pipe.put(_item(3, good, skip="motion"), wait=False) is None
    assert box.pending == 3
    assert dropped_by_reason(metrics.registry, "cam") == {"encode_error": 1}
    first = box.take(time.monotonic())
    assert first is not None and first.header.frame_index == 0
    assert (first.header.width, first.header.height) == (48, 32)
    assert first.header.gate_score == 1.0 and bytes(first.payload[:2]) == b"\xff\xd8"
    second = box.take(time.monotonic())
    assert second is not None and second.header.frame_index == 2
    third = box.take(time.monotonic())
    assert third is not None and third.header.kind == frame_pb2.FRAME_KIND_SKIPPED
    assert third.header.skip_reason == "motion" and third.nbytes == 0


def test_keyframe_requests_reach_the_camera_encoding_them_once() -> None:
    keys = KeyframeRequests()
    assert keys.take("a") == ""
    keys.request_keyframe("a", "the edge asked")
    keys.request_keyframe("a", "later")  # the first reason stands
    assert keys.take("b") == ""
    assert keys.take("a") == "the edge asked" and keys.take("a") == ""
    keys.request_keyframes("new edge session")  # no stream open yet: nobody to restart
    assert keys.take("a") == ""
    keys.opened("a")
    keys.request_keyframes("new edge session")
    assert keys.take("b") == "" and keys.take("a") == "new edge session"


def test_a_removed_camera_releases_its_thread(synthetic_mp4: Path, port: int) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    cams = [CameraConfig(id=c, source=str(synthetic_mp4)) for c in ("a", "b")]
    cfg = fast_config(edge, None, cameras=cams, source=SourceConfig(loop=True, realtime=True))
    with FrameSink(edge) as sink:
        agent = Agent(cfg, registry=CollectorRegistry())
        agent.start()
        try:
            assert sink.wait_for(4, 20.0)
            before = {t.name for t in threading.enumerate()}
            assert {"camera-a", "camera-b"} <= before
            assert agent.reload(cams[:1]) == ([], ["b"])
            assert _wait(lambda: not agent.draining(), 20.0)
            # The drain thread returns right after it forgets the camera.
            gone = {"camera-b", "drain-b"}
            assert _wait(lambda: not gone & {t.name for t in threading.enumerate()}, 5.0)
            alive = {t.name for t in threading.enumerate()}
            assert "camera-a" in alive and not agent.cameras_done()
            assert agent.sender.pending_of("b") == 0
        finally:
            agent.stop(drain_timeout_s=2.0)
    assert not {t.name for t in threading.enumerate()} & {"camera-a", "camera-b", "sender"}


def _decoded_frames(path: Path, n: int, fmt: str | None = None) -> list[av.VideoFrame]:
    with av.open(str(path)) as c:
        out = []
        for f in c.decode(video=0):
            out.append(f if fmt is None else f.reformat(format=fmt))
            if len(out) == n:
                return out
    return out


@pytest.mark.parametrize(("fmt", "size"), [(None, (96, 72)), (None, (0, 0)), ("nv12", (96, 72))])
def test_kept_frames_jpeg_from_yuv_reads_at_the_edge_like_the_bgr_route(
    synthetic_mp4: Path, fmt: str | None, size: tuple[int, int]
) -> None:
    """A decoded 4:2:0 frame's JPEG is made from its YUV planes (no BGR) and another format's
    through BGR; the edge's ingest check and decoder read both, and the pixels match what
    the BGR route gives within JPEG's noise."""
    metrics = DeviceMetrics(CollectorRegistry())
    sender = Sender("tcp://127.0.0.1:1", SenderConfig(jpeg_quality=90), metrics)  # never started
    box = sender.add_camera("cam")
    setup = PipelineSetup("agent", SenderConfig(jpeg_quality=90), scale=ScaleTarget(*size))
    # A new gate version's canary takes kept frames: as sent (JPEG) or as BGR.
    canary: list[np.ndarray | bytes] = []
    pipe = CameraPipeline("cam", setup, sender.submit, metrics.camera("cam"), passed=canary.append)
    limits = ImageLimits(4096, 4096, 1 << 24)
    for i, f in enumerate(_decoded_frames(synthetic_mp4, 3, fmt)):
        # The route this frame takes: YUV planes for 4:2:0, else None (through BGR).
        planes = Frame(i, 0.0, i, av_frame=f).yuv420((96, 72), Yuv420Scaler())
        assert (planes is None) == (fmt is not None)
        ref = Frame(i, 0.0, i, av_frame=f).bgr(setup.scale.size_for(f.width, f.height))
        item = GateItem("cam", i, i, Frame(i, 0.0, i, av_frame=f), 1.0, 0.0)
        assert pipe.put(item, wait=False) is None
        out = box.take(time.monotonic())
        assert out is not None and out.header.frame_index == i
        h = out.header
        assert h.encoding == common_pb2.ENCODING_JPEG and (h.height, h.width) == ref.shape[:2]
        assert (h.source_width, h.source_height) == (f.width, f.height)
        assert check_image(out.payload, h.encoding, h.width, h.height, limits, exact=True) == (
            h.width,
            h.height,
        )
        image = QueuedFrame(h, memoryview(out.payload), 0, 0.0).decode()
        assert image.shape == ref.shape
        # JPEG at 90 of the same pixels: a few levels apart on average, no colour cast
        # (both routes' YUV to BGR round differently: each within 1.5 levels of exact
        # BT.601 on vtest, in opposite directions; limited range read as full is 10+ off).
        diff = np.abs(image.astype(np.int16) - ref.astype(np.int16))
        assert diff.mean() < 4.0, diff.mean()
        assert np.abs(image.mean(axis=(0, 1)) - ref.mean(axis=(0, 1))).max() < 3.0
        seen = canary[-1]
        assert len(canary) == i + 1
        if fmt is None:  # the JPEG itself, decoded only if a canary runs
            assert seen == bytes(out.payload)
        else:
            assert isinstance(seen, np.ndarray) and seen.shape == ref.shape
            assert np.abs(seen.astype(np.int16) - ref.astype(np.int16)).mean() < 2.0
    assert dropped_by_reason(metrics.registry, "cam") == {}


def _notice(index: int, at: float, skip: str = "min_gap", width: int = 16) -> GateItem:
    image = np.zeros((12, width, 3), np.uint8)
    return GateItem(
        "cam", index, 1000 + index, Frame(index, index / 10, 0, bgr=image), 0.5, at, skip
    )


def _taken(box: object) -> list[frame_pb2.FrameHeader]:
    out = []
    while (item := box.take(time.monotonic())) is not None:  # type: ignore[attr-defined]
        out.append(item.header)
    return out


def _run_pipe(port: int, run: int, wait_s: float) -> tuple[Outbox, CameraPipeline]:
    """A camera's outbox (its sender never started) and a pipeline holding runs of `run`."""
    metrics = DeviceMetrics(CollectorRegistry())
    sender = Sender(f"tcp://127.0.0.1:{port}", SenderConfig(), metrics)  # never started
    box = sender.add_camera("cam")
    setup = PipelineSetup("agent", notice_run=run, notice_run_s=wait_s)
    return box, CameraPipeline("cam", setup, sender.submit, metrics.camera("cam"))


def test_dropped_frames_go_in_runs_before_the_next_kept_frame_when_full_and_at_the_end(
    port: int,
) -> None:
    box, pipe = _run_pipe(port, 4, 10.0)
    kept = np.full((12, 16, 3), 90, np.uint8)
    for i in (0, 1):
        pipe.put(_notice(i, 0.0), wait=False)
    assert box.pending == 0  # waiting for their run to fill or a kept frame
    pipe.put(_item(2, kept), wait=False)
    run, frame = _taken(box)
    assert run.kind == frame_pb2.FRAME_KIND_SKIPPED and run.frame_index == 1
    assert [s.frame_index for s in run.earlier_skipped] == [0]
    assert run.earlier_skipped[0].capture_ns == 1000 and run.capture_ns == 1001
    assert run.earlier_skipped[0].skip_reason == "min_gap" and run.skip_reason == "min_gap"
    assert (run.source_width, run.source_height) == (16, 12)
    assert frame.frame_index == 2 and frame.kind != frame_pb2.FRAME_KIND_SKIPPED
    assert run.sequence < frame.sequence  # the run goes first: frame order kept
    for i in range(3, 8):  # a full run of 4 goes at once; the fifth waits
        pipe.put(_notice(i, 0.0, "motion"), wait=False)
    (full,) = _taken(box)
    assert full.frame_index == 6 and [s.frame_index for s in full.earlier_skipped] == [3, 4, 5]
    pipe.flush()  # the camera's frames stopped
    (rest,) = _taken(box)
    assert rest.frame_index == 7 and not rest.earlier_skipped and rest.skip_reason == "motion"
    pipe.flush()
    assert _taken(box) == []


def test_a_run_goes_once_its_first_notice_has_waited_long_enough(port: int) -> None:
    box, pipe = _run_pipe(port, 100, 0.2)
    pipe.put(_notice(0, 5.0), wait=False)
    pipe.put(_notice(1, 5.1), wait=False)
    assert box.pending == 0
    pipe.put(_notice(2, 5.2), wait=False)  # 0.2 s after the run's first
    (run,) = _taken(box)
    assert run.frame_index == 2 and [s.frame_index for s in run.earlier_skipped] == [0, 1]


def test_a_camera_slower_than_the_wait_sends_each_notice_alone(port: int) -> None:
    # At 4 fps the next frame comes 0.25 s later: holding a notice for it would make the
    # edge hear of a dropped frame later than notice_run_ms allows.
    box, pipe = _run_pipe(port, 8, 0.2)
    pipe.put(_notice(0, 3.0), wait=False)  # no interval known yet: it waits for the next
    assert box.pending == 0
    got = []
    for i in range(1, 4):
        pipe.put(_notice(i, 3.0 + 0.25 * i), wait=False)
        got += _taken(box)
    pipe.flush()
    assert _taken(box) == []  # nothing was left waiting
    assert [h.frame_index for h in got] == [1, 2, 3]
    assert [s.frame_index for s in got[0].earlier_skipped] == [0]
    assert not got[1].earlier_skipped and not got[2].earlier_skipped


def test_a_run_of_one_is_the_notice_it_always_was(port: int) -> None:
    metrics = DeviceMetrics(CollectorRegistry())
    sender = Sender(f"tcp://127.0.0.1:{port}", SenderConfig(), metrics)  # never started
    box = sender.add_camera("cam")
    pipe = CameraPipeline("cam", PipelineSetup("agent"), sender.submit, metrics.camera("cam"))
    for i in range(3):
        pipe.emit(_notice(i, 0.0, "gate"), None, 0.25)
    got = _taken(box)
    assert [h.frame_index for h in got] == [0, 1, 2]
    assert all(not h.earlier_skipped and h.gate_score == 0.25 for h in got)
    assert all(h.motion_score == 0.5 and h.capture_ns == 1000 + h.frame_index for h in got)


def test_a_static_camera_tells_every_dropped_frame_in_fewer_messages(port: int) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    static = "synthetic://?frames=60&seed=3&width=160&height=120&objects=0"
    cfg = fast_config(edge, None, cameras=[CameraConfig(id="cam", source=static)])
    cascade = cfg.cascade.model_copy(update={"enabled": True, "notice_run": 8})
    cfg = cfg.model_copy(update={"cascade": cascade})
    with FrameSink(edge) as sink:
        agent = Agent(cfg, registry=CollectorRegistry())
        assert agent.run_until_done(timeout=60) == 0
        got = [r for r in sink.received() if not r.duplicate]
    assert [r.frame_index for r in got] == list(range(60))  # every frame, in order
    counts = CameraCounts.read(agent.metrics.registry, "cam")
    skipped = _skipped_sent(agent)
    assert skipped is not None and counts.sent + skipped == 60
    # Each run ends at a kept frame, when 8 long, or at the clip's end.
    runs = len({r.sequence for r in got}) - counts.sent
    assert skipped > 30 and runs <= counts.sent + 1 + skipped // 8 < skipped
    assert counts.acked == 60  # a run is acked as the frames it tells


def test_a_new_frame_size_starts_a_new_run(port: int) -> None:
    box, pipe = _run_pipe(port, 8, 10.0)
    for i, width in enumerate((16, 16, 32)):
        pipe.put(_notice(i, 0.0, width=width), wait=False)
    pipe.flush()
    first, second = _taken(box)
    assert (first.frame_index, first.source_width) == (1, 16) and len(first.earlier_skipped) == 1
    assert (second.frame_index, second.source_width) == (2, 32) and not second.earlier_skipped


def test_a_codec_probe_goes_as_raw_pixels_with_the_quality_its_jpeg_would_have(
    synthetic_mp4: Path,
) -> None:
    """Through the route a decoded 4:2:0 frame takes (its JPEG made from its YUV planes), a
    probe still goes as BGR: the pixels its JPEG would have been made of."""
    metrics = DeviceMetrics(CollectorRegistry())
    sender = Sender("tcp://127.0.0.1:1", SenderConfig(jpeg_quality=93), metrics)  # never started
    box = sender.add_camera("cam")
    setup = PipelineSetup("agent", SenderConfig(jpeg_quality=93), scale=ScaleTarget(96, 72))
    pipe = CameraPipeline("cam", setup, sender.submit, metrics.camera("cam"))
    f = _decoded_frames(synthetic_mp4, 1)[0]
    probe = GateItem("cam", 0, 0, Frame(0, 0.0, 0, av_frame=f), 1.0, 0.0)
    probe.calibration = probe.codec_probe = True
    plain = GateItem("cam", 1, 1, Frame(1, 0.1, 1, av_frame=f), 1.0, 0.0)
    for item in (probe, plain):
        assert pipe.put(item, wait=False) is None
    raw, jpeg = box.take(time.monotonic()), box.take(time.monotonic())
    assert raw is not None and jpeg is not None
    assert raw.header.encoding == common_pb2.ENCODING_BGR
    assert raw.header.codec_probe_quality == 93
    image = QueuedFrame(raw.header, memoryview(raw.payload), 0, 0.0).decode()
    ref = Frame(0, 0.0, 0, av_frame=f).bgr(setup.scale.size_for(f.width, f.height))
    assert np.array_equal(image, ref)
    assert jpeg.header.encoding == common_pb2.ENCODING_JPEG
    assert jpeg.header.codec_probe_quality == 0


def test_a_codec_probe_larger_than_a_detector_s_input_goes_as_jpeg() -> None:
    from strata.device.pipeline import PROBE_MAX_VALUES

    metrics = DeviceMetrics(CollectorRegistry())
    sender = Sender("tcp://127.0.0.1:1", SenderConfig(), metrics)  # never started
    box = sender.add_camera("cam")
    pipe = CameraPipeline("cam", PipelineSetup("agent"), sender.submit, metrics.camera("cam"))
    big = np.zeros((1080, 1920, 3), np.uint8)  # before the edge announced its input
    assert big.size > PROBE_MAX_VALUES
    probe = _item(0, big)
    probe.calibration = probe.codec_probe = True
    assert pipe.put(probe, wait=False) is None
    out = box.take(time.monotonic())
    assert out is not None and out.header.encoding == common_pb2.ENCODING_JPEG
    assert out.header.codec_probe_quality == 0
