"""GPU back ends. What a CPU can check runs everywhere; the rest needs CUDA (marked gpu)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import numpy as np
import pytest
from gpu_testkit import GPU_BACKENDS, cuda_available, open_gpu, require
from strata.shared.runtime import BACKENDS, ModelLoadError, create_runner
from strata.shared.runtime.pool import report_leaks
from strata.shared.runtime.staging import StagedRunner
from strata.shared.synthetic import SyntheticClip
from strata.shared.vision import LetterboxWriter


def test_gpu_backends_are_registered_and_never_imported_by_default() -> None:
    assert set(GPU_BACKENDS) <= set(BACKENDS)
    code = (
        "import sys; import strata.shared.runtime, strata.edge.node, "
        "strata.edge.inference.detector, "
        "strata.edge.inference.standby, strata.tools.bench.standby; "
        "heavy = ('torch', 'tensorrt', 'cuda', 'onnx2torch', 'cupy'); "
        "bad = [m for m in heavy if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_backend_without_its_libraries_fails_clearly(backend: str, colour_model: Path) -> None:
    if cuda_available():
        pytest.skip("this host has CUDA")
    with pytest.raises(ModelLoadError) as err:
        create_runner(colour_model, backend)
    msg = str(err.value)
    assert backend in msg or "cuda" in msg.lower() or "tensorrt" in msg.lower()


def _batch(size: int, n: int) -> tuple[np.ndarray, SyntheticClip]:
    clip = SyntheticClip(width=320, height=240, frames=60, objects=3, seed=1)
    buf = np.zeros((n, 3, size, size), np.float32)
    lw = LetterboxWriter(size)
    for i in range(n):
        lw.write(clip.frame(20 + i).image, buf[i])
    return buf, clip


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("streams", [1, 3])
def test_gpu_backend_matches_cpu_on_every_stream(
    backend: str,
    streams: int,
    colour_model: Path,
    tmp_path: Path,
    gpu_unavailable: Callable[[str], NoReturn],
) -> None:
    from edge_testkit import MODEL_SIZE

    batch, _clip = _batch(MODEL_SIZE, 4)
    cpu = create_runner(colour_model).run(batch)[0]
    gpu = open_gpu(
        gpu_unavailable,
        colour_model,
        backend,
        streams=streams,
        fp16=False,
        max_batch=4,
        input_size=MODEL_SIZE,
        engine_cache=str(tmp_path),
    )
    assert isinstance(gpu, StagedRunner)
    try:
        # Launch on every slot before waiting on any: the streams overlap.
        slots = []
        for k in range(streams):
            slot = gpu.acquire()
            n = 1 + k % 4
            gpu.host_input(slot)[:n] = batch[:n]
            gpu.launch(slot, n)
            slots.append((slot, n))
        for slot, n in slots:
            out = gpu.wait(slot, n)[0]
            np.testing.assert_allclose(out, cpu[:n], atol=1.0)
        assert gpu.memory_used() > 0
    finally:
        gpu.close()
    # Close gave every pooled buffer back.
    assert report_leaks(gpu.pool_owner) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_a_worker_thread_launches_on_the_configured_device(
    backend: str, colour_model: Path, tmp_path: Path, gpu_unavailable: Callable[[str], NoReturn]
) -> None:
    """device_id != 0 used to run on device 0: cudaSetDevice ran in the constructor only."""
    from edge_testkit import MODEL_SIZE

    require(gpu_unavailable, backend)
    device = _device_count(gpu_unavailable) - 1  # the last GPU: device 1 on a two-GPU host
    gpu = open_gpu(
        gpu_unavailable, colour_model, backend, device_id=device, max_batch=2,
        input_size=MODEL_SIZE, engine_cache=str(tmp_path), fp16=False,
    )  # fmt: skip
    torch = importlib.import_module("torch") if backend == "torch-cuda" else None
    seen: list[int] = []

    def work() -> None:
        slot = gpu.acquire()
        gpu.launch(slot, 1)
        gpu.wait(slot, 1)
        seen.append(int(torch.cuda.current_device()) if torch is not None else _current_device())

    try:
        t = threading.Thread(target=work)
        t.start()
        t.join(60)
        assert seen == [device]
    finally:
        gpu.close()


def _device_count(unavailable: Callable[[str], NoReturn]) -> int:
    try:
        from cuda.bindings import runtime as rt
    except ImportError:
        try:
            import torch
        except ImportError:
            unavailable("neither cuda-python nor torch is installed")
        return int(torch.cuda.device_count())
    err, n = rt.cudaGetDeviceCount()
    assert int(err) == 0
    return int(n)


def _current_device() -> int:
    from cuda.bindings import runtime as rt

    err, d = rt.cudaGetDevice()
    assert int(err) == 0
    return int(d)


@pytest.mark.gpu
def test_tensorrt_engine_is_cached_with_its_input_size(
    colour_model: Path, tmp_path: Path, gpu_unavailable: Callable[[str], NoReturn]
) -> None:
    from edge_testkit import MODEL_SIZE

    r = open_gpu(
        gpu_unavailable, colour_model, "tensorrt", max_batch=4, input_size=MODEL_SIZE,
        engine_cache=str(tmp_path),
    )  # fmt: skip
    r.close()
    engines = list(tmp_path.glob("*.engine"))
    assert len(engines) == 1 and ".b1-4-4." in engines[0].name
    assert f".in3x{MODEL_SIZE}x{MODEL_SIZE}." in engines[0].name


@pytest.mark.gpu
def test_tensorrt_prebuilt_engine_caps_a_larger_configured_batch(
    colour_model: Path, tmp_path: Path, gpu_unavailable: Callable[[str], NoReturn]
) -> None:
    """A configured max batch above the engine's gave unresolved (negative) buffer sizes."""
    from edge_testkit import MODEL_SIZE
    from strata.shared.runtime.staging import Profile
    from strata.shared.runtime.tensorrt_runner import ShapeError
    from strata.shared.runtime.trt_engine import build_engine

    require(gpu_unavailable, "tensorrt")
    try:
        blob = build_engine(colour_model, Profile(1, 2, 4), (3, MODEL_SIZE, MODEL_SIZE), False)
    except ModelLoadError as exc:
        gpu_unavailable(str(exc))
    engine = tmp_path / "colour.engine"
    engine.write_bytes(blob)
    r = open_gpu(gpu_unavailable, engine, "tensorrt", max_batch=16, input_size=MODEL_SIZE)
    try:
        assert r.max_batch == 4 and r.host_input(0).shape[0] == 4
        batch, _ = _batch(MODEL_SIZE, 4)
        np.testing.assert_allclose(
            r.run(batch)[0], create_runner(colour_model).run(batch)[0], atol=1.0
        )
        # Outside the profile: a clear error, not a silent wrong run.
        with pytest.raises((ShapeError, ValueError)):
            slot = r.acquire()
            r.launch(slot, 5)
    finally:
        r.close()


