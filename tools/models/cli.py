"""`strata models`: list, inspect, build, quantize and compile models in a repository."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strata.shared.cli.common import add_config_flag, load_or_exit


def register(subparsers: Any) -> None:
    """Add `strata models` and its subcommands."""
    from strata.tools.distill.cli import add_parser as add_distill

    actions = [*_ACTIONS, ("distill", add_distill)]
    parser = subparsers.add_parser(
        "models", help="Model repository: " + ", ".join(name for name, _ in actions) + "."
    )
    sub = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    for _, add in actions:
        add(sub)


def _add_list(sub: Any) -> None:
    p = sub.add_parser("list", help="List the models in the repository.")
    _common(p)
    p.set_defaults(func=run_list)


def _add_inspect(sub: Any) -> None:
    p = sub.add_parser("inspect", help="Show a model's manifest and verify its files.")
    _common(p)
    p.add_argument("name", help="Model name.")
    p.add_argument(
        "--no-load", action="store_true", help="Check files and checksums only, do not load."
    )
    p.set_defaults(func=run_inspect)


# The layouts `import --format` takes (= infer_layout.LAYOUTS, checked by a test), spelt out
# so that building the parser imports no model code (`strata --help` stays light).
FORMATS = (
    "yolov8",
    "yolov5",
    "yolox",
    "gfl",
    "end2end",
    "detr",
    "ssd",
    "logits",
    "probabilities",
)


def _add_import(sub: Any) -> None:
    p = sub.add_parser(
        "import",
        help="Bring any ONNX detector or classifier into a repository (no PyTorch).",
        description="Copy an ONNX file into the repository with a manifest made from its "
        "input and output shapes (the layout inferred where the shapes say it; --format "
        "otherwise), normalise what old exporters leave behind (checked: same outputs), then "
        "load and run it as the tiers do. A file the tiers cannot run is refused with the "
        "reason. Then `models.repository: DIR` and `edge.model.name: NAME` run it.",
    )
    _common(p)
    p.add_argument("name", help="Model name in the repository.")
    p.add_argument("onnx", help="The ONNX file.")
    p.add_argument(
        "--labels",
        help="File with one class name per line, or `coco` (the 80 COCO labels) "
        "(default: the file's `names`).",
    )
    p.add_argument("--imgsz", type=int, default=0, help="Input size when the file's is dynamic.")
    p.add_argument(
        "--format",
        "--output-format",
        dest="output_format",
        choices=FORMATS,
        help="Output layout (default: from the graph's outputs; a final Softmax means "
        "probabilities).",
    )
    p.add_argument(
        "--colour", choices=["RGB", "BGR"], help="Channel order (default: the layout's; yolox BGR)."
    )
    p.add_argument(
        "--resize",
        choices=["letterbox", "letterbox_topleft", "stretch"],
        help="Default: the layout's (letterbox for YOLOs, letterbox_topleft for yolox, "
        "stretch for gfl, Paddle's end2end, detr and classifiers).",
    )
    p.add_argument("--pad-value", type=float, help="Letterbox padding 0-255 (default 114).")
    p.add_argument(
        "--scale", type=float, help="Pixel multiplier (default 1/255; yolox 1: values 0-255)."
    )
    p.add_argument(
        "--mean", help="Mean per channel after scaling (default: ImageNet's for classifiers, gfl)."
    )
    p.add_argument(
        "--std", help="Std per channel after the mean (default: ImageNet's for classifiers, gfl)."
    )
    p.add_argument(
        "--grid-centre",
        choices=["half_cell", "nanodet"],
        help="gfl: anchor centres (default half_cell, PicoDet; nanodet when the file says so).",
    )
    p.add_argument(
        "--sample",
        help="Image or video whose first frame checks the normalised graph "
        "(default: data/vtest.avi where present).",
    )
    p.add_argument(
        "--dynamic-batch",
        action="store_true",
        help="Make a batch fixed at 1 dynamic where only Reshape shapes fix it (Paddle "
        "exports); checked: two frames in one batch must equal their own runs, else refused.",
    )
    p.add_argument("--force", action="store_true", help="Replace a model of that name.")
    p.set_defaults(func=run_import)


def _add_build(sub: Any) -> None:
    p = sub.add_parser(
        "build", help="Export a model from PyTorch to ONNX (needs the export extra)."
    )
    _common(p)
    p.add_argument(
        "kind", choices=["yolo", "mobilenetv3_small", "swin"], help="Architecture family."
    )
    p.add_argument(
        "--name",
        help="Model name in the repository (default: yolov8n or the yaml's stem, "
        "mobilenetv3_small, swin).",
    )
    p.add_argument(
        "--weights",
        default="",
        help="Checkpoint: ultralytics .pt for yolo (an official name such as yolov8n.pt that "
        "is not a local file is downloaded by ultralytics where the machine has internet), a "
        "state dict for timm models; omitted: the bare architecture with random (untrained) "
        "weights.",
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


def _add_fp16(sub: Any) -> None:
    p = sub.add_parser("fp16", help="Add an FP16 variant of a model's ONNX file (no torch).")
    _common(p)
    p.add_argument("name", help="Model name.")
    _into(p)
    p.set_defaults(func=run_fp16)


def _add_quantize(sub: Any) -> None:
    p = sub.add_parser(
        "quantize", help="INT8 static quantization calibrated on a clip; reports agreement."
    )
    _common(p)
    p.add_argument("name", help="Model name, or a model folder (its name, -r its parent).")
    p.add_argument("--clip", help="Video to calibrate and evaluate on (the QDQ-only mode).")
    site = p.add_argument_group(
        "site calibration (a detector; INT8 kept only when it agrees with FP32)"
    )
    site.add_argument(
        "--calibration",
        nargs="+",
        type=Path,
        help="The site's own clips or folders of kept frames (JPEG/PNG) to calibrate on.",
    )
    site.add_argument(
        "--held-out",
        nargs="+",
        type=Path,
        help="Clips the calibration does not see; agreement with FP32 is measured on them.",
    )
    site.add_argument(
        "--engine",
        choices=["openvino", "onnxruntime"],
        default="openvino",
        help="openvino: NNCF (pip install 'strata[quantize]'); onnxruntime: QDQ.",
    )
    site.add_argument(
        "--threshold",
        type=float,
        default=0.95,
        help="Least box F1 (IoU 0.5, same label) against FP32 on held-out frames; under it "
        "the quantizer refuses and writes nothing.",
    )
    site.add_argument("--calibration-frames", type=int, default=128, help="Calibration frames.")
    site.add_argument("--held-out-frames", type=int, default=100, help="Held-out frames.")
    site.add_argument(
        "--score", type=float, default=0.5, help="Score both models are cut at (min_score)."
    )
    site.add_argument("--report", type=Path, help="Also write the report (JSON) here.")
    p.add_argument(
        "--method",
        choices=["entropy", "minmax", "percentile", "auto"],
        default="entropy",
        help="Calibration method; auto tries all three and keeps the best agreement.",
    )
    p.add_argument("--samples", type=int, default=32, help="Calibration frames.")
    p.add_argument("--eval-frames", type=int, default=32, help="Frames to measure agreement on.")
    p.add_argument(
        "--keep-float",
        default="LayerNormalization,Softmax",
        help="Comma-separated operator types left in float ('' for none).",
    )
    p.add_argument("--exclude-nodes", default="", help="Regex over node names kept in float.")
    _timing(p, "Timed batch-1 runs per model.")
    p.add_argument("--variant", default="int8", help="Variant key to record.")
    p.add_argument(
        "--as-model",
        metavar="NAME",
        help="Also store the INT8 file as a model of its own (e.g. yolov8n-int8), which any "
        "tier loads by name.",
    )
    _into(p)
    p.set_defaults(func=run_quantize)


def _add_promote(sub: Any) -> None:
    p = sub.add_parser(
        "promote",
        help="Make a new numbered version of a model (from --file or --variant), or with "
        "--as store a variant as a model of its own.",
    )
    _common(p)
    p.add_argument("name", help="Model name.")
    p.add_argument("--variant", help="Variant key, e.g. int8 or fp16.")
    p.add_argument("--file", help="ONNX file that becomes the next version.")
    p.add_argument(
        "--as", dest="as_model", help="New model name (the variant as a model of its own)."
    )
    p.set_defaults(func=run_promote)


def _add_bench(sub: Any) -> None:
    p = sub.add_parser(
        "bench", help="Compare a model's variants on a clip: agreement and latency, one run."
    )
    _common(p)
    p.add_argument("name", help="Model name.")
    p.add_argument(
        "--variants",
        default="",
        help="Comma-separated variant keys, each optionally KEY@BACKEND (e.g. "
        "primary@onnxruntime-cuda,trt-fp16@tensorrt); the first is the reference "
        "(default: primary, then every ONNX variant).",
    )
    p.add_argument("--clip", required=True, help="Video whose frames are the inputs.")
    p.add_argument("--frames", type=int, default=32, help="Frames for agreement.")
    _timing(p, "Timed runs per variant.")
    p.add_argument("--batch", type=int, default=1, help="Batch size of the timed runs.")
    p.add_argument("--backend", default="onnxruntime-cpu", help="Runtime back end.")
    p.set_defaults(func=run_bench)


def _add_compare(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="Detectors of any layouts on one clip: ms a frame and agreement per label.",
    )
    _common(p)
    p.add_argument("names", nargs="+", help="Detector names; the first is the reference.")
    p.add_argument("--clip", required=True, help="Video whose frames are the inputs.")
    p.add_argument("--frames", type=int, default=100, help="Frames, spread over the clip.")
    p.add_argument("--threads", default="1,2", help="ONNX Runtime thread counts to time.")
    p.add_argument("--score", type=float, default=0.5, help="Both models cut at this score.")
    p.add_argument("--labels", default="", help="Comma-separated labels (default: all found).")
    p.add_argument("--json", default="", help="Also write the figures as JSON here.")
    p.set_defaults(func=run_compare)


def _add_engine(sub: Any) -> None:
    p = sub.add_parser("engine", help="Build a TensorRT engine (GPU, TensorRT 10).")
    _common(p)
    p.add_argument("name", help="Model name.")
    p.add_argument("--min-batch", type=int, default=1, help="Profile: smallest batch.")
    p.add_argument("--opt-batch", type=int, default=8, help="Profile: batch tuned for.")
    p.add_argument("--max-batch", type=int, default=16, help="Profile: largest batch.")
    p.add_argument("--no-fp16", action="store_true", help="Build in FP32.")
    p.add_argument("--from-variant", help="ONNX variant to build from (default: primary).")
    p.add_argument("--force", action="store_true", help="Rebuild even when up to date.")
    _into(p)
    p.set_defaults(func=run_engine)


_ACTIONS: tuple[tuple[str, Callable[[Any], None]], ...] = (
    ("list", _add_list),
    ("inspect", _add_inspect),
    ("import", _add_import),
    ("build", _add_build),
    ("fp16", _add_fp16),
    ("quantize", _add_quantize),
    ("promote", _add_promote),
    ("bench", _add_bench),
    ("compare", _add_compare),
    ("engine", _add_engine),
)


def _common(p: argparse.ArgumentParser) -> None:
    add_config_flag(p)
    p.add_argument(
        "--repository",
        "-r",
        help="Model repository folder (default: models.repository, else the starter one).",
    )


def _timing(p: argparse.ArgumentParser, runs_help: str) -> None:
    """What every command that times a model and scores its agreement takes."""
    p.add_argument("--runs", type=int, default=30, help=runs_help)
    p.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads.")
    p.add_argument("--conf", type=float, default=0.25, help="Detector score threshold for F1.")


def _into(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--into",
        help="Repository to write to (default: the source repository; required when that is "
        "the starter repository, which ships with strata and stays as built).",
    )


def _target(args: argparse.Namespace, repo: Any) -> Any:
    """The repository a command writes to; refuses to modify the starter repository."""
    from strata.shared.models.repository import ModelRepository, starter_repository

    if args.into:
        Path(args.into).mkdir(parents=True, exist_ok=True)
        return ModelRepository(args.into)
    if repo.root.resolve() == starter_repository().resolve():
        print(
            "strata models: give --into DIR: the starter repository is not modified "
            "(the model is copied into DIR first)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return repo


def _repo_path(args: argparse.Namespace) -> str:
    overrides = {"models": {"repository": args.repository}} if args.repository else {}
    cfg = load_or_exit(args, overrides, "models")
    return cfg.models.repository


def _repo(args: argparse.Namespace) -> Any:
    from strata.shared.models.repository import ModelError, ModelRepository

    try:
        return ModelRepository(_repo_path(args))
    except ModelError as exc:
        print(f"strata models: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def run_list(args: argparse.Namespace) -> int:
    """Print one line per model: name, task, precision, variants, trained or not."""
    from strata.shared.models.repository import ModelError

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
        numbers = repo.versions(name)
        versions = (
            f"versions 0,{','.join(map(str, numbers))} serving {numbers[-1]}" if numbers else ""
        )
        print(f"  {name:<24} {m.task:<8} {shape:<14} {variants:<24} {trained} {versions}".rstrip())
    return rc


def run_inspect(args: argparse.Namespace) -> int:
    """Print the manifest, then verify (and load) every file it names."""
    from strata.shared.models.manifest import dump_manifest
    from strata.shared.models.repository import ModelError

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


def _triple(text: str | None, flag: str) -> tuple[float, float, float] | None:
    if not text:
        return None
    parts = [float(x) for x in text.split(",")]
    if len(parts) != 3:
        raise ValueError(f"{flag} wants three comma-separated numbers, got {text!r}")
    return (parts[0], parts[1], parts[2])


def _read_labels(text: str) -> tuple[str, ...]:
    if text.lower() in ("coco", "coco80"):
        from strata.shared.vision import COCO80

        return COCO80
    return tuple(ln.strip() for ln in Path(text).read_text().splitlines() if ln.strip())


def run_import(args: argparse.Namespace) -> int:
    """Import an ONNX file; print what was normalised and the manifest's gist, or why not."""
    from strata.tools.models.importer import (
        ImportRefusedError,
        ImportRequest,
        fixed_batch_warning,
        import_detailed,
    )

    path = _repo_path(args)
    if not path:
        print(
            "strata models import: give --repository DIR (the starter repository is read-only)",
            file=sys.stderr,
        )
        return 2
    try:
        req = ImportRequest(
            name=args.name,
            onnx=Path(args.onnx),
            repository=Path(path),
            labels=_read_labels(args.labels) if args.labels else (),
            imgsz=args.imgsz,
            colour=args.colour,
            resize=args.resize,
            scale=args.scale,
            mean=_triple(args.mean, "--mean"),
            std=_triple(args.std, "--std"),
            pad_value=args.pad_value,
            output_format=args.output_format,
            grid_centre=args.grid_centre,
            sample=Path(args.sample) if args.sample else None,
            dynamic_batch=args.dynamic_batch,
            force=args.force,
        )
        done = import_detailed(req)
    except (ImportRefusedError, ValueError, OSError) as exc:
        print(f"strata models import: refused: {exc}", file=sys.stderr)
        return 2
    for note in done.notes:
        print(f"normalised: {note}")
    if done.notes:
        print(f"normalised: outputs equal to the file's within {done.max_difference:.2g}")
    m = done.manifest
    warning = fixed_batch_warning(m)
    if warning is not None:
        print(f"strata models import: warning: {warning}", file=sys.stderr)
    print(_summary(m, Path(path)))
    return 0


