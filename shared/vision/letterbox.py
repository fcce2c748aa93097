"""Letterbox preprocessing (ultralytics style) written straight into a batch buffer slot.

The resized image goes into a per-shape scratch buffer that is reused, and the channel swap,
transpose and scaling to [0, 1] happen in one numpy ufunc call writing into the destination,
so a frame costs no allocation once its camera's shape has been seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAD_VALUE = 114
# float32 scalar so the ufunc loop runs in float32, not float64.
_INV255 = np.float32(1.0 / 255.0)


@dataclass(frozen=True, slots=True)
class Letterbox:
    """How a frame of `width` x `height` was placed in a square model input of `size`."""

    width: int
    height: int
    size: int
    scale: float
    pad_x: int
    pad_y: int
    new_w: int
    new_h: int

    def to_original(self, boxes: np.ndarray) -> np.ndarray:
        """Map x1,y1,x2,y2 boxes (k, 4) in model-input pixels to the original frame, in place."""
        boxes[:, 0::2] -= self.pad_x
        boxes[:, 1::2] -= self.pad_y
        boxes /= self.scale
        np.clip(boxes[:, 0::2], 0, self.width, out=boxes[:, 0::2])
        np.clip(boxes[:, 1::2], 0, self.height, out=boxes[:, 1::2])
        return boxes


def plan_letterbox(width: int, height: int, size: int) -> Letterbox:
    """Scale to fit, centre, pad (as ultralytics LetterBox with auto=False, center=True)."""
    scale = min(size / width, size / height)
    new_w, new_h = round(width * scale), round(height * scale)
    dw, dh = (size - new_w) / 2, (size - new_h) / 2
    # ultralytics rounds the two sides with a -0.1 nudge so odd padding goes right/bottom.
    pad_x, pad_y = round(dw - 0.1), round(dh - 0.1)
    return Letterbox(width, height, size, scale, pad_x, pad_y, new_w, new_h)


class LetterboxWriter:
    """Writes BGR uint8 frames as RGB, CHW, [0, 1] letterboxed tensors into given slots."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._plans: dict[tuple[int, int], Letterbox] = {}
        self._scratch: dict[tuple[int, int], np.ndarray] = {}

    def plan(self, width: int, height: int) -> Letterbox:
        """The (cached) plan for a frame shape."""
        key = (width, height)
        plan = self._plans.get(key)
        if plan is None:
            plan = plan_letterbox(width, height, self.size)
            self._plans[key] = plan
        return plan

    def write(self, image: np.ndarray, dst: np.ndarray) -> Letterbox:
        """Letterbox `image` (H, W, 3 BGR uint8) into `dst` (3, size, size), any float dtype."""
        import cv2

        h, w = image.shape[:2]
        lb = self.plan(w, h)
        if (lb.new_w, lb.new_h) == (w, h):
            resized = image
        else:
            scratch = self._scratch.get((lb.new_w, lb.new_h))
            if scratch is None:
                scratch = np.empty((lb.new_h, lb.new_w, 3), np.uint8)
                self._scratch[(lb.new_w, lb.new_h)] = scratch
            resized = cv2.resize(
                image, (lb.new_w, lb.new_h), dst=scratch, interpolation=cv2.INTER_LINEAR
            )
        pad = PAD_VALUE / 255.0
        y0, y1, x0, x1 = lb.pad_y, lb.pad_y + lb.new_h, lb.pad_x, lb.pad_x + lb.new_w
        if y0 > 0:
            dst[:, :y0, :] = pad
        if y1 < self.size:
            dst[:, y1:, :] = pad
        if x0 > 0:
            dst[:, y0:y1, :x0] = pad
        if x1 < self.size:
            dst[:, y0:y1, x1:] = pad
        # BGR -> RGB and HWC -> CHW as views; one ufunc writes the scaled values in place.
        np.multiply(
            resized[:, :, ::-1].transpose(2, 0, 1),
            _INV255,
            out=dst[:, y0:y1, x0:x1],
            casting="unsafe",
        )
        return lb
