"""FP16 copies of ONNX models (ONNX Runtime's float16 converter; no torch needed).

Used by `strata models build --fp16` and by the ONNX Runtime CUDA back end, which runs a
model in the precision of its file: asked for FP16, it runs a converted copy (cached by
the source's checksum) instead of silently staying in FP32.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from .base import ModelLoadError

log = logging.getLogger(__name__)

# Ops whose FP16 kernels lose too much (or that ORT's CPU provider lacks in FP16); the
# converter wraps them in casts and keeps them in float.
KEEP_FLOAT = ["Resize", "TopK", "NonMaxSuppression"]


def convert_fp16(src: Path, dst: Path) -> None:
    """Write an FP16 copy of `src`; inputs and outputs stay float32 so callers do not change."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(src))
    half = convert_float_to_float16(model, keep_io_types=True, op_block_list=KEEP_FLOAT)
    tmp = dst.with_suffix(".part")
    onnx.save(half, str(tmp))
    tmp.replace(dst)


def is_fp16(path: Path) -> bool:
    """Whether most of the model's floating-point weights are FP16 already."""
    import onnx
    from onnx import TensorProto

    proto = onnx.load(str(path), load_external_data=False)
    kinds = [i.data_type for i in proto.graph.initializer]
    half = sum(1 for k in kinds if k == TensorProto.FLOAT16)
    single = sum(1 for k in kinds if k == TensorProto.FLOAT)
    return half > single


def fp16_copy(src: Path, cache: Path) -> Path:
    """The cached FP16 copy of `src` in `cache` (made on first use)."""
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    dst = cache / f"{src.stem}.{digest}.fp16.onnx"
    if dst.is_file():
        return dst
    try:
        cache.mkdir(parents=True, exist_ok=True)
        convert_fp16(src, dst)
    except (OSError, ImportError, ValueError) as exc:
        raise ModelLoadError(f"cannot make an FP16 copy of {src} in {cache}: {exc}") from exc
    log.info("FP16 copy of %s written to %s", src.name, dst)
    return dst
