"""Scores of exported students on held-out frames, through ONNX Runtime like the tiers."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from strata.shared.runtime import create_runner
from strata.tools.distill.boxes import Detections
from strata.tools.distill.labels import ClipLabels, read_frames
from strata.tools.distill.metrics import DetectionScore, average_precision
from strata.tools.distill.teachers import HogTeacher
from strata.tools.distill.yolo import YoloDetector

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


@dataclass(frozen=True, slots=True)
class SpeedComparison:
    """Per-frame time of the student and of the HOG teacher, measured interleaved.

    Both run on one thread (ONNX Runtime intra-op 1, cv2.setNumThreads(1)), so CPU time
    per frame is comparable and far less inflated than wall time by other jobs.
    """

    frames: int
    student_ms: float  # median wall, letterbox + inference + decode, batch 1
    hog_ms: float  # median wall, detectMultiScale on the full frame
    student_cpu_ms: float  # median CPU time of the same calls
    hog_cpu_ms: float
    student_imgsz: int
    frame_size: str

    @property
    def speedup(self) -> float:
        """HOG CPU time over student CPU time (above 1: the student is faster)."""
        return self.hog_cpu_ms / self.student_cpu_ms if self.student_cpu_ms > 0 else float("nan")


def score_detector(
    onnx: Path, clips: list[ClipLabels], conf: float = 0.25
) -> tuple[DetectionScore, list[Detections]]:
    """AP50 of the student against the teacher's boxes on every held-out frame."""
    det = YoloDetector(onnx, conf=0.001, iou=0.6)
    preds: list[Detections] = []
    truths: list[np.ndarray] = []
    try:
        for lab in clips:
            for i, frame in enumerate(read_frames(lab.clip)):
                if i < lab.holdout_start or i >= lab.frames:
                    continue
                preds.append(det.detect(frame))
                truths.append(lab.boxes[i].xyxy)
    finally:
        det.close()
    return average_precision(preds, truths, 0.5, conf), preds


def compare_speed(
    onnx: Path, clips: list[ClipLabels], frames: int = 40, warmup: int = 3
) -> SpeedComparison:
    """Student vs HOG per frame on the same held-out frames, alternating, medians."""
    import cv2

    det = YoloDetector(onnx, conf=0.25, threads=1)
    hog = HogTeacher()
    threads_before = cv2.getNumThreads()
    cv2.setNumThreads(1)
    picked: list[np.ndarray] = []
    for lab in clips:
        for i, frame in enumerate(read_frames(lab.clip)):
            if i >= lab.holdout_start and len(picked) < frames + warmup:
                picked.append(frame)
    if not picked:
        raise ValueError("no held-out frames to time")
    s_times: list[float] = []
    h_times: list[float] = []
    s_cpu: list[float] = []
    h_cpu: list[float] = []
    try:
        for k, frame in enumerate(picked):
            c0, t0 = time.thread_time(), time.perf_counter()
            det.detect(frame)
            c1, t1 = time.thread_time(), time.perf_counter()
            hog.detect(frame)
            c2, t2 = time.thread_time(), time.perf_counter()
            if k >= warmup:
                s_times.append(t1 - t0)
                h_times.append(t2 - t1)
                s_cpu.append(c1 - c0)
                h_cpu.append(c2 - c1)
    finally:
        det.close()
        cv2.setNumThreads(threads_before)
    h, w = picked[0].shape[:2]

    def med(v: list[float]) -> float:
        return 1000.0 * float(np.median(v)) if v else float("nan")

    return SpeedComparison(
        len(s_times), med(s_times), med(h_times), med(s_cpu), med(h_cpu), det.size, f"{w}x{h}"
    )


def classifier_accuracy(onnx: Path, x: np.ndarray, y: np.ndarray, batch: int = 32) -> float:
    """Top-1 accuracy of an exported classifier (ImageNet-normalised RGB, stretch resize)."""
    import cv2

    if x.shape[0] == 0:
        return float("nan")
    runner = create_runner(onnx)
    size = runner.inputs[0].shape[2]
    size = int(size) if isinstance(size, int) else x.shape[1]
    correct = 0
    try:
        for k in range(0, x.shape[0], batch):
            xb = x[k : k + batch]
            if xb.shape[1] != size:
                xb = np.stack(
                    [cv2.resize(i, (size, size), interpolation=cv2.INTER_AREA) for i in xb]
                )
            rgb = (xb[..., ::-1].astype(np.float32) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD
            logits = runner.run(np.ascontiguousarray(rgb.transpose(0, 3, 1, 2)))[0]
            correct += int((logits.argmax(axis=1) == y[k : k + batch]).sum())
    finally:
        runner.close()
    return float(correct / x.shape[0])
