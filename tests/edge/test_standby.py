"""A standby model: engine or session built, no batch buffers; it takes over an edge node.

The GPU back ends are checked on the CPU through the host stand-in of the CUDA calls
(tests/cuda_host_testkit.py) registered under a GPU back end's name, so the edge's own
path (open_staged, StandbyModel, the staged runner's allocate) runs with only CUDA
replaced; the gpu-marked test runs the same on a real GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pytest
from cuda_host_testkit import HostOrtRunner
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from gpu_testkit import GPU_BACKENDS, require
from strata.edge.build import NodeOptions, build_node
from strata.edge.inference.detector import open_staged
from strata.edge.inference.standby import StandbyModel
from strata.shared.config.edge import EdgeConfig
from strata.shared.runtime import BACKENDS, ModelLoadError
from strata.shared.runtime.pool import report_leaks
from strata.shared.runtime.staging import StagedRunner
from strata.shared.synthetic import SyntheticClip
from strata.shared.vision import LetterboxWriter

pytestmark = pytest.mark.timeout(60)


def cfg(**runtime: Any) -> EdgeConfig:
    return EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "batching": {"max_batch": 4},
            "runtime": runtime,
        }
    )


def _batch(clip: SyntheticClip, n: int) -> np.ndarray:
    buf = np.zeros((n, 3, MODEL_SIZE, MODEL_SIZE), np.float32)
    lw = LetterboxWriter(MODEL_SIZE)
    for i in range(n):
        lw.write(clip.frame(20 + i).image, buf[i])
    return buf


def _answer(runner: StagedRunner, batch: np.ndarray) -> list[np.ndarray]:
    n = int(batch.shape[0])
    slot = runner.acquire()
    runner.host_input(slot)[:n] = batch
    runner.launch(slot, n)
    return [o.copy() for o in runner.wait(slot, n)]


def _serve_one_frame(runner: StagedRunner, model: Path, zctx: Any, clip: SyntheticClip) -> None:
    node = build_node(cfg(), model, "colour", NodeOptions(runner=runner))
    node.start()
    try:
        sub = Listener(zctx, node.endpoints.publish)
        agent = RawAgent(zctx, node.endpoints.listen)
        wait_until_subscribed(agent, sub, clip.frame(0).image)
        agent.send_image("cam", 1, clip.frame(30).image)
        (msg,) = sub.collect(1)
        assert msg.camera_id == "cam" and len(msg.detections) > 0
    finally:
        node.stop()


def test_a_standby_takes_over_a_node(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    standby = StandbyModel(colour_model, cfg())
    assert standby.io_bytes() == 0 and not standby.runner.allocated
    runner = standby.take_over()
    assert runner.host_input(0).shape == (4, 3, MODEL_SIZE, MODEL_SIZE)
    assert runner.io_bytes() >= 4 * 3 * MODEL_SIZE * MODEL_SIZE * 4
    _serve_one_frame(runner, colour_model, zctx, synthetic_clip)


@pytest.fixture
def host_gpu(monkeypatch: pytest.MonkeyPatch) -> str:
    """The tensorrt back end name, served by the host stand-in of the CUDA calls."""
    monkeypatch.setitem(BACKENDS, "tensorrt", "cuda_host_testkit:HostOrtRunner")
    return "tensorrt"


def test_a_gpu_standby_holds_no_io_buffers_until_it_takes_over(
    host_gpu: str, colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    standby = StandbyModel(colour_model, cfg(backend=host_gpu, streams=2))
    runner = standby.runner
    assert isinstance(runner, HostOrtRunner)
    cuda = runner.cuda
    # Engine (here the session) built; no slot, no stream, no pinned or device byte.
    assert standby.io_bytes() == 0 and not runner.allocated and runner.bound == 0
    assert cuda.memory_used() == 0 and cuda.streams == 0
    assert report_leaks(runner.pool_owner) == 0

    took = standby.take_over()
    assert took is runner and runner.bound == 1 and cuda.streams == 2
    # Every slot's pinned input and outputs and device input and outputs, nothing else.
    assert runner.io_bytes() == 2 * runner.plan.total_bytes == cuda.memory_used()
    assert runner.host_input(0).shape == (runner.max_batch, 3, MODEL_SIZE, MODEL_SIZE)

    # The same batch through a runner opened cold the usual way: identical answers.
    batch = _batch(synthetic_clip, 3)
    cold = open_staged(colour_model, cfg(backend=host_gpu, streams=2), 4)
    try:
        assert cold.io_bytes() == runner.io_bytes()
        for got, want in zip(_answer(runner, batch), _answer(cold, batch), strict=True):
            np.testing.assert_array_equal(got, want)
    finally:
        cold.close()
    _serve_one_frame(runner, colour_model, zctx, synthetic_clip)  # node.stop closes it
    assert report_leaks(runner.pool_owner) == 0 and cuda.memory_used() == 0


def test_a_standby_that_is_not_needed_closes_without_buffers(
    host_gpu: str, colour_model: Path
) -> None:
    standby = StandbyModel(colour_model, cfg(backend=host_gpu))
    standby.close()
    with pytest.raises(RuntimeError, match="closed"):
        standby.take_over()


def test_a_standby_of_a_missing_model_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError):
        StandbyModel(tmp_path / "missing.onnx", cfg())


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_a_gpu_standby_on_a_real_gpu(
    backend: str,
    colour_model: Path,
    tmp_path: Path,
    synthetic_clip: SyntheticClip,
    gpu_unavailable: Callable[[str], NoReturn],
) -> None:
    require(gpu_unavailable, backend)
    opts = {"backend": backend, "streams": 2, "fp16": False, "max_batch": 4}
    c = cfg(**opts, engine_cache=str(tmp_path))
    try:
        standby = StandbyModel(colour_model, c)
    except ModelLoadError as exc:
        gpu_unavailable(f"{backend} cannot load: {exc}")
    runner = standby.runner
    assert standby.io_bytes() == 0 and not runner.allocated
    assert report_leaks(runner.pool_owner) == 0
    runner = standby.take_over()
    assert runner.io_bytes() > 0
    batch = _batch(synthetic_clip, 3)
    cold = open_staged(colour_model, c, 4)
    try:
        assert cold.io_bytes() == runner.io_bytes()
        for got, want in zip(_answer(runner, batch), _answer(cold, batch), strict=True):
            np.testing.assert_allclose(got, want, atol=1e-3)
    finally:
        cold.close()
        runner.close()
    assert report_leaks(runner.pool_owner) == 0
