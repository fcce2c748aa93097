"""`strata models distill`: teacher labels -> three trained students in a model repository.

Steps: label every clip with the teachers (fused, tracked); train the YOLOv8n student on
the training frames, export it and score it on the held-out frames against the teacher's
boxes, timing it against the HOG teacher in the same run; train and score the
MobileNetV3-Small gate and the Swin crop verifier the same way; write manifests, a model
card per model and distill.json.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from strata.shared.machine import describe
from strata.tools.distill.labels import ClipLabels, label_clip
from strata.tools.portable import portable, portable_text

log = logging.getLogger(__name__)

PARTS = ("detector", "gate", "verifier")
GATE_LABELS = ("nothing", "something")
VERIFIER_LABELS = ("not_person", "person")


@dataclass(frozen=True, slots=True)
class DistillRequest:
    """Everything `strata models distill` was asked for."""

    clips: tuple[Path, ...]
    repository: Path
    work: Path
    teachers: tuple[str, ...] = ("hog", "motion")
    teacher_model: Path | None = None
    holdout: float = 0.2
    parts: tuple[str, ...] = PARTS
    detector_name: str = "yolov8n"
    gate_name: str = "mobilenetv3_small"
    verifier_name: str = "swin"
    imgsz: int = 320
    student_epochs: int = 30
    student_hours: float = 0.0
    student_batch: int = 8
    student_weights: Path | None = None  # skip training: export and score this checkpoint
    gate_epochs: int = 3
    gate_size: int = 224
    verifier_epochs: int = 3
    gate_stride: int = 2  # every n-th frame makes gate images
    verifier_stride: int = 3  # every n-th frame gives verifier crops
    verifier_size: int = 224
    swin_size: str = "mini"
    max_steps: int = 0  # classifiers: cap on optimizer steps (0: the epochs decide)
    frame_stride: int = 1  # detector: every n-th training frame
    speed_frames: int = 40
    reuse_labels: bool = True
    threads: int = 0  # torch intra-op threads (0: torch's default); 1 on a busy machine


@dataclass(slots=True)
class DistillReport:
    """What was trained and how it scored on held-out frames (written as distill.json)."""

    request: dict[str, Any]
    machine: dict[str, Any]
    clips: list[dict[str, Any]] = field(default_factory=list)
    detector: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)
    verifier: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def _labels(req: DistillRequest) -> list[ClipLabels]:
    out: list[ClipLabels] = []
    for k, clip in enumerate(req.clips):
        folder = req.work / "labels" / f"{k:02d}_{clip.stem}"
        if req.reuse_labels and (folder / "labels.json").is_file():
            lab = ClipLabels.load(folder)
            if lab.clip == clip.resolve() and lab.teachers == req.teachers:
                log.info("reusing teacher labels for %s from %s", clip, folder)
                out.append(lab)
                continue
        lab = label_clip(clip, req.teachers, req.teacher_model, holdout=req.holdout)
        lab.save(folder)
        out.append(lab)
    return out


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    """NaN -> None so distill.json stays valid JSON."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def distill(req: DistillRequest) -> DistillReport:
    """Run the whole distillation; returns (and writes) the report."""
    from strata.tools.distill.train import device_name

    bad = [p for p in req.parts if p not in PARTS]
    if bad:
        raise ValueError(f"unknown part(s) {bad}; known: {', '.join(PARTS)}")
    t_start = time.perf_counter()
    if req.threads > 0:
        import torch

        # Oversubscribed OpenMP threads spin and can slow training tenfold on shared CPUs.
        torch.set_num_threads(req.threads)
    req.work.mkdir(parents=True, exist_ok=True)
    req.repository.mkdir(parents=True, exist_ok=True)
    report = DistillReport(
        request={k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(req).items()},
        machine=describe(),
    )
    report.request["clips"] = [str(c) for c in req.clips]
    labels = _labels(req)
    report.clips = [_clip_summary(lab) for lab in labels]
    report.machine["device"] = device_name()
    if "detector" in req.parts:
        report.detector = _distill_detector(req, labels)
    if "gate" in req.parts:
        report.gate = _distill_classifier("gate", req, labels)
    if "verifier" in req.parts:
        report.verifier = _distill_classifier("verifier", req, labels)
    report.seconds = time.perf_counter() - t_start
    _write(report, req)
    return report


