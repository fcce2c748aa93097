"""Model cards for distilled students: data, teacher, training, held-out scores, limits."""

from __future__ import annotations

from typing import Any

CARD_FILE = "MODEL_CARD.md"

_PURPOSE = {
    "detector": "Edge detector: boxes of people in full frames (one class, `person`).",
    "gate": "Device gate: is anything of interest (a person) in this frame? "
    "(`nothing` / `something`; configure the device gate with positive_class_ids [1]).",
    "verifier": "Cloud verifier: is this crop a person? (`not_person` / `person`), the "
    "second opinion on the edge's crops.",
}

_LIMITS = {
    "detector": "Trained on one fixed camera's frames; it has learned that scene, not people "
    "in general, and will miss people elsewhere, at other scales or in other light. Its "
    "truth is the teacher's boxes, so it inherits the teacher's misses (people standing "
    "still and never confirmed by HOG, far-away people) and its box style (motion-blob "
    "extents). Groups walking close together may be one box.",
    "gate": "Negatives are the clip's own frames with the labelled people painted over by "
    "the learned empty scene, so it tells 'people' from 'this empty scene'; a new camera or "
    "a changed scene (parked car, lighting) needs new training. People the teacher missed "
    "are left in 'empty' frames.",
    "verifier": "Positives are crops of the teacher's boxes, negatives random boxes of the "
    "same scene away from them; it knows this camera's background, not the world's. It "
    "is trained from scratch on a few thousand crops.",
}


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _data_section(report: Any) -> list[str]:
    lines = ["## Data and teacher", ""]
    for c in report.clips:
        st = c["stats"]
        tr = st["tracks"]
        lines += [
            f"- `{c['clip']}`: {c['frames']} frames, {c['size']}; frames "
            f"{c['holdout_start']}-{c['frames'] - 1} (the last "
            f"{100 * (1 - c['holdout_start'] / c['frames']):.0f}%) held out: never trained "
            "on, every score below is from them.",
            f"  - teachers: {', '.join(c['teachers'])}; per frame HOG found "
            f"{st['hog_boxes_per_frame']:.2f} boxes, motion {st['motion_blobs_per_frame']:.2f} "
            f"blobs, model {st['model_boxes_per_frame']:.2f}; after fusion and tracking "
            f"{st['label_boxes_per_frame']:.2f} labels per frame ({tr['tracks_kept']} of "
            f"{tr['tracks']} tracks kept, {tr['boxes_filled']} boxes filled across gaps).",
        ]
    lines += [
        "",
        "Labels: HOG boxes (trimmed as OpenCV's peopledetect does) and MOG2 foreground blobs "
        "(background learned on the whole clip, shadows dropped) are fused per frame (a blob "
        "inside a HOG box replaces it when it covers the person), then linked over time by an "
        "IoU tracker with constant-velocity prediction; tracks that are too short or never "
        "confirmed by a detector (or, motion-only, not long and upright) are dropped, gaps "
        "of up to 5 frames are interpolated, boxes are smoothed over 3 frames.",
        "",
    ]
    return lines


def model_card(part: str, report: Any) -> str:
    """Markdown card for one distilled model."""
    m = report.machine
    info = getattr(report, part)
    lines = [f"# Model card: `{info.get('name', part)}` (distilled)", ""]
    lines += [_PURPOSE[part], ""]
    lines += _data_section(report)
    lines += ["## Training", "", _training(part, report), ""]
    lines += ["## Held-out scores", ""]
    lines += _scores(part, info)
    lines += [
        "",
        f"Machine: {m.get('cpu')}, {m.get('cores')} cores (shared with other jobs while "
        "measured); training device " + str(m.get("device")) + ".",
        "",
        "## Limits",
        "",
        _LIMITS[part],
        "",
        "## Reproduce",
        "",
        "```bash",
        str(info.get("command") or command(report)),
        "```",
        "",
    ]
    return "\n".join(lines)


