"""How far the whole picture moved between two kept frames: a camera that pans or tilts.

Phase correlation of the motion gate's two grey frames (the new one against the last kept
one) finds the translation that best maps one onto the other, and how strongly (the peak's
response, 0-1). Objects moving over a still background leave the translation near 0 (the
background dominates); a pan moves the whole picture by its speed times the gap. Over a cut
nothing maps onto anything: the response is low and no shift is reported. Buffers are
allocated once (two float copies and the window of the gate's size).
"""

from __future__ import annotations

import math

import cv2
import numpy as np

# Under this peak response the two frames share no translation (a cut, a scene that
# changed as a whole): no shift is reported. Measured on the pans clip at the gate's
# 192x144: a pan's kept frames 0.3-0.8, across a cut 0.0-0.2.
MIN_RESPONSE = 0.25
# Gate pixels (192 wide) the picture may move between kept frames while the camera moves:
# about 2% of the frame, under half the width of vtest's people, so the edge's tracker
# still matches their boxes by overlap across the gap.
PAN_SHIFT = 4.0
# The shifted old frame must differ from the new one by at most this share of what the
# old frame as it is differs (a pan over texture: far less; objects over a still scene:
# more, the background no longer lines up).
EXPLAINS = 0.7


class ShiftMeter:
    """Translation between two grey frames of one size (the gate's), in its pixels."""

    def __init__(self, width: int, height: int) -> None:
        self._a = np.empty((height, width), np.float32)
        self._b = np.empty((height, width), np.float32)
        self._window = cv2.createHanningWindow((width, height), cv2.CV_32F)

    def shift(self, old: np.ndarray, new: np.ndarray) -> float | None:
        """Length of the translation from `old` to `new` (uint8, the meter's size), or None
        when they share none (the response under MIN_RESPONSE)."""
        np.copyto(self._a, old, casting="unsafe")
        np.copyto(self._b, new, casting="unsafe")
        (dx, dy), response = cv2.phaseCorrelate(self._a, self._b, self._window)
        if response < MIN_RESPONSE:
            return None
        length = math.hypot(dx, dy)
        if length < 0.5:
            return length
        # Objects moving over a still background can win the correlation: a translation
        # is the camera's only when it explains the change (the shifted old frame is much
        # closer to the new one than the old frame as it is).
        x, y = round(dx), round(dy)
        h, w = old.shape
        if abs(x) >= w // 2 or abs(y) >= h // 2:
            return None
        new_part = new[max(y, 0) : h + min(y, 0), max(x, 0) : w + min(x, 0)]
        moved = old[max(-y, 0) : h + min(-y, 0), max(-x, 0) : w + min(-x, 0)]
        still = old[max(y, 0) : h + min(y, 0), max(x, 0) : w + min(x, 0)]
        if cv2.norm(new_part, moved, cv2.NORM_L1) > EXPLAINS * cv2.norm(
            new_part, still, cv2.NORM_L1
        ):
            return 0.0
        return length