def _clip_summary(lab: ClipLabels) -> dict[str, Any]:
    return {
        "clip": lab.clip.name,
        "frames": lab.frames,
        "size": f"{lab.width}x{lab.height}",
        "holdout_start": lab.holdout_start,
        "teachers": list(lab.teachers),
        "stats": asdict(lab.stats),
    }


def _distill_detector(req: DistillRequest, labels: list[ClipLabels]) -> dict[str, Any]:
    """Train (or take) the YOLO student, export it, score it and time it against HOG."""
    from strata.tools.distill.dataset import write_detection_set
    from strata.tools.distill.evaluate import compare_speed, score_detector
    from strata.tools.distill.train import train_student

    ds = write_detection_set(labels, req.work / "detector_data", stride=req.frame_stride)
    if req.student_weights is not None:
        weights = req.student_weights
        train_info = checkpoint_info(req.student_weights)
    else:
        run = train_student(
            ds.yaml,
            req.work / "runs",
            epochs=req.student_epochs,
            imgsz=req.imgsz,
            batch=req.student_batch,
            hours=req.student_hours,
        )
        weights = run.weights
        train_info = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(run).items()}
    manifest = _export("yolo", req.detector_name, req, weights, ("person",), req.imgsz)
    onnx = req.repository / req.detector_name / manifest.file
    score, _ = score_detector(onnx, labels)
    speed = compare_speed(onnx, labels, req.speed_frames)
    return {
        "name": req.detector_name,
        "train": train_info,
        "train_images": ds.train_images,
        "val_images": ds.val_images,
        "heldout": _clean(asdict(score)),
        "speed": {**asdict(speed), "speedup_vs_hog": speed.speedup},
    }


def _distill_classifier(part: str, req: DistillRequest, labels: list[ClipLabels]) -> dict[str, Any]:
    """Train, export and score the gate (MobileNetV3) or the crop verifier (Swin)."""
    from strata.tools.distill.dataset import gate_set, verifier_set
    from strata.tools.distill.evaluate import classifier_accuracy
    from strata.tools.distill.train import train_classifier

    if part == "gate":
        name, kind, size, classes = req.gate_name, "mobilenetv3_small", req.gate_size, GATE_LABELS
        data = gate_set(labels, size=size, stride=req.gate_stride)
        extra: dict[str, Any] = {}
        epochs = req.gate_epochs
    else:
        name, kind, size, classes = req.verifier_name, "swin", req.verifier_size, VERIFIER_LABELS
        data = verifier_set(labels, size=size, stride=req.verifier_stride)
        extra = {"swin_size": req.swin_size, "lr": 1e-3}
        epochs = req.verifier_epochs
    run = train_classifier(
        kind, data, req.work / f"{part}.pt", epochs, imgsz=size, max_steps=req.max_steps, **extra
    )
    manifest = _export(kind, name, req, run.state_dict, classes, size)
    acc = classifier_accuracy(req.repository / name / manifest.file, data.test_x, data.test_y)
    return _classifier_report(name, run, acc, data.test_y, data.train_y)


