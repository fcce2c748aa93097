"""Build models from PyTorch into a repository (needs the `export` extra: torch, timm,
ultralytics). Imported only by `strata models build`; never by a tier.

Weights come from a checkpoint or, without one, the bare architecture with random weights.
A yolo checkpoint given by an official name that is not a local file (`yolov8n.pt`) is
downloaded by ultralytics where the machine has internet; timm state dicts are local files.
The manifest says which, so an untrained model is always labelled untrained, and it names
the checkpoint by its file name only (no path of the building machine).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.shared.models.manifest import InputSpec, Manifest, OutputSpec, Source, save_manifest
from strata.shared.models.repository import sha256_of

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
OPSET = 17

# Swin sizes through timm's SwinTransformer. "tiny" is Swin-T (28 M parameters, 110 MB in
# FP32); "mini" is a narrower Swin of the same depth that keeps the starter repository
# under its 40 MB budget.
SWIN_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"embed_dim": 96, "depths": (2, 2, 6, 2), "num_heads": (3, 6, 12, 24)},
    "mini": {"embed_dim": 32, "depths": (2, 2, 6, 2), "num_heads": (1, 2, 4, 8)},
    "micro": {"embed_dim": 16, "depths": (1, 1, 2, 1), "num_heads": (1, 1, 2, 4)},
}


@dataclass(frozen=True, slots=True)
class BuildRequest:
    """What `strata models build` was asked for."""

    kind: str  # yolo | mobilenetv3_small | swin
    name: str
    repository: Path
    weights: str = ""  # checkpoint path; empty: bare architecture
    arch: str = ""  # yolo: model yaml (default yolov8n.yaml); swin: a SWIN_SIZES key
    imgsz: int = 0  # 0: the architecture's default
    num_classes: int = 0  # 0: the default label set
    labels: tuple[str, ...] = ()
    opset: int = OPSET
    simplify: bool = True


def _offline(download: bool = False) -> None:
    # ultralytics otherwise checks for updates, fetches fonts and syncs settings. Some
    # ultralytics versions also refuse to fetch weights while YOLO_OFFLINE is set, so it
    # stays unset when the checkpoint named is one to download.
    if not download:
        os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from ultralytics.utils import SETTINGS

        SETTINGS.update({"sync": False})
    except Exception:  # settings are an optional nicety
        pass


def coco_labels() -> tuple[str, ...]:
    """COCO's 80 class names, from the dataset yaml that ships inside ultralytics."""
    import yaml
    from ultralytics.utils import ROOT

    names = yaml.safe_load((Path(ROOT) / "cfg/datasets/coco.yaml").read_text())["names"]
    return tuple(str(names[i]) for i in sorted(names))


def imagenet_labels() -> tuple[str, ...]:
    """ImageNet-1k short class descriptions, from the table that ships inside timm."""
    from timm.data import ImageNetInfo

    info = ImageNetInfo()
    return tuple(
        str(info.index_to_description(i, detailed=False)) for i in range(info.num_classes())
    )


def _export(model: Any, imgsz: int, path: Path, in_name: str, out_name: str, opset: int) -> None:
    import torch

    dummy = torch.zeros(1, 3, imgsz, imgsz)
    with torch.no_grad():
        # The TorchScript exporter: dynamic_axes keeps the batch symbolic; the dynamo
        # exporter needs onnxscript, which the export extra does not pull in.
        torch.onnx.export(
            model,
            (dummy,),
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=[in_name],
            output_names=[out_name],
            dynamic_axes={in_name: {0: "batch"}, out_name: {0: "batch"}},
            do_constant_folding=True,
        )


def _simplify(path: Path) -> None:
    try:
        import onnx
        import onnxslim
    except ImportError:
        log.warning("onnxslim not installed; keeping the unsimplified graph")
        return
    slim = onnxslim.slim(onnx.load(str(path)))
    onnx.save(slim, str(path))


def build(req: BuildRequest) -> Manifest:
    """Export the requested model to `repository/name/model.onnx` and write its manifest."""
    _offline(download=req.kind == "yolo" and bool(req.weights) and not Path(req.weights).exists())
    import torch

    torch.manual_seed(0)
    if req.kind == "yolo":
        model, imgsz, labels, source, spec = _yolo(req)
    elif req.kind in ("mobilenetv3_small", "swin"):
        model, imgsz, labels, source, spec = _timm(req)
    else:
        raise ValueError(f"unknown model kind {req.kind!r} (yolo, mobilenetv3_small, swin)")
    folder = req.repository / req.name
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        onnx_path = Path(tmp) / "model.onnx"
        out_name = "output0" if req.kind == "yolo" else "logits"
        _export(model, imgsz, onnx_path, spec.name, out_name, req.opset)
        if req.simplify:
            _simplify(onnx_path)
        shutil.move(str(onnx_path), folder / "model.onnx")
    manifest = Manifest(
        name=req.name,
        task="detect" if req.kind == "yolo" else "classify",
        file="model.onnx",
        sha256=sha256_of(folder / "model.onnx"),
        precision="fp32",
        opset=req.opset,
        input=spec,
        output=OutputSpec(name=out_name, format="yolov8" if req.kind == "yolo" else "logits"),
        labels=labels,
        source=source,
    )
    save_manifest(manifest, folder)
    return manifest


