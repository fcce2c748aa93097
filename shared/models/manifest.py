"""The model manifest: what a model file is, how to feed it and where it came from.

One `manifest.yaml` sits beside each model file in a repository folder (Triton-style):

    <repository>/<name>/manifest.yaml
    <repository>/<name>/model.onnx           (the primary file, `file`)
    <repository>/<name>/model.int8.onnx      (optional variants, `variants.<key>.file`)

Every key is validated strictly: an unknown or misspelt key is an error naming the file,
line and key, like the config. Writers (the `strata models` commands, the distillation
scripts) build a `Manifest` and call `save_manifest`; readers call `load_manifest`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from ..config.base import ConfigError, StrictModel, load_yaml_model

MANIFEST_FILE = "manifest.yaml"

Task = Literal["detect", "classify", "embed"]
Precision = Literal["fp32", "fp16", "int8"]
# Output layouts the tiers know how to decode (shared/vision/layouts.py has one decoder each):
#   yolov8:   [N, 4 + C, anchors]: cx, cy, w, h in input pixels, then class scores (sigmoid
#             applied; ultralytics YOLOv8/11 export, no NMS inside).
#   yolov5:   [N, anchors, 5 + C]: cx, cy, w, h in input pixels, objectness, class scores
#             (YOLOv5, YOLOv7; score = objectness x class score).
#   yolox:    [N, anchors, 5 + C] raw grid offsets of strides 8, 16, 32 (YOLOX's release
#             export): xy = (xy + grid) * stride, wh = exp(wh) * stride; score = obj x class.
#   gfl:      per level a class-score map [N, A, C] (sigmoid applied) and a box map
#             [N, A, 4 * (reg_max + 1)] of DFL logits (PicoDet, NanoDet); paired by shape.
#   end2end:  boxes already selected: [N, K, 6] x1, y1, x2, y2, score, class (YOLOv10,
#             YOLO26), or Paddle's [K, 6] class, score, x1, y1, x2, y2 with a count output.
#   detr:     no NMS: boxes [N, Q, 4] cx, cy, w, h normalised to the input, and class logits
#             [N, Q, C] (sigmoid), or one [N, Q, 4 + C] tensor (RT-DETR, D-FINE, RF-DETR).
#   ssd:      boxes [N, K, 4] y1, x1, y2, x2 normalised, classes [N, K], scores [N, K],
#             count [N] (TensorFlow / TFLite detection post-processing).
#   logits:   one tensor [N, num_classes] of raw logits (softmax not applied).
#   probabilities: one tensor [N, num_classes] that already sums to one.
#   embedding: one tensor [N, D], an appearance embedding (task embed; compared by cosine).
DetectFormat = Literal["yolov8", "yolov5", "yolox", "gfl", "end2end", "detr", "ssd"]
ClassifyFormat = Literal["logits", "probabilities"]
OutputFormat = Literal[
    "yolov8",
    "yolov5",
    "yolox",
    "gfl",
    "end2end",
    "detr",
    "ssd",
    "logits",
    "probabilities",
    "embedding",
]
DETECT_FORMATS: tuple[str, ...] = ("yolov8", "yolov5", "yolox", "gfl", "end2end", "detr", "ssd")
CLASSIFY_FORMATS: tuple[str, ...] = ("logits", "probabilities")
FileFormat = Literal["onnx", "tensorrt", "openvino"]
Dim = Annotated[int, Field(gt=0)] | None


class InputSpec(StrictModel):
    """The model's single image input and the preprocessing it expects."""

    name: str = Field(..., min_length=1, description="Input tensor name in the model file.")
    shape: tuple[Dim, Dim, Dim, Dim] = Field(
        ...,
        description="[N, C, H, W]; null for a dynamic axis. A fixed N (a batch-1 export) "
        "makes every tier run batches of exactly N.",
    )
    layout: Literal["NCHW"] = Field("NCHW", description="Memory layout of the input tensor.")
    colour: Literal["RGB", "BGR"] = Field("RGB", description="Channel order the model expects.")
    resize: Literal["letterbox", "letterbox_topleft", "stretch"] = Field(
        "stretch",
        description="letterbox: keep aspect, centred, pad with `pad_value` (YOLO); "
        "letterbox_topleft: the same at the top-left corner (YOLOX); stretch: plain resize "
        "to the input (PicoDet, classifiers).",
    )
    pad_value: float = Field(
        114.0, ge=0, le=255, description="Letterbox padding, in pixel values 0-255."
    )
    scale: float = Field(
        1.0 / 255.0, gt=0, description="Pixel values (0-255) are multiplied by this first."
    )
    mean: tuple[float, float, float] = Field(
        (0.0, 0.0, 0.0), description="Subtracted per channel after scaling, in `colour` order."
    )
    std: tuple[float, float, float] = Field(
        (1.0, 1.0, 1.0), description="Divided per channel after the mean, in `colour` order."
    )

    @field_validator("std")
    @classmethod
    def _std_positive(cls, v: tuple[float, float, float]) -> tuple[float, float, float]:
        if any(s <= 0 for s in v):
            raise ValueError("every std value must be > 0")
        return v

    @property
    def fixed_batch(self) -> int | None:
        """The batch every run must have (shape[0]), or None when the batch is dynamic."""
        return self.shape[0]

    @property
    def height(self) -> int:
        """Input height in pixels (a fixed axis in every starter model)."""
        h = self.shape[2]
        if h is None:
            raise ValueError(f"input {self.name!r} has a dynamic height")
        return h

    @property
    def width(self) -> int:
        """Input width in pixels."""
        w = self.shape[3]
        if w is None:
            raise ValueError(f"input {self.name!r} has a dynamic width")
        return w


