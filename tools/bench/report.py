"""report.json and report.md: the numbers every benchmark measured, with the machine."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from strata.shared.machine import one_line
from strata.shared.vision.agreement import Agreement
from strata.tools.bench.cascade import ClipResult
from strata.tools.bench.cost import markdown as cost_markdown
from strata.tools.bench.promise import promise
from strata.tools.bench.tiers import TierRun, first_number

# Report key -> where each tier's benchmark JSON holds it (first match wins).
TIER_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "device.decode_fps": ("device", ("decode_fps",)),
    "device.agent_fps": ("device", ("agent_fps",)),
    "device.ratio": ("device", ("ratio",)),
    "device.decode_bgr_fps": ("device", ("decode_bgr_fps",)),
    "device.ratio_vs_decode_bgr": ("device", ("ratio_vs_decode_bgr",)),
    "edge.bare_fps": ("edge", ("bare_fps",)),
    "edge.node_fps": ("edge", ("node_fps",)),
    "edge.ratio": ("edge", ("ratio",)),
    "edge.p50_ms": ("edge", ("p50_ms",)),
    "edge.p99_ms": ("edge", ("p99_ms",)),
    "cloud.bare_ips": ("cloud", ("bare_ips",)),
    "cloud.served_ips": ("cloud", ("served_ips",)),
    "cloud.ratio": ("cloud", ("ratio",)),
    "cloud.p50_ms": ("cloud", ("p50_ms",)),
    "cloud.p99_ms": ("cloud", ("p99_ms",)),
}
CASCADE_KEYS = (
    "cascade.frames_total",
    "cascade.frames_to_edge",
    "cascade.frames_to_cloud",
    "cascade.bytes_source",
    "cascade.bytes_to_edge",
    "cascade.bytes_to_cloud",
    "cascade.tagging",
    "cascade.counting",
    "cascade.f1",
    "cascade.frames_not_sent",
    "cascade.bytes_ratio",
    "cascade.object_recall",
    "cascade.uniform_f1",
    "cascade.uniform_counting",
    "cascade.stale_f1",
)
REQUIRED = (*TIER_KEYS, *CASCADE_KEYS)


def _num(v: float | None) -> float | None:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return round(float(v), 4)


def _estimate_rows(c: ClipResult) -> list[str]:
    """The edge's estimate of the cascade's F1 beside the measured one (none: no row)."""
    if c.estimated_f1 is None:
        return []
    off = c.estimated_f1 - c.vs_reference.f1
    return [
        f"| {c.clip}: the edge's estimate of the cascade's F1 (measured "
        f"{c.vs_reference.f1:.3f}, off by {off:+.3f}) | | | {c.estimated_f1:.3f} |"
    ]


def cascade_keys(clip: ClipResult, prefix: str = "cascade") -> dict[str, float | None]:
    """The cascade.* keys of one clip (`prefix` replaces "cascade")."""
    a = clip.vs_reference
    total = clip.frames_total or 1
    out = {
        "cascade.frames_total": clip.frames_total,
        "cascade.frames_to_edge": clip.frames_to_edge,
        "cascade.frames_to_cloud": clip.frames_to_cloud,
        "cascade.bytes_source": clip.bytes_source,
        "cascade.bytes_to_edge": _num(clip.bytes_to_edge),
        "cascade.bytes_to_cloud": _num(clip.bytes_to_cloud),
        "cascade.tagging": _num(a.tagging),
        "cascade.counting": _num(a.counting),
        "cascade.f1": _num(a.f1),
        # The edge's own online estimate of that F1 (calibration), to read against it.
        "cascade.estimated_f1": _num(clip.estimated_f1),
        # Frames whose pixels never reached the edge, as a share of the clip's.
        "cascade.frames_not_sent": _num(1.0 - clip.frames_to_edge / total),
        # Bytes to the edge over the clip file's size (vtest.mp4: its H.264 stream).
        "cascade.bytes_ratio": _num(clip.bytes_to_edge / clip.bytes_source)
        if clip.bytes_source
        else None,
        "cascade.object_recall": _num(clip.object_recall),
        "cascade.uniform_f1": _num(clip.uniform.f1) if clip.uniform else None,
        "cascade.uniform_counting": _num(clip.uniform.counting) if clip.uniform else None,
        "cascade.stale_f1": _num(clip.stale.f1) if clip.stale else None,
        # Counting of the mean count per second (the per-frame figure also scores the
        # detector's own flicker).
        "cascade.counting_per_second": _num(clip.counting_per_second),
        "cascade.uniform_counting_per_second": _num(clip.uniform_counting_per_second),
        "cascade.crops_per_track_max": clip.crops_per_track_max,
        "cascade.crops_per_track_mean": _num(clip.crops_per_track_mean),
        # Per camera-day (the clip streamed all day): event clips cut on the device beside
        # the cascade's bytes to the edge and to the cloud (issue 26).
        **_per_day(clip),
    }
    return {k.replace("cascade.", f"{prefix}.", 1): v for k, v in out.items()}


def _per_day(clip: ClipResult) -> dict[str, float | None]:
    """Bytes per camera-day: clips, to the edge, to the cloud (None: no duration known)."""
    seconds = clip.frames_total / clip.fps if clip.fps else 0.0
    day = 86400.0 / seconds if seconds > 0 else None
    return {
        "cascade.clip_bytes_per_camera_day": _num(clip.bytes_clips * day) if day else None,
        "cascade.edge_bytes_per_camera_day": _num(clip.bytes_to_edge * day) if day else None,
        "cascade.cloud_bytes_per_camera_day": _num(clip.bytes_to_cloud * day) if day else None,
    }


def headline(clips: list[ClipResult]) -> ClipResult | None:
    """The clip whose figures are the cascade.* keys: vtest (the real camera) when it ran,
    else none (the synthetic clip's figures are cascade_synthetic.*)."""
    for c in clips:
        if c.clip.startswith("vtest"):
            return c
    return None


def build(
    machine: dict[str, Any],
    tiers: dict[str, TierRun],
    clips: list[ClipResult],
    extra: dict[str, Any],
    quick: bool,
) -> dict[str, Any]:
    """The report: required keys flat (`device.decode_fps`), then the details."""
    report: dict[str, Any] = {}
    for key, (tier, paths) in TIER_KEYS.items():
        run = tiers.get(tier)
        report[key] = _num(first_number(run.data, paths)) if run is not None else None
    head = headline(clips)
    if head is not None:
        report.update(cascade_keys(head))
    else:
        report.update(dict.fromkeys(CASCADE_KEYS))
    for c in clips:
        if c is not head and c.clip.startswith("synthetic"):
            report.update(cascade_keys(c, "cascade_synthetic"))
    report["machine"] = machine
    report["quick"] = quick
    # The same numbers nested by tier, for readers that prefer report["edge"]["p50_ms"].
    for key in REQUIRED:
        section, name = key.split(".", 1)
        report.setdefault(section, {})[name] = report[key]
    report["clips"] = {
        c.clip: {
            **cascade_keys(c),
            "vs_reference": asdict(c.vs_reference),
            "uniform": asdict(c.uniform) if c.uniform else None,
            "stale": asdict(c.stale) if c.stale else None,
            "frames_unanswered": c.frames_unanswered,
            "uniform_curve": [asdict(p) for p in c.curve],
            "bytes_curve": [{"kept": k, "bytes_ratio": b} for k, b in c.bytes_curve],
            "objects": c.objects,
            "vs_truth": asdict(c.vs_truth) if c.vs_truth else None,
            "detector_vs_truth": asdict(c.detector_vs_truth) if c.detector_vs_truth else None,
            "reference_missing": c.reference_missing,
            # Issue 22: the target held or said so, the estimate against the measure, the
            # cascade against uniform spacing at the same and at twice its share.
            "promise": promise(c).as_dict(),
            "estimated_counting": _num(c.estimated_counting),
            "edge_answers": c.answers,
            "estimated_f1_last_window": _num(c.estimated_f1_last),
            "uniform_double_share": asdict(c.uniform_double) if c.uniform_double else None,
            "detected_vs_reference": asdict(c.detected_vs_reference)
            if c.detected_vs_reference
            else None,
            "pipeline_reference_fps": _num(c.reference_fps),
            "through_codec": asdict(c.through_codec) if c.through_codec else None,
            "uniform_through_codec": asdict(c.uniform_through_codec)
            if c.uniform_through_codec
            else None,
            "notes": c.notes,
        }
        for c in clips
    }
    report["tier_runs"] = {
        t: {"command": " ".join(r.command), "seconds": round(r.seconds, 1), "error": r.error}
        for t, r in tiers.items()
    }
    report["tier_results"] = {t: r.data for t, r in tiers.items()}
    report.update(extra)
    # --quick leaves vtest out: its headline keys are then absent by design, not missing.
    skipped = quick and head is None
    report["missing"] = [
        k for k in REQUIRED if report.get(k) is None and not (skipped and k.startswith("cascade."))
    ]
    return report


def write_json(report: dict[str, Any], path: Path) -> None:
    """report.json."""
    path.write_text(json.dumps(report, indent=2) + "\n")


def _f(v: Any, digits: int = 2) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _agreement_row(name: str, a: Agreement | None) -> str:
    if a is None:
        return f"| {name} | n/a | n/a | n/a |"
    return f"| {name} | {a.tagging:.3f} | {a.counting:.3f} | {a.f1:.3f} |"


def meaning(clips: list[ClipResult]) -> list[str]:
    """What the agreement numbers mean, said from the data rather than assumed."""
    out = [
        "What these mean: agreement with the reference measures only what the device's gates "
        "cost (frames the edge never saw); it says nothing about whether the detector is right. "
        "Bytes: the source is H.264 (inter-frame compressed); the device sends each kept frame "
        "as a JPEG, so bytes to the edge can exceed the file's size."
    ]
    for c in clips:
        ref_boxes = c.vs_reference.true_positives + c.vs_reference.false_negatives
        if ref_boxes == 0:
            out.append(
                f"On {c.clip} the reference YOLO found no objects at all (the model knows "
                "nothing of this clip: untrained, or trained for another camera), so agreement "
                "with it is trivially perfect and means nothing; bring weights trained for "
                "this footage (README) for a meaningful figure."
            )
        if c.vs_truth is not None:
            out.append(
                f"On {c.clip} the ground truth is known: the `oracle` row scores the "
                "ground-truth boxes of the kept frames, not any detector's output (a dropped "
                "frame reuses the last kept frame's truth): the upper bound of what dropping "
                "frames allows, whatever the detector; `YOLO vs ground truth` shows how far "
                "the detector itself is from right."
            )
    return out


def promise_markdown(clips: list[ClipResult], detector: dict[str, Any] | None) -> list[str]:
    """Per clip: did the cascade keep its promise (tools/bench/promise.py)."""
    if not clips:
        return []
    out = ["", "## The cascade's promise per clip", ""]
    if detector:
        size = "x".join(str(v) for v in detector.get("input_size", []))
        out += [
            f"Detector: {detector.get('name')} version {detector.get('version')}, input "
            f"{size}, {detector.get('precision')}, from {detector.get('repository')}.",
            "",
        ]
    out += [f"- {promise(c).line()}" for c in clips]
    return out


def markdown(report: dict[str, Any], clips: list[ClipResult], command: str) -> str:
    """report.md: tables a person reads, with the machine and the command."""
    r = report
    lines = [
        "# strata bench",
        "",
        f"Machine: {one_line(r['machine'])}. Command: `{command}`"
        + (" (quick: reduced sizes)." if r.get("quick") else "."),
        "",
        "## Tiers (each against its bare model or codec in the same run)",
        "",
        "| tier | bare | in strata | ratio | p50 ms | p99 ms |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| device (frames/s: PyAV decode only vs agent with both gates) "
        f"| {_f(r['device.decode_fps'])} | {_f(r['device.agent_fps'])} "
        f"| {_f(r['device.ratio'], 3)} | | |",
        f"| device, beside it: PyAV decode + BGR of every frame "
        f"| {_f(r.get('device.decode_bgr_fps'))} | {_f(r['device.agent_fps'])} "
        f"| {_f(r.get('device.ratio_vs_decode_bgr'), 3)} | | |",
        f"| edge (frames/s: ONNX Runtime session vs node over ZeroMQ) | {_f(r['edge.bare_fps'])} "
        f"| {_f(r['edge.node_fps'])} | {_f(r['edge.ratio'], 3)} | {_f(r['edge.p50_ms'])} "
        f"| {_f(r['edge.p99_ms'])} |",
        f"| cloud (images/s: Swin session vs gRPC Classify) | {_f(r['cloud.bare_ips'])} "
        f"| {_f(r['cloud.served_ips'])} | {_f(r['cloud.ratio'], 3)} | {_f(r['cloud.p50_ms'])} "
        f"| {_f(r['cloud.p99_ms'])} |",
        "",
        "## Cascade (reference: the same YOLO on every frame; a dropped frame reuses the last "
        "kept frame's boxes)",
        "",
        "| clip | frames | to edge | to cloud | bytes source | bytes to edge | bytes to cloud |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in clips:
        lines.append(
            f"| {c.clip} | {c.frames_total} | {c.frames_to_edge} | {c.frames_to_cloud} "
            f"| {_f(c.bytes_source)} | {_f(int(c.bytes_to_edge))} | {_f(int(c.bytes_to_cloud))} |"
        )
    lines += [
        "",
        "| clip: agreement | tagging | counting | F1 @ IoU 0.5 |",
        "| --- | --- | --- | --- |",
    ]
    for c in clips:
        lines.append(_agreement_row(f"{c.clip}: cascade vs YOLO on every frame", c.vs_reference))
        lines += _estimate_rows(c)
        if c.vs_truth is not None:
            lines.append(
                _agreement_row(
                    f"{c.clip}: oracle (ground-truth boxes of the kept frames) vs ground truth",
                    c.vs_truth,
                )
            )
            lines.append(
                _agreement_row(
                    f"{c.clip}: YOLO on every frame vs ground truth", c.detector_vs_truth
                )
            )
    lines += ["", *meaning(clips)]
    lines += promise_markdown(clips, r.get("detector"))
    lines += cost_markdown(r.get("cost") or {})
    lines += _ultralytics_markdown(r.get("ultralytics"))
    if r.get("missing"):
        lines += ["", f"Missing (a benchmark failed or is absent): {', '.join(r['missing'])}"]
    errors = {t: x["error"] for t, x in r.get("tier_runs", {}).items() if x.get("error")}
    for tier, err in errors.items():
        lines += ["", f"{tier} benchmark: {err}"]
    return "\n".join(lines) + "\n"


def _ultralytics_markdown(side: dict[str, Any] | None) -> list[str]:
    """The ultralytics side-by-side paragraph (or why it failed); none when not run."""
    if side and "ultralytics_fps" in side:
        return [
            "",
            "## ultralytics side by side",
            "",
            f"On {side['clip']} ({side['frames']} frames, model {Path(side['model']).name}): "
            f"ultralytics `YOLO(model).predict(stream=True)` at batch {side.get('batch')} "
            f"{side['ultralytics_fps']} frames/s (batch 1: {side.get('ultralytics_fps_batch1')}), "
            f"strata's edge path {side['strata_pipeline_fps']} frames/s "
            f"(ratio {side['ratio']} at the same batch, {side.get('ratio_vs_batch1')} against "
            f"batch 1). {side['what']}.",
        ]
    if side:
        return ["", f"ultralytics side by side failed: {side.get('error')}"]
    return []
