"""Frames (BGR uint8) into a model's input batch, exactly as its manifest describes.

Letterboxed inputs go through the edge tier's shared `LetterboxWriter` (so calibration sees
what the detector sees at run time); stretched inputs are resized and normalised with the
manifest's scale, mean and std. Used for calibration and agreement checks, not a hot path.
"""

from __future__ import annotations

import numpy as np
from strata.shared.models.manifest import InputSpec
from strata.shared.vision.letterbox import LetterboxWriter


def prepare(spec: InputSpec, frames: list[np.ndarray]) -> np.ndarray:
    """An (N, 3, H, W) float32 batch of `frames` per `spec`."""
    import cv2

    h, w = spec.height, spec.width
    out = np.empty((len(frames), 3, h, w), np.float32)
    std = np.asarray(spec.std, np.float32)
    # (x * scale - mean) / std == x * mul + add, per model channel.
    mul = (np.float32(spec.scale) / std).reshape(3, 1, 1)
    add = (-np.asarray(spec.mean, np.float32) / std).reshape(3, 1, 1)
    letterbox = spec.resize == "letterbox"
    if letterbox and h != w:
        raise ValueError(f"letterbox inputs must be square, got {h}x{w}")
    if letterbox and (spec.colour != "RGB" or spec.scale != 1.0 / 255.0):
        raise ValueError("letterbox inputs are RGB scaled by 1/255 (ultralytics)")
    plain = spec.mean == (0.0, 0.0, 0.0) and spec.std == (1.0, 1.0, 1.0)
    writer = LetterboxWriter(h) if letterbox else None
    for i, frame in enumerate(frames):
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise ValueError(f"expected (H, W, 3) uint8 BGR frames, got {frame.shape}")
        if writer is not None:
            writer.write(frame, out[i])  # RGB, [0, 1]
            if not plain:
                out[i] = (out[i] * 255.0) * mul + add
        else:
            img = cv2.resize(frame, (w, h), interpolation=cv2.INTER_LINEAR)
            if spec.colour == "RGB":
                img = img[:, :, ::-1]
            out[i] = img.transpose(2, 0, 1) * mul + add
    return out