def _training(part: str, report: Any) -> str:
    info = getattr(report, part)
    tr = info.get("train", {})
    if part == "detector":
        return (
            "YOLOv8n (ultralytics `yolov8n.yaml`, from scratch: no pretrained weights), "
            f"{info.get('train_images')} training frames ({info.get('val_images')} more for "
            f"ultralytics' validation, also from the training part), imgsz "
            f"{tr.get('imgsz', report.request.get('imgsz'))}, batch "
            f"{tr.get('batch', report.request.get('student_batch'))}, epochs "
            f"{tr.get('epochs', 'n/a')}"
            + (f" (a {tr['time']} h time budget)" if tr.get("time") else "")
            + f", {_fmt(tr.get('seconds'), 0)} s on {tr.get('device', 'n/a')}; "
            f"{tr.get('optimizer', 'AdamW')} lr0 {tr.get('lr0', 0.002)} with an optimizer step "
            "per batch, a short warm-up, no mosaic, ultralytics' HSV/flip/scale "
            "augmentation; AMP and plots off (both would download)."
        )
    arch = (
        "MobileNetV3-Small (timm `mobilenetv3_small_100`)"
        if part == "gate"
        else f"Swin Transformer (timm, '{report.request.get('swin_size')}' size as the "
        "starter `swin`)"
    )
    return (
        f"{arch}, 2 classes, from scratch, {tr.get('train_samples')} training images "
        f"(class balance {info.get('train_balance')}), input {tr.get('imgsz')} px, "
        f"{tr.get('epochs')} epochs, AdamW + one-cycle, flips and brightness jitter, "
        f"{_fmt(tr.get('seconds'), 0)} s on {tr.get('device', 'n/a')}."
    )


def _scores(part: str, info: dict[str, Any]) -> list[str]:
    if part != "detector":
        tr = info.get("train", {})
        return [
            "| metric | value |",
            "| --- | --- |",
            f"| accuracy (exported ONNX, held-out) | {_fmt(info.get('heldout_accuracy_onnx'))} |",
            f"| accuracy (PyTorch, held-out) | {_fmt(tr.get('test_accuracy'))} |",
            f"| held-out samples (class balance) | {tr.get('test_samples')} "
            f"({info.get('test_balance')}) |",
        ]
    h = info.get("heldout", {})
    s = info.get("speed", {})
    return [
        "| metric | value |",
        "| --- | --- |",
        f"| mAP50 vs the teacher's boxes | {_fmt(h.get('ap50'))} |",
        f"| precision / recall at score {h.get('conf')} | {_fmt(h.get('precision'))} / "
        f"{_fmt(h.get('recall'))} |",
        f"| frames / teacher boxes | {h.get('frames')} / {h.get('truth_boxes')} |",
        f"| student CPU / wall ms per {s.get('frame_size')} frame (imgsz "
        f"{s.get('student_imgsz')}, ONNX Runtime, 1 thread, median of {s.get('frames')}) | "
        f"{_fmt(s.get('student_cpu_ms'), 1)} / {_fmt(s.get('student_ms'), 1)} |",
        "| HOG teacher CPU / wall ms per frame (1 thread, same frames, interleaved) | "
        f"{_fmt(s.get('hog_cpu_ms'), 1)} / {_fmt(s.get('hog_ms'), 1)} |",
        f"| student speed-up over HOG (CPU time) | {_fmt(s.get('speedup_vs_hog'), 2)}x |",
    ]


def command(report: Any) -> str:
    """The `strata models distill` command line that produced the report."""
    r = report.request
    parts_run = r.get("parts", [])
    out = ["strata models distill", *r.get("clips", [])]
    out += [f"--teachers {','.join(r.get('teachers', []))}", f"--into {r.get('repository')}"]
    out += [f"--parts {','.join(parts_run)}"]
    if "detector" in parts_run:
        weights = r.get("student_weights")
        if weights and weights != "None":
            out += [f"--student-weights {weights}"]
        elif r.get("student_hours"):
            out += [f"--student-hours {r['student_hours']}"]
        else:
            out += [f"--student-epochs {r.get('student_epochs')}"]
        out += [f"--imgsz {r.get('imgsz')}", f"--student-batch {r.get('student_batch')}"]
    if "gate" in parts_run:
        out += [f"--gate-epochs {r.get('gate_epochs')}", f"--gate-stride {r.get('gate_stride')}"]
    if "verifier" in parts_run:
        out += [
            f"--verifier-epochs {r.get('verifier_epochs')}",
            f"--verifier-stride {r.get('verifier_stride')}",
        ]
    if r.get("max_steps"):
        out += [f"--max-steps {r['max_steps']}"]
    if r.get("threads"):
        out += [f"--threads {r['threads']}"]
    return " ".join(out)


def manifest_note(part: str, report: Any) -> str:
    """One line for the manifest's source.notes."""
    info = getattr(report, part)
    clips = ", ".join(c["clip"] for c in report.clips)
    if part == "detector":
        score = f"held-out mAP50 vs teacher {_fmt(info.get('heldout', {}).get('ap50'))}"
    else:
        score = f"held-out accuracy {_fmt(info.get('heldout_accuracy_onnx'))}"
    teachers = ", ".join(report.clips[0]["teachers"]) if report.clips else ""
    return (
        f"distilled by strata models distill from {teachers} on {clips} (one fixed camera); "
        f"{score}; see {CARD_FILE}"
    )
