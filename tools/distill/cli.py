"""`strata models distill`: train the three tiers' models for one camera from teachers."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from strata.shared.cli.common import add_config_flag, load_or_exit


def add_parser(sub: Any) -> None:
    """Add `distill` under `strata models`."""
    p = sub.add_parser(
        "distill",
        help="Train detector, gate and verifier students on clips from a fixed camera, "
        "labelled by teachers (needs the export extra).",
        description="Label clips with teachers (HOG people detector, MOG2 motion blobs, a "
        "detector from the repository), fuse and track the boxes, then train YOLOv8n, a "
        "MobileNetV3-Small gate and a Swin crop verifier on the first part of each clip and "
        "score them on the held-out rest. Writes models, manifests and model cards.",
    )
    add_config_flag(p)
    p.add_argument("clips", nargs="+", help="Video files from one fixed camera.")
    p.add_argument("--into", required=True, help="Model repository to write the students to.")
    p.add_argument(
        "--work", help="Folder for labels, datasets and training runs (default: INTO/.distill)."
    )
    p.add_argument(
        "--teachers",
        default="hog,motion",
        help="Comma-separated teachers: hog, motion, model (default hog,motion).",
    )
    p.add_argument(
        "--teacher-model",
        help="Detector for the `model` teacher: a name in --repository or an ONNX file.",
    )
    p.add_argument(
        "--repository", "-r", help="Repository the teacher model comes from (default: config)."
    )
    p.add_argument(
        "--parts",
        default="detector,gate,verifier",
        help="Which students to train (default all: detector,gate,verifier).",
    )
    p.add_argument("--holdout", type=float, default=0.2, help="Held-out tail of each clip.")
    p.add_argument("--imgsz", type=int, default=320, help="Student detector input size.")
    p.add_argument("--student-epochs", type=int, default=30, help="Detector epochs.")
    p.add_argument(
        "--student-hours", type=float, default=0.0, help="Detector time budget (overrides epochs)."
    )
    p.add_argument("--student-batch", type=int, default=8, help="Detector batch size.")
    p.add_argument(
        "--student-weights", help="Skip detector training: export and score this checkpoint."
    )
    p.add_argument("--gate-epochs", type=int, default=3, help="Gate epochs.")
    p.add_argument("--gate-size", type=int, default=224, help="Gate input size.")
    p.add_argument("--verifier-epochs", type=int, default=3, help="Verifier epochs.")
    p.add_argument("--gate-stride", type=int, default=2, help="Gate: every n-th frame.")
    p.add_argument("--verifier-stride", type=int, default=3, help="Verifier: every n-th frame.")
    p.add_argument("--verifier-size", type=int, default=224, help="Verifier input size.")
    p.add_argument(
        "--swin-size", default="mini", help="Verifier Swin size (tiny, mini, micro), default mini."
    )
    p.add_argument(
        "--max-steps", type=int, default=0, help="Cap on classifier optimizer steps (0: none)."
    )
    p.add_argument("--frame-stride", type=int, default=1, help="Detector: every n-th frame.")
    p.add_argument("--speed-frames", type=int, default=40, help="Frames timed for the speed check.")
    p.add_argument(
        "--threads", type=int, default=0, help="Torch threads (0: default; 1 on a busy CPU)."
    )
    p.add_argument("--relabel", action="store_true", help="Ignore teacher labels from --work.")
    p.set_defaults(func=run)


def _teacher_model(args: argparse.Namespace) -> Path | None:
    if not args.teacher_model:
        return None
    path = Path(args.teacher_model)
    if path.suffix == ".onnx" or path.is_file():
        return path
    from strata.shared.models import ModelRepository

    overrides = {"models": {"repository": args.repository}} if args.repository else {}
    cfg = load_or_exit(args, overrides, "models")
    repo = ModelRepository(cfg.models.repository)
    manifest, _, file = repo.file_of(args.teacher_model)
    if manifest.task != "detect":
        raise ValueError(f"teacher model {args.teacher_model!r} is a {manifest.task} model")
    return Path(file)


def run(args: argparse.Namespace) -> int:
    """Run the distillation and print the held-out scores as JSON."""
    load_or_exit(args, {}, "models")
    from strata.tools.distill.labels import ClipError
    from strata.tools.distill.pipeline import DistillRequest, distill

    clips = tuple(Path(c) for c in args.clips)
    missing = [str(c) for c in clips if not c.is_file()]
    if missing:
        print(f"strata models distill: no such clip: {', '.join(missing)}", file=sys.stderr)
        return 2
    if not 0.0 < args.holdout < 1.0:
        print("strata models distill: --holdout must be between 0 and 1", file=sys.stderr)
        return 2
    into = Path(args.into)
    try:
        import torch  # noqa: F401
    except ImportError:
        print(
            "strata models distill: needs the export extra (torch, ultralytics, timm): "
            "pip install 'strata[export]'",
            file=sys.stderr,
        )
        return 2
    try:
        req = DistillRequest(
            clips=clips,
            repository=into,
            work=Path(args.work) if args.work else into / ".distill",
            teachers=tuple(t.strip() for t in args.teachers.split(",") if t.strip()),
            teacher_model=_teacher_model(args),
            holdout=args.holdout,
            parts=tuple(p.strip() for p in args.parts.split(",") if p.strip()),
            imgsz=args.imgsz,
            student_epochs=args.student_epochs,
            student_hours=args.student_hours,
            student_batch=args.student_batch,
            student_weights=Path(args.student_weights) if args.student_weights else None,
            gate_epochs=args.gate_epochs,
            gate_size=args.gate_size,
            verifier_epochs=args.verifier_epochs,
            verifier_size=args.verifier_size,
            gate_stride=args.gate_stride,
            verifier_stride=args.verifier_stride,
            swin_size=args.swin_size,
            max_steps=args.max_steps,
            frame_stride=args.frame_stride,
            speed_frames=args.speed_frames,
            reuse_labels=not args.relabel,
            threads=args.threads,
        )
        report = distill(req)
    except (ClipError, ValueError) as exc:
        print(f"strata models distill: {exc}", file=sys.stderr)
        return 2
    summary = {
        "detector": report.detector.get("heldout"),
        "speed": report.detector.get("speed"),
        "gate_accuracy": report.gate.get("heldout_accuracy_onnx"),
        "verifier_accuracy": report.verifier.get("heldout_accuracy_onnx"),
        "repository": str(into),
    }
    print(json.dumps(summary, indent=2, default=str))
    return 0
