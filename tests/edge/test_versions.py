"""Model versions at run time: a switch under load with every frame's result counted, and a
canary or load failure that rolls back, on a real node with real ONNX versions."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from edge_colour_model import build_colour_detector
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from onnx import numpy_helper
from strata.edge.build import NodeOptions, build_node
from strata.edge.node import EdgeNode
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import frame_pb2
from strata.shared.loopback import free_port
from strata.shared.metrics import sample
from strata.shared.models import ModelRepository
from strata.shared.models.repository import promote_version
from strata.shared.synthetic import SyntheticClip
from strata.tools.cli import main
from strata.tools.models.importer import ImportRequest, import_model

pytestmark = pytest.mark.timeout(120)


def shifted_classes(src: Path, dst: Path) -> Path:
    """The colour detector with every class id moved by one: same boxes, wrong classes."""
    model = onnx.load(str(src))
    for i, init in enumerate(model.graph.initializer):
        if init.name == "eye":
            eye = numpy_helper.to_array(init)
            new = numpy_helper.from_array(np.roll(eye, 1, axis=1).astype(np.float32), "eye")
            model.graph.initializer[i].CopyFrom(new)
    onnx.save(model, str(dst))
    return dst


@pytest.fixture
def repo(colour_model: Path, tmp_path: Path) -> ModelRepository:
    import_model(ImportRequest("colour", colour_model, tmp_path / "repo"))
    return ModelRepository(tmp_path / "repo")


def start(repo: ModelRepository, **versions: Any) -> EdgeNode:
    cfg = EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "batching": {"max_batch": 4, "max_queue_delay_ms": 5, "queue_per_camera": 256},
            "versions": {"poll_s": 0.1, "canary_frames": 4, **versions},
        }
    )
    path = repo.file_of("colour")[2]
    node = build_node(cfg, path, "colour", NodeOptions(repository=str(repo.root)))
    node.start()
    return node


def until(cond: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def results(sub: Listener, n: int) -> list[frame_pb2.FrameDetections]:
    """The next `n` results of the load's cameras (late probe answers left out)."""
    out: list[frame_pb2.FrameDetections] = []
    deadline = time.monotonic() + 60
    while len(out) < n and time.monotonic() < deadline:
        out += [m for m in sub.collect(n - len(out), timeout_s=1) if m.camera_id != "probe"]
    return out


