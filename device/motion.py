"""The motion gate (Reducto-style): keep a frame when it differs enough from the last KEPT one.

The score is the L2 norm of the difference of two grey, down-scaled frames divided by the
square root of the pixels compared: the RMS grey-level difference (0-255), so a threshold
means the same at any scale. Comparing with the last kept frame rather than the previous
one makes slow drifts add up until they are reported. All buffers are allocated once.

A decoded frame reaches the gate already small (`score_input`: FFmpeg scales its luma
plane, device/frames.py `GreyScaler`); an array of any other size (the synthetic clip's
BGR, tests) is scaled here with cv2's area interpolation, which gives the same grey.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np
from strata.shared.config.device import MotionConfig

from .frames import Frame, GreyScaler


@dataclass(frozen=True, slots=True)
class MotionDecision:
    """The gate's verdict on one frame."""

    keep: bool
    score: float
    # Why it was kept: "first", "motion", "interval" (max interval passed); "" if dropped.
    why: str


class MotionGate:
    """Stateful per camera: holds the down-scaled grey image of the last kept frame."""

    def __init__(self, cfg: MotionConfig) -> None:
        self.cfg = cfg
        w, h = cfg.width, cfg.height
        self._grey = np.empty((h, w), np.uint8)
        self._kept = np.empty((h, w), np.uint8)
        self._small_bgr = np.empty((h, w, 3), np.uint8)
        self._have_kept = False
        self._kept_ts = 0.0
        self._scaler: GreyScaler | None = None
        self._mask: np.ndarray | None = None
        pixels = w * h
        if cfg.ignore:
            self._mask = np.full((h, w), 255, np.uint8)
            for r in cfg.ignore:
                x1, x2 = math.floor(r.x1 * w), math.ceil(r.x2 * w)
                y1, y2 = math.floor(r.y1 * h), math.ceil(r.y2 * h)
                self._mask[y1:y2, x1:x2] = 0
            pixels = int(np.count_nonzero(self._mask))
        # A mask that hides everything leaves only the max interval to keep frames.
        self._scale = 1.0 / math.sqrt(pixels) if pixels else 0.0

    def score_input(self, frame: Frame) -> np.ndarray:
        """What `check` should score for `frame`: a decoded frame scaled to the gate's size
        straight from its luma plane (no BGR conversion), else the frame's BGR image."""
        if frame.decoded:
            if self._scaler is None:
                self._scaler = GreyScaler(self.cfg.width, self.cfg.height)
            return frame.motion_input(self._scaler)
        return frame.motion_input()

    def reset(self) -> None:
        """Forget the last kept frame (after a reconnect the scene may have changed)."""
        self._have_kept = False

    def check(self, image: np.ndarray, ts: float, threshold: float | None = None) -> MotionDecision:
        """Score `image` (2-D grey or H x W x 3 BGR) at stream time `ts` and decide;
        `threshold` overrides the configured one (degradation raises it)."""
        self._load(image)
        if not self._have_kept:
            return self._keep(ts, 0.0, "first")
        if self._scale:
            norm = cv2.norm(self._grey, self._kept, cv2.NORM_L2, self._mask)
            score = float(norm) * self._scale
        else:
            score = 0.0
        if score >= (self.cfg.threshold if threshold is None else threshold):
            return self._keep(ts, score, "motion")
        if self.cfg.max_interval_s > 0 and ts - self._kept_ts >= self.cfg.max_interval_s:
            return self._keep(ts, score, "interval")
        return MotionDecision(False, score, "")

    def keep_now(self, image: np.ndarray, ts: float, why: str) -> MotionDecision:
        """Score `image` like `check`, and keep it whatever the score (the cascade forces
        it: a calibration burst, the edge asked, the longest gap passed)."""
        self._load(image)
        score = 0.0
        if self._have_kept and self._scale:
            score = float(cv2.norm(self._grey, self._kept, cv2.NORM_L2, self._mask)) * self._scale
        return self._keep(ts, score, why)

    def _load(self, image: np.ndarray) -> None:
        """Put `image`'s grey at the gate's size into the working buffer."""
        if image.shape == self._grey.shape:  # already scaled (a decoded frame's luma)
            np.copyto(self._grey, image)
        elif image.ndim == 2:
            size = (self.cfg.width, self.cfg.height)
            cv2.resize(image, size, dst=self._grey, interpolation=cv2.INTER_AREA)
        else:
            size = (self.cfg.width, self.cfg.height)
            cv2.resize(image, size, dst=self._small_bgr, interpolation=cv2.INTER_AREA)
            cv2.cvtColor(self._small_bgr, cv2.COLOR_BGR2GRAY, dst=self._grey)

    def _keep(self, ts: float, score: float, why: str) -> MotionDecision:
        # Swap buffers instead of copying: the new grey becomes the reference.
        self._grey, self._kept = self._kept, self._grey
        self._have_kept = True
        self._kept_ts = ts
        return MotionDecision(True, score, why)