def _summary(m: Any, repo: Path) -> str:
    """The one line that says what was imported and how it will be fed."""
    shape = "x".join("N" if d is None else str(d) for d in m.input.shape)
    i, o = m.input, m.output
    pre = f"{i.colour} {i.resize}"
    if i.resize != "stretch":
        pre += f" pad {i.pad_value:g}"
    pre += f", scale {i.scale:.6g}, mean {_nums(i.mean)}, std {_nums(i.std)}"
    layout = o.format
    if o.format == "gfl":
        layout += f" (reg_max {o.reg_max}, strides {_nums(o.strides) or 'usual'}, {o.grid_centre})"
    if len(o.all_names) > 1:
        layout += f", {len(o.all_names)} outputs"
    return (
        f"imported {m.name} -> {repo / m.name / m.file}: {m.task}, input {shape} {pre}; "
        f"output {layout}, {m.num_classes} labels; loads and runs in ONNX Runtime "
        f"(sha256 {m.sha256[:12]}...); override with --colour/--resize/--scale/--mean/--std"
    )


def _nums(values: tuple[float, ...]) -> str:
    return ",".join(f"{v:g}" for v in values)


def run_build(args: argparse.Namespace) -> int:
    """Export a model from PyTorch into the repository (and an FP16 variant)."""
    try:
        from strata.tools.models.export import BuildRequest, build
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
    if args.kind == "yolo" and args.arch:
        default_name["yolo"] = Path(args.arch).stem  # yolov8s.yaml -> yolov8s
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
        from strata.tools.models.fp16 import add_fp16_variant

        variant = add_fp16_variant(Path(path), manifest.name)
        print(f"fp16 variant -> {Path(path) / manifest.name / variant.file}")
    if not manifest.source.trained:
        print("note: no checkpoint given, so the weights are random: labelled untrained")
    return 0


