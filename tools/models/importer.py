"""`strata models import`: bring any ONNX model into a repository without PyTorch.

The file's input and output shapes decide what it is: one float32 NCHW image input with 3
channels and a dynamic batch; one output, [N, 4 + classes, anchors] (a YOLOv8/11 detector
exported without NMS) or [N, classes] (a classifier; probabilities when its last operator
is a Softmax, logits otherwise). Anything else is refused with the reason and, where there
is one, the way out. The copied file is loaded through the new manifest and run on a batch
of two before the import counts, so what is imported is what the tiers can run.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from strata.shared.models.manifest import (
    InputSpec,
    Manifest,
    OutputFormat,
    OutputSpec,
    Source,
    save_manifest,
)
from strata.shared.models.repository import ModelError, ModelRepository, sha256_of

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ImportRefusedError(ValueError):
    """The file is not something the tiers can run; the message says why."""


@dataclass(frozen=True, slots=True)
class Tensor:
    """A graph input or output: name, shape (None for a dynamic axis), ONNX element type."""

    name: str
    shape: tuple[int | None, ...]
    elem_type: int


@dataclass(frozen=True, slots=True)
class OnnxFacts:
    """What the file says about itself."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    opset: int | None
    last_op: dict[str, str]  # output name -> operator producing it
    names: tuple[str, ...]  # labels from ultralytics' `names` metadata, if any


@dataclass(frozen=True, slots=True)
class ImportRequest:
    """What `strata models import` was asked for."""

    name: str
    onnx: Path
    repository: Path
    labels: tuple[str, ...] = ()  # empty: the file's `names` metadata
    imgsz: int = 0  # fixes dynamic height and width
    colour: Literal["RGB", "BGR"] = "RGB"
    resize: Literal["letterbox", "stretch"] | None = None  # None: letterbox for detectors
    scale: float = 1.0 / 255.0
    mean: tuple[float, float, float] | None = None  # None: ImageNet's for classifiers, else 0
    std: tuple[float, float, float] | None = None
    output_format: OutputFormat | None = None  # None: read from the graph
    force: bool = False


def read_facts(path: Path) -> OnnxFacts:
    """Inputs (initializers excluded), outputs, opset and metadata of an ONNX file."""
    import onnx

    if not path.is_file():
        raise ImportRefusedError(f"{path}: no such file")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx raises several types for a damaged file
        raise ImportRefusedError(f"{path.name} is not a valid ONNX model: {exc}") from None
    graph = model.graph
    weights = {t.name for t in graph.initializer}

    def tensor(v: onnx.ValueInfoProto) -> Tensor:
        t = v.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        return Tensor(v.name, shape, t.elem_type)

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    names: tuple[str, ...] = ()
    for prop in model.metadata_props:
        if prop.key == "names":
            try:
                parsed = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                break
            if isinstance(parsed, dict):
                names = tuple(str(parsed[k]) for k in sorted(parsed))
            elif isinstance(parsed, list | tuple):
                names = tuple(str(x) for x in parsed)
    return OnnxFacts(
        inputs=tuple(tensor(v) for v in graph.input if v.name not in weights),
        outputs=tuple(tensor(v) for v in graph.output),
        opset=opset,
        last_op={o: n.op_type for n in graph.node for o in n.output},
        names=names,
    )


