"""Against a real GStreamer RTSP server (Debian's gst-rtsp-server run by /usr/bin/python3)."""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from required_testkit import missing
from strata.device.agent import Agent
from strata.device.camera import CameraState
from strata.device.metrics import CameraCounts
from strata.device.transport.sink import FrameSink
from strata.shared.config.device import CameraConfig, MotionConfig, SourceConfig
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip

from .conftest import fast_config

pytestmark = pytest.mark.rtsp

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "rtsp_server.py"
SYSTEM_PY = "/usr/bin/python3"


def _gst_rtsp_missing() -> str:
    if not os.path.exists(SYSTEM_PY):
        return f"{SYSTEM_PY} not found"
    probe = subprocess.run(
        [
            SYSTEM_PY,
            "-c",
            "import gi; gi.require_version('GstRtspServer', '1.0'); "
            "from gi.repository import GstRtspServer",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return "" if probe.returncode == 0 else probe.stderr.strip().splitlines()[-1]


_MISSING = _gst_rtsp_missing()
if _MISSING:
    missing(
        f"GStreamer RTSP server unavailable ({_MISSING}); install python3-gi and "
        "gir1.2-gst-rtsp-server-1.0 (.ci/system-deps does)",
        module_level=True,
    )


@pytest.fixture(scope="module")
def rtsp_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    clip = SyntheticClip(width=320, height=240, frames=450, fps=30, objects=4, seed=5)
    return clip.write(tmp_path_factory.mktemp("rtsp") / "cam.mp4")


ServerFactory = Callable[[], subprocess.Popen[str]]


@pytest.fixture
def rtsp_server(rtsp_clip: Path, port: int) -> Iterator[tuple[str, ServerFactory]]:
    procs: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        cmd = [SYSTEM_PY, str(SERVER), "--port", str(port), "--name", "cam"]
        proc = subprocess.Popen([*cmd, "--file", str(rtsp_clip)], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == "READY", f"RTSP server did not start: {line!r}"
        return proc

    yield f"rtsp://127.0.0.1:{port}/cam", start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait(5)


def _until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def _agent(url: str, edge: str, *others: CameraConfig) -> Agent:
    cfg = fast_config(
        edge,
        None,
        cameras=[CameraConfig(id="cam", source=url), *others],
        source=SourceConfig(
            open_timeout_s=1.5, read_timeout_s=1.5, backoff_initial_s=0.2, backoff_max_s=0.5
        ),
        motion=MotionConfig(enabled=False),  # every frame goes to the sink
    )
    return Agent(cfg, registry=CollectorRegistry())


def test_killed_server_is_reconnected_and_counted(
    rtsp_server: tuple[str, ServerFactory], port: int, caplog: pytest.LogCaptureFixture
) -> None:
    url, start = rtsp_server
    edge = f"tcp://127.0.0.1:{port + 1 if port < 65535 else port - 1}"
    server = start()
    with FrameSink(edge) as sink:
        agent = _agent(url, edge)
        agent.start()
        try:
            counts = lambda: CameraCounts.read(agent.metrics.registry, "cam")  # noqa: E731
            assert _until(lambda: counts().decoded >= 30, 10.0), agent.statuses()
            # A loaded machine can make the first open fail too (the server listens before
            # its media is ready): that is an outage of its own, logged before this one.
            logged_before = len(caplog.records)
            server.kill()  # mid-stream, no goodbye
            server.wait(5)
            assert _until(lambda: agent.cameras[0].state == CameraState.RECONNECTING, 5.0)
            before = counts().decoded
            time.sleep(0.5)
            start()
            assert _until(lambda: counts().decoded >= before + 30, 10.0), agent.statuses()
            status = agent.statuses()[0]
            assert status.state == CameraState.RUNNING and status.reconnects == 1
            assert counts().reconnects == 1 and counts().source_errors >= 1
        finally:
            agent.stop(drain_timeout_s=3.0)
        got = sink.received()
    assert max(r.frame_index for r in got) >= before + 20  # frames after the reconnect arrived
    assert CameraCounts.read(agent.metrics.registry, "cam").acked == len(got)
    errors = [r for r in caplog.records[logged_before:] if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "camera cam:" in errors[0].getMessage()  # one line per outage


def test_stalled_stream_is_noticed_within_the_read_timeout(
    rtsp_server: tuple[str, ServerFactory], port: int
) -> None:
    url, start = rtsp_server
    edge = f"tcp://127.0.0.1:{port + 1 if port < 65535 else port - 1}"
    server = start()
    # A second camera, paced like a live one, must not notice the first one's trouble.
    other = CameraConfig(
        id="other", source="synthetic://?frames=2000&width=160&height=120&fps=20&realtime=1"
    )
    agent = _agent(url, edge, other)
    agent.start()
    try:
        counts = lambda: CameraCounts.read(agent.metrics.registry, "cam")  # noqa: E731
        others = lambda: CameraCounts.read(agent.metrics.registry, "other").decoded  # noqa: E731
        assert _until(lambda: counts().decoded >= 20, 10.0), agent.statuses()
        server.send_signal(signal.SIGSTOP)  # alive but silent: a stalled stream
        t = time.monotonic()
        during = others()
        assert _until(lambda: agent.cameras[0].state == CameraState.RECONNECTING, 6.0)
        noticed = time.monotonic() - t
        assert noticed < 1.5 + 1.0, f"stall noticed after {noticed:.1f}s"
        # About 20 frames/s went on while the stream was stalled.
        assert others() - during >= int(10 * noticed), (others() - during, noticed)
        server.send_signal(signal.SIGCONT)
        assert _until(lambda: agent.statuses()[0].reconnects == 1, 10.0), agent.statuses()
        n = counts().decoded
        assert _until(lambda: counts().decoded >= n + 10, 10.0)
    finally:
        agent.stop(drain_timeout_s=0.0)


class RecordingRandom(random.Random):
    """The camera's jitter source, recording each draw so the expected waits are exact."""

    def __init__(self) -> None:
        super().__init__(11)
        self.draws: list[float] = []

    def uniform(self, a: float, b: float) -> float:
        u = super().uniform(a, b)
        self.draws.append(u)
        return u


def _outage_agent(url: str, edge: str, source: SourceConfig) -> Agent:
    cfg = fast_config(
        edge,
        None,
        cameras=[CameraConfig(id="cam", source=url)],
        source=source,
        motion=MotionConfig(enabled=False),
    )
    return Agent(cfg, registry=CollectorRegistry())


def test_backoff_grows_to_its_cap_with_jitter_on_a_real_outage(
    rtsp_server: tuple[str, ServerFactory], port: int
) -> None:
    """The server dies and stays dead: each reopen waits backoff_initial_s doubled per
    attempt, capped at backoff_max_s, times the jitter factor drawn for it; with
    max_reopen_attempts 0 (the default) the camera never gives up."""
    url, start = rtsp_server
    edge = f"tcp://127.0.0.1:{port + 1 if port < 65535 else port - 1}"
    src = SourceConfig(
        open_timeout_s=1.5, read_timeout_s=1.5, backoff_initial_s=0.1, backoff_max_s=0.4,
        backoff_jitter=0.25,
    )  # fmt: skip
    server = start()
    with FrameSink(edge):
        agent = _outage_agent(url, edge, src)
        rng = RecordingRandom()
        agent.cameras[0]._rng = rng  # the one random source of the camera, recorded
        agent.start()
        try:
            reg = agent.metrics.registry
            attempt = lambda: sample(reg, "strata_device_camera_retry_attempt", {"camera": "cam"})  # noqa: E731
            assert _until(lambda: CameraCounts.read(reg, "cam").decoded >= 10, 10.0)
            server.kill()
            server.wait(5)
            seen: dict[int, float] = {}  # attempt -> when it was first seen (monotonic)
            deadline = time.monotonic() + 15.0
            while len(seen) < 7 and time.monotonic() < deadline:
                a = int(attempt())
                if a and a not in seen:
                    seen[a] = time.monotonic()
                time.sleep(0.005)
            assert agent.cameras[0].state == CameraState.RECONNECTING, agent.statuses()
        finally:
            agent.stop(drain_timeout_s=0.0)
    assert sorted(seen) == list(range(1, 8)), f"attempts seen: {sorted(seen)}"
    assert len(rng.draws) >= 7
    for k in range(1, 7):
        base = min(0.4, 0.1 * 2 ** (k - 1))
        expected = base * (1 + 0.25 * rng.draws[k - 1])
        waited = seen[k + 1] - seen[k]  # the wait, then a refused open (fast)
        # Never shorter than the jittered wait (less the 5 ms polling), and not much longer:
        # an uncapped wait would be 0.8 s at attempt 4, 1.6 s at 5 and 3.2 s at 6.
        assert waited >= expected - 0.015, (k, waited, expected)
        assert waited <= expected + 0.35, (k, waited, expected)
    # The jitter drawn is used: waits differ from the plain doubling.
    assert max(abs(d) for d in rng.draws[:6]) > 0.1


def test_max_reopen_attempts_makes_a_dead_camera_give_up(
    rtsp_server: tuple[str, ServerFactory], port: int
) -> None:
    url, start = rtsp_server
    edge = f"tcp://127.0.0.1:{port + 1 if port < 65535 else port - 1}"
    src = SourceConfig(
        open_timeout_s=1.5, read_timeout_s=1.5, backoff_initial_s=0.05, backoff_max_s=0.1,
        max_reopen_attempts=3,
    )  # fmt: skip
    server = start()
    with FrameSink(edge):
        agent = _outage_agent(url, edge, src)
        agent.start()
        try:
            reg = agent.metrics.registry
            assert _until(lambda: CameraCounts.read(reg, "cam").decoded >= 10, 10.0)
            server.kill()
            server.wait(5)
            assert _until(lambda: agent.cameras[0].state == CameraState.FAILED, 10.0), (
                agent.statuses()
            )
            # The lost read, then three reopens that failed; the fourth is never tried.
            assert CameraCounts.read(reg, "cam").source_errors == 4
            time.sleep(0.5)
            assert CameraCounts.read(reg, "cam").source_errors == 4
            assert agent.cameras[0].done
        finally:
            agent.stop(drain_timeout_s=0.0)