def run_fp16(args: argparse.Namespace) -> int:
    """Add an FP16 variant, copying the model into --into first when given."""
    from strata.shared.models.repository import ModelError
    from strata.tools.models.fp16 import add_fp16_variant
    from strata.tools.models.quantize import copy_model

    repo = _repo(args)
    target = _target(args, repo)
    try:
        if target.root != repo.root:
            copy_model(repo, target, args.name)
        variant = add_fp16_variant(target.root, args.name)
    except ModelError as exc:
        print(f"strata models fp16: {exc}", file=sys.stderr)
        return 2
    print(f"fp16 variant -> {target.folder(args.name) / variant.file}")
    return 0


def run_quantize(args: argparse.Namespace) -> int:
    """Quantize, record the variant, print agreement and speed."""
    from strata.shared.models.repository import ModelError
    from strata.tools.models.quantize import QuantizeRequest, quantize

    if args.calibration or args.held_out:
        from strata.tools.models.site_cli import run_site_quantize

        return run_site_quantize(args, _repo, _target)
    if not args.clip:
        print(
            "strata models quantize: give --calibration CLIPS --held-out CLIPS (a detector, "
            "calibrated on the site's frames) or --clip VIDEO",
            file=sys.stderr,
        )
        return 2
    repo = _repo(args)
    target = _target(args, repo)
    keep = tuple(t.strip() for t in args.keep_float.split(",") if t.strip())
    req = QuantizeRequest(
        name=args.name,
        clip=Path(args.clip),
        method=args.method,
        samples=args.samples,
        keep_float=keep,
        exclude_nodes=args.exclude_nodes,
        eval_frames=args.eval_frames,
        timing_runs=args.runs,
        threads=args.threads,
        conf=args.conf,
        variant=args.variant,
        progress=sys.stderr.isatty(),
    )
    try:
        rep = quantize(repo, req, into=target)
    except (ModelError, FileNotFoundError, ValueError) as exc:
        print(f"strata models quantize: {exc}", file=sys.stderr)
        return 2
    a = rep.agreement
    value = "undefined" if a.value is None else f"{a.value:.3f}"
    what = "top-1 agreement" if a.metric == "top1" else "box F1 @ IoU 0.5"
    print(f"{rep.name}: int8 written to {rep.path}")
    print(
        f"  calibration      {rep.method}, {rep.samples} frames of {req.clip.name}; "
        f"{rep.kept_float_nodes} nodes kept in float"
    )
    print(
        f"  {what:<16} {value} over {a.frames} frames "
        f"(float items {a.reference_items}, int8 items {a.test_items}); "
        f"output relative error {a.output_rel_error:.4f}"
    )
    print(
        f"  latency (batch 1) fp32 {rep.float_timing.median_ms:.2f} ms "
        f"(p90 {rep.float_timing.p90_ms:.2f}), int8 {rep.int8_timing.median_ms:.2f} ms "
        f"(p90 {rep.int8_timing.p90_ms:.2f}): x{rep.speedup:.2f}, {rep.int8_timing.runs} runs"
    )
    print(
        f"  size             fp32 {rep.float_bytes / 1e6:.1f} MB, "
        f"int8 {rep.int8_bytes / 1e6:.1f} MB"
    )
    if len(rep.tried) > 1:
        tried = ", ".join(
            f"{m} {_fmt_value(t.value)} (error {t.output_rel_error:.4f})"
            for m, t in rep.tried.items()
        )
        print(f"  tried            {tried}; kept {rep.method}")
    for note in rep.notes:
        print(f"  note: {note}")
    if args.as_model:
        from strata.shared.models.repository import promote_variant

        promote_variant(target, args.name, args.variant, args.as_model)
        print(f"  stored as model {args.as_model!r} in {target.root}")
    return 0