@pytest.mark.gpu
def test_ort_tensorrt_runs_the_starter_detector_with_the_default_input_size(
    tmp_path: Path, gpu_unavailable: Callable[[str], NoReturn]
) -> None:
    """The profile used to say images:Nx3x640x640 for a fixed 3x320x320 model."""
    starter = Path(__file__).resolve().parents[2] / "shared/starter_models/yolov8n/model.onnx"
    r = open_gpu(
        gpu_unavailable, starter, "onnxruntime-tensorrt", max_batch=4, input_size=640,
        engine_cache=str(tmp_path),
    )  # fmt: skip
    try:
        x = np.random.default_rng(0).random((4, 3, 320, 320), np.float32)
        np.testing.assert_allclose(
            r.run(x)[0], create_runner(starter).run(x)[0], atol=0.5, rtol=0.05
        )
    finally:
        r.close()


@pytest.mark.gpu
def test_ort_cuda_fp16_runs_an_fp16_copy(
    colour_model: Path, tmp_path: Path, gpu_unavailable: Callable[[str], NoReturn]
) -> None:
    """fp16 used to be silently ignored by the CUDA provider."""
    from edge_testkit import MODEL_SIZE

    r = open_gpu(
        gpu_unavailable, colour_model, "onnxruntime-cuda", fp16=True, max_batch=2,
        input_size=MODEL_SIZE, engine_cache=str(tmp_path),
    )  # fmt: skip
    try:
        assert r.precision == "fp16"
        assert list(tmp_path.glob("*.fp16.onnx"))
    finally:
        r.close()


@pytest.mark.gpu
def test_a_gpu_runner_takes_a_cloud_sized_batch(
    colour_model: Path, tmp_path: Path, gpu_unavailable: Callable[[str], NoReturn]
) -> None:
    """The cloud passes its batcher's max_batch; run() also chunks anything larger."""
    from edge_testkit import MODEL_SIZE

    r = open_gpu(
        gpu_unavailable, colour_model, "onnxruntime-cuda", fp16=False, max_batch=8,
        input_size=MODEL_SIZE,
    )  # fmt: skip
    try:
        batch, _ = _batch(MODEL_SIZE, 4)
        big = np.concatenate([batch] * 5)  # 20 rows through a runner of 8
        out = r.run(big)[0]
        assert out.shape[0] == 20
        np.testing.assert_allclose(out[16:], out[:4], atol=1e-3)
    finally:
        r.close()


@pytest.mark.gpu
def test_torch_runner_allocates_nothing_per_batch(
    colour_model: Path, gpu_unavailable: Callable[[str], NoReturn]
) -> None:
    from edge_testkit import MODEL_SIZE

    r = open_gpu(
        gpu_unavailable, colour_model, "torch-cuda", fp16=False, max_batch=4,
        input_size=MODEL_SIZE, streams=2,
    )  # fmt: skip
    try:
        torch = importlib.import_module("torch")
        batch, _ = _batch(MODEL_SIZE, 4)
        for _ in range(2):  # first runs capture the graphs of both slots
            r.run(batch)
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        for _ in range(10):
            r.run(batch)
        after = torch.cuda.memory_stats()["allocation.all.allocated"]
        assert after == before, f"{after - before} allocations in 10 batches"
    finally:
        r.close()
