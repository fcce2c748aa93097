"""FP16 variants of ONNX models (no torch needed: onnxruntime's float16 converter)."""

from __future__ import annotations

from pathlib import Path

from strata.shared.models.manifest import Variant, save_manifest
from strata.shared.models.repository import ModelRepository, sha256_of
from strata.shared.runtime.fp16 import convert_fp16

__all__ = ["add_fp16_variant", "convert_fp16"]


def add_fp16_variant(repository: Path, name: str, key: str = "fp16") -> Variant:
    """Convert `name`'s primary file to FP16 and record it as variant `key`."""
    repo = ModelRepository(repository)
    manifest, _, src = repo.file_of(name)
    dst = src.with_name(f"{src.stem}.{key}.onnx")
    convert_fp16(src, dst)
    variant = Variant(
        file=dst.name,
        sha256=sha256_of(dst),
        format="onnx",
        precision="fp16",
        made_by="strata models build --fp16 (onnxruntime float16 converter, keep_io_types)",
    )
    updated = manifest.model_copy(update={"variants": {**manifest.variants, key: variant}})
    save_manifest(updated, repo.folder(name))
    return variant
