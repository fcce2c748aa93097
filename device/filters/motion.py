"""The motion gate (Reducto-style): keep a frame when it differs enough from the last KEPT one.

The score is the L2 norm of the difference of two grey, down-scaled frames divided by the
square root of the pixels compared: the RMS grey-level difference (0-255), so a threshold
means the same at any scale. Comparing with the last kept frame rather than the previous
one makes slow drifts add up until they are reported. All buffers are allocated once.

A decoded frame reaches the gate already small (`score_input`: FFmpeg scales its luma
plane, device/capture/frames.py `GreyScaler`); an array of any other size (the synthetic clip's
BGR, tests) is scaled here with cv2's area interpolation, which gives the same grey.

A scene change (a cut, a pan: nearly every pixel moves) is told apart from ordinary motion
by the share of 8x8 cells of the grey frame whose mean absolute difference to the last kept
frame passes a level: objects moving over a still scene change a few cells, a cut or a pan
most of them. A scene change is kept whatever the thresholds and flagged, so the edge
re-seeds its tracks instead of predicting across it.

Most frames are held back by the cascade's gap, and are looked at only for a cut or a pan.
`quiet` answers that for most of them from a coarse grey (device/capture/frames.py `CoarseLuma`, a
fifth of the cost): when under half the share of cells a cut or a pan needs changed there,
`cut` could not keep the frame, and the full grey is never made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np
from strata.shared.config.device import MotionConfig

from ..capture.frames import CoarseLuma, Frame, GreyScaler
from .camera_shift import PAN_SHIFT, ShiftMeter


@dataclass(frozen=True, slots=True)
class MotionDecision:
    """The gate's verdict on one frame."""

    keep: bool
    score: float
    # Why it was kept: "first", "motion", "interval" (max interval passed), "scene_change",
    # or the cascade's forced reason; "" if dropped.
    why: str
    # Most of the frame changed against the last kept one (a cut or a pan).
    scene_change: bool = False
    # Kept: how far the whole picture moved since the last kept frame, in the gate's pixels
    # (device/filters/camera_shift.py); None when unknown (the first, a cut, nothing shared).
    shift: float | None = None


