"""Small real ONNX models built with onnx.helper, for the model repository tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from strata.shared.models import InputSpec, Manifest, OutputSpec, Source, sha256_of


def tiny_classifier(path: Path, size: int = 16, classes: int = 3, dynamic: bool = True) -> None:
    """Conv -> ReLU -> global pool -> Gemm: a real, quantizable classifier."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(8, np.float32), "b")
    fw = numpy_helper.from_array(rng.normal(0, 0.3, (classes, 8)).astype(np.float32), "fw")
    fb = numpy_helper.from_array(np.zeros(classes, np.float32), "fb")
    nodes = [
        helper.make_node("Conv", ["images", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
    ]
    batch: str | int = "N" if dynamic else 1
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
        [w, b, fw, fb],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def classifier_manifest(name: str, path: Path, size: int = 16, classes: int = 3) -> Manifest:
    return Manifest(
        name=name,
        task="classify",
        file=path.name,
        sha256=sha256_of(path),
        input=InputSpec(name="images", shape=(None, 3, size, size)),
        output=OutputSpec(name="logits", format="logits"),
        labels=tuple(f"c{i}" for i in range(classes)),
        source=Source(architecture="tiny conv", made_by="tests", trained=False),
    )


def tiny_detector(path: Path, size: int = 32, classes: int = 2) -> None:
    """A YOLOv8-shaped detector: learned Conv head, then a decode tail (Split, Sigmoid, Concat)."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.normal(0, 0.5, (4 + classes, 3, 8, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(4 + classes, np.float32), "b")
    anchors = (size // 8) ** 2
    shape = numpy_helper.from_array(np.array([0, 4 + classes, anchors], np.int64), "shape")
    split = numpy_helper.from_array(np.array([4, classes], np.int64), "split")
    scale = numpy_helper.from_array(np.array(float(size), np.float32), "scale")
    nodes = [
        helper.make_node("Conv", ["images", "w", "b"], ["c"], strides=[8, 8], name="head_conv"),
        helper.make_node("Reshape", ["c", "shape"], ["r"], name="tail_reshape"),
        helper.make_node("Split", ["r", "split"], ["box", "cls"], axis=1, name="tail_split"),
        helper.make_node("Sigmoid", ["box"], ["box_s"], name="tail_box_sigmoid"),
        helper.make_node("Mul", ["box_s", "scale"], ["box_px"], name="tail_mul"),
        helper.make_node("Sigmoid", ["cls"], ["cls_s"], name="tail_cls_sigmoid"),
        helper.make_node("Concat", ["box_px", "cls_s"], ["output0"], axis=1, name="tail_concat"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_det",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 4 + classes, anchors])],
        [w, b, shape, split, scale],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def detector_manifest(name: str, path: Path, size: int = 32, classes: int = 2) -> Manifest:
    return Manifest(
        name=name,
        task="detect",
        file=path.name,
        sha256=sha256_of(path),
        input=InputSpec(name="images", shape=(None, 3, size, size), resize="letterbox"),
        output=OutputSpec(name="output0", format="yolov8"),
        labels=tuple(f"c{i}" for i in range(classes)),
        source=Source(architecture="tiny yolo-shaped", made_by="tests", trained=False),
    )
