"""The GPU runtime's fixes that a CPU can check: profiles, engine cache, ORT-TRT options,
fixed-batch models, FP16 on the CUDA provider, the one builder and the one Profile.

Each test here failed before its fix (the ORT-TRT options used 640 and `images` whatever
the model said; the cache key had no input size; the cache sat beside the ONNX file; an
engine's own profile was never read; `fp16` was ignored by the CUDA provider).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from models_testkit import tiny_classifier
from strata.shared.runtime import ModelLoadError, create_runner
from strata.shared.runtime.fp16 import fp16_copy, is_fp16
from strata.shared.runtime.onnxruntime_gpu import capped_max_batch, trt_provider_options
from strata.shared.runtime.staging import Profile, engine_profile
from strata.shared.runtime.tensorrt_runner import ShapeError, set_shape
from strata.shared.runtime.trt_engine import (
    default_engine_cache,
    engine_cache_path,
    model_input,
    store_engine,
)

ROOT = Path(__file__).resolve().parents[2]
STARTER_DETECTOR = ROOT / "shared" / "starter_models" / "yolov8n" / "model.onnx"


def _renamed(tmp_path: Path, name: str, fixed: int | None = None) -> Path:
    """The tiny classifier with its input renamed (and its batch fixed, if asked)."""
    path = tmp_path / "m.onnx"
    tiny_classifier(path, size=24, dynamic=fixed is None)
    m = onnx.load(str(path))
    old = m.graph.input[0].name
    m.graph.input[0].name = name
    for node in m.graph.node:
        node.input[:] = [name if i == old else i for i in node.input]
    if fixed is not None:
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = fixed
    onnx.save(m, str(path))
    return path


def test_ort_tensorrt_profile_uses_the_models_input_name_and_size() -> None:
    inp = model_input(STARTER_DETECTOR)
    assert (inp.name, inp.dims) == ("images", (None, 3, 320, 320))
    # The config's input_size (640) must not override the model's fixed 320.
    opts = trt_provider_options(inp, Profile(1, 4, 8), 640, 0, 0, True, "/c", 1024)
    assert opts["trt_profile_min_shapes"] == "images:1x3x320x320"
    assert opts["trt_profile_opt_shapes"] == "images:4x3x320x320"
    assert opts["trt_profile_max_shapes"] == "images:8x3x320x320"
    assert opts["trt_engine_cache_path"] == "/c" and opts["trt_fp16_enable"] == "True"


def test_ort_tensorrt_profile_follows_another_input_name(tmp_path: Path) -> None:
    inp = model_input(_renamed(tmp_path, "pixel_values"))
    opts = trt_provider_options(inp, Profile(1, 2, 4), 640, 1, 7, False, "", 512)
    assert opts["trt_profile_max_shapes"] == "pixel_values:4x3x24x24"
    assert opts["device_id"] == "1" and opts["user_compute_stream"] == "7"
    assert opts["trt_engine_cache_path"] == str(default_engine_cache())


def test_a_static_input_gets_no_profile(tmp_path: Path) -> None:
    inp = model_input(_renamed(tmp_path, "x", fixed=1))
    assert inp.fixed_batch == 1
    opts = trt_provider_options(inp, Profile(1, 4, 8), 640, 0, 0, True, "", 1024)
    assert not any(k.startswith("trt_profile") for k in opts)
    assert capped_max_batch(inp, 8) == 1


def test_engine_cache_key_has_the_input_size(tmp_path: Path) -> None:
    onnx_path = _renamed(tmp_path, "x")
    p = Profile(1, 4, 8)
    a = engine_cache_path(onnx_path, str(tmp_path), p, (3, 320, 320), True, "10.8", "H200")
    b = engine_cache_path(onnx_path, str(tmp_path), p, (3, 640, 640), True, "10.8", "H200")
    assert a != b and ".in3x320x320." in a.name and ".in3x640x640." in b.name
    assert a.parent == tmp_path


def test_engine_cache_defaults_to_a_writable_cache_not_the_model_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CACHE_DIRECTORY", str(tmp_path / "systemd"))
    assert default_engine_cache() == tmp_path / "systemd" / "engines"
    monkeypatch.delenv("CACHE_DIRECTORY")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_engine_cache() == tmp_path / "xdg" / "strata" / "engines"
    onnx_path = _renamed(tmp_path, "x")
    path = engine_cache_path(onnx_path, "", Profile(1, 1, 1), (3, 24, 24), True, "10", "g")
    assert path.parent == tmp_path / "xdg" / "strata" / "engines"
    assert path.parent != onnx_path.parent


def test_an_unwritable_engine_cache_is_logged_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A path under a regular file cannot be created, whoever runs the test (root included).
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    assert store_engine(blocker / "e.engine", b"blob") is False
    assert "cannot cache the TensorRT engine" in caplog.text


def test_store_engine_writes_atomically(tmp_path: Path) -> None:
    assert store_engine(tmp_path / "sub" / "e.engine", b"blob")
    assert (tmp_path / "sub" / "e.engine").read_bytes() == b"blob"
    assert not list((tmp_path / "sub").glob("*.part"))


def test_a_prebuilt_engines_profile_caps_the_configured_batch() -> None:
    # Engine built for 1..4; the config asks for 16: run with 4, never with unresolved shapes.
    p = engine_profile((1, 3, 640, 640), (2, 3, 640, 640), (4, 3, 640, 640), 16)
    assert (p.min_batch, p.opt_batch, p.max_batch) == (1, 2, 4)
    p = engine_profile((1, 3, 64, 64), (8, 3, 64, 64), (16, 3, 64, 64), 4)
    assert (p.min_batch, p.opt_batch, p.max_batch) == (1, 4, 4)
    with pytest.raises(ModelLoadError, match="starts at batch 4"):
        engine_profile((4, 3, 64, 64), (4, 3, 64, 64), (8, 3, 64, 64), 2)


def test_a_rejected_input_shape_raises() -> None:
    class Refusing:
        """What TensorRT's IExecutionContext does outside its profile: returns False."""

        def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
            return shape[0] <= 4

    set_shape(Refusing(), "images", (4, 3, 8, 8), Profile(1, 2, 4))
    with pytest.raises(ShapeError, match=r"\(8, 3, 8, 8\).*profile 1/2/4"):
        set_shape(Refusing(), "images", (8, 3, 8, 8), Profile(1, 2, 4))


