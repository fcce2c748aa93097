"""The exact rewrites of shared/runtime/openvino_graph.py, on the real OpenVINO runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from required_testkit import require_module

require_module("openvino", "the test extra installs it: pip install -e '.[cpu,test]'")

import onnx  # noqa: E402
import openvino as ov  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from strata.shared.runtime.openvino_graph import fuse_hard_swish  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PICODET = ROOT / "shared/starter_models/picodet_s_416/model.onnx"


def _ops(model: ov.Model) -> list[str]:
    return [op.get_type_name() for op in model.get_ordered_ops()]


def _run(model: ov.Model, x: np.ndarray) -> list[np.ndarray]:
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    out = compiled(x)
    return [np.array(out[i]) for i in range(len(compiled.outputs))]


def test_picodet_s_416_hard_swishes_fuse_and_its_outputs_stay_the_same() -> None:
    core = ov.Core()
    before, after = core.read_model(str(PICODET)), core.read_model(str(PICODET))
    assert fuse_hard_swish(after) == 87
    assert _ops(after).count("HSwish") == 87
    # The squeeze-excite scales' HardSigmoids (read by a Mul with another tensor) stay.
    assert _ops(after).count("HardSigmoid") == _ops(before).count("HardSigmoid") - 87 > 0
    x = np.random.default_rng(0).random((1, 3, 416, 416), dtype=np.float32)
    for a, b in zip(_run(before, x), _run(after, x), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def _gated(tmp_path: Path, alpha: float, same_input: bool) -> ov.Model:
    """y = x * HardSigmoid(x or another input, alpha, 0.5), as an ONNX file read back."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [
        helper.make_node("HardSigmoid", ["x" if same_input else "z"], ["h"], alpha=alpha),
        helper.make_node("Mul", ["x", "h"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [x, z], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    path = tmp_path / "gated.onnx"
    onnx.save(model, str(path))
    return ov.Core().read_model(str(path))


@pytest.mark.parametrize(
    ("alpha", "same_input", "fused"),
    [(1 / 6, True, 1), (0.2, True, 0), (1 / 6, False, 0)],
    ids=["hard-swish", "plain-hard-sigmoid", "a-gate-of-another-tensor"],
)
def test_only_x_times_its_own_hard_sigmoid_of_one_sixth_is_fused(
    tmp_path: Path, alpha: float, same_input: bool, fused: int
) -> None:
    model = _gated(tmp_path, alpha, same_input)
    assert fuse_hard_swish(model) == fused
    x = np.linspace(-5, 5, 4, dtype=np.float32).reshape(1, 4)
    z = np.full((1, 4), 0.7, np.float32)
    expected = x * np.clip(alpha * (x if same_input else z) + 0.5, 0, 1)
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    np.testing.assert_allclose(compiled([x, z])[0], expected, atol=1e-6)
