"""`strata models import`: bring any ONNX detector or classifier into a repository, no PyTorch.

The file's input must be one float32 NCHW image with 3 channels (an extra constant-like
input, Paddle's `scale_factor` or `im_shape`, is folded away); its outputs decide the layout
(the rules are in tools/models/infer_layout.py: yolov8, yolov5 / yolox (ambiguous: asks for
--format), gfl, end2end, detr, ssd, logits, probabilities), and `--format` names it where
the shapes cannot. Each layout brings its usual preprocessing (yolox: BGR, 0-255, top-left
letterbox; gfl and Paddle's end2end: stretch, RGB, ImageNet mean/std; the YOLOs: RGB, 1/255,
centred letterbox; classifiers: stretch, ImageNet), every part of it overridable.

What old exporters leave behind is normalised (tools/models/normalise.py: weights listed as
inputs, hard-swish split into four nodes, constant inputs), the normalised graph is checked
to give the file's outputs within 1e-4 on a random and a real frame, and the result is loaded
through its new manifest and run as the tiers do before the import counts. Anything else is
refused with the reason and the way out.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

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

from .infer_layout import Hints, ImportRefusedError, Layout, fmt, infer
from .normalise import FOLDABLE_INPUTS, BatchNotFreeError, Normalised, check_equal, normalise

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
Resize = Literal["letterbox", "letterbox_topleft", "stretch"]

__all__ = ["ImportRefusedError", "ImportRequest", "Imported", "import_model", "read_facts"]


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
    text: str = ""  # file name and metadata values, lower case (the YOLOX hint)


@dataclass(frozen=True, slots=True)
class ImportRequest:
    """What `strata models import` was asked for; None: the layout's usual value."""

    name: str
    onnx: Path
    repository: Path
    labels: tuple[str, ...] = ()  # empty: the file's `names` metadata
    imgsz: int = 0  # fixes dynamic height and width
    colour: Literal["RGB", "BGR"] | None = None
    resize: Resize | None = None
    scale: float | None = None
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    pad_value: float | None = None
    output_format: OutputFormat | None = None  # None: read from the graph
    grid_centre: Literal["half_cell", "nanodet"] | None = None  # gfl; None: from the name
    sample: Path | None = None  # an image or video for the normalisation check
    dynamic_batch: bool = False  # make a batch fixed at 1 dynamic where the graph allows
    force: bool = False


@dataclass(frozen=True, slots=True)
class Imported:
    """The manifest written and what normalisation did (its lines, the largest difference)."""

    manifest: Manifest
    notes: tuple[str, ...] = field(default=())
    max_difference: float = 0.0


def _load(path: Path) -> Any:
    """The checked onnx.ModelProto of `path`; ImportRefusedError when it is not one."""
    import onnx

    if not path.is_file():
        raise ImportRefusedError(f"{path}: no such file")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx raises several types for a damaged file
        raise ImportRefusedError(f"{path.name} is not a valid ONNX model: {exc}") from None
    return model


def read_facts(path: Path) -> OnnxFacts:
    """Inputs (initializers excluded), outputs, opset and metadata of an ONNX file."""
    return facts_of(_load(path), path.name)


def _labels_of(value: str) -> tuple[str, ...]:
    """Labels from ultralytics' `names` metadata (a dict or list literal)."""
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return ()
    if isinstance(parsed, dict):
        return tuple(str(parsed[k]) for k in sorted(parsed))
    if isinstance(parsed, list | tuple):
        return tuple(str(x) for x in parsed)
    return ()


def facts_of(model: Any, file_name: str) -> OnnxFacts:
    """The facts of a loaded model."""
    graph = model.graph
    weights = {t.name for t in graph.initializer}

    def tensor(v: Any) -> Tensor:
        t = v.type.tensor_type
        # Old exporters write -1 (or 0) for a dynamic axis instead of leaving it unset.
        shape = tuple(d.dim_value if d.dim_value > 0 else None for d in t.shape.dim)
        return Tensor(v.name, shape, t.elem_type)

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    meta = {p.key: p.value for p in model.metadata_props}
    return OnnxFacts(
        inputs=tuple(tensor(v) for v in graph.input if v.name not in weights),
        outputs=tuple(tensor(v) for v in graph.output),
        opset=opset,
        last_op={o: n.op_type for n in graph.node for o in n.output},
        names=_labels_of(meta["names"]) if "names" in meta else (),
        text=" ".join([file_name, graph.name, *meta.values()]).lower(),
    )


