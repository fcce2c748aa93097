"""hard_swish: x * HardSigmoid(x) fused into one HardSwish for OpenVINO, the same numbers
out (ONNX Runtime runs both graphs), and a squeeze-excite HardSigmoid left alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from ort_testkit import run_cpu
from strata.shared.models import starter_repository
from strata.tools.models.hard_swish import fuse_hard_swish, hard_swish_file


def _graph() -> onnx.ModelProto:
    """x -> hard-swish (Mul(x, HardSigmoid(x))) -> h; h * HardSigmoid(x) (a scale, not a
    hard-swish) -> out; and a HardSigmoid of ONNX's default constants, left as it is."""
    nodes = [
        helper.make_node("HardSigmoid", ["x"], ["hs"], name="hs", alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["hs", "x"], ["h"], name="swish"),
        helper.make_node("HardSigmoid", ["h"], ["g"], name="gate", alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["x", "g"], ["scaled"], name="scale"),
        helper.make_node("HardSigmoid", ["scaled"], ["d"], name="plain"),
        helper.make_node("Mul", ["scaled", "d"], ["out"], name="not_swish"),
    ]
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "g", [info("x", TensorProto.FLOAT, [2, 8])], [info("out", TensorProto.FLOAT, [2, 8])]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def test_fuses_only_x_times_its_own_hard_sigmoid() -> None:
    model = _graph()
    fused, n = fuse_hard_swish(model)
    assert n == 1
    ops = [(nd.name, nd.op_type) for nd in fused.graph.node]
    assert ("swish", "HardSwish") in ops and ("hs", "HardSigmoid") not in ops
    assert ("scale", "Mul") in ops and ("gate", "HardSigmoid") in ops, "a scale stays"
    assert ("not_swish", "Mul") in ops, "alpha 0.2 is not hard-swish's"
    assert max(o.version for o in fused.opset_import if o.domain in ("", "ai.onnx")) >= 14
    onnx.checker.check_model(fused)
    x = np.linspace(-8, 8, 16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_allclose(
        run_cpu(fused, {"x": x})[0], run_cpu(model, {"x": x})[0], rtol=1e-6, atol=1e-6
    )
    assert [nd.op_type for nd in model.graph.node].count("HardSigmoid") == 3, "input untouched"


def test_picodet_hard_swishes_fused(tmp_path: Path) -> None:
    src = starter_repository() / "picodet_s_416" / "model.onnx"
    dst, n = hard_swish_file(src, tmp_path)
    assert n == 87 and dst.parent == tmp_path
    ops = [nd.op_type for nd in onnx.load(str(dst)).graph.node]
    assert ops.count("HardSwish") == 87
    assert ops.count("HardSigmoid") == 13, "the squeeze-excite scales stay"
    none, zero = hard_swish_file(dst, tmp_path / "again")
    assert (none, zero) == (dst, 0), "nothing left to fuse: the file itself"
