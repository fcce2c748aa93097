"""`strata models`: list, inspect, build, quantize and compile models in a repository."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..cli.common import add_config_flag, load_or_exit


def register(subparsers: Any) -> None:
    """Add `strata models` and its subcommands."""
    parser = subparsers.add_parser(
        "models", help="Model repository: list, inspect, build, quantize, engine."
    )
    sub = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    p = sub.add_parser("list", help="List the models in the repository.")
    _common(p)
    p.set_defaults(func=run_list)

    p = sub.add_parser("inspect", help="Show a model's manifest and verify its files.")
    _common(p)
    p.add_argument("name", help="Model name.")
    p.add_argument(
        "--no-load", action="store_true", help="Check files and checksums only, do not load."
    )
    p.set_defaults(func=run_inspect)

    p = sub.add_parser(
        "build", help="Export a model from PyTorch to ONNX (needs the export extra)."
    )
    _common(p)
    p.add_argument(
        "kind", choices=["yolo", "mobilenetv3_small", "swin"], help="Architecture family."
    )
    p.add_argument("--name", help="Model name in the repository (default: from the kind).")
    p.add_argument(
        "--weights",
        default="",
        help="Checkpoint: ultralytics .pt for yolo, a state dict for timm models; "
        "omitted: the bare architecture with random (untrained) weights.",
    )
    p.add_argument(
        "--arch",
        default="",
        help="yolo: architecture yaml (default yolov8n.yaml); swin: size tiny|mini|micro "
        "(default mini).",
    )
    p.add_argument("--imgsz", type=int, default=0, help="Input size (default 640 / 224).")
    p.add_argument("--num-classes", type=int, default=0, help="Head width (default: labels).")
    p.add_argument("--labels", help="File with one class name per line.")
    p.add_argument("--opset", type=int, default=17, help="ONNX opset (>= 17).")
    p.add_argument("--fp16", action="store_true", help="Also write an FP16 variant.")
    p.add_argument("--no-simplify", action="store_true", help="Skip onnxslim.")
    p.set_defaults(func=run_build)


def _common(p: argparse.ArgumentParser) -> None:
    add_config_flag(p)
    p.add_argument(
        "--repository",
        "-r",
        help="Model repository folder (default: models.repository, else the starter one).",
    )


def _repo_path(args: argparse.Namespace) -> str:
    overrides = {"models": {"repository": args.repository}} if args.repository else {}
    cfg = load_or_exit(args, overrides, "models")
    return cfg.models.repository


def _repo(args: argparse.Namespace) -> Any:
    from .repository import ModelError, ModelRepository

    try:
        return ModelRepository(_repo_path(args))
    except ModelError as exc:
        print(f"strata models: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def run_list(args: argparse.Namespace) -> int:
    """Print one line per model: name, task, precision, variants, trained or not."""
    from .repository import ModelError

    repo = _repo(args)
    print(f"repository: {repo.root}")
    rc = 0
    for name in repo.names():
        try:
            m = repo.manifest(name)
        except ModelError as exc:
            print(f"  {name:<24} INVALID: {exc}")
            rc = 1
            continue
        variants = ",".join([m.precision, *m.variants])
        trained = "trained" if m.source.trained else "UNTRAINED"
        shape = "x".join("N" if d is None else str(d) for d in m.input.shape)
        print(f"  {name:<24} {m.task:<8} {shape:<14} {variants:<24} {trained}")
    return rc


def run_inspect(args: argparse.Namespace) -> int:
    """Print the manifest, then verify (and load) every file it names."""
    from .manifest import dump_manifest
    from .repository import ModelError

    repo = _repo(args)
    try:
        manifest = repo.manifest(args.name)
    except ModelError as exc:
        print(f"strata models: {exc}", file=sys.stderr)
        return 2
    text = dump_manifest(manifest, max_labels=20)
    print(text)
    rc = 0
    for key in [None, *manifest.variants]:
        try:
            if args.no_load or (key and manifest.variants[key].format == "tensorrt"):
                _, label, path = repo.file_of(args.name, key)
                print(f"ok   {label:<10} {path.name}: file present, checksum matches")
            else:
                loaded = repo.open(args.name, variant=key)
                print(
                    f"ok   {loaded.variant:<10} {loaded.path.name}: checksum matches, loads in "
                    f"{loaded.runner.backend}, inputs/outputs agree with the manifest"
                )
                loaded.close()
        except ModelError as exc:
            print(f"FAIL {exc}")
            rc = 1
    return rc


def run_build(args: argparse.Namespace) -> int:
    """Export a model from PyTorch into the repository (and an FP16 variant)."""
    try:
        from .export import BuildRequest, build
    except ImportError as exc:
        print(
            f"strata models build: needs the export extra ({exc.name} missing): "
            "pip install 'strata[export]'",
            file=sys.stderr,
        )
        return 2
    path = _repo_path(args)
    if not path:
        print(
            "strata models build: give --repository DIR (the starter repository is read-only)",
            file=sys.stderr,
        )
        return 2
    labels: tuple[str, ...] = ()
    if args.labels:
        labels = tuple(
            line.strip() for line in Path(args.labels).read_text().splitlines() if line.strip()
        )
    default_name = {"yolo": "yolov8n", "mobilenetv3_small": "mobilenetv3_small", "swin": "swin"}
    req = BuildRequest(
        kind=args.kind,
        name=args.name or default_name[args.kind],
        repository=Path(path),
        weights=args.weights,
        arch=args.arch,
        imgsz=args.imgsz,
        num_classes=args.num_classes,
        labels=labels,
        opset=args.opset,
        simplify=not args.no_simplify,
    )
    try:
        manifest = build(req)
    except (ValueError, FileNotFoundError) as exc:
        print(f"strata models build: {exc}", file=sys.stderr)
        return 2
    print(f"built {manifest.name} -> {Path(path) / manifest.name / manifest.file}")
    if args.fp16:
        from .fp16 import add_fp16_variant

        variant = add_fp16_variant(Path(path), manifest.name)
        print(f"fp16 variant -> {Path(path) / manifest.name / variant.file}")
    if not manifest.source.trained:
        print("note: no checkpoint given, so the weights are random: labelled untrained")
    return 0