def _write(report: DistillReport, req: DistillRequest) -> None:
    """distill.json, a model card per part and the manifests' notes, with no absolute path."""
    from strata.shared.models.manifest import MANIFEST_FILE, load_manifest, save_manifest
    from strata.tools.distill import card

    for part in req.parts:
        getattr(report, part)["command"] = card.command(report)
    _merge_previous(report, req)
    for f in fields(report):
        setattr(report, f.name, portable(getattr(report, f.name)))
    (req.repository / "distill.json").write_text(json.dumps(asdict(report), indent=2, default=str))
    for part, name in (
        ("detector", req.detector_name),
        ("gate", req.gate_name),
        ("verifier", req.verifier_name),
    ):
        folder = req.repository / name
        # Every part in the (merged) report gets its card rewritten, so they stay in step.
        if not getattr(report, part) or not (folder / MANIFEST_FILE).is_file():
            continue
        (folder / card.CARD_FILE).write_text(portable_text(card.model_card(part, report)))
        m = load_manifest(folder / MANIFEST_FILE)
        src = m.source.model_copy(update={"notes": card.manifest_note(part, report)})
        save_manifest(m.model_copy(update={"source": src}), folder)


def checkpoint_info(weights: Path) -> dict[str, Any]:
    """How an ultralytics checkpoint was trained: its train args and run's results.csv."""
    import csv

    import yaml

    info: dict[str, Any] = {"weights": str(weights)}
    run = weights.resolve().parent.parent
    args_file = run / "args.yaml"
    if args_file.is_file():
        args = yaml.safe_load(args_file.read_text()) or {}
        for key in ("imgsz", "batch", "optimizer", "lr0", "mosaic", "time", "device"):
            if key in args:
                info[key] = args[key]
    results = run / "results.csv"
    if results.is_file():
        with results.open() as fh:
            rows = list(csv.DictReader(fh))
        if rows:
            last = {k.strip(): v for k, v in rows[-1].items()}
            info["epochs"] = len(rows)
            info["seconds"] = float(last.get("time", "nan"))
            info["final_train_box_loss"] = float(last.get("train/box_loss", "nan"))
    return info


def _merge_previous(report: DistillReport, req: DistillRequest) -> None:
    """Keep the sections of parts this run did not train from an earlier distill.json."""
    path = req.repository / "distill.json"
    if not path.is_file():
        return
    try:
        prev = json.loads(path.read_text())
    except (OSError, ValueError):
        log.warning("ignoring unreadable %s", path)
        return
    for part in PARTS:
        if part not in req.parts and prev.get(part):
            setattr(report, part, prev[part])


def _classifier_report(
    name: str, run: Any, onnx_accuracy: float, test_y: Any, train_y: Any
) -> dict[str, Any]:
    import numpy as np

    return {
        "name": name,
        "train": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(run).items()},
        "train_balance": np.bincount(train_y, minlength=2).tolist(),
        "test_balance": np.bincount(test_y, minlength=2).tolist(),
        "heldout_accuracy_onnx": None if math.isnan(onnx_accuracy) else onnx_accuracy,
    }


def _export(
    kind: str,
    name: str,
    req: DistillRequest,
    weights: Path,
    labels: tuple[str, ...],
    imgsz: int,
) -> Any:
    from strata.tools.models.export import BuildRequest, build

    manifest = build(
        BuildRequest(
            kind=kind,
            name=name,
            repository=req.repository,
            weights=str(weights),
            arch=req.swin_size if kind == "swin" else "",
            imgsz=imgsz,
            num_classes=len(labels),
            labels=labels,
        )
    )
    if kind == "yolo":
        manifest = _add_names(req.repository / name, manifest, labels)
    return manifest


def _add_names(folder: Path, manifest: Any, labels: tuple[str, ...]) -> Any:
    """Write the labels into the ONNX metadata as ultralytics' export does (`names`): a
    consumer given only the file (e.g. an explicit model path) still gets them."""
    import onnx
    from strata.shared.models.manifest import save_manifest
    from strata.shared.models.repository import sha256_of

    path = folder / manifest.file
    model = onnx.load(str(path))
    names = repr(dict(enumerate(labels)))
    for prop in model.metadata_props:
        if prop.key == "names":
            prop.value = names
            break
    else:
        model.metadata_props.add(key="names", value=names)
    onnx.save(model, str(path))
    updated = manifest.model_copy(update={"sha256": sha256_of(path)})
    save_manifest(updated, folder)
    return updated
