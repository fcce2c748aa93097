"""Gate versions at run time on a real agent with real ONNX versions of the red gate: a
switch while frames flow (every frame decided once, by one version), a canary or load
failure that rolls back, and SIGHUP on a real `strata device` process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import zmq
from onnx import numpy_helper
from strata.device.agent import Agent
from strata.device.metrics import CameraCounts
from strata.shared.config.device import DeviceConfig
from strata.shared.contracts import frame_pb2
from strata.shared.metrics import sample
from strata.shared.models import ModelRepository
from strata.shared.models.repository import promote_version
from strata.shared.wire import make_ack
from strata.tools.models.importer import ImportRequest, import_model

from .conftest import write_red_classifier

pytestmark = pytest.mark.timeout(90)


def variant(src: Path, dst: Path, sign: float) -> Path:
    """The red gate with its weights times `sign`: 1, another file with the same decisions;
    -1, the opposite decisions (it loads fine and fails its canary)."""
    model = onnx.load(str(src))
    model.doc_string = f"variant {sign}"
    for i, init in enumerate(model.graph.initializer):
        if init.name == "W":
            w = (numpy_helper.to_array(init) * sign).astype(np.float32)
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(w, "W"))
    onnx.save(model, str(dst))
    return dst


@pytest.fixture
def repo(tmp_path: Path) -> ModelRepository:
    model = write_red_classifier(tmp_path / "red.onnx")
    import_model(ImportRequest("red", model, tmp_path / "repo", labels=("other", "red")))
    return ModelRepository(tmp_path / "repo")


class Edge:
    """A ROUTER on 127.0.0.1 that acks every frame PROCESSED and keeps its header."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.got: list[frame_pb2.FrameHeader] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        sock = zmq.Context.instance().socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(f"tcp://127.0.0.1:{self.port}")
        try:
            while not self.stop.is_set():
                if not sock.poll(50):
                    continue
                ident, head, _payload = sock.recv_multipart()
                h = frame_pb2.FrameHeader.FromString(head)
                self.got.append(h)
                ack = make_ack(h.camera_id, h.sequence, frame_pb2.ACK_STATUS_PROCESSED)
                ack.session_id = h.session_id
                sock.send_multipart([ident, ack.SerializeToString()])
        finally:
            sock.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


@pytest.fixture
def edge(port: int) -> Iterator[Edge]:
    e = Edge(port)
    yield e
    e.close()


def config(edge: Edge, source: Path) -> DeviceConfig:
    return DeviceConfig.model_validate(
        {
            "edge": f"tcp://127.0.0.1:{edge.port}",
            "agent_id": "test-agent",
            "cameras": [{"id": "cam", "source": str(source)}],
            "source": {"loop": True, "realtime": True},
            "motion": {"enabled": False},
            "cascade": {"enabled": False},
            "gate": {"model": "red", "positive_class_ids": [1], "threshold": 0.5},
            "versions": {"poll_s": 0.1, "canary_frames": 4},
            "sender": {"drain_timeout_s": 10},
        }
    )


