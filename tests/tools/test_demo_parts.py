"""The demo's parts on their own: process handling, scraping, results, annotation, report."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server
from strata.shared.contracts import analytics_pb2, common_pb2, current_version, frame_pb2
from strata.shared.synthetic import SyntheticClip
from strata.tools.demo import summary
from strata.tools.demo.cli import parse_sets
from strata.tools.demo.procs import TierExitedError, TierProcess
from strata.tools.demo.results import DetectionCollector, Received
from strata.tools.demo.scrape import scrape
from strata.tools.demo.sources import camera_id
from strata.tools.demo.stack import Camera, Stack


def test_a_process_that_dies_is_reported_with_its_log(tmp_path: Path) -> None:
    proc = TierProcess("edge", ["edge", "--no-such-flag"], tmp_path / "edge.log")
    proc.start()
    deadline = time.monotonic() + 30
    while proc.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(TierExitedError) as err:
        proc.check()
    assert err.value.returncode == 2
    assert any("--no-such-flag" in line or "invalid choice" in line for line in err.value.tail)
    assert "edge exited with status 2" in str(err.value)
    assert proc.stop() == 2


def test_stop_interrupts_a_running_process(tmp_path: Path) -> None:
    # The handler is set explicitly: a test run started in the background (`cmd &` in a
    # script) inherits SIGINT ignored, and Python then installs none of its own.
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "try:\n print('ready', flush=True)\n time.sleep(60)\n"
        "except KeyboardInterrupt:\n print('bye')"
    )
    proc = TierProcess("sleeper", [], tmp_path / "s.log", command=[sys.executable, "-c", code])
    proc.start()
    deadline = time.monotonic() + 30
    while proc.tail() != ["ready"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.running() and proc.tail() == ["ready"]
    started = time.monotonic()
    assert proc.stop(timeout=10) == 0  # SIGINT first: a clean exit
    assert time.monotonic() - started < 5
    assert proc.tail() == ["ready", "bye"]


def test_scrape_sums_over_labels(port: int) -> None:
    reg = CollectorRegistry()
    c = Counter("strata_edge_drops", "x", ["reason"], registry=reg)
    c.labels(reason="shed").inc(3)
    c.labels(reason="stale").inc(2)
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    try:
        got = scrape(f"http://127.0.0.1:{port}/metrics")
        assert got is not None
        assert got.total("strata_edge_drops_total") == 5
        assert got.total("strata_edge_drops_total", reason="shed") == 3
        assert got.by_label("strata_edge_drops_total", "reason") == {"shed": 3, "stale": 2}
        assert summary.drops({"edge": got}) == {"edge.shed": 3, "edge.stale": 2}
    finally:
        server.shutdown()
    assert scrape(f"http://127.0.0.1:{port}/metrics", timeout=0.5) is None


def test_parse_sets_and_camera_ids() -> None:
    assert parse_sets(["edge.batching.max_batch=8", "device.gate.enabled=false"]) == {
        "edge": {"batching": {"max_batch": 8}},
        "device": {"gate": {"enabled": False}},
    }
    with pytest.raises(ValueError):
        parse_sets(["nonsense"])
    assert camera_id(0, "/x/clip one.mp4") == "cam0-clip_one"
    assert camera_id(1, "rtsp://h:8554/live/cam") == "cam1-cam"


def test_stack_config_validates(tmp_path: Path) -> None:
    from strata.shared.config.device import DeviceConfig

    if "cameras" not in DeviceConfig.model_fields:
        pytest.skip("the device tier's config has not landed yet")
    stack = Stack(tmp_path, [Camera("cam0", "/x.mp4")])
    path = stack.write_config()
    assert path.exists()
    bad = Stack(tmp_path, [Camera("cam0", "/x.mp4")], {"edge": {"nonsense": 1}})
    with pytest.raises(ValueError, match="nonsense"):
        bad.write_config()


def _detections(
    camera: str, index: int, boxes: list[tuple[float, ...]]
) -> frame_pb2.FrameDetections:
    msg = frame_pb2.FrameDetections(
        version=current_version(), camera_id=camera, sequence=index + 1, frame_index=index
    )
    for x1, y1, x2, y2 in boxes:
        msg.detections.add(
            box=common_pb2.Box(x1=x1, y1=y1, x2=x2, y2=y2), score=0.9, class_id=0, label="person"
        )
    msg.timing.capture_ns = 1_000_000_000 + index * 100_000_000
    msg.timing.edge_send_ns = msg.timing.capture_ns + 40_000_000
    return msg


def test_collector_receives_published_results(port: int) -> None:
    import zmq

    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    pub.bind(f"tcp://127.0.0.1:{port}")
    collector = DetectionCollector(f"tcp://127.0.0.1:{port}")
    collector.start()
    try:
        deadline = time.monotonic() + 10
        msg = _detections("cam0", 0, [(1, 2, 30, 40)])
        # PUB drops until the subscription arrives: publish until the collector has one.
        while collector.count() == 0 and time.monotonic() < deadline:
            pub.send_multipart([b"cam0", msg.SerializeToString()])
            time.sleep(0.05)
        pub.send_multipart([b"cam0", b"\xff\xfe not a protobuf"])
        for i in range(1, 5):
            pub.send_multipart([b"cam0", _detections("cam0", i, []).SerializeToString()])
        while collector.count() < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        collector.close()
        pub.close(0)
    frames = collector.frames()
    assert sorted(i for _, i in frames) == [0, 1, 2, 3, 4]
    assert frames[("cam0", 0)].message.detections[0].box.x2 == 30


def test_annotated_video_has_every_frame(tmp_path: Path) -> None:
    import av

    clip = SyntheticClip(width=160, height=120, frames=12, seed=3)
    src = clip.write(tmp_path / "clip.mp4")
    results = {
        ("cam0", i): Received(_detections("cam0", i, [(10, 40, 60, 80)]), 0) for i in (0, 4, 8)
    }
    ev = analytics_pb2.Event(camera_id="cam0", sequence=5, label="car", score=0.7)
    ev.edge_detection.box.CopyFrom(common_pb2.Box(x1=10, y1=10, x2=60, y2=50))
    from strata.tools.demo.annotate import annotate_video

    out = tmp_path / "annotated.mp4"
    assert annotate_video(src, "cam0", results, [ev], out) == 12
    with av.open(str(out)) as f:
        frames = [fr.to_ndarray(format="bgr24") for fr in f.decode(video=0)]
    assert len(frames) == 12
    # The status bar is drawn (black strip with white text) and a box edge is coloured.
    assert frames[0][:18].mean() < frames[0][30:].mean()
    with av.open(str(src)) as f:
        plain = [fr.to_ndarray(format="bgr24") for fr in f.decode(video=0)]
    # The box's top edge (row 40) is drawn on a kept frame and on a held (dropped) one.
    for i in (0, 1):
        diff = np.abs(frames[i][40, 12:58].astype(int) - plain[i][40, 12:58].astype(int))
        assert diff.mean() > 30


def test_report_latency_and_table() -> None:
    results = {("cam0", i): Received(_detections("cam0", i, []), 0) for i in range(10)}
    events = [
        analytics_pb2.Event(camera_id="cam0", sequence=1, capture_ns=10, stored_ns=10 + 5_000_000)
    ]
    s = summary.build(
        [{"camera": "cam0", "source": "x", "bytes": 100}], {}, results, events, {}, 1.0
    )
    assert s.latency["capture_to_edge"].p50_ms == pytest.approx(40.0)
    assert s.latency["capture_to_edge"].n == 10
    assert s.latency["capture_to_cloud"].p99_ms == pytest.approx(5.0)
    assert s.frames["results_received"] == 10
    assert s.bytes["source"] == 100
    text = summary.table(s)
    assert "p50" in text and "frames decoded" in text
    assert '"capture_to_cloud"' in s.to_json()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--source", "/nonexistent/clip.mp4"], "no such file"),
        (["--set", "edge.no_such_key=1"], "edge.no_such_key: unknown key"),
        (["--set", "nonsense"], "--set wants KEY=VALUE"),
    ],
)
def test_bad_input_is_a_clear_error_before_anything_starts(
    tmp_path: Path, args: list[str], message: str
) -> None:
    import subprocess

    cmd = [sys.executable, "-m", "strata.tools.cli", "demo", "--out", str(tmp_path), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "run" / "edge.log").exists()  # no daemon was started


def test_the_default_clip_is_vtest_in_real_time_else_synthetic_with_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from strata.tools.demo import cli as demo_cli
    from strata.tools.demo.cli import default_sources

    vtest = tmp_path / "vtest.mp4"
    vtest.write_bytes(b"x")
    monkeypatch.setattr(demo_cli, "find_vtest", lambda explicit: vtest)
    assert default_sources(False) == ([str(vtest)], True)
    assert default_sources(True) == ([], False)
    monkeypatch.setattr(demo_cli, "find_vtest", lambda explicit: None)
    assert default_sources(False) == ([], False)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data/vtest.mp4 not found" in err[0] and "synthetic" in err[0]


def test_camera_states_from_the_device_metrics() -> None:
    import time

    from prometheus_client import generate_latest
    from strata.device.metrics import DeviceMetrics
    from strata.tools.demo.cameras import camera_views
    from strata.tools.demo.scrape import parse

    m = DeviceMetrics()
    up, down = m.camera("cam0"), m.camera("cam1")
    up.set_state("starting")
    up.set_state("running")
    down.set_state("reconnecting")
    down.set_error("refused")
    down.retry_attempt.set(4)
    down.retry_at.set(time.time() + 8.2)
    views = camera_views(parse(generate_latest(m.registry).decode()), time.time())
    assert [v.describe() for v in views] == [
        "cam0 running",
        "cam1 reconnecting (refused), retry 4 in 8 s",
    ]
    down.set_state("running")
    down.set_error("")
    assert camera_views(parse(generate_latest(m.registry).decode()), time.time())[1].describe() == (
        "cam1 running"
    )


def test_table_counts_the_cascade_policys_drops() -> None:
    """decoded = dropped by motion + gate + cascade policy + sent, in the table and per camera."""
    from prometheus_client import generate_latest
    from strata.device.filters.cascade import CascadeMetrics, CascadePolicy
    from strata.device.metrics import DeviceMetrics
    from strata.shared.config.device import CascadeConfig
    from strata.tools.demo.scrape import parse

    m = DeviceMetrics()
    cam = m.camera("cam0")
    policy = CascadePolicy(CascadeConfig(), CascadeMetrics(m.registry), "cam0")
    # As the camera counts them: 10 decoded, 2 without motion, 5 skipped by the policy.
    cam.decoded.inc(10)
    # Three more the cascade's gap held back undecoded (source.skip_held).
    cam.skipped_held.inc(3)
    cam.dropped_motion.inc(2)
    for _ in range(2):
        policy.count("dropped", "motion")
    for _ in range(5):
        policy.count("dropped", "min_gap")
    for _ in range(2):
        policy.count("kept", "motion")
    cam.sent.inc(2)
    # One more frame with motion, dropped by the source degradation the edge asked for.
    cam.dropped("degraded_motion").inc()
    scrapes = {"device": parse(generate_latest(m.registry).decode())}
    s = summary.build([], scrapes, {}, [], {}, 1.0)
    f = s.frames
    assert (f["decoded"], f["dropped_motion"], f["dropped_cascade"]) == (10, 2, 5)
    assert f["dropped_degraded"] == 1 and s.drops["device.degraded_motion"] == 1
    parts = ("dropped_motion", "dropped_gate", "dropped_cascade", "dropped_degraded")
    assert sum(f[k] for k in parts) + f["sent_to_edge"] == 10
    assert s.drops["device.cascade_min_gap"] == 5
    assert s.per_camera["cam0"]["dropped_cascade"] == 5
    row = next(line for line in summary.table(s).splitlines() if "cascade policy" in line)
    assert row.split()[-1] == "5"
    assert f["held"] == 3 and s.per_camera["cam0"]["held"] == 3
    held = next(line for line in summary.table(s).splitlines() if "not decoded" in line)
    assert held.split()[-1] == "3"
    cam_row = next(line for line in summary.table(s).splitlines() if line.startswith("cam0"))
    assert cam_row.split()[1:3] == ["10", "3"]


def test_the_edges_estimate_per_camera_in_the_live_line_and_the_table() -> None:
    import time

    from prometheus_client import generate_latest
    from strata.device.filters.cascade import CascadeMetrics, CascadePolicy
    from strata.device.metrics import DeviceMetrics
    from strata.shared.config.device import CascadeConfig
    from strata.shared.contracts import frame_pb2
    from strata.tools.demo.cameras import camera_views
    from strata.tools.demo.scrape import parse

    m = DeviceMetrics()
    m.camera("cam0").set_state("running")
    m.camera("cam1").set_state("running")
    policy = CascadePolicy(CascadeConfig(), CascadeMetrics(m.registry), "cam0")
    policy.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.8125))
    device = parse(generate_latest(m.registry).decode())
    views = camera_views(device, time.time())
    assert [v.describe() for v in views] == ["cam0 running, est. acc. 0.81", "cam1 running"]
    s = summary.build([], {"device": device}, {}, [], {}, 1.0)
    assert s.per_camera["cam0"]["estimated_accuracy"] == 0.8125
    lines = summary.table(s).splitlines()
    head = next(i for i, line in enumerate(lines) if "est. acc." in line)
    assert lines[head + 1].split()[0] == "cam0" and lines[head + 1].split()[-1] == "0.812"


def test_before_a_window_estimate_the_bursts_prediction_is_shown_marked() -> None:
    """A clip shorter than a calibration window (the demo's) still shows an accuracy: the
    bursts' prediction at the gap kept, marked `~`, until the edge's estimate arrives."""
    import time

    from prometheus_client import generate_latest
    from strata.device.filters.cascade import CascadeMetrics, CascadePolicy
    from strata.device.metrics import DeviceMetrics
    from strata.shared.config.device import CascadeConfig
    from strata.shared.contracts import frame_pb2
    from strata.tools.demo.cameras import camera_views
    from strata.tools.demo.scrape import parse

    m = DeviceMetrics()
    m.camera("cam0").set_state("running")
    policy = CascadePolicy(CascadeConfig(target=0.9), CascadeMetrics(m.registry), "cam0")
    # A first burst: gaps 1..4 at 1.0, 0.97, 0.93, 0.85: the longest meeting 0.9 is 3.
    policy.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0, 0.97, 0.93, 0.85]))
    device = parse(generate_latest(m.registry).decode())
    assert [v.describe() for v in camera_views(device, time.time())] == [
        "cam0 running, est. acc. ~0.93 (bursts)"
    ]
    s = summary.build([], {"device": device}, {}, [], {}, 1.0)
    lines = summary.table(s).splitlines()
    head = next(i for i, line in enumerate(lines) if "est. acc." in line)
    assert lines[head + 1].split()[-1] == "~0.930"
    assert any(line.startswith("~ the calibration bursts' prediction") for line in lines)
    # The window's estimate, once it comes, is what is shown.
    policy.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.91))
    device = parse(generate_latest(m.registry).decode())
    s = summary.build([], {"device": device}, {}, [], {}, 1.0)
    lines = summary.table(s).splitlines()
    head = next(i for i, line in enumerate(lines) if "est. acc." in line)
    assert lines[head + 1].split()[-1] == "0.910"
    assert not any(line.startswith("~") for line in lines)


def test_the_degrading_row_counts_every_degradation_drop_the_drops_line_lists() -> None:
    """Issue 39: the table said "dropped degrading at source 0" beside
    `device.degraded_policy 152`: the row counts every degradation drop, policy included."""
    from prometheus_client import generate_latest
    from strata.device.metrics import DeviceMetrics
    from strata.tools.demo.scrape import parse

    m = DeviceMetrics()
    cam = m.camera("cam0")
    cam.decoded.inc(400)
    cam.dropped("degraded_policy").inc(152)
    cam.dropped("degraded_rate").inc(3)
    scrapes = {"device": parse(generate_latest(m.registry).decode())}
    s = summary.build([], scrapes, {}, [], {}, 1.0)
    listed = sum(v for k, v in s.drops.items() if k.startswith("device.degraded_"))
    assert listed == 155
    lines = summary.table(s).splitlines()
    row = next(line for line in lines if "degrading at source" in line)
    assert row.split()[-1] == "155"
    notes = [line for line in lines if not line.startswith("drops")]
    assert any("degraded_policy" in line and "sent" in line for line in notes)


def test_capture_to_cloud_is_set_beside_the_edges_figure_for_the_same_frames() -> None:
    """Issue 39: capture to cloud (107 ms) printed below capture to edge (134 ms) with no
    word on why: the two cover different frames. The table gives the edge's figure over the
    cloud's own frames, and says what each covers."""
    results = {("cam0", i): Received(_detections("cam0", i, []), 0) for i in range(10)}
    # Frames the edge answered from its tracker are published late (a gap's worth):
    for i in range(5, 10):
        results[("cam0", i)].message.predicted = True
        results[("cam0", i)].message.timing.edge_send_ns += 200_000_000
    # Crops of frames 0 and 1 reached the cloud 30 ms after their edge result.
    events = [
        analytics_pb2.Event(
            camera_id="cam0", sequence=i + 1, capture_ns=t, stored_ns=t + 70_000_000
        )
        for i in (0, 1)
        for t in [results[("cam0", i)].message.timing.capture_ns]
    ]
    s = summary.build([], {}, results, events, {}, 1.0)
    edge, cloud = s.latency["capture_to_edge"], s.latency["capture_to_cloud"]
    assert cloud.p50_ms is not None and edge.p50_ms is not None
    assert cloud.p50_ms < edge.p50_ms  # what the demo showed, unexplained
    same = s.latency["capture_to_edge_cloud_frames"]
    assert (same.n, same.p50_ms) == (2, pytest.approx(40.0))
    assert same.p50_ms <= cloud.p50_ms
    lines = summary.table(s).splitlines()
    row = next(line for line in lines if "edge, same frames" in line)
    assert "p50      40 ms" in row and "n 2" in row
    assert any("only the frames whose crops the cloud stored" in line for line in lines)
