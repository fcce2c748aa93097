"""TensorRT 10 engines built from a repository's ONNX files (GPU machines only).

An engine only runs on the GPU model and TensorRT version it was built with, so the
manifest records both, with the optimization profile, the precision and the checksum of
the ONNX it came from; `ensure_engine` rebuilds whenever any of them differs. A timing
cache beside the engine makes rebuilds fast. The planning and the rebuild decision are
plain Python (tested on any machine); only `build_engine` and `current_target` need
tensorrt and a GPU.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

from strata.shared.models.manifest import InputSpec, Manifest, TensorRTBuild, Variant, save_manifest
from strata.shared.models.repository import ModelError, ModelRepository, sha256_of
from strata.shared.runtime import ModelLoadError, trt_engine
from strata.shared.runtime.staging import Profile

__all__ = ["Profile", "build_engine", "ensure_engine", "plan_profile", "rebuild_reason"]

log = logging.getLogger(__name__)

TIMING_CACHE = "timing.cache"


@dataclass(frozen=True, slots=True)
class Target:
    """The machine an engine is for."""

    tensorrt_version: str
    gpu_name: str
    compute_capability: str


def plan_profile(spec: InputSpec, min_batch: int, opt_batch: int, max_batch: int) -> Profile:
    """Validate a batch profile against the model's input; ModelError says what is wrong."""
    if not 1 <= min_batch <= opt_batch <= max_batch:
        raise ModelError(
            f"profile needs 1 <= min <= opt <= max, got {min_batch}/{opt_batch}/{max_batch}"
        )
    fixed = spec.shape[0]
    if fixed is not None and (min_batch, opt_batch, max_batch) != (fixed, fixed, fixed):
        raise ModelError(
            f"input {spec.name!r} has a fixed batch of {fixed}; the profile must be "
            f"{fixed}/{fixed}/{fixed}, not {min_batch}/{opt_batch}/{max_batch}"
        )
    if spec.shape[2] is None or spec.shape[3] is None:
        raise ModelError(f"input {spec.name!r} needs a fixed height and width for an engine")
    return Profile(min_batch, opt_batch, max_batch)


def rebuild_reason(
    variant: Variant | None,
    engine_path: Path,
    target: Target,
    profile: Profile,
    fp16: bool,
    onnx_sha256: str,
) -> str | None:
    """Why the engine must be (re)built, or None when the recorded one is still good."""
    if variant is None or variant.tensorrt is None:
        return "no engine recorded"
    rec = variant.tensorrt
    if not engine_path.is_file():
        return f"engine file {engine_path.name} is missing"
    checks = [
        ("TensorRT version", rec.tensorrt_version, target.tensorrt_version),
        ("GPU", rec.gpu_name, target.gpu_name),
        ("compute capability", rec.compute_capability, target.compute_capability),
        ("ONNX checksum", rec.onnx_sha256, onnx_sha256),
        (
            "profile",
            f"{rec.min_batch}/{rec.opt_batch}/{rec.max_batch}",
            f"{profile.min_batch}/{profile.opt_batch}/{profile.max_batch}",
        ),
        ("fp16", str(rec.fp16), str(fp16)),
    ]
    for what, built, now in checks:
        if built != now:
            return f"{what} changed: built for {built}, now {now}"
    if sha256_of(engine_path) != variant.sha256:
        return "engine file checksum mismatch"
    return None


def current_target() -> Target:
    """TensorRT version and GPU 0 of this machine (needs tensorrt and an NVIDIA GPU)."""
    import tensorrt as trt

    name, cc = _gpu()
    return Target(str(trt.__version__), name, cc)


def _gpu() -> tuple[str, str]:
    try:
        from cuda.bindings import runtime as cudart

        err, props = cudart.cudaGetDeviceProperties(0)
        if int(err) == 0:
            raw = props.name
            name = raw.decode() if isinstance(raw, bytes) else str(raw)
            return name.strip("\x00 "), f"{props.major}.{props.minor}"
    except ImportError:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ModelError(f"no NVIDIA GPU found for a TensorRT engine: {exc}") from exc
    name, cc = (p.strip() for p in out.strip().splitlines()[0].split(","))
    return name, cc


def build_engine(
    onnx_path: Path,
    engine_path: Path,
    spec: InputSpec,
    profile: Profile,
    fp16: bool = True,
    timing_cache: Path | None = None,
    workspace_gib: float = 4.0,
    progress: bool = True,
) -> None:
    """Build and write a TensorRT 10 engine with the runtime's builder (one for both)."""
    try:
        blob = trt_engine.build_engine(
            onnx_path,
            profile,
            (3, spec.height, spec.width),
            fp16=fp16,
            workspace_mib=int(workspace_gib * 1024),
            timing_cache=timing_cache,
            progress=progress,
        )
    except ModelLoadError as exc:
        raise ModelError(str(exc)) from exc
    tmp = engine_path.with_suffix(".part")
    tmp.write_bytes(blob)
    tmp.replace(engine_path)


@dataclass(frozen=True, slots=True)
class EngineResult:
    """What ensure_engine did."""

    variant: Variant
    path: Path
    rebuilt: bool
    reason: str | None


def ensure_engine(
    repo: ModelRepository,
    name: str,
    profile: Profile,
    fp16: bool = True,
    key: str = "trt-fp16",
    source_variant: str | None = None,
    force: bool = False,
    target: Target | None = None,
    progress: bool = True,
) -> EngineResult:
    """Build `name`'s engine when the recorded one does not fit this machine; record it."""
    manifest, _, onnx_path = repo.file_of(name, source_variant)
    target = target or current_target()
    onnx_sha = sha256_of(onnx_path)
    engine_path = onnx_path.with_name(f"model.{key}.engine")
    current = manifest.variants.get(key)
    reason = (
        "forced" if force else rebuild_reason(current, engine_path, target, profile, fp16, onnx_sha)
    )
    if reason is None and current is not None:
        return EngineResult(current, engine_path, False, None)
    log.info("building TensorRT engine for %s: %s", name, reason)
    build_engine(
        onnx_path,
        engine_path,
        manifest.input,
        profile,
        fp16=fp16,
        timing_cache=onnx_path.with_name(TIMING_CACHE),
        progress=progress,
    )
    variant = engine_variant(engine_path, target, profile, fp16, onnx_sha)
    _record(repo, manifest, key, variant)
    return EngineResult(variant, engine_path, True, reason)


def engine_variant(
    engine_path: Path, target: Target, profile: Profile, fp16: bool, onnx_sha: str
) -> Variant:
    """The manifest record of a freshly built engine."""
    return Variant(
        file=engine_path.name,
        sha256=sha256_of(engine_path),
        format="tensorrt",
        precision="fp16" if fp16 else "fp32",
        made_by=f"strata models engine (TensorRT {target.tensorrt_version})",
        tensorrt=TensorRTBuild(
            tensorrt_version=target.tensorrt_version,
            gpu_name=target.gpu_name,
            compute_capability=target.compute_capability,
            min_batch=profile.min_batch,
            opt_batch=profile.opt_batch,
            max_batch=profile.max_batch,
            fp16=fp16,
            onnx_sha256=onnx_sha,
        ),
    )


def _record(repo: ModelRepository, manifest: Manifest, key: str, variant: Variant) -> None:
    updated = manifest.model_copy(update={"variants": {**manifest.variants, key: variant}})
    save_manifest(updated, repo.folder(manifest.name))
