"""The OpenVINO back end (shared/runtime/openvino_runner.py) on the real runtime, on the CPU.

Its registry entry, the error when `openvino` is not installed (the import made to fail in
a fresh interpreter), the compiled-model cache (the second start loads what the first
compiled), a model it cannot compile, and the staged slots against the synchronous run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from required_testkit import require_module
from strata.shared.runtime import (
    BACKENDS,
    EXTRAS,
    ModelLoadError,
    ModelRunner,
    OpenVinoOptions,
    create_runner,
)
from strata.shared.runtime.staging import StagedRunner

require_module("openvino", "the test extra installs it: pip install -e '.[cpu,test]'")

ROOT = Path(__file__).resolve().parents[2]
PICODET = ROOT / "shared/starter_models/picodet_s_416/model.onnx"


def _open(tmp_path: Path, precision: str = "f32") -> Any:
    options = OpenVinoOptions(precision=precision, cache_dir=str(tmp_path / "cache"))
    return create_runner(PICODET, "openvino", options=options, max_batch=2)


def test_the_registry_names_the_back_end_and_its_extra() -> None:
    assert BACKENDS["openvino"] == "strata.shared.runtime.openvino_runner:OpenVinoRunner"
    assert EXTRAS["openvino"] == "openvino"
    assert set(EXTRAS) == set(BACKENDS), "every back end names the extra that installs it"


def test_it_runs_the_default_detector_staged_and_synchronously(tmp_path: Path) -> None:
    runner = _open(tmp_path)
    try:
        assert isinstance(runner, StagedRunner) and isinstance(runner, ModelRunner)
        assert runner.backend == "openvino"
        assert runner.slots >= 1  # one infer request per stream (the throughput hint's)
        assert [o.name for o in runner.outputs][:1] == ["save_infer_model/scale_0.tmp_1"]
        rng = np.random.default_rng(0)
        batch = rng.standard_normal((2, 3, 416, 416)).astype(np.float32)
        want = runner.run(batch)
        slot = runner.acquire()
        runner.host_input(slot)[:2] = batch
        runner.launch(slot, 2)
        got = runner.wait(slot, 2)
        assert len(got) == len(want) == len(runner.outputs)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        # A partial batch runs only its rows (the batch axis is dynamic).
        slot = runner.acquire()
        runner.host_input(slot)[:1] = batch[:1]
        runner.launch(slot, 1)
        one = runner.wait(slot, 1)
        assert one[0].shape[0] == 1
        np.testing.assert_allclose(one[0], want[0][:1], rtol=1e-4, atol=1e-4)
    finally:
        runner.close()


def test_the_precision_hint_is_f32_unless_told(tmp_path: Path) -> None:
    """OpenVINO's CPU default on a bf16 CPU (this EPYC) is bf16: the runner asks for f32."""
    import openvino as ov

    runner = _open(tmp_path)
    try:
        hint = runner.compiled.get_property("INFERENCE_PRECISION_HINT")
        assert hint == ov.Type.f32, hint
    finally:
        runner.close()
    bf16 = _open(tmp_path, precision="bf16")
    try:
        hint = bf16.compiled.get_property("INFERENCE_PRECISION_HINT")
        capable = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        assert hint == (ov.Type.bf16 if capable else ov.Type.f32), hint
    finally:
        bf16.close()


def test_the_second_start_loads_the_compiled_model_from_the_cache(tmp_path: Path) -> None:
    first = _open(tmp_path)
    first.close()
    assert not first.loaded_from_cache
    blobs = list((tmp_path / "cache").iterdir())
    assert blobs, "nothing was written to the cache folder"
    second = _open(tmp_path)
    try:
        assert second.loaded_from_cache
        assert sorted((tmp_path / "cache").iterdir()) == sorted(blobs), "compiled again"
    finally:
        second.close()


def test_a_model_it_cannot_compile_says_the_fix(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [x], [y])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    path = tmp_path / "custom_op.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ModelLoadError) as err:
        create_runner(path, "openvino")
    text = str(err.value)
    assert "cannot compile" in text and str(path) in text
    assert "NoSuchOp" in text, "what OpenVINO could not convert"
    assert "Exception from" not in text, "OpenVINO's source locations are left out"
    assert "edge.runtime.backend: onnxruntime-cpu" in text, "the fallback is named"
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    with pytest.raises(ModelLoadError, match="onnxruntime-cpu"):
        create_runner(garbage, "openvino")


def test_a_cache_folder_it_cannot_create_says_the_setting(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder's parent should be")
    options = OpenVinoOptions(cache_dir=str(blocker / "cache"))
    with pytest.raises(ModelLoadError, match=r"edge\.runtime\.openvino_cache"):
        create_runner(PICODET, "openvino", options=options)


def test_an_unknown_device_is_refused_with_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="CPU, GPU, NPU"):
        create_runner(PICODET, "openvino", options=OpenVinoOptions(device="TPU"))


def test_without_openvino_installed_the_error_names_the_extra() -> None:
    """A fresh interpreter where `import openvino` fails, as on an install without the extra
    (None in sys.modules is Python's own way to make an import fail)."""
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["openvino"] = None
        from strata.shared.runtime import ModelLoadError, create_runner
        try:
            create_runner({str(PICODET)!r}, "openvino")
        except ModelLoadError as exc:
            print(exc)
        else:
            raise SystemExit("no error")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "pip install 'strata[openvino]'" in out.stdout, out.stdout
    assert "'openvino'" in out.stdout  # the back end it was asked for


def test_a_batch_option_compiles_a_static_batch_the_manifest_still_matches() -> None:
    """`batch` fixes the batch axis for the compiler; the runner still reports the file's
    dynamic axis (so the manifest check holds) and its fixed batch apart."""
    osnet = ROOT / "shared/starter_models/osnet_x0_25_msmt17/model.onnx"
    runner = create_runner(osnet, "openvino", options=OpenVinoOptions(batch=1), allocate=False)
    assert runner.fixed_batch == 1
    assert runner.inputs[0].shape == (None, 3, 256, 128)
    out = runner.run(np.zeros((1, 3, 256, 128), np.float32))[0]
    assert out.shape == (1, 512)
    runner.close()