def run_promote(args: argparse.Namespace) -> int:
    """A new numbered version of a model, or (--as) a variant as a model of its own."""
    from strata.shared.models.repository import ModelError, promote_variant, promote_version

    repo = _repo(args)
    _target(argparse.Namespace(into=None), repo)  # refuses the starter repository
    try:
        if args.as_model:
            if not args.variant or args.file:
                print(
                    "strata models promote: --as needs --variant (and no --file)", file=sys.stderr
                )
                return 2
            m = promote_variant(repo, args.name, args.variant, args.as_model)
            print(f"{args.name}:{args.variant} -> model {m.name!r} ({m.precision}) in {repo.root}")
            return 0
        if bool(args.variant) == bool(args.file):
            print(
                "strata models promote: give --file ONNX or --variant KEY (the new version)",
                file=sys.stderr,
            )
            return 2
        number, m = promote_version(repo, args.name, args.file, args.variant)
    except ModelError as exc:
        print(f"strata models promote: {exc}", file=sys.stderr)
        return 2
    print(f"{args.name} version {number} ({m.precision}, sha256 {m.sha256[:12]}) in {repo.root}")
    return 0


def _fmt_value(v: float | None) -> str:
    return "undefined" if v is None else f"{v:.3f}"


def run_engine(args: argparse.Namespace) -> int:
    """Build (or keep) the TensorRT engine for this GPU and TensorRT version."""
    from strata.shared.models.repository import ModelError
    from strata.tools.models.engine import ensure_engine, plan_profile

    repo = _repo(args)
    target = _target(args, repo)
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        print(
            "strata models engine: needs TensorRT 10 and an NVIDIA GPU: pip install 'strata[gpu]'",
            file=sys.stderr,
        )
        return 2
    try:
        from strata.tools.models.quantize import copy_model

        if target.root != repo.root:
            copy_model(repo, target, args.name)
        manifest = target.manifest(args.name)
        profile = plan_profile(manifest.input, args.min_batch, args.opt_batch, args.max_batch)
        fp16 = not args.no_fp16
        res = ensure_engine(
            target,
            args.name,
            profile,
            fp16=fp16,
            key="trt-fp16" if fp16 else "trt-fp32",
            source_variant=args.from_variant,
            force=args.force,
            progress=sys.stderr.isatty(),
        )
    except ModelError as exc:
        print(f"strata models engine: {exc}", file=sys.stderr)
        return 2
    rec = res.variant.tensorrt
    assert rec is not None
    state = f"built ({res.reason})" if res.rebuilt else "up to date"
    print(
        f"{args.name}: engine {res.path} {state}: TensorRT {rec.tensorrt_version}, "
        f"{rec.gpu_name} (sm {rec.compute_capability}), batch "
        f"{rec.min_batch}/{rec.opt_batch}/{rec.max_batch}, fp16={rec.fp16}"
    )
    return 0


