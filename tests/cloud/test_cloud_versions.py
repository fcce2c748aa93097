"""Classifier versions at run time on a real server with real ONNX versions: a switch while
crops flow (every crop answered once, by one version), a canary or load failure that rolls
back, and SIGHUP on a real `strata cloud` process."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
import onnx
import pytest
from cloud_helpers import jpeg, make_config
from cloud_models import LABELS, build_colour_classifier
from onnx import numpy_helper
from strata.cloud.server import CloudServer
from strata.shared.config.base import validate_model
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc, common_pb2, current_version
from strata.shared.metrics import sample
from strata.shared.models import ModelRepository
from strata.shared.models.repository import promote_version
from strata.tools.models.importer import ImportRequest, import_model
from test_cloud_cli import STRATA, wait_serving

pytestmark = pytest.mark.timeout(90)

COLOURS = {"red": (0, 0, 220), "green": (0, 220, 0), "blue": (220, 0, 0)}  # BGR


def wrong_labels(src: Path, dst: Path) -> Path:
    """The colour classifier with its classes rotated: loads fine, answers the wrong label."""
    model = onnx.load(str(src))
    for i, init in enumerate(model.graph.initializer):
        if init.name == "w_fc":
            w = np.roll(numpy_helper.to_array(init), 1, axis=0).astype(np.float32)
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(w, "w_fc"))
    onnx.save(model, str(dst))
    return dst


@pytest.fixture
def repo(tmp_path: Path) -> ModelRepository:
    model = build_colour_classifier(tmp_path / "colour.onnx", size=32)
    request = ImportRequest(
        "colour",
        model,
        tmp_path / "repo",
        labels=LABELS,
        resize="stretch",
        mean=(0.0, 0.0, 0.0),
        std=(1.0, 1.0, 1.0),
    )
    import_model(request)
    return ModelRepository(tmp_path / "repo")


def config(repo: ModelRepository, db: Path, **versions: object) -> CloudConfig:
    cfg = make_config(Path(""), db, batcher={"max_batch": 4, "max_queue_delay_ms": 2})
    data = cfg.model_dump()
    data["model"] = {"name": "colour", "input_size": 32}
    data["versions"] = {"poll_s": 0.1, "canary_crops": 8, **versions}
    return validate_model(CloudConfig, data)


def until(cond: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


class Flow:
    """Threads uploading crops of known colours until stopped; every ack is kept."""

    def __init__(self, address: str, threads: int = 3) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = analytics_pb2_grpc.AnalyticsStub(self.channel)
        self.sent: dict[str, str] = {}  # crop id -> its colour
        self.acks: list[analytics_pb2.CropAck] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            crops = []
            with self._lock:
                for _ in range(2):
                    n = next(self._ids)
                    colour = list(COLOURS)[n % 3]
                    self.sent[f"c{n}"] = colour
                    crops.append(
                        analytics_pb2.Crop(
                            crop_id=f"c{n}",
                            edge_id="edge-1",
                            camera_id=f"cam{n % 2}",
                            encoding=common_pb2.ENCODING_JPEG,
                            image=jpeg(COLOURS[colour]),
                            timing=common_pb2.Timing(capture_ns=10**18 + n),
                        )
                    )
            batch = analytics_pb2.CropBatch(version=current_version(), crops=crops)
            try:
                got = [a for r in self.stub.Uplink(iter([batch]), timeout=30) for a in r.acks]
            except grpc.RpcError as exc:
                self.errors.append(str(exc))
                continue
            with self._lock:
                self.acks += got
            time.sleep(0.005)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        self.channel.close()


def query_all(address: str) -> list[analytics_pb2.Event]:
    """Every stored event, through QueryEvents (all pages)."""
    with grpc.insecure_channel(address) as channel:
        stub = analytics_pb2_grpc.AnalyticsStub(channel)
        req = analytics_pb2.QueryEventsRequest(version=current_version(), page_size=50)
        return [e for page in stub.QueryEvents(req, timeout=30) for e in page.events]


def test_a_switch_while_crops_flow_answers_every_crop_once(
    repo: ModelRepository, tmp_path: Path
) -> None:
    server = CloudServer(config(repo, tmp_path / "ev.sqlite"), repository=str(repo.root))
    server.start()
    reg = server.metrics.registry
    try:
        flow = Flow(server.address)
        assert until(lambda: len(flow.acks) >= 20)
        # Another file with the same answers (extra work scaled to zero): version 1.
        v1 = build_colour_classifier(tmp_path / "v1.onnx", size=32, slow_layers=1, width=8)
        assert promote_version(repo, "colour", v1)[0] == 1
        assert until(lambda: sample(reg, "strata_cloud_model_switches_total") == 1)
        seen = len(flow.acks)
        assert until(lambda: len(flow.acks) >= seen + 20)  # crops go on, on version 1
        flow.finish()
        stored = query_all(server.address)
    finally:
        server.stop(0.5)
    assert flow.errors == []
    # Every stored event records the version that labelled it, as its ack said.
    acked = {a.crop_id: a.model_version for a in flow.acks}
    assert {e.crop_id: e.model_version for e in stored} == acked
    assert all(e.HasField("model_version") for e in stored)
    ids = [a.crop_id for a in flow.acks]
    assert len(ids) == len(set(ids)) == len(flow.sent)
    assert all(a.status == analytics_pb2.CROP_STATUS_STORED for a in flow.acks)
    assert all(a.labels[0].label == flow.sent[a.crop_id] for a in flow.acks)
    versions = [a.model_version for a in sorted(flow.acks, key=lambda a: int(a.crop_id[1:]))]
    assert 0 in versions and 1 in versions
    # Crops made after the switch was seen (at least 20 acks later, at most 6 crops in
    # flight then: the last 10 ids are such crops) are answered by version 1 only.
    assert set(versions[-10:]) == {1}
    assert sample(reg, "strata_cloud_model_version") == 1
    assert sample(reg, "strata_cloud_model_canary_agreement") == pytest.approx(1.0)
    assert sample(reg, "strata_cloud_model_load_seconds") > 0


@pytest.mark.parametrize("failure", ["canary", "load"])
def test_a_failed_version_rolls_back_and_the_old_one_keeps_serving(
    failure: str, repo: ModelRepository, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = CloudServer(config(repo, tmp_path / "ev.sqlite"), repository=str(repo.root))
    server.start()
    reg = server.metrics.registry
    try:
        flow = Flow(server.address)
        assert until(lambda: len(flow.acks) >= 20)
        if failure == "canary":
            bad = wrong_labels(repo.file_of("colour")[2], tmp_path / "bad.onnx")
            promote_version(repo, "colour", bad)
        else:
            # A version whose file does not match its manifest's checksum.
            shutil.copytree(repo.version_folder("colour", 0), tmp_path / "v1")
            (tmp_path / "v1" / "model.onnx").write_bytes(b"not a model")
            (tmp_path / "v1").rename(repo.version_folder("colour", 1))
        assert until(
            lambda: sample(reg, "strata_cloud_model_rollbacks_total", {"reason": failure}) == 1
        )
        time.sleep(0.5)  # polls go on; the failed version is not retried
        flow.finish()
    finally:
        server.stop(0.5)
    assert flow.errors == []
    assert {a.crop_id for a in flow.acks} == set(flow.sent)
    assert {a.model_version for a in flow.acks} == {0}
    assert all(a.labels[0].label == flow.sent[a.crop_id] for a in flow.acks)
    assert sample(reg, "strata_cloud_model_version") == 0
    assert sample(reg, "strata_cloud_model_switches_total") == 0
    assert sample(reg, "strata_cloud_model_rollbacks_total", {"reason": failure}) == 1
    if failure == "canary":
        assert sample(reg, "strata_cloud_model_canary_agreement") == 0.0
    assert "version 1 not switched to, version 0 keeps serving" in caplog.text


def classify(stub: analytics_pb2_grpc.AnalyticsStub) -> analytics_pb2.ClassifyResponse:
    req = analytics_pb2.ClassifyRequest(
        version=current_version(),
        encoding=common_pb2.ENCODING_JPEG,
        image=jpeg(COLOURS["green"]),
    )
    resp: analytics_pb2.ClassifyResponse = stub.Classify(req, timeout=30)
    assert resp.labels[0].label == "green"
    return resp


def test_sighup_makes_a_running_strata_cloud_switch_versions(
    repo: ModelRepository, tmp_path: Path, port: int
) -> None:
    address, db = f"127.0.0.1:{port}", tmp_path / "ev.sqlite"
    cfg = tmp_path / "strata.yaml"
    cfg.write_text(
        f"models:\n  repository: {repo.root}\n"
        "cloud:\n  model:\n    name: colour\n    input_size: 32\n"
        "  versions:\n    poll_s: 0\n    canary_crops: 2\n"
    )
    proc = subprocess.Popen(
        [*STRATA, "cloud", "--config", str(cfg), "--listen", address, "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_serving(address, proc, timeout=60)
        channel = grpc.insecure_channel(address)
        stub = analytics_pb2_grpc.AnalyticsStub(channel)
        assert {classify(stub).model_version for _ in range(3)} == {0}
        v1 = build_colour_classifier(tmp_path / "v1.onnx", size=32, slow_layers=1, width=8)
        promote_version(repo, "colour", v1)
        time.sleep(0.5)  # poll_s 0: nothing happens until the signal
        assert classify(stub).model_version == 0
        proc.send_signal(signal.SIGHUP)
        version = 0
        deadline = time.monotonic() + 30
        while version != 1 and time.monotonic() < deadline:
            version = classify(stub).model_version
            time.sleep(0.05)
        assert version == 1
        assert classify(stub).model == "colour"
        channel.close()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0
    assert "SIGHUP: looking for a newer model version" in out
    assert "switched from version 0 to 1" in out
