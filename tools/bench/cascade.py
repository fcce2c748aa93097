"""The cascade's cost and accuracy on one clip: two real pipeline runs, compared.

Reference: the device's gates off, so the edge's YOLO sees every frame. Cascade: the gates
as configured. Both runs are the real daemons over loopback (`strata.tools.demo.pipeline`).
On the synthetic clip the ground truth is known, so the cascade is also scored against it
(a frame the device dropped reuses the truth of the last kept frame), which measures what
dropping frames costs independently of how good the detector is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from strata.shared.config.base import merge
from strata.shared.vision.agreement import Agreement, agreement, propagate
from strata.shared.vision.boxes import FrameBoxes
from strata.tools.demo.names import BYTES, COUNTS
from strata.tools.demo.pipeline import Outcome, PipelineRun, RunOptions
from strata.tools.demo.results import Received
from strata.tools.demo.stack import Camera
from strata.tools.demo.summary import edge_latency_ns, value

log = logging.getLogger(__name__)

# Both runs: the edge must not shed frames (a shed reference frame has no answer), and the
# deep queue of a file read at full speed must not trigger batch-size degradation.
# The device must also wait for every ack at the end of the file: a file is read far faster
# than the edge detects, and frames still unacked when the agent gives up are lost.
NO_SHEDDING: dict[str, Any] = {
    "edge": {"batching": {"queue_per_camera": 100_000, "delay_target_ms": 0}},
    "device": {"sender": {"drain_timeout_s": 1800}},
}
GATES_OFF: dict[str, Any] = {
    "device": {"motion": {"enabled": False}, "gate": {"enabled": False}},
    # The reference needs only the detector; no crops for the cloud.
    "edge": {"crops": {"max_per_frame": 0}},
}


class Labels:
    """Label names to small ints, shared by everything compared in one clip."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id(self, label: str) -> int:
        """The id of `label` (new labels get the next id)."""
        return self.ids.setdefault(label, len(self.ids))


def boxes_of(results: Mapping[tuple[str, int], Received], labels: Labels) -> dict[int, FrameBoxes]:
    """Frame index -> the edge's boxes, for a run with one camera."""
    out = {}
    for (_camera, index), r in results.items():
        dets = r.message.detections
        boxes = np.array(
            [(d.box.x1, d.box.y1, d.box.x2, d.box.y2) for d in dets], np.float32
        ).reshape(-1, 4)
        classes = np.array([labels.id(d.label or str(d.class_id)) for d in dets], np.int32)
        out[index] = FrameBoxes.of(boxes, classes)
    return out


@dataclass
class ClipResult:
    """Everything measured on one clip."""

    clip: str
    frames_total: int
    frames_to_edge: int
    frames_to_cloud: int
    bytes_source: int
    bytes_to_edge: float
    bytes_to_cloud: float
    vs_reference: Agreement
    vs_truth: Agreement | None = None
    detector_vs_truth: Agreement | None = None
    reference_missing: int = 0
    edge_latency_ms: list[float] = field(default_factory=list)
    reference_fps: float = 0.0
    notes: list[str] = field(default_factory=list)


def run_once(workdir: Path, clip: Path, overrides: dict[str, Any], timeout_s: float) -> Outcome:
    """One pipeline run over `clip`; raises when a daemon died."""
    run = PipelineRun(
        workdir,
        [Camera("bench", str(clip))],
        overrides,
        RunOptions(quiet_s=1.5, drain_timeout_s=timeout_s, startup_timeout_s=120.0),
    )
    outcome = run.execute()
    if outcome.error is not None:
        raise RuntimeError(str(outcome.error))
    return outcome


def measure_clip(
    clip: Path,
    workdir: Path,
    truth: list[FrameBoxes] | None = None,
    truth_labels: Labels | None = None,
    overrides: dict[str, Any] | None = None,
    timeout_s: float = 1800.0,
) -> ClipResult:
    """Reference and cascade runs over `clip`, compared."""
    labels = truth_labels or Labels()
    extra = merge(NO_SHEDDING, overrides or {})
    ref = run_once(workdir / "reference", clip, merge(extra, GATES_OFF), timeout_s)
    cas = run_once(workdir / "cascade", clip, extra, timeout_s)
    decoded = int(value(ref.scrapes, COUNTS["decoded"]))
    ref_boxes = boxes_of(ref.results, labels)
    cas_boxes = boxes_of(cas.results, labels)
    total = decoded or (max(ref_boxes, default=-1) + 1)
    missing = sum(1 for i in range(total) if i not in ref_boxes)
    # A reference frame without an answer would count against the cascade; treat it as
    # empty and say how many there were.
    reference = [ref_boxes.get(i, FrameBoxes.empty()) for i in range(total)]
    ours = propagate(cas_boxes, total)
    result = ClipResult(
        clip=clip.name,
        frames_total=total,
        frames_to_edge=int(value(cas.scrapes, COUNTS["sent_to_edge"])),
        frames_to_cloud=len({(e.camera_id, e.sequence) for e in cas.events}),
        bytes_source=clip.stat().st_size,
        bytes_to_edge=value(cas.scrapes, BYTES["to_edge"]),
        bytes_to_cloud=value(cas.scrapes, BYTES["to_cloud"]),
        vs_reference=agreement(reference, ours),
        reference_missing=missing,
        edge_latency_ms=sorted((edge_latency_ns(cas.results) / 1e6).tolist()),
        reference_fps=len(ref.results) / ref.processing_s if ref.processing_s > 0 else 0.0,
        notes=[*ref.notes, *cas.notes],
    )
    if missing:
        result.notes.append(f"{missing} reference frames had no result (counted as empty)")
    if truth is not None:
        truth = truth[:total]
        kept = {i: truth[i] for i in cas_boxes if i < len(truth)}
        result.vs_truth = agreement(truth, propagate(kept, len(truth)))
        result.detector_vs_truth = agreement(truth, reference[: len(truth)])
    return result


def synthetic_truth(clip: Any, labels: Labels) -> list[FrameBoxes]:
    """Ground truth of a SyntheticClip as FrameBoxes, labels by name."""
    out = []
    for i in range(len(clip)):
        gt = clip.boxes(i)
        boxes = np.array([(b.x1, b.y1, b.x2, b.y2) for b in gt], np.float32).reshape(-1, 4)
        classes = np.array([labels.id(b.label) for b in gt], np.int32)
        out.append(FrameBoxes.of(boxes, classes))
    return out
