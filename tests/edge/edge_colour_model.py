"""A real ONNX detector whose right answer is known: one box per synthetic-clip colour.

The synthetic clip paints objects in pure saturated colours on grey. Per class, a colour
mask (channel > HI where the colour is 255, < LO where it is 0) gives row and column
extents (ReduceMax, then ArgMax first/last index), emitted in the ultralytics YOLOv8 layout
[N, 4 + classes, anchors] with cx, cy, w, h in model-input (letterbox) pixels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from strata.shared.synthetic import CLASSES

HI, LO = 0.7, 0.3
SCORE = 0.9


def build_colour_detector(
    path: Path, size: int, extra_anchors: int = 5, batch: int | str = "batch"
) -> Path:
    """Write the model (input `images` [N, 3, size, size] RGB in [0, 1]) and return path.

    `batch` fixes the batch axis (an int, as many exports do) or names it (dynamic)."""
    nc = len(CLASSES)
    nodes: list[onnx.NodeProto] = []
    inits = [
        numpy_helper.from_array(np.array(HI, np.float32), "hi"),
        numpy_helper.from_array(np.array(LO, np.float32), "lo"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([2], np.int64), "ax2"),
        numpy_helper.from_array(np.array([3], np.int64), "ax3"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.eye(nc, dtype=np.float32) * SCORE, "eye"),
    ]
    nodes.append(helper.make_node("Split", ["images"], ["R", "G", "B"], axis=1, num_outputs=3))
    for ch in "RGB":
        nodes.append(helper.make_node("Greater", [ch, "hi"], [f"{ch}_hi"]))
        nodes.append(helper.make_node("Less", [ch, "lo"], [f"{ch}_lo"]))
    masks = []
    for c, (_label, bgr) in enumerate(CLASSES):
        rgb = (bgr[2], bgr[1], bgr[0])
        terms = [f"{ch}_hi" if v == 255 else f"{ch}_lo" for ch, v in zip("RGB", rgb, strict=True)]
        nodes.append(helper.make_node("And", terms[:2], [f"m{c}a"]))
        nodes.append(helper.make_node("And", [f"m{c}a", terms[2]], [f"m{c}b"]))
        nodes.append(helper.make_node("Cast", [f"m{c}b"], [f"m{c}"], to=TensorProto.FLOAT))
        masks.append(f"m{c}")
    nodes.append(helper.make_node("Concat", masks, ["M"], axis=1))  # N, nc, H, W
    nodes.append(helper.make_node("ReduceMax", ["M", "ax2"], ["cols"], keepdims=0))
    nodes.append(helper.make_node("ReduceMax", ["M", "ax3"], ["rows"], keepdims=0))
    nodes.append(helper.make_node("ReduceMax", ["cols", "ax2"], ["present"], keepdims=0))
    for axis_name, src in (("x", "cols"), ("y", "rows")):
        nodes.append(helper.make_node("ArgMax", [src], [f"{axis_name}1i"], axis=2, keepdims=0))
        nodes.append(
            helper.make_node(
                "ArgMax", [src], [f"{axis_name}2i"], axis=2, keepdims=0, select_last_index=1
            )
        )
        nodes.append(
            helper.make_node("Cast", [f"{axis_name}1i"], [f"{axis_name}1"], to=TensorProto.FLOAT)
        )
        nodes.append(
            helper.make_node("Cast", [f"{axis_name}2i"], [f"{axis_name}2l"], to=TensorProto.FLOAT)
        )
        # The last set pixel's index + 1 is the exclusive edge, as the ground truth has it.
        nodes.append(helper.make_node("Add", [f"{axis_name}2l", "onef"], [f"{axis_name}2"]))
        nodes.append(
            helper.make_node("Add", [f"{axis_name}1", f"{axis_name}2"], [f"c{axis_name}2"])
        )
        nodes.append(helper.make_node("Mul", [f"c{axis_name}2", "half"], [f"c{axis_name}"]))
        nodes.append(helper.make_node("Sub", [f"{axis_name}2", f"{axis_name}1"], [f"d{axis_name}"]))
    inits.append(numpy_helper.from_array(np.array(1.0, np.float32), "onef"))
    rows = []
    for name in ("cx", "cy", "dx", "dy"):
        nodes.append(helper.make_node("Unsqueeze", [name, "one"], [f"{name}_u"]))
        rows.append(f"{name}_u")
    nodes.append(helper.make_node("Concat", rows, ["boxes"], axis=1))  # N, 4, nc
    nodes.append(helper.make_node("Unsqueeze", ["present", "one"], ["present_u"]))  # N, 1, nc
    nodes.append(helper.make_node("Mul", ["present_u", "eye"], ["scores"]))  # N, nc, nc
    nodes.append(helper.make_node("Concat", ["boxes", "scores"], ["det"], axis=1))
    # Empty extra anchors make the decoder skip low-score columns too.
    nodes.append(helper.make_node("Shape", ["det"], ["det_shape"]))
    nodes.append(helper.make_node("Slice", ["det_shape", "zero", "two"], ["n_rows"]))  # [N, 4+nc]
    nodes.append(helper.make_node("Concat", ["n_rows", "extra"], ["pad_shape"], axis=0))
    nodes.append(helper.make_node("ConstantOfShape", ["pad_shape"], ["pad"]))
    nodes.append(helper.make_node("Concat", ["det", "pad"], ["output0"], axis=2))
    inits += [
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
        numpy_helper.from_array(np.array([extra_anchors], np.int64), "extra"),
    ]
    graph = helper.make_graph(
        nodes,
        "colour_detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, size, size])],
        [
            helper.make_tensor_value_info(
                "output0", TensorProto.FLOAT, [batch, 4 + nc, nc + extra_anchors]
            )
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    names = {i: label for i, (label, _c) in enumerate(CLASSES)}
    helper.set_model_props(model, {"names": repr(names)})
    onnx.checker.check_model(model, full_check=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path
