"""Box arrays every teacher, tracker and metric here speaks: (N, 4) float32 x1, y1, x2, y2."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Which teacher supported a box; a fused box carries the OR of its sources.
SOURCE_HOG = 1
SOURCE_MOTION = 2
SOURCE_MODEL = 4
SOURCE_FILLED = 8  # interpolated across a short gap by the tracker


@dataclass(frozen=True, slots=True)
class Detections:
    """Boxes in one frame's pixel coordinates with a score and a source bitmask each."""

    xyxy: np.ndarray  # (N, 4) float32
    scores: np.ndarray  # (N,) float32
    sources: np.ndarray  # (N,) uint8, SOURCE_* bits

    def __len__(self) -> int:
        return int(self.xyxy.shape[0])

    @staticmethod
    def empty() -> Detections:
        return Detections(
            np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.uint8)
        )

    @staticmethod
    def of(xyxy: np.ndarray, scores: np.ndarray, source: int) -> Detections:
        """Wrap arrays from one teacher."""
        boxes = np.asarray(xyxy, np.float32).reshape(-1, 4)
        return Detections(
            boxes,
            np.asarray(scores, np.float32).reshape(-1),
            np.full(boxes.shape[0], source, np.uint8),
        )

    def select(self, mask: np.ndarray) -> Detections:
        return Detections(self.xyxy[mask], self.scores[mask], self.sources[mask])

    @staticmethod
    def concat(parts: list[Detections]) -> Detections:
        if not parts:
            return Detections.empty()
        return Detections(
            np.concatenate([p.xyxy for p in parts]).astype(np.float32, copy=False),
            np.concatenate([p.scores for p in parts]).astype(np.float32, copy=False),
            np.concatenate([p.sources for p in parts]).astype(np.uint8, copy=False),
        )