def run_compare(args: argparse.Namespace) -> int:
    """Print the comparison's two markdown tables, with the machine."""
    import dataclasses
    import json

    from strata.shared.models.repository import ModelError
    from strata.tools.models.compare import CompareRequest, compare

    req = CompareRequest(
        names=tuple(args.names),
        clip=Path(args.clip),
        frames=args.frames,
        threads=tuple(int(t) for t in args.threads.split(",") if t.strip()),
        score=args.score,
        labels=tuple(x.strip() for x in args.labels.split(",") if x.strip()),
    )
    try:
        rep = compare(_repo(args), req)
    except (ModelError, FileNotFoundError, ValueError) as exc:
        print(f"strata models compare: {exc}", file=sys.stderr)
        return 2
    print(
        f"{rep.frames} frames of {rep.clip}, score >= {rep.score}, IoU 0.5; agreement is "
        f"with {rep.results[0].name}'s boxes, not ground truth; {rep.machine}"
    )
    print(rep.markdown())
    if args.json:
        Path(args.json).write_text(json.dumps(dataclasses.asdict(rep), indent=2) + "\n")
    return 0


def run_bench(args: argparse.Namespace) -> int:
    """Print a markdown table comparing the variants, with the machine."""
    from strata.shared.models.repository import ModelError
    from strata.tools.models.bench import compare

    repo = _repo(args)
    try:
        manifest = repo.manifest(args.name)
        if args.variants:
            variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        else:
            onnx = [k for k, v in manifest.variants.items() if v.format == "onnx"]
            variants = ["primary", *onnx]
        rep = compare(
            repo,
            args.name,
            variants,
            Path(args.clip),
            frames=args.frames,
            runs=args.runs,
            batch=args.batch,
            threads=args.threads,
            conf=args.conf,
            backend=args.backend,
        )
    except (ModelError, FileNotFoundError, ValueError) as exc:
        print(f"strata models bench: {exc}", file=sys.stderr)
        return 2
    print(
        f"{rep.name}: batch {rep.batch}, {rep.runs} interleaved runs per variant, "
        f"agreement over {rep.frames} frames of {Path(args.clip).name}; {rep.machine}"
    )
    print(rep.markdown())
    return 0
