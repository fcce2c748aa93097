"""TensorRT 10 engines from ONNX: the one builder (runtime and `strata models engine`),
the engine cache (where, and under which key), and the model's input as the ONNX says.

Only `build_engine` imports tensorrt; the rest is plain Python a CPU can test.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import ModelLoadError
from .staging import Profile

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelInput:
    """The first graph input of an ONNX file: name and dims (None where symbolic)."""

    name: str
    dims: tuple[int | None, ...]

    @property
    def fixed_batch(self) -> int | None:
        return self.dims[0] if self.dims else None

    def chw(self, input_size: int) -> tuple[int, ...]:
        """(C, H, W), with `input_size` where the ONNX leaves a spatial axis dynamic."""
        return tuple(d if d is not None else input_size for d in self.dims[1:])


def model_input(path: Path) -> ModelInput:
    """Read the ONNX graph's first input without loading its weights."""
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError and friends
        raise ModelLoadError(f"cannot read ONNX model {path}: {exc}") from exc
    inits = {i.name for i in proto.graph.initializer}
    graph_inputs = [i for i in proto.graph.input if i.name not in inits]
    if not graph_inputs:
        raise ModelLoadError(f"{path} has no graph input")
    inp = graph_inputs[0]
    dims = tuple(
        d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
        for d in inp.type.tensor_type.shape.dim
    )
    return ModelInput(inp.name, dims)


def default_engine_cache() -> Path:
    """A writable cache folder: systemd's CacheDirectory, else XDG's cache, else ~/.cache.

    Not the ONNX file's folder: the model repository is read-only under the shipped unit
    (ProtectSystem=strict), where systemd sets $CACHE_DIRECTORY for CacheDirectory=.
    """
    systemd = os.environ.get("CACHE_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd) / "engines"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "strata" / "engines"


def engine_cache_path(
    onnx_path: Path,
    cache: str,
    profile: Profile,
    chw: tuple[int, ...],
    fp16: bool,
    trt_version: str,
    gpu: str,
) -> Path:
    """Where the engine for this model, input size, profile, precision, TensorRT and GPU is."""
    digest = hashlib.sha256(onnx_path.read_bytes()).hexdigest()[:12]
    gpu_tag = "".join(c if c.isalnum() else "-" for c in gpu)
    size = "x".join(str(d) for d in chw)
    name = (
        f"{onnx_path.stem}.{digest}.in{size}.trt{trt_version}.{gpu_tag}."
        f"b{profile.min_batch}-{profile.opt_batch}-{profile.max_batch}."
        f"{'fp16' if fp16 else 'fp32'}.engine"
    )
    return (Path(cache) if cache else default_engine_cache()) / name


def store_engine(path: Path, blob: bytes) -> bool:
    """Write an engine atomically; a read-only cache is logged, not fatal (it is rebuilt)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        tmp.write_bytes(blob)
        tmp.replace(path)
    except OSError as exc:
        log.warning(
            "cannot cache the TensorRT engine at %s (%s); it will be rebuilt at the next "
            "start: set runtime.engine_cache to a writable folder",
            path,
            exc.strerror or exc,
        )
        return False
    return True


def build_engine(
    onnx_path: Path,
    profile: Profile,
    chw: tuple[int, ...],
    fp16: bool = True,
    workspace_mib: int = 1024,
    timing_cache: Path | None = None,
    progress: bool = False,
) -> bytes:
    """Build a serialized TensorRT 10 engine (explicit batch, one optimization profile)."""
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise ModelLoadError("building an engine needs TensorRT 10 (pip tensorrt)") from exc
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ModelLoadError(f"TensorRT cannot parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mib << 20)
    # platform_has_fast_fp16 is deprecated in TensorRT 10 (every supported GPU has it).
    if fp16 and getattr(builder, "platform_has_fast_fp16", True):
        config.set_flag(trt.BuilderFlag.FP16)
    inp = network.get_input(0)
    opt = builder.create_optimization_profile()
    lo, mid, hi = profile.shapes(chw)
    opt.set_shape(inp.name, lo, mid, hi)
    config.add_optimization_profile(opt)
    cache_bytes = timing_cache.read_bytes() if timing_cache and timing_cache.is_file() else b""
    config.set_timing_cache(config.create_timing_cache(cache_bytes), ignore_mismatch=False)
    if progress:
        config.progress_monitor = _progress_monitor(trt)
    log.info(
        "building TensorRT engine for %s (profile %s, input %s, fp16=%s)",
        onnx_path,
        profile,
        chw,
        fp16,
    )
    blob = builder.build_serialized_network(network, config)
    if blob is None:
        raise ModelLoadError(f"TensorRT failed to build an engine for {onnx_path} (see its log)")
    if timing_cache is not None:
        try:
            timing_cache.write_bytes(bytes(config.get_timing_cache().serialize()))
        except OSError as exc:
            log.warning("cannot write the timing cache %s: %s", timing_cache, exc)
    return bytes(blob)


def _progress_monitor(trt: Any) -> Any:
    """A tqdm bar per TensorRT build phase (trt.IProgressMonitor)."""
    from tqdm import tqdm

    class _Monitor(trt.IProgressMonitor):  # type: ignore[misc]
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)
            self._bars: dict[str, Any] = {}

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            self._bars[phase_name] = tqdm(total=num_steps, desc=phase_name, leave=False)

        def step_complete(self, phase_name: str, step: int) -> bool:
            bar = self._bars.get(phase_name)
            if bar is not None:
                bar.update(1)
            return True  # False would cancel the build

        def phase_finish(self, phase_name: str) -> None:
            bar = self._bars.pop(phase_name, None)
            if bar is not None:
                bar.close()

    return _Monitor()