def _fmt(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("N" if d is None else str(d) for d in shape) + "]"


def _input_spec(facts: OnnxFacts, req: ImportRequest, task: str) -> InputSpec:
    from onnx import TensorProto

    if len(facts.inputs) != 1:
        names = ", ".join(t.name for t in facts.inputs)
        raise ImportRefusedError(
            f"the model has {len(facts.inputs)} inputs ({names}); the tiers feed one image"
        )
    x = facts.inputs[0]
    if x.elem_type != TensorProto.FLOAT:
        raise ImportRefusedError(
            f"input {x.name!r} is not float32 (ONNX type {x.elem_type}); import the float32 "
            "file (then `strata models fp16` or `quantize` make the smaller variants)"
        )
    if len(x.shape) != 4 or x.shape[1] != 3:
        raise ImportRefusedError(
            f"input {x.name!r} is {_fmt(x.shape)}; the tiers feed NCHW images with 3 channels "
            "[N, 3, H, W]"
        )
    # A fixed batch (ultralytics exports batch 1 unless told dynamic=True) is taken: the
    # manifest keeps it in shape[0] and every tier runs batches of exactly that size.
    h, w = x.shape[2], x.shape[3]
    if h is None or w is None:
        if not req.imgsz:
            raise ImportRefusedError(
                f"input {x.name!r} is {_fmt(x.shape)} with a dynamic size; give --imgsz N"
            )
        h = w = req.imgsz
    elif req.imgsz and (h, w) != (req.imgsz, req.imgsz):
        raise ImportRefusedError(f"--imgsz {req.imgsz} but input {x.name!r} is fixed at {h}x{w}")
    classify = task == "classify"
    return InputSpec(
        name=x.name,
        shape=(x.shape[0], 3, h, w),
        colour=req.colour,
        resize=req.resize or ("stretch" if classify else "letterbox"),
        scale=req.scale,
        mean=req.mean or (IMAGENET_MEAN if classify else (0.0, 0.0, 0.0)),
        std=req.std or (IMAGENET_STD if classify else (1.0, 1.0, 1.0)),
    )


def _task_and_output(facts: OnnxFacts, req: ImportRequest) -> tuple[str, OutputSpec, int]:
    """detect or classify, the output spec and the number of classes, from the output."""
    if len(facts.outputs) != 1:
        names = ", ".join(f"{t.name} {_fmt(t.shape)}" for t in facts.outputs)
        raise ImportRefusedError(
            f"the model has {len(facts.outputs)} outputs ({names}); the tiers read one: "
            "[N, 4 + classes, anchors] (a detector without NMS inside) or [N, classes]"
        )
    y = facts.outputs[0]
    if len(y.shape) == 3:
        rows, anchors = y.shape[1], y.shape[2]
        if rows is None or rows < 5:
            raise ImportRefusedError(
                f"output {y.name!r} is {_fmt(y.shape)}; a YOLOv8 detector gives "
                "[N, 4 + classes, anchors]"
            )
        if anchors is not None and anchors < rows:
            raise ImportRefusedError(
                f"output {y.name!r} is {_fmt(y.shape)}: boxes along axis 1 (a YOLOv5-style or "
                "NMS-included export); the tiers decode YOLOv8/11's [N, 4 + classes, anchors] "
                "without NMS inside (ultralytics: export(format='onnx', nms=False))"
            )
        if req.output_format not in (None, "yolov8"):
            raise ImportRefusedError(f"a [N, rows, anchors] output cannot be {req.output_format}")
        return "detect", OutputSpec(name=y.name, format="yolov8"), rows - 4
    if len(y.shape) == 2:
        classes = y.shape[1]
        if classes is None:
            raise ImportRefusedError(
                f"output {y.name!r} is {_fmt(y.shape)}; the class axis is dynamic"
            )
        fmt: OutputFormat = req.output_format or (
            "probabilities" if facts.last_op.get(y.name) == "Softmax" else "logits"
        )
        if fmt == "yolov8":
            raise ImportRefusedError("a [N, classes] output cannot be yolov8")
        return "classify", OutputSpec(name=y.name, format=fmt), classes
    raise ImportRefusedError(
        f"output {y.name!r} is {_fmt(y.shape)}; the tiers read [N, 4 + classes, anchors] "
        "(detect) or [N, classes] (classify)"
    )


def plan_manifest(req: ImportRequest, facts: OnnxFacts, sha256: str) -> Manifest:
    """The manifest of the imported file; raises ImportRefusedError saying what does not fit."""
    task, output, classes = _task_and_output(facts, req)
    spec = _input_spec(facts, req, task)
    labels = req.labels or facts.names
    if not labels:
        raise ImportRefusedError(
            f"the file names no labels: give --labels FILE (one class name a line, {classes} lines)"
        )
    if len(labels) != classes:
        where = "--labels" if req.labels else "the file's `names` metadata"
        raise ImportRefusedError(f"{where} has {len(labels)} labels for {classes} classes")
    return Manifest(
        name=req.name,
        task=task,  # type: ignore[arg-type]
        file="model.onnx",
        sha256=sha256,
        opset=facts.opset,
        input=spec,
        output=output,
        labels=labels,
        source=Source(
            architecture=f"imported ONNX ({req.onnx.name})",
            made_by="strata models import",
            trained=True,
            weights=req.onnx.name,
            notes="imported as given: strata did not train or check what the weights detect",
        ),
    )


def import_model(req: ImportRequest) -> Manifest:
    """Copy the file into `repository/name/`, write its manifest and load it as the tiers do."""
    facts = read_facts(req.onnx)
    manifest = plan_manifest(req, facts, sha256_of(req.onnx))
    folder = req.repository / req.name
    if folder.exists() and not req.force:
        raise ImportRefusedError(f"{folder} exists; give --force to replace it")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    try:
        shutil.copyfile(req.onnx, folder / manifest.file)
        save_manifest(manifest, folder)
        _try_run(ModelRepository(req.repository), manifest)
    except (ModelError, ImportRefusedError):
        shutil.rmtree(folder)  # nothing half-imported stays behind
        raise
    return manifest


def fixed_batch_warning(manifest: Manifest) -> str | None:
    """The one line `strata models import` prints for a fixed-batch model: what it costs."""
    fixed = manifest.input.fixed_batch
    if fixed is None:
        return None
    return (
        f"input {manifest.input.name!r} has a fixed batch of {fixed}: every tier runs it in "
        f"batches of exactly {fixed} (no batching of more frames per run, lower throughput on "
        "a GPU); export with a dynamic batch to batch (ultralytics: export(dynamic=True))"
    )


def _try_run(repo: ModelRepository, manifest: Manifest) -> None:
    """Load through the manifest (checksum, shapes) and run a batch of two (or the fixed one)."""
    try:
        loaded = repo.open(manifest.name)
    except ModelError as exc:
        raise ImportRefusedError(f"the tiers cannot load it: {exc}") from None
    n = manifest.input.fixed_batch or 2
    try:
        x = np.zeros((n, 3, manifest.input.height, manifest.input.width), np.float32)
        (out,) = loaded.runner.run(x)
    except Exception as exc:  # ONNX Runtime's errors have no common base class
        raise ImportRefusedError(f"ONNX Runtime cannot run it on a batch of {n}: {exc}") from None
    finally:
        loaded.close()
    if out.shape[0] != n:
        raise ImportRefusedError(f"a batch of {n} gave an output of shape {list(out.shape)}")
