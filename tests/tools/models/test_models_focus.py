"""focus: a Focus stem (four strided-slice phases, concat, conv) as one 2k x 2k conv of
stride 2 on the image; the same numbers out (ONNX Runtime runs both graphs, a built one
and the real YOLOX-nano on vtest frames), and what is not a Focus left alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from layouts_testkit import models_dir
from onnx import TensorProto, helper, numpy_helper
from ort_testkit import run_cpu
from strata.tools.models.focus import focus_file, fold_focus
from strata.tools.models.site_int8 import site_frames

END = 2**63 - 1


def _graph(order: list[tuple[int, int]], stride: int = 1, k: int = 3) -> onnx.ModelProto:
    """x [1, 3, 8, 8] -> the four phases x[..., dy::2, dx::2] in `order` -> concat ->
    conv k x k (stride `stride`, padded k // 2) -> y; the slice constants as initializers."""
    rng = np.random.default_rng(0)
    ints = {f"i{v}": v for v in (0, 1, 2, 3, END)}
    init = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in ints.items()]
    w = rng.standard_normal((5, 12, k, k)).astype(np.float32)
    init += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.ones(5, np.float32), "b")]
    nodes = []
    for i, (dy, dx) in enumerate(order):
        rows, cols = f"r{i}", f"p{i}"
        nodes.append(helper.make_node("Slice", ["x", f"i{dy}", f"i{END}", "i2", "i2"], [rows]))
        nodes.append(helper.make_node("Slice", [rows, f"i{dx}", f"i{END}", "i3", "i2"], [cols]))
    phases = [f"p{i}" for i in range(len(order))]
    nodes.append(helper.make_node("Concat", phases, ["cat"], name="focus", axis=1))
    p = k // 2
    nodes.append(
        helper.make_node(
            "Conv", ["cat", "w", "b"], ["y"], name="stem", pads=[p] * 4, strides=[stride] * 2
        )
    )
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "g",
        [info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [info("y", TensorProto.FLOAT, [1, 5, None, None])],
        init,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_focus_becomes_one_strided_conv_with_the_same_outputs() -> None:
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    for order in ([(0, 0), (1, 0), (0, 1), (1, 1)], [(1, 1), (0, 0), (0, 1), (1, 0)]):
        for k in (1, 3):
            model = _graph(order, k=k)
            folded, folds = fold_focus(model)
            onnx.checker.check_model(folded)
            assert [(f.concat, f.conv, f.kernel) for f in folds] == [("focus", "stem", 2 * k)]
            ops = [n.op_type for n in folded.graph.node]
            assert ops == ["Conv"], "the slices and the concat are gone"
            np.testing.assert_allclose(
                run_cpu(folded, {"x": x})[0], run_cpu(model, {"x": x})[0], atol=1e-5
            )
    strided, none = fold_focus(_graph([(0, 0), (1, 0), (0, 1), (1, 1)], stride=2))
    assert none == [] and "Concat" in [n.op_type for n in strided.graph.node]
    twice, none = fold_focus(_graph([(0, 0), (1, 0), (0, 1), (0, 1)]))
    assert none == [] and len(twice.graph.node) == 10, "not the four phases: left alone"


def test_yolox_nano_focus_folds_with_the_same_outputs_on_vtest(
    tmp_path: Path, vtest_mp4: Path
) -> None:
    src = models_dir() / "yolox_nano" / "model.onnx"
    if not src.is_file():
        pytest.skip(f"real model {src} absent (set STRATA_MODELS_DIR to the models folder)")
    dst, folds = focus_file(src, tmp_path)
    assert [(f.conv, f.kernel) for f in folds] == [("Conv_41", 6)]
    ops = [n.op_type for n in onnx.load(str(dst)).graph.node]
    assert "Slice" not in ops
    for frame in site_frames([vtest_mp4], 2):
        # BGR 0-255, the 416 x 416 top-left of the frame: the model's own input range.
        x = np.ascontiguousarray(frame[:416, :416].transpose(2, 0, 1))[None].astype(np.float32)
        want = run_cpu(str(src), {"images": x})[0]
        np.testing.assert_allclose(run_cpu(str(dst), {"images": x})[0], want, rtol=0, atol=1e-4)
    assert focus_file(dst, tmp_path / "again") == (dst, [])
