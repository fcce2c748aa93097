"""Training sets from labelled clips: YOLO detection, frame gate, crop verifier.

Every set is split by frame index: frames from a clip's held-out tail go only into the test
split. The detector's validation split (ultralytics needs one) is every 10th training frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from strata.shared.vision.boxes import iou
from strata.tools.distill.labels import ClipLabels, read_frames

LABEL = "person"


@dataclass(frozen=True, slots=True)
class DetectionSet:
    """A YOLO dataset on disk."""

    yaml: Path
    train_images: int
    val_images: int
    test_images: int
    test_dir: Path


def _yolo_lines(xyxy: np.ndarray, width: int, height: int) -> str:
    if xyxy.shape[0] == 0:
        return ""
    cx = (xyxy[:, 0] + xyxy[:, 2]) / 2 / width
    cy = (xyxy[:, 1] + xyxy[:, 3]) / 2 / height
    w = (xyxy[:, 2] - xyxy[:, 0]) / width
    h = (xyxy[:, 3] - xyxy[:, 1]) / height
    rows = np.clip(np.stack([cx, cy, w, h], axis=1), 0.0, 1.0)
    return "".join(f"0 {a:.6f} {b:.6f} {c:.6f} {d:.6f}\n" for a, b, c, d in rows.tolist())


def write_detection_set(
    clips: list[ClipLabels], root: Path, stride: int = 1, max_side: int = 640
) -> DetectionSet:
    """Frames as JPEGs (long side at most max_side) with YOLO label files, split by time."""
    counts = {"train": 0, "val": 0, "test": 0}
    for split in counts:
        (root / split / "images").mkdir(parents=True, exist_ok=True)
        (root / split / "labels").mkdir(parents=True, exist_ok=True)
    for ci, lab in enumerate(clips):
        scale = min(1.0, max_side / max(lab.width, lab.height))
        for i, frame in enumerate(read_frames(lab.clip)):
            if i >= lab.frames:
                break
            if i >= lab.holdout_start:
                split = "test"
            elif i % stride:
                continue
            else:
                split = "val" if (i // stride) % 10 == 9 else "train"
            name = f"c{ci:02d}_{i:06d}"
            img = frame if scale == 1.0 else cv2.resize(frame, None, fx=scale, fy=scale)
            cv2.imwrite(str(root / split / "images" / f"{name}.jpg"), img)
            text = _yolo_lines(lab.boxes[i].xyxy, lab.width, lab.height)
            (root / split / "labels" / f"{name}.txt").write_text(text)
            counts[split] += 1
    yaml = root / "data.yaml"
    yaml.write_text(
        f"path: {root}\ntrain: train/images\nval: val/images\ntest: test/images\n"
        f"names:\n  0: {LABEL}\n"
    )
    return DetectionSet(yaml, counts["train"], counts["val"], counts["test"], root / "test")


@dataclass(frozen=True, slots=True)
class ImageSet:
    """Images with binary labels (1 = person / something of interest), train and test."""

    train_x: np.ndarray  # (N, S, S, 3) uint8 BGR
    train_y: np.ndarray  # (N,) int64
    test_x: np.ndarray
    test_y: np.ndarray


def _blank_people(
    frame: np.ndarray, background: np.ndarray, boxes: np.ndarray, margin: float
) -> np.ndarray:
    """The frame with the given people replaced by the empty scene."""
    out = frame.copy()
    h, w = frame.shape[:2]
    for x1, y1, x2, y2 in boxes.tolist():
        mx, my = (x2 - x1) * margin, (y2 - y1) * margin
        a, b = max(0, int(x1 - mx)), max(0, int(y1 - my))
        c, d = min(w, int(x2 + mx) + 1), min(h, int(y2 + my) + 1)
        out[b:d, a:c] = background[b:d, a:c]
    return out


def gate_set(clips: list[ClipLabels], size: int = 224, stride: int = 2, seed: int = 0) -> ImageSet:
    """Frames with people (positives) and the same frames with every person painted out.

    Negatives come from painting the labelled people over with the learned empty scene, so
    both classes share the clip's light and noise. A positive also has some of its people
    painted out, so the gate cannot learn the paint seams instead of the people.
    """
    rng = np.random.default_rng(seed)
    xs: dict[str, list[np.ndarray]] = {"train": [], "test": []}
    ys: dict[str, list[int]] = {"train": [], "test": []}
    for lab in clips:
        bg = lab.background
        for i, frame in enumerate(read_frames(lab.clip)):
            if i >= lab.frames or i % stride:
                continue
            split = "test" if i >= lab.holdout_start else "train"
            boxes = lab.boxes[i].xyxy
            if boxes.shape[0] == 0:
                xs[split].append(cv2.resize(frame, (size, size), interpolation=cv2.INTER_AREA))
                ys[split].append(0)
                continue
            drop = np.asarray(rng.random(boxes.shape[0]) < 0.5, bool)
            drop[rng.integers(boxes.shape[0])] = False  # keep at least one person
            pos = _blank_people(frame, bg, boxes[drop], 0.15)
            neg = _blank_people(frame, bg, boxes, 0.15)
            for img, y in ((pos, 1), (neg, 0)):
                xs[split].append(cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA))
                ys[split].append(y)
    return _pack(xs, ys, size)


def _crop(frame: np.ndarray, box: np.ndarray, size: int, pad: float) -> np.ndarray:
    """A square crop around a box (padded), resized to size x size."""
    h, w = frame.shape[:2]
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    side = max(box[2] - box[0], box[3] - box[1]) * (1 + pad)
    x1, y1 = int(max(0, cx - side / 2)), int(max(0, cy - side / 2))
    x2, y2 = int(min(w, cx + side / 2)), int(min(h, cy + side / 2))
    if x2 - x1 < 2 or y2 - y1 < 2:
        return np.zeros((size, size, 3), np.uint8)
    out: np.ndarray = cv2.resize(frame[y1:y2, x1:x2], (size, size), interpolation=cv2.INTER_AREA)
    return out


def verifier_set(
    clips: list[ClipLabels], size: int = 112, stride: int = 3, seed: int = 0
) -> ImageSet:
    """Person crops (labelled boxes, jittered) against crops of the scene with nobody in them.

    Negatives are boxes of the same sizes placed where no label is (IoU below 0.1), half of
    them on the frame and half on the empty scene, so shadows, poles and cars are negatives.
    """
    rng = np.random.default_rng(seed)
    xs: dict[str, list[np.ndarray]] = {"train": [], "test": []}
    ys: dict[str, list[int]] = {"train": [], "test": []}
    for lab in clips:
        for i, frame in enumerate(read_frames(lab.clip)):
            if i >= lab.frames or i % stride:
                continue
            split = "test" if i >= lab.holdout_start else "train"
            boxes = lab.boxes[i].xyxy
            for b in boxes:
                wh = b[2:] - b[:2]
                jitter = b + np.concatenate([wh, wh]) * rng.uniform(-0.08, 0.08, 4)
                xs[split].append(_crop(frame, jitter.astype(np.float32), size, 0.1))
                ys[split].append(1)
            for _ in range(max(1, boxes.shape[0])):
                neg = _negative_box(rng, boxes, lab.width, lab.height)
                if neg is None:
                    continue
                src = frame if rng.random() < 0.5 else lab.background
                xs[split].append(_crop(src, neg, size, 0.1))
                ys[split].append(0)
    return _pack(xs, ys, size)


def _negative_box(
    rng: np.random.Generator, boxes: np.ndarray, width: int, height: int
) -> np.ndarray | None:
    for _ in range(20):
        h = float(rng.uniform(0.08, 0.4) * height)
        w = h * float(rng.uniform(0.3, 1.0))
        x = float(rng.uniform(0, width - w))
        y = float(rng.uniform(0, height - h))
        cand = np.array([[x, y, x + w, y + h]], np.float32)
        if boxes.shape[0] == 0 or iou(cand, boxes).max() < 0.1:
            found: np.ndarray = cand[0]
            return found
    return None


def _pack(xs: dict[str, list[np.ndarray]], ys: dict[str, list[int]], size: int) -> ImageSet:
    def stack(split: str) -> tuple[np.ndarray, np.ndarray]:
        if not xs[split]:
            return np.zeros((0, size, size, 3), np.uint8), np.zeros(0, np.int64)
        return np.stack(xs[split]), np.asarray(ys[split], np.int64)

    tx, ty = stack("train")
    vx, vy = stack("test")
    return ImageSet(tx, ty, vx, vy)
