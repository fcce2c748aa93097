"""What the payload costs: bytes against the clip's own H.264 file, and box F1 against the
detector on the original frames, for kept frames sent as H.264 at the model's input size.

In-process and offline, with the parts the daemons use: PyAV decode with the device's
scaling (`Frame.bgr(size)`), the device's H.264 encoder over the kept frames only, the
edge's per-camera H.264 decoder, and the edge's detector (starter model, ONNX Runtime CPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from strata.device.capture.frames import Frame
from strata.device.transport.encoder import H264Encoder, fit_size
from strata.edge.inference.detector import Detector, model_labels, open_staged
from strata.edge.inference.h264 import H264Decoders
from strata.edge.ingest.frames import DecodedFrame, QueuedFrame
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import frame_pb2
from strata.shared.vision import FrameBoxes


@dataclass(frozen=True, slots=True)
class PayloadRun:
    """Bytes of the kept frames' H.264 stream and the detector's boxes on what decoded."""

    kept: int
    bytes: int
    size: tuple[int, int]
    boxes: dict[int, FrameBoxes]


def detector_for(model: Path, max_batch: int = 8) -> Detector:
    """The edge's detector on ONNX Runtime CPU."""
    cfg = EdgeConfig()
    runner = open_staged(model, cfg, max_batch)
    shape = runner.outputs[0].shape
    classes = (shape[1] or 0) - 4 if len(shape) == 3 else 1
    return Detector(runner, model_labels(model, max(classes, 1), ()), cfg.detection)


def detect(
    det: Detector, images: Sequence[np.ndarray], scale: tuple[float, float]
) -> list[FrameBoxes]:
    """Boxes of each image, multiplied by `scale` (x, y) into source pixels."""
    out: list[FrameBoxes] = []
    sx, sy = scale
    for i in range(0, len(images), det.max_batch):
        chunk = [
            DecodedFrame(QueuedFrame(frame_pb2.FrameHeader(), memoryview(b""), 0, 0.0), im)
            for im in images[i : i + det.max_batch]
        ]
        for b in det.finish(det.launch(chunk, 0)):
            boxes = b.boxes * np.array([sx, sy, sx, sy], np.float32)
            out.append(FrameBoxes(boxes, b.scores, b.class_ids))
    return out


def h264_run(
    clip: Path,
    kept: np.ndarray,
    det: Detector,
    model_input: int,
    keyframe_interval: int = 250,
    crf: int = 18,
) -> PayloadRun:
    """Kept frames scaled to fit the model's input, encoded as one H.264 stream, decoded
    as the edge does, detected; boxes in source pixels."""
    import av

    enc = H264Encoder(keyframe_interval, crf)
    dec = H264Decoders()
    total = 0
    images: dict[int, np.ndarray] = {}
    size = (0, 0)
    src = (0, 0)
    with av.open(str(clip)) as container:
        for i, f in enumerate(container.decode(video=0)):
            if i >= len(kept) or not kept[i]:
                continue
            src = (f.width, f.height)
            size = fit_size(f.width, f.height, model_input, model_input)
            image = Frame(i, 0.0, 0, av_frame=f).bgr(size)
            unit = enc.encode(image)
            total += len(unit.data)
            images[i] = dec.decode(1, "c", i + 1, len(images) + 1, unit.data, unit.keyframe, *size)
    idx = sorted(images)
    scale = (src[0] / size[0], src[1] / size[1]) if size[0] else (1.0, 1.0)
    boxes = detect(det, [images[i] for i in idx], scale)
    return PayloadRun(len(idx), total, size, dict(zip(idx, boxes, strict=True)))


def h264_bytes(clip: Path, kept: np.ndarray, model_input: int, crf: int = 18) -> int:
    """Bytes of the H.264 stream of the kept frames scaled to fit `model_input`."""
    import av

    enc = H264Encoder(250, crf)
    total = 0
    with av.open(str(clip)) as container:
        for i, f in enumerate(container.decode(video=0)):
            if i < len(kept) and kept[i]:
                size = fit_size(f.width, f.height, model_input, model_input)
                total += len(enc.encode(Frame(i, 0.0, 0, av_frame=f).bgr(size)).data)
    return total


def original_boxes(clip: Path, det: Detector) -> list[FrameBoxes]:
    """The detector on every original frame (full resolution BGR): the reference."""
    import av

    with av.open(str(clip)) as container:
        images = [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]
    return detect(det, images, (1.0, 1.0))
