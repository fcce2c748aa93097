"""Small real ONNX classifiers for the cloud tests, built with onnx.helper.

The colour classifier's answer is known: the class is the dominant RGB channel of the
normalized image, so a test can check preprocessing (BGR->RGB, scale, mean/std) end to end.
A `slow_layers` branch adds real convolution work whose result is scaled to zero, to make
batches take long enough for queueing tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LABELS = ("red", "green", "blue")


def build_colour_classifier(
    path: Path, size: int = 32, slow_layers: int = 0, width: int = 64, fixed_batch: int = 0
) -> Path:
    """Write an ONNX model (N, 3, size, size) -> logits (N, 3) to path."""
    rng = np.random.default_rng(0)
    batch: int | str = fixed_batch or "N"
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 3])
    inits = [
        numpy_helper.from_array(np.eye(3, dtype=np.float32) * 4.0, "w_fc"),
        numpy_helper.from_array(np.zeros(3, np.float32), "b_fc"),
    ]
    nodes = [
        helper.make_node("GlobalAveragePool", ["input"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w_fc", "b_fc"], ["fc"], transB=1),
    ]
    result = "fc"
    if slow_layers:
        w0 = rng.standard_normal((width, 3, 3, 3)).astype(np.float32) * 0.1
        inits.append(numpy_helper.from_array(w0, "w_slow0"))
        nodes.append(helper.make_node("Conv", ["input", "w_slow0"], ["s0"], pads=[1, 1, 1, 1]))
        cur = "s0"
        for i in range(1, slow_layers + 1):
            w = rng.standard_normal((width, width, 3, 3)).astype(np.float32) * 0.01
            inits.append(numpy_helper.from_array(w, f"w_slow{i}"))
            nodes.append(
                helper.make_node("Conv", [cur, f"w_slow{i}"], [f"c{i}"], pads=[1, 1, 1, 1])
            )
            nodes.append(helper.make_node("Relu", [f"c{i}"], [f"s{i}"]))
            cur = f"s{i}"
        inits.append(numpy_helper.from_array(np.zeros((1, 1), np.float32), "zero"))
        nodes += [
            helper.make_node("GlobalAveragePool", [cur], ["slow_gap"]),
            helper.make_node("Flatten", ["slow_gap"], ["slow_flat"]),
            helper.make_node("MatMul", ["slow_flat", "ones"], ["slow_sum"]),
            helper.make_node("Mul", ["slow_sum", "zero"], ["slow_zero"]),
            helper.make_node("Add", ["fc", "slow_zero"], ["slow_fc"]),
        ]
        inits.append(numpy_helper.from_array(np.ones((width, 1), np.float32), "ones"))
        result = "slow_fc"
    nodes.append(helper.make_node("Identity", [result], ["logits"]))
    graph = helper.make_graph(nodes, "colour", [inp], [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


def build_failing_classifier(path: Path, size: int = 32) -> Path:
    """A model that loads but fails every run (a Reshape whose element count cannot fit)."""
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, size, size])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])
    shape = numpy_helper.from_array(np.array([-1, 7, 7], np.int64), "bad_shape")
    nodes = [
        helper.make_node("GlobalAveragePool", ["input"], ["gap"]),
        helper.make_node("Reshape", ["gap", "bad_shape"], ["r"]),
        helper.make_node("ReduceSum", ["r"], ["logits"], keepdims=0),
    ]
    graph = helper.make_graph(nodes, "failing", [inp], [out], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path