class OutputSpec(StrictModel):
    """The model's output and how to read it."""

    name: str = Field(..., min_length=1, description="Output tensor name in the model file.")
    format: OutputFormat = Field(..., description="Layout of the output (see OutputFormat).")
    names: tuple[str, ...] = Field(
        (),
        description="Every output the decoder reads, in the model's order, when it reads "
        "more than `name` (gfl, end2end with a count, detr, ssd); empty: `name` alone.",
    )
    strides: tuple[int, ...] = Field(
        (),
        description="gfl and yolox: the strides of the levels; empty: the layout's usual "
        "ones (gfl 8, 16, 32, 64; yolox 8, 16, 32).",
    )
    reg_max: int = Field(7, ge=1, le=64, description="gfl: DFL bins per side, less one.")
    grid_centre: Literal["half_cell", "nanodet"] = Field(
        "half_cell",
        description="gfl: an anchor's centre: (i + 0.5) x stride (PicoDet), or NanoDet's "
        "older i x stride + (stride - 1) / 2.",
    )
    class_offset: int = Field(
        0,
        ge=0,
        description="end2end, ssd: subtracted from the model's class ids (1 for exports "
        "whose id 0 is a background class).",
    )

    @field_validator("strides")
    @classmethod
    def _strides_positive(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(s <= 0 for s in v):
            raise ValueError("every stride must be > 0")
        return v

    @property
    def all_names(self) -> tuple[str, ...]:
        """The outputs the decoder reads, in order."""
        return self.names or (self.name,)


class Source(StrictModel):
    """Provenance: how the file was made and whether its weights were trained."""

    architecture: str = Field(..., description="Architecture and size, e.g. 'YOLOv8n'.")
    made_by: str = Field(..., description="Tool and command that produced the file.")
    trained: bool = Field(
        ..., description="False for randomly initialised weights (outputs are meaningless)."
    )
    weights: str = Field("", description="Checkpoint the weights came from; empty: none.")
    notes: str = Field("", description="Anything a user must know (dataset, caveats).")


class Calibration(StrictModel):
    """How an INT8 variant was calibrated, and what it was measured to agree to."""

    method: Literal["entropy", "minmax", "percentile"] = Field(..., description="Calibrator.")
    samples: int = Field(..., gt=0, description="Frames used for calibration.")
    clip: str = Field(..., description="File name of the calibration clip.")
    kept_float: tuple[str, ...] = Field((), description="Operator types left in float.")
    excluded_nodes: int = Field(0, ge=0, description="Nodes kept in float in total.")
    agreement: float | None = Field(
        None, description="Top-1 agreement (classify) or box F1 at IoU 0.5 (detect) vs float."
    )


class TensorRTBuild(StrictModel):
    """What a TensorRT engine was built for; an engine is rebuilt when these differ."""

    tensorrt_version: str = Field(..., description="tensorrt.__version__ at build time.")
    gpu_name: str = Field(..., description="GPU name, as CUDA reports it.")
    compute_capability: str = Field(..., description="e.g. '9.0'.")
    min_batch: int = Field(..., gt=0, description="Optimization profile: smallest batch.")
    opt_batch: int = Field(..., gt=0, description="Optimization profile: tuned batch.")
    max_batch: int = Field(..., gt=0, description="Optimization profile: largest batch.")
    fp16: bool = Field(..., description="Built with the FP16 flag.")
    onnx_sha256: str = Field(..., description="Checksum of the ONNX file it was built from.")

    @model_validator(mode="after")
    def _ordered(self) -> TensorRTBuild:
        if not self.min_batch <= self.opt_batch <= self.max_batch:
            raise ValueError("need min_batch <= opt_batch <= max_batch")
        return self


class Variant(StrictModel):
    """Another file of the same model: an FP16 or INT8 ONNX, or a TensorRT engine."""

    file: str = Field(..., min_length=1, description="File name inside the model folder.")
    sha256: str = Field(..., pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the file.")
    format: FileFormat = Field(
        "onnx",
        description="onnx, tensorrt (a serialized engine) or openvino (IR: `file` is the .xml, "
        "its weights the .bin beside it).",
    )
    precision: Precision = Field(..., description="Arithmetic of the weights/activations.")
    made_by: str = Field("", description="Command that produced this variant.")
    calibration: Calibration | None = Field(None, description="INT8 only: calibration record.")
    tensorrt: TensorRTBuild | None = Field(None, description="Engines only: build record.")
    weights_sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="OpenVINO IR only: SHA-256 of the .bin."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Variant:
        if self.format == "tensorrt" and self.tensorrt is None:
            raise ValueError("a tensorrt variant needs its `tensorrt` build record")
        return self


class Manifest(StrictModel):
    """The manifest of one model folder. The tiers load models only through this."""

    manifest_version: Literal[1] = Field(1, description="Format version.")
    name: str = Field(
        ..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Model name (= folder name)."
    )
    task: Task = Field(..., description="detect, classify or embed (appearance).")
    file: str = Field(..., min_length=1, description="Primary model file (ONNX) in the folder.")
    sha256: str = Field(..., pattern=r"^[0-9a-f]{64}$", description="SHA-256 of `file`.")
    precision: Precision = Field("fp32", description="Precision of the primary file.")
    opset: int | None = Field(None, description="ONNX opset of the primary file.")
    input: InputSpec = Field(..., description="The image input.")
    output: OutputSpec = Field(..., description="The output and its format.")
    labels: tuple[str, ...] = Field(..., min_length=1, description="Class names by class id.")
    source: Source = Field(..., description="Where the weights came from.")
    variants: dict[str, Variant] = Field(
        default_factory=dict, description="Other files by key, e.g. fp16, int8, trt-fp16."
    )

    @field_validator("variants")
    @classmethod
    def _keys_are_names(cls, v: dict[str, Variant]) -> dict[str, Variant]:
        for key in v:
            # Keys name files (model.<key>.onnx) and appear on command lines.
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", key) or key == "primary":
                raise ValueError(f"variant key {key!r}: letters, digits, _ . - only, not 'primary'")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        fmt = self.output.format
        if self.task == "detect" and fmt not in DETECT_FORMATS:
            raise ValueError(
                f"a detect model needs a detection layout ({', '.join(DETECT_FORMATS)}), not {fmt}"
            )
        if self.task == "classify" and fmt not in CLASSIFY_FORMATS:
            raise ValueError("a classify model needs output format logits or probabilities")
        if (self.task == "embed") != (fmt == "embedding"):
            raise ValueError("an embed model has output format embedding, and only it has")
        if self.input.shape[1] != 3:
            raise ValueError("input.shape: the channel axis (index 1) must be 3")
        return self

    @property
    def num_classes(self) -> int:
        """Number of classes (= len(labels))."""
        return len(self.labels)


class _Dumper(yaml.SafeDumper):
    """Block mappings (one key a line, easy to diff) with lists in flow style."""


def _flow_list(dumper: yaml.SafeDumper, data: list[object]) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


_Dumper.add_representer(list, _flow_list)


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate one manifest.yaml; ConfigError names file, line and key."""
    return load_yaml_model(Manifest, path)


def dump_manifest(manifest: Manifest, max_labels: int | None = None) -> str:
    """The YAML text of a manifest; `max_labels` shortens long label lists (for display)."""
    data = manifest.model_dump(mode="json", exclude_none=True)
    if max_labels is not None and len(manifest.labels) > max_labels:
        n = len(manifest.labels)
        data["labels"] = [*manifest.labels[: max_labels // 2], f"... {n} labels in all"]
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)


def save_manifest(manifest: Manifest, folder: str | Path) -> Path:
    """Write `folder/manifest.yaml` atomically; returns its path."""
    path = Path(folder) / MANIFEST_FILE
    tmp = path.with_suffix(".yaml.part")
    tmp.write_text(dump_manifest(manifest))
    tmp.replace(path)
    return path


__all__ = [
    "CLASSIFY_FORMATS",
    "DETECT_FORMATS",
    "MANIFEST_FILE",
    "Calibration",
    "ClassifyFormat",
    "ConfigError",
    "DetectFormat",
    "InputSpec",
    "Manifest",
    "OutputSpec",
    "Source",
    "TensorRTBuild",
    "Variant",
    "dump_manifest",
    "load_manifest",
    "save_manifest",
]
