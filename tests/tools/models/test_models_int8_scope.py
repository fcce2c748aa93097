"""int8_scope: the depthwise convolutions a per-tensor INT8 activation scale cannot serve,
found from the FP32 model's activations on calibration frames (a built graph, and the real
PicoDet-S 416 on vtest frames)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from strata.shared.models import ModelRepository, starter_repository
from strata.tools.models.int8_engines import LADDER, kept_in_float
from strata.tools.models.int8_scope import depthwise_inputs, narrow_depthwise, spreads
from strata.tools.models.site_int8 import edge_batch, site_frames

PICODET = "picodet_s_416"


def _graph(path: Path) -> onnx.ModelProto:
    """image [1, 2, 4, 4] -> depthwise conv (2 groups, 1x1) -> dense 1x1 conv -> out."""
    dw = numpy_helper.from_array(np.ones((2, 1, 1, 1), np.float32), "w_dw")
    dense = numpy_helper.from_array(np.ones((1, 2, 1, 1), np.float32), "w_dense")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["image", "w_dw"], ["mid"], name="dw", group=2),
            helper.make_node("Conv", ["mid", "w_dense"], ["out"], name="dense"),
        ],
        "g",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [None, 2, 4, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, 1, 4, 4])],
        [dw, dense],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path))
    return model


def _frames(wide: float, narrow: float, n: int = 6) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.random((n, 2, 4, 4), dtype=np.float32)
    x[:, 0] *= wide
    x[:, 1] *= narrow
    return x


def test_a_narrow_channel_keeps_the_depthwise_conv_in_float(tmp_path: Path) -> None:
    path = tmp_path / "g.onnx"
    model = _graph(path)
    assert depthwise_inputs(model) == {"dw": "image"}, "the dense conv is not depthwise"
    # Channel 1 spans 1/1000 of the tensor: a fraction of one INT8 step.
    assert narrow_depthwise(path, model, _frames(1000.0, 1.0)) == ["dw"]
    (spread,) = spreads(path, model, _frames(1000.0, 1.0))
    assert spread.channels == 2 and spread.narrow_channels == 1
    assert spread.narrowest_steps < 1.0
    # Channels of like ranges: nothing kept; steps 0 turns the rule off.
    assert narrow_depthwise(path, model, _frames(1000.0, 500.0)) == []
    assert narrow_depthwise(path, model, _frames(1000.0, 1.0), steps=0) == []


def test_picodet_stem_depthwise_conv_is_found_on_vtest(vtest_mp4: Path) -> None:
    """The stem's depthwise conv (Conv_1: hard-swish then max-pool, channels 0.3-6 beside
    channels up to 568) is the layer whose INT8 cost PicoDet-S 416 its agreement."""
    repo = ModelRepository(starter_repository())
    manifest, _, src = repo.file_of(PICODET)
    batch, _ = edge_batch(manifest, site_frames([vtest_mp4], 8))
    model = onnx.load(str(src))
    found = narrow_depthwise(src, model, batch)
    assert "Conv_1" in found
    assert len(found) < len(depthwise_inputs(model)) / 2, "most depthwise convs stay INT8"
    kept = kept_in_float(src, model, LADDER[0], batch)
    assert {"Conv_1", "Conv_117", "Conv_122", "Conv_127", "Conv_132"} <= set(kept)
    assert len(kept) == len(set(kept))


def _swish_graph(path: Path) -> None:
    """x -> conv A -> y -> y * HardSigmoid(y) -> z -> conv C -> c."""
    w = numpy_helper.from_array(np.eye(2, dtype=np.float32).reshape(2, 2, 1, 1), "w")
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["y"], name="A"),
            helper.make_node("HardSigmoid", ["y"], ["h"], name="H", alpha=1 / 6, beta=0.5),
            helper.make_node("Mul", ["y", "h"], ["z"], name="M"),
            helper.make_node("Conv", ["z", "w"], ["c"], name="C"),
        ],
        "g",
        [info("x", TensorProto.FLOAT, [None, 2, 4, 4])],
        [info("c", TensorProto.FLOAT, [None, 2, 4, 4])],
        [w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def test_ort_conv_inputs_only_leaves_hard_swish_in_float(tmp_path: Path) -> None:
    """ONNX Runtime's QDQ as the site INT8 engine runs it: only convs' inputs quantized, so
    a hard-swish gate sees the conv's output itself, not one INT8 step of its whole range
    (what broke PicoDet-S on ONNX Runtime)."""
    from strata.tools.models.quantize import quantize_file

    src, dst = tmp_path / "g.onnx", tmp_path / "q.onnx"
    _swish_graph(src)
    batch = _frames(10.0, 10.0)
    quantize_file(src, dst, batch, "x", "minmax", (), "", "classify", False, True)
    nodes = {n.name: n for n in onnx.load(str(dst)).graph.node}
    producers = {o: n for n in nodes.values() for o in n.output}
    assert nodes["H"].input[0] == "y" and list(nodes["M"].input) == ["y", "h"]
    assert producers[nodes["C"].input[0]].op_type == "DequantizeLinear"
    # The default quantizes the Mul's inputs too.
    quantize_file(src, dst, batch, "x", "minmax", (), "", "classify", False)
    default = {n.name: n for n in onnx.load(str(dst)).graph.node}
    assert default["M"].input[0] != "y"