def _source(req: BuildRequest, architecture: str, library: str, meaningless: str) -> Source:
    """Where the weights came from; the checkpoint by name, never by this machine's path."""
    trained = bool(req.weights)
    return Source(
        architecture=architecture,
        made_by=f"strata models build {req.kind} ({library}, torch.onnx opset {req.opset})",
        trained=trained,
        weights=Path(req.weights).name if trained else "",
        notes=(
            "weights from the checkpoint named in `weights`"
            if trained
            else f"random initialisation (no checkpoint given): {meaningless} are "
            "meaningless; use it to test plumbing and speed, not accuracy"
        ),
    )


def _yolo(req: BuildRequest) -> tuple[Any, int, tuple[str, ...], Source, InputSpec]:
    from ultralytics import YOLO
    from ultralytics.nn.modules import Detect

    arch = req.arch or "yolov8n.yaml"
    src = req.weights or arch
    yolo = YOLO(src)
    model = yolo.model
    if req.num_classes and not req.weights:
        # A fresh architecture with a different head width (distillation targets).
        from ultralytics.nn.tasks import DetectionModel

        model = DetectionModel(arch, nc=req.num_classes, verbose=False)
    model = model.float().eval()
    if hasattr(model, "fuse"):
        model = model.fuse(verbose=False)
    for m in model.modules():
        if isinstance(m, Detect):
            # Export mode: one [N, 4 + nc, anchors] tensor, anchors made for a fixed size.
            m.export = True
            m.format = "onnx"
            m.dynamic = False
    for p in model.parameters():
        p.requires_grad_(False)
    nc = int(model.model[-1].nc)
    names = getattr(model, "names", None) or {}
    if req.labels:
        labels = req.labels
    elif req.weights and names and len(names) == nc:
        labels = tuple(str(names[i]) for i in range(nc))
    elif nc == 80:
        labels = coco_labels()
    else:
        labels = tuple(f"class{i}" for i in range(nc))
    if len(labels) != nc:
        raise ValueError(f"{len(labels)} labels given for a head with {nc} classes")
    imgsz = req.imgsz or 640
    source = _source(
        req,
        f"YOLO ({Path(arch).stem if not req.weights else Path(src).name})",
        "ultralytics",
        "the boxes and scores",
    )
    spec = InputSpec(
        name="images",
        shape=(None, 3, imgsz, imgsz),
        colour="RGB",
        resize="letterbox",
        scale=1.0 / 255.0,
    )
    return model, imgsz, labels, source, spec


def _timm(req: BuildRequest) -> tuple[Any, int, tuple[str, ...], Source, InputSpec]:
    import timm
    import torch

    nc = req.num_classes or (len(req.labels) if req.labels else 0)
    if req.kind == "mobilenetv3_small":
        nc = nc or 1000
        model = timm.create_model("mobilenetv3_small_100", pretrained=False, num_classes=nc)
        arch = "MobileNetV3-Small 1.0 (timm mobilenetv3_small_100)"
        default_labels = imagenet_labels() if nc == 1000 else ()
    else:
        from timm.models.swin_transformer import SwinTransformer

        size = req.arch or "mini"
        if size not in SWIN_SIZES:
            raise ValueError(f"unknown swin size {size!r} ({', '.join(SWIN_SIZES)})")
        nc = nc or 80
        imgsz0 = req.imgsz or 224
        model = SwinTransformer(img_size=imgsz0, window_size=7, num_classes=nc, **SWIN_SIZES[size])
        cfg = SWIN_SIZES[size]
        arch = (
            f"Swin Transformer ({size}: timm SwinTransformer embed_dim {cfg['embed_dim']}, "
            f"depths {'-'.join(map(str, cfg['depths']))}, heads "
            f"{'-'.join(map(str, cfg['num_heads']))}, window 7)"
        )
        default_labels = coco_labels() if nc == 80 else ()
    if req.weights:
        state = torch.load(req.weights, map_location="cpu", weights_only=True)
        if isinstance(state, dict) and "state_dict" in state:
            state = state["state_dict"]
        model.load_state_dict(state)
    labels = req.labels or default_labels or tuple(f"class{i}" for i in range(nc))
    if len(labels) != nc:
        raise ValueError(f"{len(labels)} labels given for a head with {nc} classes")
    model = model.eval()
    imgsz = req.imgsz or 224
    source = _source(req, arch, "timm", "the class scores")
    spec = InputSpec(
        name="images",
        shape=(None, 3, imgsz, imgsz),
        colour="RGB",
        resize="stretch",
        scale=1.0 / 255.0,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
    )
    return model, imgsz, labels, source, spec
