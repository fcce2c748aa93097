"""How closely one model follows another on the same inputs.

Classifiers: top-1 agreement. Detectors: box F1 at IoU 0.5, the reference model's boxes
as truth, decoded with the edge tier's shared YOLO decoder and scored with the cascade
agreement (shared/vision/agreement.py: one matching for every comparison in strata).

Two detectors of any layouts (a PicoDet against a YOLOX, say) are compared on the same
frames in the frames' own pixels: `detect_frames` runs and decodes each with its own
preprocessing and layout, `detector_agreement` scores one class of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from strata.shared.models.manifest import Manifest
from strata.shared.vision.agreement import Agreement
from strata.shared.vision.agreement import agreement as box_agreement
from strata.shared.vision.boxes import FrameBoxes
from strata.shared.vision.layouts import DetectLayout, Thresholds, decode_detections
from strata.shared.vision.letterbox import LetterboxWriter, Preprocess, plan_letterbox
from strata.shared.vision.yolo import decode_yolo


@dataclass(frozen=True, slots=True)
class OutputAgreement:
    """Agreement of a test model's outputs with a reference model's."""

    metric: Literal["top1", "box_f1"]
    value: float | None  # None: undefined (neither model found a box)
    frames: int
    reference_items: int  # classifier: frames; detector: reference boxes
    test_items: int  # classifier: frames; detector: test boxes
    # ||test - ref|| / ||ref|| over the raw outputs; a detector's class-score rows only, since
    # its box rows (hundreds of pixels) would hide any error in the scores.
    output_rel_error: float
    boxes: Agreement | None = None  # detectors: the box agreement behind `value`


def agreement(
    manifest: Manifest, ref: np.ndarray, test: np.ndarray, conf: float = 0.25, iou: float = 0.45
) -> OutputAgreement:
    """Top-1 agreement (classify) or box F1 at IoU 0.5 (detect) of `test` against `ref`."""
    a, b = (ref[:, 4:], test[:, 4:]) if manifest.task == "detect" else (ref, test)
    rel = float(np.linalg.norm(b - a) / max(float(np.linalg.norm(a)), 1e-12))
    n = int(ref.shape[0])
    if manifest.task == "classify":
        same = int((ref.argmax(axis=1) == test.argmax(axis=1)).sum())
        return OutputAgreement("top1", same / n, n, n, n, rel)
    size = manifest.input.height
    identity = [plan_letterbox(size, size, size)] * n  # boxes stay in input pixels
    refs = decode_yolo(ref, identity, conf, iou)
    tests = decode_yolo(test, identity, conf, iou)
    boxes = box_agreement(refs, tests)
    n_ref = boxes.true_positives + boxes.false_negatives
    n_test = boxes.true_positives + boxes.false_positives
    f1 = boxes.f1 if n_ref + n_test else None  # undefined, not perfect, with no box at all
    return OutputAgreement("box_f1", f1, n, n_ref, n_test, rel, boxes)


@dataclass(frozen=True, slots=True)
class ClipDetections:
    """A detector's boxes on some frames (in the frames' pixels), and its decode time."""

    frames: list[FrameBoxes]
    decode_ms: float  # median decode_detections time a frame


def detect_frames(
    run: Callable[[np.ndarray], Sequence[np.ndarray]],
    preprocess: Preprocess,
    layout: DetectLayout,
    images: Sequence[np.ndarray],
    thresholds: Thresholds,
) -> ClipDetections:
    """Any layout's detections on BGR `images`, one at a time: `run` takes the (1, 3, S, S)
    batch `preprocess` makes and returns the model's outputs in the manifest's order."""
    writer = LetterboxWriter(preprocess.size, preprocess)
    batch = np.zeros((1, 3, preprocess.size, preprocess.size), np.float32)
    frames: list[FrameBoxes] = []
    times: list[float] = []
    for image in images:
        lb = writer.write(image, batch[0])
        outputs = run(batch)
        t0 = time.perf_counter()
        frames.extend(decode_detections(layout, outputs, [lb], thresholds))
        times.append((time.perf_counter() - t0) * 1e3)
    return ClipDetections(frames, float(np.median(times)) if times else 0.0)


def only(frames: Sequence[FrameBoxes], class_id: int, min_score: float = 0.0) -> list[FrameBoxes]:
    """Each frame's boxes of one class scoring at least `min_score`."""
    out = []
    for f in frames:
        keep = (f.class_ids == class_id) & (f.scores >= min_score)
        out.append(FrameBoxes(f.boxes[keep], f.scores[keep], f.class_ids[keep]))
    return out


def detector_agreement(
    reference: Sequence[FrameBoxes],
    test: Sequence[FrameBoxes],
    class_id: int = 0,
    min_score: float = 0.5,
) -> Agreement:
    """How two detectors of any layouts agree on one class (COCO 0: person) over the same
    frames: box F1 at IoU 0.5 (greedy, boxes.match_count), the reference's boxes as truth,
    both cut at `min_score`."""
    return box_agreement(only(reference, class_id, min_score), only(test, class_id, min_score))