# Side of a scene-change cell in pixels of the gate's grey frame.
_CELL = 8
# A cell changed when its mean absolute grey difference reaches this: well above sensor noise
# (averaged over a cell) and a slow change of light, below what a cut or a shifted texture gives.
_CELL_LEVEL = 12
# While the cascade waits out its gap, a share of changed cells from which the camera may be
# moving (a pan of 4 gate pixels over vtest: 0.25-0.30; its people over 15 frames: 0.06-0.12).
PAN_CELLS = 0.2
# A coarse pixel changed when its grey moved this much. With a quiet share of half what a
# cut or a pan needs, the frames `cut` kept showed 4.8x that share or more (levels 4-12,
# shares 0.05-0.15 tried on vtest panned at 2 and 4 pixels a frame, the tests' blurred pan,
# cuts between vtest's scenes), while 99% of vtest's held frames stayed quiet.
_COARSE_LEVEL = 6


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
        # In a calibration burst (every frame kept): the last burst frame the gate alone
        # would have kept (`burst_unchanged`).
        self._burst_ref = np.empty((h, w), np.uint8)
        self._shift = ShiftMeter(w, h)
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
        cells = (max(1, w // _CELL), max(1, h // _CELL))
        self._diff = np.empty((h, w), np.uint8)
        self._cells = np.empty((cells[1], cells[0]), np.uint8)
        # Cells wholly inside ignored regions take no part in the scene-change share.
        self._cell_on: np.ndarray | None = None
        self._cells_counted = cells[0] * cells[1]
        if self._mask is not None:
            on = cv2.resize(self._mask, cells, interpolation=cv2.INTER_AREA)
            self._cell_on = np.where(on > 0, 255, 0).astype(np.uint8)
            self._cells_counted = int(np.count_nonzero(self._cell_on))
        # The coarse grey (`quiet`): the frame last scored and the one loaded (with its
        # coarse grey once made: only for a frame kept or held), the last kept frame's (own
        # buffer), and what a quiet frame may have changed.
        self._coarser: CoarseLuma | None = None
        self._scored: tuple[Frame, np.ndarray | None] | None = None
        self._loaded: tuple[Frame, np.ndarray | None] | None = None
        self._kept_coarse = np.empty((0, 0), np.uint8)
        self._kept_coarse_ok = False
        self._coarse_diff = np.empty((0, 0), np.uint8)
        self._coarse_on: np.ndarray | None = None
        self._quiet_cells = 0.0
        needed = min(PAN_CELLS, cfg.scene_change) if cfg.scene_change > 0 else PAN_CELLS
        self._quiet_share = needed / 2

    def score_input(self, frame: Frame) -> np.ndarray:
        """What `check` should score for `frame`: a decoded frame scaled to the gate's size
        straight from its luma plane (no BGR conversion), else the frame's BGR image."""
        if frame.decoded:
            if self._scaler is None:
                self._scaler = GreyScaler(self.cfg.width, self.cfg.height)
            # Remembered, so a frame kept can be `quiet`'s reference (its coarse grey made
            # then: a still scene's frames that `check` drops never need one).
            scored = self._scored
            if scored is None or scored[0] is not frame:
                self._scored = (frame, None)
            return frame.motion_input(self._scaler)
        self._scored = None
        return frame.motion_input()

    def quiet(self, frame: Frame) -> bool:
        """For a frame the cascade holds back: True when `cut` could not keep it, judged
        from its coarse grey against the last kept frame's (fewer than half the changed
        share a cut or a pan needs); False when `cut` must look (or no coarse grey exists:
        a frame not from a decoder, a new frame size)."""
        if not self._have_kept or not self._scale:
            return True  # `cut` keeps nothing then
        if not self._kept_coarse_ok:
            return False
        now = self._coarse_of(frame)
        if now is not None and now.shape == self._kept_coarse.shape:
            diff = self._coarse_diff
            cv2.absdiff(now, self._kept_coarse, dst=diff)
            cv2.threshold(diff, _COARSE_LEVEL - 1, 255, cv2.THRESH_BINARY, dst=diff)
            if self._coarse_on is not None:
                cv2.bitwise_and(diff, self._coarse_on, dst=diff)
            if cv2.countNonZero(diff) < self._quiet_cells:
                return True
        self._scored = (frame, now)  # `score_input` takes it for `cut`
        return False

    def _coarse_of(self, frame: Frame) -> np.ndarray | None:
        scored = self._scored
        if scored is not None and scored[0] is frame and scored[1] is not None:
            return scored[1]  # `quiet` made it for this frame
        if self._coarser is None:
            self._coarser = CoarseLuma()
        now = frame.coarse(self._coarser)
        if now is not None and now.shape != self._coarse_diff.shape:
            self._coarse_size(now.shape)
        return now

    def _coarse_size(self, shape: tuple[int, ...]) -> None:
        """Buffers and the ignore mask for a new coarse size (a new frame size)."""
        h, w = shape
        self._coarse_diff = np.empty((h, w), np.uint8)
        self._kept_coarse_ok = False
        counted = h * w
        if self.cfg.ignore:
            # As the scene-change cells: a coarse pixel wholly inside a region is not counted.
            on = np.full((h, w), 255, np.uint8)
            for r in self.cfg.ignore:
                x1, x2 = math.ceil(r.x1 * w), math.floor(r.x2 * w)
                y1, y2 = math.ceil(r.y1 * h), math.floor(r.y2 * h)
                on[y1:y2, x1:x2] = 0
            self._coarse_on = on
            counted = int(np.count_nonzero(on))
        self._quiet_cells = self._quiet_share * counted

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
        # A scene change is kept under any raised threshold: tracks across it are wrong.
        if score >= self.cfg.threshold and self._scene_changed():
            return self._keep(ts, score, "scene_change", True)
        if score >= (self.cfg.threshold if threshold is None else threshold):
            return self._keep(ts, score, "motion")
        if self.cfg.max_interval_s > 0 and ts - self._kept_ts >= self.cfg.max_interval_s:
            return self._keep(ts, score, "interval")
        self._loaded = None
        return MotionDecision(False, score, "")

    def keep_now(self, image: np.ndarray, ts: float, why: str) -> MotionDecision:
        """Score `image` like `check`, and keep it whatever the score (the cascade forces
        it: a calibration burst, the edge asked, the longest gap passed)."""
        self._load(image)
        score = 0.0
        scene = False
        if self._have_kept and self._scale:
            score = float(cv2.norm(self._grey, self._kept, cv2.NORM_L2, self._mask)) * self._scale
            scene = score >= self.cfg.threshold and self._scene_changed()
        return self._keep(ts, score, why, scene)

    def burst_unchanged(self, start: bool) -> bool:
        """For the calibration frame just kept (`keep_now`): would the gate alone have
        dropped it as unchanged? Scored against the last burst frame it would have kept
        (the burst's first frame, `start`, is one), which becomes the reference when not.
        The edge measures on these frames what answering an unchanged frame costs."""
        unchanged = False
        if not start and self._scale:
            norm = cv2.norm(self._kept, self._burst_ref, cv2.NORM_L2, self._mask)
            unchanged = float(norm) * self._scale < self.cfg.threshold
        if not unchanged:
            np.copyto(self._burst_ref, self._kept)
        return unchanged

    def cut(self, image: np.ndarray, ts: float) -> MotionDecision | None:
        """Score `image` for a change of the whole picture only (the cascade drops it
        otherwise: its min_gap has not passed): a scene change (kept, flagged) or a camera
        that moved PAN_SHIFT pixels since the last kept frame (kept, "pan"); else None, and
        the last kept frame stays the reference. A cut is seen on the frame it happens, not
        when the gap runs out (the frames in between would be answered from the old
        scene), and a pan that starts in a long gap is followed from its first pixels."""
        if not self._have_kept or not self._scale:
            return None
        self._load(image)
        score = float(cv2.norm(self._grey, self._kept, cv2.NORM_L2, self._mask)) * self._scale
        if score < self.cfg.threshold:
            self._loaded = None
            return None
        share = self.changed_share()
        if self.cfg.scene_change > 0 and share >= self.cfg.scene_change:
            return self._keep(ts, score, "scene_change", True)
        if share >= PAN_CELLS:
            # Many cells changed, not all: the camera may be moving. Kept once the picture
            # moved PAN_SHIFT pixels, so the edge's tracker follows the boxes across.
            shift = self._shift.shift(self._kept, self._grey)
            if shift is not None and shift >= PAN_SHIFT:
                return self._keep(ts, score, "pan", shift=shift)
        self._loaded = None
        return None

    def changed_share(self) -> float:
        """Share of cells (outside ignored regions) whose grey changed against the last
        kept frame, for the frame last loaded."""
        if not self._cells_counted:
            return 0.0
        cv2.absdiff(self._grey, self._kept, dst=self._diff)
        h, w = self._cells.shape
        cv2.resize(self._diff, (w, h), dst=self._cells, interpolation=cv2.INTER_AREA)
        cells = self._cells
        cv2.threshold(cells, _CELL_LEVEL - 1, 255, cv2.THRESH_BINARY, dst=cells)
        if self._cell_on is not None:
            cv2.bitwise_and(cells, self._cell_on, dst=cells)
        return cv2.countNonZero(cells) / self._cells_counted

    def _scene_changed(self) -> bool:
        share = self.cfg.scene_change
        return share > 0 and self.changed_share() >= share

    def _load(self, image: np.ndarray) -> None:
        """Put `image`'s grey at the gate's size into the working buffer."""
        # The coarse grey scored with it (`score_input`), if `image` came from there.
        self._loaded, self._scored = self._scored, None
        if image.shape == self._grey.shape:  # already scaled (a decoded frame's luma)
            np.copyto(self._grey, image)
        elif image.ndim == 2:
            size = (self.cfg.width, self.cfg.height)
            cv2.resize(image, size, dst=self._grey, interpolation=cv2.INTER_AREA)
        else:
            size = (self.cfg.width, self.cfg.height)
            cv2.resize(image, size, dst=self._small_bgr, interpolation=cv2.INTER_AREA)
            cv2.cvtColor(self._small_bgr, cv2.COLOR_BGR2GRAY, dst=self._grey)

    def _keep(
        self, ts: float, score: float, why: str, scene: bool = False, shift: float | None = None
    ) -> MotionDecision:
        if shift is None and self._have_kept:
            # A fast pan is a scene change and still a translation: measured too. A picture
            # with few changed cells (people over a still scene) did not move as a whole,
            # and the correlation (0.4 ms a kept frame) is not spent on it.
            moved = self.changed_share() >= PAN_CELLS
            shift = self._shift.shift(self._kept, self._grey) if moved else 0.0
        # Swap buffers instead of copying: the new grey becomes the reference.
        self._grey, self._kept = self._kept, self._grey
        loaded, self._loaded = self._loaded, None
        coarse = None
        if loaded is not None:
            coarse = loaded[1] if loaded[1] is not None else self._coarse_of(loaded[0])
        self._kept_coarse_ok = coarse is not None
        if coarse is not None:
            if coarse.shape != self._kept_coarse.shape:
                self._kept_coarse = np.empty_like(coarse)
            np.copyto(self._kept_coarse, coarse)
        self._have_kept = True
        self._kept_ts = ts
        return MotionDecision(True, score, why, scene, shift)
