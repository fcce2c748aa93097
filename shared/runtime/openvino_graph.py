"""Exact rewrites of a read OpenVINO model before it is compiled.

Hard-swish written as `x * HardSigmoid(x, alpha=1/6, beta=0.5)` (ONNX before opset 14 has no
HardSwish; PicoDet's export has 87 of them) runs in OpenVINO's CPU plugin as two ops, the
HardSigmoid in its reference kernel, between every convolution. One HSwish op is the same
arithmetic (x * max(0, min(1, x / 6 + 0.5))) and the plugin fuses it into the convolution
before it: the starter PicoDet-S 416 in FP32 goes from 42.4 to 26.3 ms a frame on one
thread here, outputs bit-identical (docs/edge.md). ONNX Runtime fuses the pair itself.
"""

from __future__ import annotations

from typing import Any

import openvino.opset13 as ops

ALPHA = 1.0 / 6.0
BETA = 0.5


def _constant(output: Any) -> float | None:
    node = output.get_node()
    if node.get_type_name() != "Constant":
        return None
    data = node.get_data()
    return float(data) if data.size == 1 else None


def _same(a: Any, b: Any) -> bool:
    """Two outputs are the same tensor (the Python wrappers are not the same objects)."""
    same_node = a.get_node().get_instance_id() == b.get_node().get_instance_id()
    return bool(same_node and a.get_index() == b.get_index())


def _hard_swish_input(mul: Any) -> Any | None:
    """x when `mul` is x * HardSigmoid(x) with hard-swish's constants, else None."""
    a, b = mul.input_value(0), mul.input_value(1)
    for x, h in ((a, b), (b, a)):
        gate = h.get_node()
        if gate.get_type_name() != "HardSigmoid" or not _same(gate.input_value(0), x):
            continue
        alpha, beta = _constant(gate.input_value(1)), _constant(gate.input_value(2))
        # Only hard-swish's 1/6 and 0.5: a plain HardSigmoid (ONNX's 0.2) is not one.
        if alpha is None or beta is None:
            continue
        if abs(alpha - ALPHA) < 1e-5 and abs(beta - BETA) < 1e-6:
            return x
    return None


def fuse_hard_swish(model: Any) -> int:
    """Replace, in place, every x * HardSigmoid(x) of hard-swish's constants in `model` (an
    `openvino.Model`) by one HSwish; returns how many. A HardSigmoid read by anything else
    (a squeeze-excite scale) stays."""
    fused = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Multiply":
            continue
        x = _hard_swish_input(op)
        if x is None:
            continue
        swish = ops.hswish(x)
        swish.set_friendly_name(op.get_friendly_name())
        op.output(0).replace(swish.output(0))
        fused += 1
    return fused
