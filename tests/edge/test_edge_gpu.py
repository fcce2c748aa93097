"""GPU back ends. What a CPU can check runs everywhere; the rest needs CUDA (marked gpu)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from strata.shared.runtime import BACKENDS, ModelLoadError, create_runner
from strata.shared.runtime.staging import StagedRunner
from strata.shared.synthetic import SyntheticClip
from strata.shared.vision import LetterboxWriter

GPU_BACKENDS = ("onnxruntime-cuda", "onnxruntime-tensorrt", "tensorrt", "torch-cuda")


def _cuda_available() -> bool:
    return shutil.which("nvidia-smi") is not None and (
        importlib.util.find_spec("cuda") is not None
        or importlib.util.find_spec("torch") is not None
    )


needs_cuda = pytest.mark.skipif(not _cuda_available(), reason="needs an NVIDIA GPU and CUDA")


def test_gpu_backends_are_registered_and_never_imported_by_default() -> None:
    assert set(GPU_BACKENDS) <= set(BACKENDS)
    code = (
        "import sys; import strata.shared.runtime, strata.edge.node, strata.edge.detector; "
        "heavy = ('torch', 'tensorrt', 'cuda', 'onnx2torch', 'cupy'); "
        "bad = [m for m in heavy if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_backend_without_its_libraries_fails_clearly(backend: str, colour_model: Path) -> None:
    if _cuda_available():
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
@needs_cuda
@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("streams", [1, 3])
def test_gpu_backend_matches_cpu_on_every_stream(
    backend: str, streams: int, colour_model: Path, tmp_path: Path
) -> None:
    from edge_testkit import MODEL_SIZE

    batch, _clip = _batch(MODEL_SIZE, 4)
    cpu = create_runner(colour_model).run(batch)[0]
    try:
        gpu = create_runner(
            colour_model,
            backend,
            streams=streams,
            fp16=False,
            max_batch=4,
            input_size=MODEL_SIZE,
            engine_cache=str(tmp_path),
        )
    except ModelLoadError as exc:
        pytest.skip(f"{backend} not installed here: {exc}")
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


@pytest.mark.gpu
@needs_cuda
def test_tensorrt_engine_is_cached(colour_model: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorrt")
    from edge_testkit import MODEL_SIZE

    r = create_runner(
        colour_model, "tensorrt", max_batch=4, input_size=MODEL_SIZE, engine_cache=str(tmp_path)
    )
    r.close()
    engines = list(tmp_path.glob("*.engine"))
    assert len(engines) == 1 and ".b1-4-4." in engines[0].name
