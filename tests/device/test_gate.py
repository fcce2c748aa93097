from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from strata.device.agent import Agent
from strata.device.capture.frames import Frame
from strata.device.filters.gate import GateLoadError, load_gate
from strata.device.filters.inbox import GateInbox, GateItem
from strata.device.metrics import CameraCounts
from strata.device.transport.sink import FrameSink
from strata.shared.config.device import CameraConfig, GateConfig
from strata.shared.loopback import free_port

from .conftest import fast_config


def _img(bgr: tuple[int, int, int], h: int = 48, w: int = 64) -> np.ndarray:
    out = np.empty((h, w, 3), np.uint8)
    out[:] = bgr
    return out


RED, GREY = _img((0, 0, 220)), _img((128, 128, 128))


def test_positive_class_threshold_decides(red_model: Path) -> None:
    gate = load_gate(GateConfig(model_path=str(red_model), positive_class_ids=[1], threshold=0.5))
    scores = gate.score([RED, GREY, RED, GREY])
    assert list(gate.decide(scores)) == [True, False, True, False]
    assert scores[0] > 0.9 and scores[1] < 0.5
    gate.close()


def test_other_positive_class_inverts_the_decision(red_model: Path) -> None:
    gate = load_gate(GateConfig(model_path=str(red_model), positive_class_ids=[0], threshold=0.5))
    assert list(gate.decide(gate.score([RED, GREY]))) == [False, True]


def test_batches_match_single_frames(red_model: Path) -> None:
    gate = load_gate(GateConfig(model_path=str(red_model), positive_class_ids=[1], max_batch=4))
    frames = [RED, GREY, _img((0, 0, 180), 30, 30), _img((40, 200, 40), 100, 60)]
    together = gate.score(frames)
    alone = np.concatenate([gate.score([f]) for f in frames])
    assert np.allclose(together, alone, atol=1e-5)
    with pytest.raises(ValueError, match="max_batch"):
        gate.score([RED] * 5)


def test_bad_model_and_bad_classes_are_clear_errors(tmp_path: Path, red_model: Path) -> None:
    with pytest.raises(GateLoadError, match="not found"):
        load_gate(GateConfig(model_path=str(tmp_path / "none.onnx")))
    junk = tmp_path / "junk.onnx"
    junk.write_text("not a model")
    with pytest.raises(GateLoadError, match="cannot load"):
        load_gate(GateConfig(model_path=str(junk)))
    with pytest.raises(GateLoadError, match="outside"):
        load_gate(GateConfig(model_path=str(red_model), positive_class_ids=[5]))


def _item(cam: str, i: int) -> GateItem:
    return GateItem(cam, i, 0, Frame(i, 0.0, 0, bgr=GREY), 0.0, 0.0)


def test_inbox_batches_round_robin_over_cameras() -> None:
    inbox = GateInbox(per_camera=10)
    for cam in ("a", "b"):
        inbox.add_camera(cam)
    for i in range(6):
        inbox.put(_item("a", i), wait=False)
    inbox.put(_item("b", 0), wait=False)
    batch = inbox.take(4, 0.0, timeout_s=1.0)
    assert [(b.camera_id, b.index) for b in batch] == [("a", 0), ("b", 0), ("a", 1), ("a", 2)]


def test_inbox_waits_max_delay_for_a_batch_then_goes() -> None:
    import threading
    import time

    inbox = GateInbox(per_camera=10)
    inbox.add_camera("a")
    inbox.put(_item("a", 0), wait=False)
    threading.Timer(0.02, lambda: inbox.put(_item("a", 1), wait=False)).start()
    t = time.monotonic()
    batch = inbox.take(8, 0.2, timeout_s=1.0)
    took = time.monotonic() - t
    assert len(batch) == 2 and 0.15 < took < 1.0  # waited the delay for more, got 2
    assert inbox.take(8, 0.0, timeout_s=0.05) == []


def test_full_inbox_drops_the_oldest_for_live_cameras() -> None:
    inbox = GateInbox(per_camera=2)
    inbox.add_camera("a")
    assert inbox.put(_item("a", 0), wait=False) is None
    assert inbox.put(_item("a", 1), wait=False) is None
    dropped = inbox.put(_item("a", 2), wait=False)
    assert dropped is not None and dropped.index == 0
    assert [b.index for b in inbox.take(8, 0.0, 1.0)] == [1, 2]


def test_default_gate_loads_the_starter_repository_model() -> None:
    gate = load_gate(GateConfig(max_batch=2))
    assert gate.name == "mobilenetv3_small"
    assert (gate.spec.height, gate.spec.width) == (224, 224)
    scores = gate.score([RED, GREY])
    assert scores.shape == (2,) and np.all((scores >= 0) & (scores <= 1))
    gate.close()
    with pytest.raises(GateLoadError, match="not found"):
        load_gate(GateConfig(model="no_such_model"))


def _gated_run(red_model: Path, port: int, threshold: float) -> tuple[list[int], float]:
    """Frame indexes the edge got, and gate inferences run, for one threshold."""
    edge = f"tcp://127.0.0.1:{port}"
    gate = GateConfig(model_path=str(red_model), positive_class_ids=[0], threshold=threshold)
    synth = "synthetic://?frames=40&seed=1&width=160&height=120"
    cfg = fast_config(edge, None, cameras=[CameraConfig(id="cam", source=synth)], gate=gate)
    with FrameSink(edge) as sink:
        agent = Agent(cfg, registry=CollectorRegistry())
        assert agent.run_until_done(timeout=60) == 0
        got = [r.frame_index for r in sink.stats.log if not r.duplicate]
    registry = agent.metrics.registry
    counts = CameraCounts.read(registry, "cam")
    assert counts.dropped_gate == 0
    assert len(got) == counts.decoded - counts.dropped_motion > 10
    return got, registry.get_sample_value("strata_device_gate_batch_size_count") or 0.0


def test_a_gate_that_cannot_drop_is_not_run_and_the_edge_gets_the_same_frames(
    red_model: Path, port: int
) -> None:
    # Class 0 ("not red") scores high on the grey synthetic scene: 0.01 keeps every frame
    # too, but by running the classifier; 0 keeps them without it.
    kept_without, batches_without = _gated_run(red_model, port, 0.0)
    # A port of its own: ZeroMQ closes the first sink's listener on its I/O thread, after
    # `close` returns, and binding the same port at once can find it still open.
    kept_with, batches_with = _gated_run(red_model, free_port(), 0.01)
    assert batches_without == 0 and batches_with > 0
    assert kept_without == kept_with
