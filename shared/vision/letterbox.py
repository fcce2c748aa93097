"""Detector preprocessing written straight into a batch buffer slot.

A frame is placed in the square model input one of three ways (`Preprocess.resize`):
centred letterbox (ultralytics), top-left letterbox (YOLOX) or a plain stretch (PicoDet);
then its channels are ordered, scaled and normalised as the model's manifest says. The
resized image goes into a per-shape scratch buffer that is reused, its planes are split
into reused scratch planes, and each is scaled (with its mean) straight into its place in
the destination, so a frame costs no allocation once its camera's shape has been seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

PAD_VALUE = 114
# float32 scalar so the ufunc loop runs in float32, not float64.
_INV255 = np.float32(1.0 / 255.0)

Resize = Literal["letterbox", "letterbox_topleft", "stretch"]


@dataclass(frozen=True, slots=True)
class Letterbox:
    """How a frame of `width` x `height` was placed in a square model input of `size`.

    `scale` is the horizontal factor; `scale_y` the vertical one when it differs (a
    stretch), 0 meaning the same as `scale`."""

    width: int
    height: int
    size: int
    scale: float
    pad_x: int
    pad_y: int
    new_w: int
    new_h: int
    scale_y: float = 0.0

    def to_original(self, boxes: np.ndarray) -> np.ndarray:
        """Map x1,y1,x2,y2 boxes (k, 4) in model-input pixels to the original frame, in place."""
        boxes[:, 0::2] -= self.pad_x
        boxes[:, 1::2] -= self.pad_y
        if self.scale_y and self.scale_y != self.scale:
            boxes[:, 0::2] /= self.scale
            boxes[:, 1::2] /= self.scale_y
        else:
            boxes /= self.scale
        np.clip(boxes[:, 0::2], 0, self.width, out=boxes[:, 0::2])
        np.clip(boxes[:, 1::2], 0, self.height, out=boxes[:, 1::2])
        return boxes


def plan_letterbox(width: int, height: int, size: int, resize: Resize = "letterbox") -> Letterbox:
    """Where a frame goes: scale to fit and centre (as ultralytics LetterBox with auto=False,
    center=True), scale to fit at the top-left corner, or stretch to the whole input."""
    if resize == "stretch":
        return Letterbox(width, height, size, size / width, 0, 0, size, size, size / height)
    scale = min(size / width, size / height)
    new_w, new_h = round(width * scale), round(height * scale)
    if resize == "letterbox_topleft":
        return Letterbox(width, height, size, scale, 0, 0, new_w, new_h)
    dw, dh = (size - new_w) / 2, (size - new_h) / 2
    # ultralytics rounds the two sides with a -0.1 nudge so odd padding goes right/bottom.
    pad_x, pad_y = round(dw - 0.1), round(dh - 0.1)
    return Letterbox(width, height, size, scale, pad_x, pad_y, new_w, new_h)


@dataclass(frozen=True, slots=True)
class Preprocess:
    """What a detector's input expects (from its manifest): placement, channel order and
    value = (pixel x scale - mean) / std per channel, in the model's channel order."""

    size: int
    resize: Resize = "letterbox"
    rgb: bool = True
    scale: float = 1.0 / 255.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    pad_value: float = float(PAD_VALUE)


class LetterboxWriter:
    """Writes BGR uint8 frames into given (3, size, size) slots as `Preprocess` says
    (by default ultralytics' RGB, centred letterbox, [0, 1])."""

    def __init__(self, size: int, preprocess: Preprocess | None = None) -> None:
        pre = preprocess or Preprocess(size)
        if pre.size != size:
            raise ValueError(f"preprocess size {pre.size} differs from the writer's {size}")
        self.size = size
        self.pre = pre
        self._plans: dict[tuple[int, int], Letterbox] = {}
        self._scratch: dict[tuple[int, int], np.ndarray] = {}
        # Per channel, in the model's order: value = pixel * mul - off.
        mul = np.asarray([pre.scale / s for s in pre.std], np.float32)
        off = np.asarray([m / s for m, s in zip(pre.mean, pre.std, strict=True)], np.float32)
        self._plain = bool(np.all(off == 0) and np.all(mul == mul[0]))
        self._mul_scalar = np.float32(mul[0])
        self._mul = mul.reshape(3, 1, 1)
        self._off = off.reshape(3, 1, 1)
        self._pad = (np.float32(pre.pad_value) * mul - off).reshape(3, 1, 1)
        # BGR source: [::-1] gives RGB; [:] keeps BGR.
        self._order = slice(None, None, -1) if pre.rgb else slice(None)
        self._planes: dict[tuple[int, int], list[np.ndarray]] = {}
        # Per model channel: its BGR source plane, value = pixel * mul + add.
        self._sources = (2, 1, 0) if pre.rgb else (0, 1, 2)
        self._scale_add = [(float(m), float(-o)) for m, o in zip(mul, off, strict=True)]

    def _channels(self, planes: list[np.ndarray]) -> list[tuple[np.ndarray, float, float]]:
        return [
            (planes[src], m, a) for src, (m, a) in zip(self._sources, self._scale_add, strict=True)
        ]

    def plan(self, width: int, height: int) -> Letterbox:
        """The (cached) plan for a frame shape."""
        key = (width, height)
        plan = self._plans.get(key)
        if plan is None:
            plan = plan_letterbox(width, height, self.size, self.pre.resize)
            self._plans[key] = plan
        return plan

    def write(self, image: np.ndarray, dst: np.ndarray) -> Letterbox:
        """Place `image` (H, W, 3 BGR uint8) into `dst` (3, size, size), any float dtype."""
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
        y0, y1, x0, x1 = lb.pad_y, lb.pad_y + lb.new_h, lb.pad_x, lb.pad_x + lb.new_w
        pad = self._pad
        if y0 > 0:
            dst[:, :y0, :] = pad
        if y1 < self.size:
            dst[:, y1:, :] = pad
        if x0 > 0:
            dst[:, y0:y1, :x0] = pad
        if x1 < self.size:
            dst[:, y0:y1, x1:] = pad
        body = dst[:, y0:y1, x0:x1]
        if dst.dtype == np.float32:
            # OpenCV's SIMD loops: split the planes, then scale each straight into its
            # destination plane (1.5x less time than numpy's strided ufunc over the
            # transposed view; the scratch planes are reused).
            planes = self._planes.get((lb.new_w, lb.new_h))
            if planes is None:
                planes = [np.empty((lb.new_h, lb.new_w), np.uint8) for _ in range(3)]
                self._planes[(lb.new_w, lb.new_h)] = planes
            cv2.split(resized, planes)
            for c, (plane, mul, off) in enumerate(self._channels(planes)):
                cv2.addWeighted(plane, mul, plane, 0.0, off, dst=body[c], dtype=cv2.CV_32F)
            return lb
        # Other dtypes (float16): channel order and HWC -> CHW as views; one ufunc writes
        # the scaled values in place.
        src = resized[:, :, self._order].transpose(2, 0, 1)
        if self._plain:
            np.multiply(src, self._mul_scalar, out=body, casting="unsafe")
        else:
            np.multiply(src, self._mul, out=body, casting="unsafe")
            np.subtract(body, self._off, out=body, casting="unsafe")
        return lb


__all__ = ["PAD_VALUE", "Letterbox", "LetterboxWriter", "Preprocess", "Resize", "plan_letterbox"]
