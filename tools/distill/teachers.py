"""Teachers that label a fixed camera's frames offline, with nothing to download.

- `HogTeacher`: OpenCV's pretrained HOG + linear SVM people detector (OpenCV 4.x wheels).
- `MotionTeacher`: MOG2 background subtraction; foreground blobs are moving objects.
- `ModelTeacher`: any YOLOv8-style ONNX detector, e.g. a user's big model from the repository.

A teacher sees the clip twice: `warm_up` on every frame first (MOG2 learns the empty scene
from the whole clip, so the first frames get labels too), then `detect` on each frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np
from strata.tools.distill.boxes import SOURCE_HOG, SOURCE_MOTION, Detections


class Teacher(Protocol):
    """Labels frames; boxes in the frame's pixel coordinates."""

    name: str

    def warm_up(self, frame: np.ndarray) -> None:
        """See a frame before labelling starts (no-op for stateless teachers)."""
        ...

    def detect(self, frame: np.ndarray) -> Detections:
        """Boxes for one frame."""
        ...


@dataclass(frozen=True, slots=True)
class HogSettings:
    """detectMultiScale settings; the defaults are OpenCV's peopledetect sample's."""

    win_stride: int = 8
    padding: int = 8
    scale: float = 1.05
    min_score: float = 0.3


class HogTeacher:
    """OpenCV's default people detector, boxes tightened to the person inside the window."""

    name = "hog"

    def __init__(self, settings: HogSettings | None = None) -> None:
        self.settings = settings or HogSettings()
        self.hog = cv2.HOGDescriptor()
        if not hasattr(cv2, "HOGDescriptor_getDefaultPeopleDetector"):
            raise RuntimeError("this OpenCV has no HOG people detector; install opencv 4.x")
        self.hog.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())

    def warm_up(self, frame: np.ndarray) -> None:
        return None

    def detect(self, frame: np.ndarray) -> Detections:
        s = self.settings
        rects, weights = self.hog.detectMultiScale(
            frame,
            winStride=(s.win_stride, s.win_stride),
            padding=(s.padding, s.padding),
            scale=s.scale,
        )
        if len(rects) == 0:
            return Detections.empty()
        r = np.asarray(rects, np.float32).reshape(-1, 4)
        scores = np.asarray(weights, np.float32).reshape(-1)
        # The 64x128 window has a margin around the person; peopledetect.py trims the same.
        pad_w, pad_h = 0.15 * r[:, 2], 0.05 * r[:, 3]
        xyxy = np.stack(
            [
                r[:, 0] + pad_w,
                r[:, 1] + pad_h,
                r[:, 0] + r[:, 2] - pad_w,
                r[:, 1] + r[:, 3] - pad_h,
            ],
            axis=1,
        )
        return Detections.of(xyxy, scores, SOURCE_HOG).select(scores >= s.min_score)


@dataclass(frozen=True, slots=True)
class MotionSettings:
    """MOG2 and blob filter settings, in pixels of the full frame."""

    history: int = 300
    var_threshold: float = 25.0
    min_area: int = 250
    open_px: int = 5
    close_w: int = 9
    close_h: int = 15


class MotionTeacher:
    """Foreground blobs from MOG2 (shadows dropped), learned on the whole clip first."""

    name = "motion"

    def __init__(self, settings: MotionSettings | None = None) -> None:
        s = self.settings = settings or MotionSettings()
        self.mog = cv2.createBackgroundSubtractorMOG2(
            history=s.history, varThreshold=s.var_threshold, detectShadows=True
        )
        self._open = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (s.open_px, s.open_px))
        self._close = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (s.close_w, s.close_h))
        self.warmed = 0

    def warm_up(self, frame: np.ndarray) -> None:
        self.mog.apply(frame)
        self.warmed += 1

    def background(self) -> np.ndarray:
        """The learned empty scene (BGR)."""
        bg: np.ndarray = self.mog.getBackgroundImage()
        return bg

    def mask(self, frame: np.ndarray) -> np.ndarray:
        """Cleaned foreground mask (uint8 0/255), without shadows."""
        # Frozen model after warm-up: people who stop do not melt into the background.
        raw = self.mog.apply(frame, learningRate=0.0 if self.warmed else -1.0)
        fg = np.where(raw == 255, np.uint8(255), np.uint8(0))
        fg = cv2.morphologyEx(fg, cv2.MORPH_OPEN, self._open)
        out: np.ndarray = cv2.morphologyEx(fg, cv2.MORPH_CLOSE, self._close)
        return out

    def detect(self, frame: np.ndarray) -> Detections:
        fg = self.mask(frame)
        n, _, stats, _ = cv2.connectedComponentsWithStats(fg)
        st = stats[1:n]
        st = st[st[:, cv2.CC_STAT_AREA] >= self.settings.min_area]
        if st.shape[0] == 0:
            return Detections.empty()
        x, y, w, h = (st[:, i].astype(np.float32) for i in range(4))
        fill = st[:, cv2.CC_STAT_AREA] / np.maximum(w * h, 1.0)
        return Detections.of(np.stack([x, y, x + w, y + h], axis=1), fill, SOURCE_MOTION)


class ModelTeacher:
    """A YOLOv8-style ONNX detector, keeping the given class ids (e.g. COCO person = 0)."""

    name = "model"

    def __init__(
        self, path: str | Path, classes: tuple[int, ...] | None = (0,), conf: float = 0.35
    ) -> None:
        from strata.tools.distill.yolo import YoloDetector

        self.detector = YoloDetector(path, conf=conf, classes=classes)

    def warm_up(self, frame: np.ndarray) -> None:
        return None

    def detect(self, frame: np.ndarray) -> Detections:
        return self.detector.detect(frame)