def test_profile_is_one_type_with_model_batch_and_caps() -> None:
    from strata.tools.models.engine import Profile as ToolsProfile

    assert ToolsProfile is Profile
    assert Profile(1, 4, 8).for_model_batch(1) == Profile(1, 1, 1)
    assert Profile(1, 4, 8).for_model_batch(None) == Profile(1, 4, 8)
    assert Profile(2, 4, 8).capped(3) == Profile(2, 3, 3)
    assert str(Profile(1, 4, 8)) == "1/4/8"
    with pytest.raises(ValueError):
        Profile(4, 2, 8)


def test_one_engine_builder_for_runtime_and_tools() -> None:
    import inspect

    from strata.shared.runtime import tensorrt_runner, trt_engine
    from strata.tools.models import engine

    assert tensorrt_runner.build_engine is trt_engine.build_engine
    assert "trt_engine.build_engine(" in inspect.getsource(engine.build_engine)
    assert "create_network" not in inspect.getsource(engine)


def test_fp16_copy_runs_with_float32_io_and_agrees(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    tiny_classifier(src, size=24)
    assert not is_fp16(src)
    half = fp16_copy(src, tmp_path / "cache")
    assert is_fp16(half) and half.parent == tmp_path / "cache"
    assert fp16_copy(src, tmp_path / "cache") == half  # cached by checksum
    x = np.random.default_rng(0).random((2, 3, 24, 24), np.float32)
    ref = create_runner(src).run(x)[0]
    got = create_runner(half).run(x)[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, atol=2e-2, rtol=2e-2)