class Load:
    """Frames of three cameras sent in a thread until stopped; every one is remembered."""

    def __init__(self, agent: RawAgent, clip: SyntheticClip) -> None:
        self.agent, self.clip = agent, clip
        self.sent: list[tuple[str, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            cam, seq = f"cam{i % 3}", 1000 + i
            self.agent.send_image(cam, seq, self.clip.frame(i % 20).image)
            self.sent.append((cam, seq))
            i += 1
            time.sleep(0.004)


def test_a_version_switch_under_load_answers_every_frame_once(
    repo: ModelRepository,
    colour_model: Path,
    zctx: Any,
    synthetic_clip: SyntheticClip,
    tmp_path: Path,
) -> None:
    node = start(repo)
    reg = node.metrics.registry
    try:
        sub = Listener(zctx, node.endpoints.publish)
        agent = RawAgent(zctx, node.endpoints.listen)
        wait_until_subscribed(agent, sub, synthetic_clip.frame(0).image)
        load = Load(agent, synthetic_clip)
        load.thread.start()
        time.sleep(0.5)
        # Another file with the same answers (more empty anchors): a new version.
        v1 = build_colour_detector(tmp_path / "v1.onnx", MODEL_SIZE, extra_anchors=9)
        assert promote_version(repo, "colour", v1)[0] == 1
        assert until(lambda: sample(reg, "strata_edge_model_switches_total") == 1)
        time.sleep(0.5)  # load continues on the new version
        load.stop.set()
        load.thread.join()
        got = results(sub, len(load.sent))
    finally:
        node.stop()
    keys = [(m.camera_id, m.sequence) for m in got]
    assert len(keys) == len(set(keys)) == len(load.sent)
    assert set(keys) == set(load.sent)
    versions = [m.model_version for m in got]
    assert 0 in versions and 1 in versions
    # Per camera, once version 1 answered, version 0 never does again.
    for cam in ("cam0", "cam1", "cam2"):
        vs = [m.model_version for m in got if m.camera_id == cam]
        assert vs == sorted(vs)
    assert sample(reg, "strata_edge_model_version") == 1
    assert sample(reg, "strata_edge_model_canary_agreement") == pytest.approx(1.0)
    assert sample(reg, "strata_edge_model_load_seconds") > 0
    assert sample(reg, "strata_edge_drops_total", {"reason": "overload"}) == 0
    assert node.model_path.parent.name == "1"


@pytest.mark.parametrize("failure", ["canary", "load"])
def test_a_failed_version_rolls_back_and_the_old_one_keeps_serving(
    failure: str,
    repo: ModelRepository,
    colour_model: Path,
    zctx: Any,
    synthetic_clip: SyntheticClip,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = start(repo)
    reg = node.metrics.registry
    try:
        sub = Listener(zctx, node.endpoints.publish)
        agent = RawAgent(zctx, node.endpoints.listen)
        wait_until_subscribed(agent, sub, synthetic_clip.frame(0).image)
        load = Load(agent, synthetic_clip)
        load.thread.start()
        time.sleep(0.3)
        if failure == "canary":
            bad = shifted_classes(colour_model, tmp_path / "bad.onnx")
            promote_version(repo, "colour", bad)
        else:
            # A version whose file does not match its manifest's checksum.
            folder = repo.version_folder("colour", 1)
            shutil.copytree(repo.version_folder("colour", 0), tmp_path / "v1")
            (tmp_path / "v1" / "model.onnx").write_bytes(b"not a model")
            (tmp_path / "v1").rename(folder)
        assert until(
            lambda: sample(reg, "strata_edge_model_rollbacks_total", {"reason": failure}) == 1
        )
        time.sleep(0.5)  # polls go on; the failed version is not retried
        load.stop.set()
        load.thread.join()
        got = results(sub, len(load.sent))
    finally:
        node.stop()
    assert {(m.camera_id, m.sequence) for m in got} == set(load.sent)
    assert {m.model_version for m in got} == {0}
    assert sample(reg, "strata_edge_model_version") == 0
    assert sample(reg, "strata_edge_model_switches_total") == 0
    assert sample(reg, "strata_edge_model_rollbacks_total", {"reason": failure}) == 1
    if failure == "canary":
        assert sample(reg, "strata_edge_model_canary_agreement") < 0.9
    assert "version 1 not switched to, version 0 keeps serving" in caplog.text


def test_promote_makes_numbered_versions_and_list_shows_them(
    repo: ModelRepository, colour_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = str(repo.root)
    assert main(["models", "promote", "colour", "-r", r, "--file", str(colour_model)]) == 0
    assert main(["models", "promote", "colour", "-r", r, "--file", str(colour_model)]) == 0
    assert repo.versions("colour") == [1, 2]
    assert repo.file_of("colour")[2] == repo.root / "colour" / "2" / "model.onnx"
    assert repo.file_of("colour", version=0)[2] == repo.root / "colour" / "model.onnx"
    assert main(["models", "list", "-r", r]) == 0
    assert "versions 0,1,2 serving 2" in capsys.readouterr().out
    # Neither a file nor a variant; a file that is not the model's kind.
    assert main(["models", "promote", "colour", "-r", r]) == 2
    (tmp_path / "junk.onnx").write_bytes(b"junk")
    assert (
        main(["models", "promote", "colour", "-r", r, "--file", str(tmp_path / "junk.onnx")]) == 2
    )
    assert "cannot be version 3" in capsys.readouterr().err
    assert repo.versions("colour") == [1, 2]


def test_sighup_makes_a_running_strata_edge_switch_versions(
    repo: ModelRepository, zctx: Any, synthetic_clip: SyntheticClip, tmp_path: Path
) -> None:
    listen = f"tcp://127.0.0.1:{free_port()}"
    publish = f"tcp://127.0.0.1:{free_port()}"
    cfg = tmp_path / "strata.yaml"
    cfg.write_text(
        f"models:\n  repository: {repo.root}\n"
        f"edge:\n  publish: {publish}\n  model:\n    name: colour\n    input_size: {MODEL_SIZE}\n"
        "  versions:\n    poll_s: 0\n    canary_frames: 2\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strata.tools.cli",
            "edge",
            "--listen",
            listen,
            "--config",
            str(cfg),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        sub = Listener(zctx, publish)
        agent = RawAgent(zctx, listen)
        wait_until_subscribed(agent, sub, synthetic_clip.frame(0).image, timeout_s=60)
        image = synthetic_clip.frame(30).image
        for seq in range(1, 5):
            agent.send_image("cam", seq, image)
        assert {m.model_version for m in results(sub, 4)} == {0}
        v1 = build_colour_detector(tmp_path / "v1.onnx", MODEL_SIZE, extra_anchors=9)
        promote_version(repo, "colour", v1)
        time.sleep(0.5)  # poll_s 0: nothing happens until the signal
        agent.send_image("cam", 5, image)
        assert results(sub, 1)[0].model_version == 0
        proc.send_signal(signal.SIGHUP)
        seq, version = 5, 0
        deadline = time.monotonic() + 30
        while version != 1 and time.monotonic() < deadline:
            seq += 1
            agent.send_image("cam", seq, image)
            got = results(sub, 1)
            version = got[0].model_version if got else version
        assert version == 1
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert "SIGHUP: looking for a newer model version" in out
    assert "switched from version 0 to 1" in out
