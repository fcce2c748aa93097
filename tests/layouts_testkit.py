"""Detector outputs of every layout, made on purpose: ONNX graphs whose outputs are known
constants (plus 0 x the image, so the graph has a real image input), and encoders that
write given boxes in each layout's own terms, through a real letterbox placement."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from strata.shared.models.repository import starter_repository
from strata.shared.vision.layouts import DetectLayout
from strata.shared.vision.letterbox import Letterbox, Preprocess

ROOT = Path(__file__).resolve().parents[1]


def models_dir() -> Path:
    """The real pretrained models: $STRATA_MODELS_DIR, else <repo>/../shared/models."""
    env = os.environ.get("STRATA_MODELS_DIR")
    return Path(env) if env else ROOT.parent / "shared" / "models"


def constant_model(outputs: dict[str, np.ndarray], size: int, batch: int = 1) -> bytes:
    """An ONNX model with input 'images' [batch, 3, size, size] and the given outputs: each
    float one is its constant + 0 x mean(images); an integer one is its constant."""
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["mean"], keepdims=0),
        helper.make_node("Mul", ["mean", "zero"], ["nothing"]),
    ]
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    infos = []
    for i, (name, value) in enumerate(outputs.items()):
        inits.append(numpy_helper.from_array(value, f"const{i}"))
        if value.dtype == np.float32:
            nodes.append(helper.make_node("Add", [f"const{i}", "nothing"], [name]))
        else:
            nodes.append(helper.make_node("Identity", [f"const{i}"], [name]))
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        infos.append(helper.make_tensor_value_info(name, elem, list(value.shape)))
    image = helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, size, size])
    graph = helper.make_graph(nodes, "constant_outputs", [image], infos, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def run_constant_model(
    outputs: dict[str, np.ndarray], size: int, batch: int = 1
) -> list[np.ndarray]:
    """The outputs as onnxruntime gives them back, from a batch of zero images."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(
        constant_model(outputs, size, batch), so, providers=["CPUExecutionProvider"]
    )
    return list(sess.run(None, {"images": np.zeros((batch, 3, size, size), np.float32)}))


@dataclass(frozen=True, slots=True)
class Obj:
    """A box in the original frame's pixels, its class and score, and the level (a gfl or
    yolox head) it is written on."""

    xyxy: tuple[float, float, float, float]
    cls: int
    score: float
    level: int = 0


def to_input(lb: Letterbox, xyxy: tuple[float, float, float, float]) -> np.ndarray:
    """A frame box in model-input pixels (the inverse of Letterbox.to_original)."""
    sy = lb.scale_y or lb.scale
    x1, y1, x2, y2 = xyxy
    return np.array(
        [
            x1 * lb.scale + lb.pad_x,
            y1 * sy + lb.pad_y,
            x2 * lb.scale + lb.pad_x,
            y2 * sy + lb.pad_y,
        ],
        np.float64,
    )


def _cxcywh(b: np.ndarray) -> np.ndarray:
    return np.array([(b[0] + b[2]) / 2, (b[1] + b[3]) / 2, b[2] - b[0], b[3] - b[1]])


def encode_yolov8(lb: Letterbox, objs: list[Obj], c: int) -> list[np.ndarray]:
    out = np.zeros((1, 4 + c, 10), np.float32)
    for a, o in enumerate(objs):
        out[0, :4, a] = _cxcywh(to_input(lb, o.xyxy))
        out[0, 4 + o.cls, a] = o.score
    return [out]


def encode_yolov5(lb: Letterbox, objs: list[Obj], c: int) -> list[np.ndarray]:
    out = np.zeros((1, 12, 5 + c), np.float32)
    for a, o in enumerate(objs):
        out[0, a, :4] = _cxcywh(to_input(lb, o.xyxy))
        # score = objectness x class score: split it over both on every other box.
        obj, cls = (1.0, o.score) if a % 2 == 0 else (o.score / 0.8, 0.8)
        out[0, a, 4], out[0, a, 5 + o.cls] = obj, cls
    return [out]


