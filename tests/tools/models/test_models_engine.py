from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest
from gpu_testkit import gpu_backends_wanted
from strata.shared.models import InputSpec, ModelError, ModelRepository, sha256_of
from strata.shared.models.manifest import Variant
from strata.tools.models.engine import (
    Profile,
    Target,
    engine_variant,
    ensure_engine,
    plan_profile,
    rebuild_reason,
)

SPEC = InputSpec(name="images", shape=(None, 3, 640, 640))
H200 = Target("10.13.0", "NVIDIA H200", "9.0")


def test_profile_shapes() -> None:
    p = plan_profile(SPEC, 1, 8, 16)
    assert p.shapes((3, SPEC.height, SPEC.width)) == (
        (1, 3, 640, 640),
        (8, 3, 640, 640),
        (16, 3, 640, 640),
    )


@pytest.mark.parametrize(("lo", "opt", "hi"), [(0, 1, 1), (2, 1, 4), (1, 8, 4)])
def test_profile_must_be_ordered(lo: int, opt: int, hi: int) -> None:
    with pytest.raises(ModelError, match="min <= opt <= max"):
        plan_profile(SPEC, lo, opt, hi)


def test_fixed_batch_model_needs_a_fixed_profile() -> None:
    fixed = InputSpec(name="images", shape=(1, 3, 224, 224))
    assert plan_profile(fixed, 1, 1, 1) == Profile(1, 1, 1)
    with pytest.raises(ModelError, match="fixed batch of 1"):
        plan_profile(fixed, 1, 4, 8)


def test_dynamic_spatial_input_is_refused() -> None:
    with pytest.raises(ModelError, match="fixed height and width"):
        plan_profile(InputSpec(name="x", shape=(None, 3, None, None)), 1, 1, 2)


@pytest.fixture
def engine_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.trt-fp16.engine"
    path.write_bytes(b"serialized engine bytes")
    return path


def test_rebuild_reasons(engine_file: Path) -> None:
    prof = Profile(1, 8, 16)
    rec = engine_variant(engine_file, H200, prof, True, "a" * 64)
    assert rebuild_reason(rec, engine_file, H200, prof, True, "a" * 64) is None
    assert rebuild_reason(None, engine_file, H200, prof, True, "a" * 64) == "no engine recorded"
    cases = [
        (Target("10.14.0", "NVIDIA H200", "9.0"), prof, True, "a" * 64, "TensorRT version"),
        (Target("10.13.0", "NVIDIA L4", "8.9"), prof, True, "a" * 64, "GPU changed"),
        (H200, Profile(1, 4, 16), True, "a" * 64, "profile changed: built for 1/8/16"),
        (H200, prof, False, "a" * 64, "fp16 changed"),
        (H200, prof, True, "b" * 64, "ONNX checksum"),
    ]
    for target, p, fp16, sha, reason in cases:
        got = rebuild_reason(rec, engine_file, target, p, fp16, sha)
        assert got is not None and reason in got
    engine_file.write_bytes(b"another engine")
    assert rebuild_reason(rec, engine_file, H200, prof, True, "a" * 64) == (
        "engine file checksum mismatch"
    )
    engine_file.unlink()
    assert "missing" in str(rebuild_reason(rec, engine_file, H200, prof, True, "a" * 64))


def test_tensorrt_variant_needs_its_build_record() -> None:
    with pytest.raises(ValueError, match="build record"):
        Variant(file="m.engine", sha256="a" * 64, format="tensorrt", precision="fp16")


def test_recorded_engine_that_fits_is_kept(tiny_repo: Path) -> None:
    """ensure_engine finds the recorded engine current and does not rebuild (no TensorRT)."""
    repo = ModelRepository(tiny_repo)
    manifest, _, onnx_path = repo.file_of("tiny")
    engine = onnx_path.with_name("model.trt-fp16.engine")
    engine.write_bytes(b"an engine built earlier")
    prof = Profile(1, 2, 4)
    rec = engine_variant(engine, H200, prof, True, sha256_of(onnx_path))
    from strata.shared.models import save_manifest

    save_manifest(manifest.model_copy(update={"variants": {"trt-fp16": rec}}), repo.folder("tiny"))
    res = ensure_engine(repo, "tiny", prof, fp16=True, target=H200, progress=False)
    assert not res.rebuilt and res.reason is None
    assert res.variant == repo.manifest("tiny").variants["trt-fp16"]


@pytest.mark.gpu
def test_build_engine_on_a_gpu(tiny_repo: Path, gpu_unavailable: Callable[[str], NoReturn]) -> None:
    wanted = gpu_backends_wanted()
    if wanted is not None and "tensorrt" not in wanted:
        pytest.skip("tensorrt not in STRATA_GPU_BACKENDS on this host")
    if importlib.util.find_spec("tensorrt") is None:
        gpu_unavailable("TensorRT is not installed")
    repo = ModelRepository(tiny_repo)
    prof = plan_profile(repo.manifest("tiny").input, 1, 2, 4)
    first = ensure_engine(repo, "tiny", prof, fp16=True, progress=False)
    assert first.rebuilt and first.path.stat().st_size > 0
    assert (first.path.parent / "timing.cache").stat().st_size > 0
    again = ensure_engine(repo, "tiny", prof, fp16=True, progress=False)
    assert not again.rebuilt
    changed = ensure_engine(repo, "tiny", Profile(1, 4, 4), fp16=True, progress=False)
    assert changed.rebuilt and changed.reason is not None and "profile" in changed.reason


def test_cli_engine_without_tensorrt_is_a_clear_error(
    tiny_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    from strata.tools.cli import main

    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt is installed here")
    assert main(["models", "engine", "tiny", "-r", str(tiny_repo)]) == 2
    assert "needs TensorRT 10" in capsys.readouterr().err
