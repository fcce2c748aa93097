"""What the edge needs to run a detector, read from its manifest: preprocessing and layout."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config.base import ConfigError
from ..vision.layouts import DetectLayout
from ..vision.letterbox import Preprocess
from .manifest import MANIFEST_FILE, InputSpec, Manifest, load_manifest


@dataclass(frozen=True, slots=True)
class DetectorSpec:
    """Preprocessing, output layout and labels of one detector."""

    preprocess: Preprocess
    layout: DetectLayout
    labels: tuple[str, ...]
    outputs: tuple[str, ...]


def detector_spec(manifest: Manifest) -> DetectorSpec:
    """The spec of a detect manifest; ValueError for a classifier."""
    if manifest.task != "detect":
        raise ValueError(f"model {manifest.name!r} is a {manifest.task} model, not a detector")
    inp, out = manifest.input, manifest.output
    size = inp.height
    if inp.width != size:
        raise ValueError(
            f"model {manifest.name!r}: the edge needs a square input, got {inp.width}x{size}"
        )
    return DetectorSpec(
        preprocess_of(inp), layout_of(manifest, size), manifest.labels, out.all_names
    )


def preprocess_of(inp: InputSpec) -> Preprocess:
    """The writer settings of a manifest's (square) image input."""
    return Preprocess(
        size=inp.height,
        resize=inp.resize,
        rgb=inp.colour == "RGB",
        scale=inp.scale,
        mean=inp.mean,
        std=inp.std,
        pad_value=inp.pad_value,
    )


def layout_of(manifest: Manifest, input_size: int) -> DetectLayout:
    """How to read a detect manifest's outputs (`input_size` 0: anchor counts unchecked)."""
    out = manifest.output
    return DetectLayout(
        format=out.format,
        num_classes=manifest.num_classes,
        input_size=input_size,
        strides=out.strides,
        reg_max=out.reg_max,
        grid_centre=out.grid_centre,
        class_offset=out.class_offset,
    )


def yolov8_spec(
    size: int, labels: tuple[str, ...], output: str = "", classes: int = 0
) -> DetectorSpec:
    """The spec of a bare ultralytics YOLOv8 ONNX file (no manifest): RGB letterbox, /255;
    `classes` when no labels name them."""
    layout = DetectLayout("yolov8", classes or len(labels), size)
    return DetectorSpec(Preprocess(size), layout, labels, (output,) if output else ())


def spec_beside(path: str | Path) -> DetectorSpec | None:
    """The spec from the manifest beside an ONNX file (a repository folder) when it
    describes that file; None for a bare file (read as YOLOv8). ValueError for a bad
    manifest or one that is not a detector's."""
    file = Path(path)
    beside = file.parent / MANIFEST_FILE
    if not beside.is_file():
        return None
    try:
        manifest = load_manifest(beside)
    except ConfigError as exc:
        raise ValueError(f"bad manifest beside {file}: {exc}") from None
    if file.name not in {manifest.file, *(v.file for v in manifest.variants.values())}:
        return None
    return detector_spec(manifest)


__all__ = [
    "DetectorSpec",
    "detector_spec",
    "layout_of",
    "preprocess_of",
    "spec_beside",
    "yolov8_spec",
]
