"""Run a YOLOv8-style ONNX detector on BGR frames, one at a time, on the CPU.

The distiller needs this twice, as a teacher (a user's big YOLO from the repository) and to
score the student it exports. Letterboxing and decoding are the tiers' shared ones
(strata.shared.vision), so the student is scored exactly as the edge node will run it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from strata.shared.runtime import ModelRunner, create_runner
from strata.shared.vision.letterbox import LetterboxWriter
from strata.shared.vision.yolo import decode_yolo
from strata.tools.distill.boxes import SOURCE_MODEL, Detections


class YoloDetector:
    """A YOLOv8 ONNX model (output (N, 4 + classes, anchors)) on the CPU."""

    def __init__(
        self,
        path: str | Path,
        size: int | None = None,
        conf: float = 0.25,
        iou: float = 0.45,
        classes: tuple[int, ...] | None = None,
        threads: int = 0,
    ) -> None:
        self.runner: ModelRunner = create_runner(path, threads=threads)
        shape = self.runner.inputs[0].shape
        fixed = shape[2] if len(shape) == 4 and isinstance(shape[2], int) else None
        self.size = int(size or fixed or 640)
        self.conf, self.iou = conf, iou
        self.classes = None if classes is None else np.asarray(classes, np.int32)
        self._writer = LetterboxWriter(self.size)
        # Allocated once: every frame is letterboxed into this buffer.
        self._batch = np.zeros((1, 3, self.size, self.size), np.float32)

    def detect(self, frame: np.ndarray) -> Detections:
        """Boxes in the frame's pixel coordinates after the score filter and NMS."""
        lb = self._writer.write(frame, self._batch[0])
        out = self.runner.run(self._batch)[0]
        fb = decode_yolo(out, [lb], self.conf, self.iou)[0]
        keep = (
            np.ones(len(fb), bool) if self.classes is None else np.isin(fb.class_ids, self.classes)
        )
        return Detections.of(fb.boxes[keep], fb.scores[keep], SOURCE_MODEL)

    def close(self) -> None:
        self.runner.close()