def until(cond: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def gated(agent: Agent, version: int) -> float:
    return sample(
        agent.metrics.registry, "strata_device_gate_version_frames_total", {"version": str(version)}
    )


def test_a_switch_while_frames_flow_decides_every_frame_once(
    repo: ModelRepository, edge: Edge, synthetic_mp4: Path, tmp_path: Path
) -> None:
    agent = Agent(config(edge, synthetic_mp4), models_repository=str(repo.root))
    reg = agent.metrics.registry
    agent.start()
    try:
        assert until(lambda: gated(agent, 0) >= 10)
        v1 = variant(repo.file_of("red")[2], tmp_path / "v1.onnx", 1.0)
        assert promote_version(repo, "red", v1)[0] == 1
        assert until(lambda: sample(reg, "strata_device_model_switches_total") == 1)
        assert until(lambda: gated(agent, 1) >= 10)  # frames go on, on version 1
    finally:
        agent.stop()
    keys = [(h.camera_id, h.sequence) for h in edge.got]
    assert len(keys) == len(set(keys))
    # Every frame the gate saw was decided by exactly one version: kept (and delivered)
    # or dropped by the gate, nothing else.
    c = CameraCounts.read(reg, "cam")
    assert (c.dropped_overload, c.source_errors) == (0, 0), c
    assert gated(agent, 0) + gated(agent, 1) == c.sent + c.dropped_gate, c
    assert c.sent == len(keys) == c.processed, c
    assert sample(reg, "strata_device_model_version") == 1
    assert sample(reg, "strata_device_model_canary_agreement") == pytest.approx(1.0)
    assert sample(reg, "strata_device_model_load_seconds") > 0


@pytest.mark.parametrize("failure", ["canary", "load"])
def test_a_failed_gate_version_rolls_back_and_the_old_one_keeps_serving(
    failure: str,
    repo: ModelRepository,
    edge: Edge,
    synthetic_mp4: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = Agent(config(edge, synthetic_mp4), models_repository=str(repo.root))
    reg = agent.metrics.registry
    agent.start()
    try:
        assert until(lambda: gated(agent, 0) >= 10)
        if failure == "canary":
            promote_version(repo, "red", variant(repo.file_of("red")[2], tmp_path / "b.onnx", -1))
        else:
            # A version whose file does not match its manifest's checksum.
            shutil.copytree(repo.version_folder("red", 0), tmp_path / "v1")
            (tmp_path / "v1" / "model.onnx").write_bytes(b"not a model")
            (tmp_path / "v1").rename(repo.version_folder("red", 1))
        assert until(
            lambda: sample(reg, "strata_device_model_rollbacks_total", {"reason": failure}) == 1
        )
        seen = gated(agent, 0)
        assert until(lambda: gated(agent, 0) >= seen + 10)  # version 0 keeps deciding
    finally:
        agent.stop()
    assert gated(agent, 1) == 0
    assert sample(reg, "strata_device_model_version") == 0
    assert sample(reg, "strata_device_model_switches_total") == 0
    assert sample(reg, "strata_device_model_rollbacks_total", {"reason": failure}) == 1
    if failure == "canary":
        assert sample(reg, "strata_device_model_canary_agreement") < 0.9
    assert "version 1 not switched to, version 0 keeps serving" in caplog.text


def test_sighup_makes_a_running_strata_device_switch_gate_versions(
    repo: ModelRepository, edge: Edge, synthetic_mp4: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "strata.yaml"
    cfg.write_text(
        f"models:\n  repository: {repo.root}\n"
        "device:\n  motion:\n    enabled: false\n  cascade:\n    enabled: false\n"
        "  source:\n    loop: true\n    realtime: true\n"
        "  gate:\n    model: red\n    positive_class_ids: [1]\n    threshold: 0.5\n"
        "  versions:\n    poll_s: 0\n    canary_frames: 2\n"
    )
    cmd = [sys.executable, "-m", "strata.tools.cli", "device", "--config", str(cfg)]
    cmd += ["--source", str(synthetic_mp4), "--edge", f"tcp://127.0.0.1:{edge.port}"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")))
    reader.start()

    def said(text: str) -> bool:
        return any(text in line for line in list(lines)) or proc.poll() is not None

    try:
        assert until(lambda: said("camera synthetic"), 60), lines
        time.sleep(1.0)  # frames for the canary
        v1 = variant(repo.file_of("red")[2], tmp_path / "v1.onnx", 1.0)
        promote_version(repo, "red", v1)
        time.sleep(0.5)  # poll_s 0: nothing happens until the signal
        assert not said("switched from version")
        proc.send_signal(signal.SIGHUP)
        assert until(lambda: said("switched from version 0 to 1"), 30), lines
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        reader.join(10)
    out = "".join(lines)
    assert "SIGHUP: looking for a newer model version" in out, out
    assert "switched from version 0 to 1" in out, out