_fmt = fmt


def _image_input(facts: OnnxFacts) -> Tensor:
    """The image input; the others must be inputs normalisation folds into constants."""
    from onnx import TensorProto

    images = [t for t in facts.inputs if t.name not in FOLDABLE_INPUTS]
    if len(images) != 1:
        names = ", ".join(t.name for t in facts.inputs)
        raise ImportRefusedError(
            f"the model has {len(facts.inputs)} inputs ({names}); the tiers feed one image"
            + (f" (and fold {', '.join(FOLDABLE_INPUTS)})" if len(images) > 1 else "")
        )
    x = images[0]
    if x.elem_type != TensorProto.FLOAT:
        raise ImportRefusedError(
            f"input {x.name!r} is not float32 (ONNX type {x.elem_type}); import the float32 "
            "file (then `strata models fp16` or `quantize` make the smaller variants)"
        )
    if len(x.shape) != 4 or x.shape[1] != 3:
        raise ImportRefusedError(
            f"input {x.name!r} is {_fmt(x.shape)}: not an image; the tiers feed NCHW images "
            "with 3 channels [N, 3, H, W] (export the model with such an input)"
        )
    return x


def _input_size(x: Tensor, req: ImportRequest) -> tuple[int, int]:
    h, w = x.shape[2], x.shape[3]
    if h is None or w is None:
        if not req.imgsz:
            raise ImportRefusedError(
                f"input {x.name!r} is {_fmt(x.shape)} with a dynamic size; give --imgsz N"
            )
        return req.imgsz, req.imgsz
    if req.imgsz and (h, w) != (req.imgsz, req.imgsz):
        raise ImportRefusedError(f"--imgsz {req.imgsz} but input {x.name!r} is fixed at {h}x{w}")
    return h, w


@dataclass(frozen=True, slots=True)
class _Preprocess:
    colour: Literal["RGB", "BGR"]
    resize: Resize
    scale: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    pad_value: float = 114.0