def _cell(centre: float, stride: int, grid: int) -> int:
    return min(max(int(centre // stride), 0), grid - 1)


def encode_yolox(lb: Letterbox, objs: list[Obj], c: int, strides=(8, 16, 32)) -> list[np.ndarray]:
    grids = [math.ceil(lb.size / s) for s in strides]
    offsets = np.cumsum([0] + [g * g for g in grids])
    out = np.zeros((1, int(offsets[-1]), 5 + c), np.float32)
    for o in objs:
        s, g = strides[o.level], grids[o.level]
        cx, cy, w, h = _cxcywh(to_input(lb, o.xyxy))
        gx, gy = _cell(cx, s, g), _cell(cy, s, g)
        a = int(offsets[o.level]) + gy * g + gx
        assert not out[0, a].any(), "two boxes on one anchor"
        out[0, a, :4] = (cx / s - gx, cy / s - gy, math.log(w / s), math.log(h / s))
        out[0, a, 4], out[0, a, 5 + o.cls] = 1.0, o.score
    return [out]


def _dfl_logits(d: float, reg_max: int) -> np.ndarray:
    """Logits whose softmax expectation over 0..reg_max is d: mass on floor(d) and next."""
    assert 0 <= d <= reg_max, f"distance {d} strides is out of the DFL range"
    logits = np.full(reg_max + 1, -60.0)
    j = min(int(d), reg_max - 1)
    f = d - j
    logits[j] = 0.0
    logits[j + 1] = math.log(f / (1 - f)) if 0 < f < 1 else (-60.0 if f == 0 else 60.0)
    if f == 1:
        logits[j] = -60.0
    return logits


def encode_gfl(lb: Letterbox, objs: list[Obj], layout: DetectLayout) -> list[np.ndarray]:
    """Class maps then box maps, finest level first, [1, A, .] each."""
    strides, c, r = layout.level_strides, layout.num_classes, layout.reg_max
    grids = [math.ceil(lb.size / s) for s in strides]
    cls = [np.zeros((1, g * g, c), np.float32) for g in grids]
    box = [np.zeros((1, g * g, 4 * (r + 1)), np.float32) for g in grids]
    for o in objs:
        s, g = strides[o.level], grids[o.level]
        b = to_input(lb, o.xyxy)
        cx, cy = _cxcywh(b)[:2]
        gx, gy = _cell(cx, s, g), _cell(cy, s, g)
        if layout.grid_centre == "nanodet":
            px, py = gx * s + (s - 1) / 2, gy * s + (s - 1) / 2
        else:
            px, py = (gx + 0.5) * s, (gy + 0.5) * s
        a = gy * g + gx
        assert not cls[o.level][0, a].any(), "two boxes on one anchor"
        cls[o.level][0, a, o.cls] = o.score
        dists = (px - b[0], py - b[1], b[2] - px, b[3] - py)
        box[o.level][0, a] = np.concatenate([_dfl_logits(d / s, r) for d in dists])
    return cls + box


def encode_end2end(lb: Letterbox, objs: list[Obj], offset: int = 0) -> list[np.ndarray]:
    out = np.zeros((1, 8, 6), np.float32)
    for k, o in enumerate(objs):
        out[0, k, :4] = to_input(lb, o.xyxy)
        out[0, k, 4], out[0, k, 5] = o.score, o.cls + offset
    return [out]


def encode_paddle(
    lbs: list[Letterbox], frames: list[list[Obj]], offset: int = 0
) -> list[np.ndarray]:
    """Paddle's multiclass NMS: [K, 6] class, score, x1, y1, x2, y2 rows, and counts."""
    rows = [
        [o.cls + offset, o.score, *to_input(lb, o.xyxy)]
        for lb, objs in zip(lbs, frames, strict=True)
        for o in objs
    ]
    counts = np.array([len(f) for f in frames], np.int32)
    return [np.array(rows, np.float32).reshape(-1, 6), counts]


def _normalised_cxcywh(lb: Letterbox, o: Obj) -> np.ndarray:
    return _cxcywh(to_input(lb, o.xyxy)) / lb.size


def encode_detr(lb: Letterbox, objs: list[Obj], c: int, single: bool) -> list[np.ndarray]:
    q = 10
    boxes = np.full((1, q, 4), 0.5, np.float32)
    logits = np.full((1, q, c), -9.0, np.float32)  # sigmoid 1e-4: nothing there
    for k, o in enumerate(objs):
        boxes[0, k] = _normalised_cxcywh(lb, o)
        logits[0, k, o.cls] = math.log(o.score / (1 - o.score))
    if single:  # ultralytics' RT-DETR: sigmoid applied in the graph
        return [np.concatenate([boxes, 1 / (1 + np.exp(-logits))], axis=2).astype(np.float32)]
    return [boxes, logits]


def encode_ssd(lb: Letterbox, objs: list[Obj], offset: int = 1) -> list[np.ndarray]:
    k = 10
    boxes = np.zeros((1, k, 4), np.float32)
    classes = np.zeros((1, k), np.float32)
    scores = np.zeros((1, k), np.float32)
    for i, o in enumerate(objs):
        x1, y1, x2, y2 = to_input(lb, o.xyxy) / lb.size
        boxes[0, i] = (y1, x1, y2, x2)
        classes[0, i], scores[0, i] = o.cls + offset, o.score
    # A row past the count: must not be read.
    boxes[0, len(objs)] = (0.1, 0.1, 0.2, 0.2)
    scores[0, len(objs)] = 0.99
    return [boxes, classes, scores, np.array([len(objs)], np.float32)]


# The real detectors in models_dir(): file, preprocessing and layout (from their SOURCE.txt).
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


@dataclass(frozen=True, slots=True)
class RealDetector:
    file: str
    preprocess: Preprocess
    layout: DetectLayout
    extra_inputs: tuple[tuple[str, tuple[int, ...]], ...] = ()  # name, shape: fed ones


def _picodet(size: int) -> tuple[Preprocess, DetectLayout]:
    pre = Preprocess(size, "stretch", True, 1.0, IMAGENET_MEAN, IMAGENET_STD)
    return pre, DetectLayout("gfl", 80, size)


REAL_DETECTORS: dict[str, RealDetector] = {
    # The starter repository's copy (always present; the reference of the others).
    "picodet_s_416": RealDetector(
        str(starter_repository() / "picodet_s_416" / "model.onnx"), *_picodet(416)
    ),
    "picodet_s_320": RealDetector("picodet_s_320_coco/cleaned.onnx", *_picodet(320)),
    "nanodet_m_320": RealDetector(
        "nanodet_m_320/model.onnx",
        Preprocess(320, "letterbox", False, 1.0, IMAGENET_MEAN[::-1], IMAGENET_STD[::-1], 0.0),
        DetectLayout("gfl", 80, 320, strides=(8, 16, 32), grid_centre="nanodet"),
    ),
    "yolox_nano": RealDetector(
        "yolox_nano/model.onnx",
        Preprocess(416, "letterbox_topleft", False, 1.0, pad_value=114.0),
        DetectLayout("yolox", 80, 416),
    ),
    "picodet_xs_320": RealDetector(
        "picodet_xs_320_lcnet/upstream.onnx",
        Preprocess(320, "stretch", True, 1.0, IMAGENET_MEAN, IMAGENET_STD),
        DetectLayout("end2end", 80, 320),
        # Boxes in input pixels (helper B's importer folds this input to the same constant).
        (("scale_factor", (1, 2)),),
    ),
}
