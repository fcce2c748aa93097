"""The bench's cost section: a camera's day through the cascade against every frame
through the GPU, priced with the cost model (shared/cost.py) from this run's figures.

Detector time per frame is the bare back end's best rate in the edge benchmark (on a CPU
host that is CPU time, priced as GPU time: the report says which back end it was);
classifier time per crop is the cloud benchmark's bare rate. Rates per second of video
come from each clip: frames kept, bytes to the cloud, frames that reached the cloud.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from strata.shared.config.common import CostConfig
from strata.shared.cost import cascade_vs_every_frame
from strata.tools.bench.cascade import ClipResult
from strata.tools.bench.tiers import TierRun, lookup


def clip_fps(path: Path) -> float:
    """The clip's own frame rate (a camera streams at it)."""
    import av

    with av.open(str(path)) as f:
        rate = f.streams.video[0].average_rate
        return float(rate) if rate else 10.0


def _best_rate(run: TierRun | None, key: str) -> float | None:
    sweep = lookup(run.data, "sweep") if run else None
    if isinstance(sweep, list):
        rates = [float(p[key]) for p in sweep if isinstance(p, dict) and p.get(key)]
        if rates:
            return max(rates)
    value = lookup(run.data, key) if run else None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _event_bytes() -> int:
    """Bytes of one stored event as the cloud serializes it (a typical one)."""
    from strata.shared.contracts import analytics_pb2

    ev = analytics_pb2.Event(
        event_id=123456, edge_id="edge-node-1", camera_id="camera-01", sequence=1_700_000_000,
        capture_ns=1_700_000_000_000_000_000, label="person", score=0.87, crop_id="c" * 32,
    )  # fmt: skip
    ev.edge_detection.score = 0.5
    ev.edge_detection.label = "person"
    ev.edge_detection.box.x2 = 100.0
    ev.edge_detection.box.y2 = 200.0
    return ev.ByteSize()


def bench_cost(
    runs: dict[str, TierRun],
    clips: list[ClipResult],
    fps: dict[str, float],
    prices: CostConfig | None = None,
) -> dict[str, Any]:
    """Per clip (one camera streaming it all day): every frame vs the cascade, per day."""
    prices = prices or CostConfig()
    edge_fps = _best_rate(runs.get("edge"), "bare_fps")
    cloud_ips = _best_rate(runs.get("cloud"), "bare_ips")
    notes = []
    if edge_fps is None:
        notes.append("no edge benchmark: detector time from the pipeline's reference run")
    if cloud_ips is None:
        notes.append("no cloud benchmark: classifier time not counted")
    backend = lookup(runs["edge"].data, "backend") if "edge" in runs else None
    per_event = _event_bytes()
    out: dict[str, Any] = {}
    for c in clips:
        rate = fps.get(c.clip, 10.0)
        detector = 1.0 / (edge_fps or c.reference_fps or 1.0)
        seconds = c.frames_total / rate if rate else 0.0
        if seconds <= 0:
            continue
        cc = cascade_vs_every_frame(
            fps=rate,
            kept_fraction=c.frames_to_edge / max(1, c.frames_total),
            detector_s_per_frame=detector,
            source_bytes_per_s=c.bytes_source / seconds,
            cloud_bytes_per_s=c.bytes_to_cloud / seconds,
            # Frames that reached the cloud: at least one crop each (a lower bound).
            crops_per_s=c.frames_to_cloud / seconds,
            classifier_s_per_crop=1.0 / cloud_ips if cloud_ips else 0.0,
            stored_bytes_per_event=per_event,
            prices=prices,
        )
        out[c.clip] = {
            "camera_fps": rate,
            "kept_fraction": round(c.frames_to_edge / max(1, c.frames_total), 3),
            "detector_s_per_frame": round(detector, 5),
            "every_frame_edge_gpu": {k: round(v, 4) for k, v in asdict(cc.every_frame).items()}
            | {"total": round(cc.every_frame.total, 4)},
            "every_frame_cloud_gpu": {
                k: round(v, 4) for k, v in asdict(cc.every_frame_cloud).items()
            }
            | {"total": round(cc.every_frame_cloud.total, 4)},
            "cascade": {k: round(v, 4) for k, v in asdict(cc.cascade).items()}
            | {"total": round(cc.cascade.total, 4)},
            "saving_vs_every_frame": round(cc.saving, 3),
        }
    return {
        "per_camera_per_day": out,
        "currency": prices.currency,
        "prices": prices.model_dump(),
        "detector_backend": backend,
        "notes": notes,
    }


def markdown(cost: dict[str, Any]) -> list[str]:
    """The report.md section."""
    rows = cost.get("per_camera_per_day") or {}
    if not rows:
        return []
    cur = cost["currency"]
    p = cost["prices"]
    lines = [
        "",
        f"## Cost per camera per day ({cur}; GPU {p['gpu_per_hour']}/h, egress "
        f"{p['egress_per_gb']}/GB, storage {p['storage_per_gb_month']}/GB-month)",
        "",
        "| clip (one camera streaming it) | every frame, edge GPU | every frame, cloud GPU "
        "| cascade | cascade saves |",
        "| --- | --- | --- | --- | --- |",
    ]
    for clip, r in rows.items():
        lines.append(
            f"| {clip} ({r['camera_fps']:.0f} fps, {r['kept_fraction']:.0%} kept) "
            f"| {r['every_frame_edge_gpu']['total']:.3f} "
            f"| {r['every_frame_cloud_gpu']['total']:.3f} | {r['cascade']['total']:.3f} "
            f"| {r['saving_vs_every_frame']:.0%} |"
        )
    lines += [
        "",
        f"Detector time per frame: the edge benchmark's bare {cost.get('detector_backend')} "
        "rate (on a CPU host, CPU time priced as GPU time). " + " ".join(cost.get("notes") or []),
    ]
    return lines