_YOLO = _Preprocess("RGB", "letterbox", 1 / 255, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
_IMAGENET = _Preprocess("RGB", "stretch", 1 / 255, IMAGENET_MEAN, IMAGENET_STD)


def _usual_preprocess(layout: Layout) -> _Preprocess:
    """Each layout's usual preprocessing (its exporters' own demos)."""
    if layout.task == "classify" or layout.format == "gfl":
        return _IMAGENET  # PicoDet, NanoDet-Plus, torchvision / Keras classifiers
    if layout.format == "end2end" and layout.names:
        return _IMAGENET  # Paddle's detectors with NMS inside
    if layout.format == "yolox":
        return _Preprocess("BGR", "letterbox_topleft", 1.0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    if layout.format == "detr":
        return replace(_YOLO, resize="stretch")  # RT-DETR, D-FINE: a plain resize
    return _YOLO


def _input_spec(
    x: Tensor, hw: tuple[int, int], req: ImportRequest, usual: _Preprocess
) -> InputSpec:
    # A fixed batch (ultralytics exports batch 1 unless told dynamic=True) is taken: the
    # manifest keeps it in shape[0] and every tier runs batches of exactly that size.
    return InputSpec(
        name=x.name,
        shape=(x.shape[0], 3, hw[0], hw[1]),
        colour=req.colour or usual.colour,
        resize=req.resize or usual.resize,
        pad_value=usual.pad_value if req.pad_value is None else req.pad_value,
        scale=usual.scale if req.scale is None else req.scale,
        mean=req.mean or usual.mean,
        std=req.std or usual.std,
    )


def _hints(facts: OnnxFacts, labels: int | None, hw: tuple[int, int]) -> Hints:
    softmax = frozenset(o.name for o in facts.outputs if facts.last_op.get(o.name) == "Softmax")
    return Hints(facts.text, softmax, labels, hw)


def _labels(req: ImportRequest, facts: OnnxFacts, layout: Layout) -> tuple[str, ...]:
    labels = req.labels or facts.names
    want = "" if layout.classes is None else f", {layout.classes} lines"
    if not labels:
        raise ImportRefusedError(
            f"the file names no labels: give --labels FILE (one class name a line{want}) "
            "or --labels coco"
        )
    if layout.classes is not None and len(labels) != layout.classes:
        where = "--labels" if req.labels else "the file's `names` metadata"
        raise ImportRefusedError(
            f"{where} has {len(labels)} labels for {layout.classes} classes (the model's "
            f"{layout.format} output); give a label file of {layout.classes} lines"
        )
    return labels


def _grid_centre(req: ImportRequest, facts: OnnxFacts) -> Literal["half_cell", "nanodet"]:
    if req.grid_centre is not None:
        return req.grid_centre
    # NanoDet's original head centres anchors at i x stride + (stride - 1) / 2.
    return "nanodet" if "nanodet" in facts.text and "plus" not in facts.text else "half_cell"


def plan_manifest(req: ImportRequest, facts: OnnxFacts, sha256: str) -> Manifest:
    """The manifest of the imported file; raises ImportRefusedError saying what does not fit."""
    x = _image_input(facts)
    hw = _input_size(x, req)
    given = len(req.labels or facts.names) or None
    layout = infer(facts.outputs, _hints(facts, given, hw), req.output_format)
    labels = _labels(req, facts, layout)
    output = OutputSpec(
        name=layout.name,
        format=layout.format,
        names=layout.names,
        strides=layout.strides,
        reg_max=layout.reg_max,
        grid_centre=_grid_centre(req, facts) if layout.format == "gfl" else "half_cell",
    )
    return Manifest(
        name=req.name,
        task=layout.task,  # type: ignore[arg-type]
        file="model.onnx",
        sha256=sha256,
        opset=facts.opset,
        input=_input_spec(x, hw, req, _usual_preprocess(layout)),
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
    return import_detailed(req).manifest


def import_detailed(req: ImportRequest) -> Imported:
    """`import_model`, with what normalisation changed."""
    model = _load(req.onnx)
    facts = facts_of(model, req.onnx.name)
    x = _image_input(facts)
    hw = _input_size(x, req)
    norm = normalise(model, x.name, hw, free_batch=req.dynamic_batch)
    worst = 0.0
    if norm.changed:
        facts = facts_of(norm.model, req.onnx.name)
    manifest = plan_manifest(req, facts, "0" * 64)  # refusals before any file is written
    if norm.changed:
        try:
            worst = _check_normalised(model, norm, manifest, req.sample)
        except BatchNotFreeError:
            # The batch stays as the file has it; the other rewrites are checked again.
            norm = normalise(model, x.name, hw, free_batch=False)
            facts = (
                facts_of(norm.model, req.onnx.name)
                if norm.changed
                else facts_of(model, req.onnx.name)
            )
            manifest = plan_manifest(req, facts, "0" * 64)
            worst = _check_normalised(model, norm, manifest, req.sample) if norm.changed else 0.0
    folder = req.repository / req.name
    if folder.exists() and not req.force:
        raise ImportRefusedError(f"{folder} exists; give --force to replace it")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    try:
        target = folder / manifest.file
        if norm.changed:
            target.write_bytes(norm.model.SerializeToString())
        else:
            shutil.copyfile(req.onnx, target)  # byte for byte: the checksum is the file's
        manifest = _finish(manifest, norm, sha256_of(target))
        save_manifest(manifest, folder)
        _try_run(ModelRepository(req.repository), manifest)
    except (ModelError, ImportRefusedError):
        shutil.rmtree(folder)  # nothing half-imported stays behind
        raise
    return Imported(manifest, norm.notes, worst)


def _finish(manifest: Manifest, norm: Normalised, sha256: str) -> Manifest:
    update: dict[str, Any] = {"sha256": sha256}
    if norm.changed:
        notes = f"{manifest.source.notes}; normalised on import: {'; '.join(norm.notes)}"
        update["source"] = manifest.source.model_copy(update={"notes": notes})
    return manifest.model_copy(update=update)


def _check_normalised(model: Any, norm: Normalised, m: Manifest, sample: Path | None) -> float:
    """The normalised graph's largest difference from the file's on a random and a real
    input, preprocessed as the manifest says; refused over the tolerance."""
    n = m.input.fixed_batch or 1
    h, w = m.input.height, m.input.width
    rng = np.random.default_rng(0)
    frame = _real_frame(sample, rng)
    real = np.stack([_preprocess(frame, m.input)] * n)
    lo, hi = float(real.min()), float(real.max())
    noise = rng.uniform(lo, hi, (n, 3, h, w)).astype(np.float32)
    try:
        return check_equal(model.SerializeToString(), norm, m.input.name, [noise, real])
    except BatchNotFreeError:
        raise
    except ValueError as exc:
        raise ImportRefusedError(
            f"normalising the graph ({'; '.join(norm.notes)}) changed its outputs: {exc}; "
            "this is a bug in strata's normaliser: please report it with the file"
        ) from None
    except Exception as exc:  # ONNX Runtime's errors have no common base class
        raise ImportRefusedError(f"ONNX Runtime cannot run the file: {exc}") from None


def _real_frame(sample: Path | None, rng: np.random.Generator) -> np.ndarray:
    """A BGR frame: the sample's (an image, or a video's first frame), else the project's
    test clip, else a drawn scene (flat areas, edges, gradients) when neither is there."""
    import cv2

    root = Path(__file__).resolve().parents[2]
    for path in [p for p in (sample, root / "data" / "vtest.avi") if p is not None]:
        if not path.is_file():
            continue
        frame = cv2.imread(str(path))
        if frame is None:
            cap = cv2.VideoCapture(str(path))
            ok, frame = cap.read()
            cap.release()
            frame = frame if ok else None
        if frame is not None:
            return np.ascontiguousarray(frame)
        if path == sample:
            raise ImportRefusedError(f"--sample {sample}: neither an image nor a video")
    scene = np.zeros((480, 640, 3), np.uint8)
    scene[:] = np.linspace(40, 220, 640, dtype=np.uint8)[None, :, None]
    for _ in range(12):
        x, y = rng.integers(0, 600), rng.integers(0, 440)
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        cv2.rectangle(scene, (int(x), int(y)), (int(x) + 60, int(y) + 90), colour, -1)
    return scene


def _preprocess(frame: np.ndarray, spec: InputSpec) -> np.ndarray:
    """One frame as the model's input (3, H, W), as the manifest says."""
    from strata.shared.models.detector import preprocess_of
    from strata.shared.vision.letterbox import LetterboxWriter

    if spec.height != spec.width:  # the tiers' writer is square; a plain resize suffices here
        import cv2

        img = cv2.resize(frame, (spec.width, spec.height)).astype(np.float32)
        img = img[:, :, ::-1] if spec.colour == "RGB" else img
        chw = ((img * spec.scale - spec.mean) / spec.std).transpose(2, 0, 1)
        return np.ascontiguousarray(chw, np.float32)
    out = np.empty((3, spec.height, spec.width), np.float32)
    LetterboxWriter(spec.height, preprocess_of(spec)).write(frame, out)
    return out


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
        outs = loaded.runner.run(x)
    except Exception as exc:  # ONNX Runtime's errors have no common base class
        raise ImportRefusedError(f"ONNX Runtime cannot run it on a batch of {n}: {exc}") from None
    finally:
        loaded.close()
    for spec, out in zip(loaded.runner.outputs, outs, strict=True):
        # Outputs with a batch axis (rank 3: every layout's maps and boxes; classifiers'
        # [N, C]) hold one row a frame; Paddle's [K, 6], counts and NanoDet's [A, C] do not.
        batched = out.ndim == 3 or (manifest.task == "classify" and out.ndim == 2)
        if batched and out.shape[0] != n:
            raise ImportRefusedError(
                f"a batch of {n} gave output {spec.name!r} of shape {list(out.shape)}"
            )
