"""The detector the bench's edge runs: a model of a model repository, named in the report.

The starter repository's COCO detector (`picodet_s_416`) unless told otherwise
(`--model-repository`, `--model`): a user measures the cascade with the detector they will
run. The model is resolved once, in the bench (manifest validated, checksum verified, a bad
name says which models there are), and handed to every edge the bench starts as an
explicit file, read with the manifest beside it (preprocessing, output layout, labels), so
the cloud and the device keep their own (starter) models whatever the repository holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.shared.config.edge import DEFAULT_DETECTOR

# What the edge assumes for a model whose input side is dynamic (edge.model.input_size).
_DYNAMIC_SIDE = 640


@dataclass(frozen=True, slots=True)
class BenchDetector:
    """One repository model, as the report names it and the edges load it."""

    name: str
    version: int
    repository: str
    path: Path
    # (width, height) of the model's input; the edge's default side when dynamic.
    input_width: int
    input_height: int
    precision: str
    sha256: str
    labels: tuple[str, ...]

    def overrides(self) -> dict[str, Any]:
        """Config that makes an edge load this model (and no other tier's model changes)."""
        model: dict[str, Any] = {"name": self.name, "path": str(self.path)}
        if self.labels:
            model["labels"] = list(self.labels)
        return {"edge": {"model": model}}

    def describe(self) -> dict[str, Any]:
        """The report's `detector` section."""
        return {
            "name": self.name,
            "version": self.version,
            "input_size": [self.input_width, self.input_height],
            "precision": self.precision,
            "labels": len(self.labels),
            "sha256": self.sha256,
            "repository": self.repository,
            "path": str(self.path),
        }

    def one_line(self) -> str:
        """`yolov8n v0 (320x320, fp32)`."""
        return (
            f"{self.name} v{self.version} ({self.input_width}x{self.input_height}, "
            f"{self.precision})"
        )


def resolve(repository: str | None = None, name: str = DEFAULT_DETECTOR) -> BenchDetector:
    """Model `name` (its latest version) of `repository` (None or "": the starter one);
    ModelError says what is wrong with it."""
    from strata.shared.models import ModelRepository

    repo = ModelRepository(repository or None)
    version = repo.latest_version(name)
    manifest, _variant, path = repo.file_of(name, version=version)
    shape = manifest.input.shape
    height = shape[-2] if len(shape) >= 2 and shape[-2] else _DYNAMIC_SIDE
    width = shape[-1] if len(shape) >= 2 and shape[-1] else _DYNAMIC_SIDE
    return BenchDetector(
        name=name,
        version=version,
        repository=str(repo.root.resolve()),
        path=path.resolve(),
        input_width=int(width),
        input_height=int(height),
        precision=manifest.precision,
        sha256=manifest.sha256,
        labels=tuple(manifest.labels),
    )


def variant_key(known: Iterable[str], precision: str, backend: str) -> str:
    """The variant a `precision` run of `backend` loads: `strata models quantize
    --calibration` writes int8-<engine> (the back end's own), `--clip` writes int8."""
    engine = "openvino" if backend == "openvino" else "onnxruntime"
    names = set(known)
    return next((k for k in (f"{precision}-{engine}", precision) if k in names), precision)
