"""rewrite_speed: the interleaved speed of ONNX Runtime and OpenVINO runs on one batch, and
OpenVINO's per-layer counters, on a small built graph (the real figures: docs/models.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from required_testkit import require_module
from strata.tools.models.rewrite_speed import (
    Candidate,
    candidates,
    interleaved,
    layer_times,
    table,
)


def _conv(path: Path) -> Path:
    w = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32) / 27, "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="c", pads=[1, 1, 1, 1])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8, 16, 16])],
        [w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_interleaved_runs_both_engines_at_batch_1_and_4(tmp_path: Path) -> None:
    require_module("openvino", "pip install 'strata[openvino]'")
    src = _conv(tmp_path / "c.onnx")
    runs = [Candidate("ort", src, "onnxruntime"), Candidate("ov", src, "openvino")]
    for batch in (1, 4):
        x = np.random.default_rng(0).random((batch, 3, 16, 16), dtype=np.float32)
        timings = interleaved(runs, x, 1, 3)
        assert [t.label for t in timings] == ["ort", "ov"]
        assert all(t.wall_ms > 0 and t.p90_ms >= t.wall_ms for t in timings)
        text = table(timings, 1, batch, 3)
        assert "| ort |" in text and "x1.00" in text
    layers = layer_times(src, x[:1], runs=2)
    assert layers and any(r.layer == "Convolution" for r in layers)
    assert layers == sorted(layers, key=lambda r: -r.ms)


def test_candidates_start_with_onnx_runtime_on_the_file(tmp_path: Path) -> None:
    src, rw, q = tmp_path / "m.onnx", tmp_path / "m.rw.onnx", tmp_path / "v" / "q.xml"
    runs = candidates(src, rw, [q])
    assert runs[0] == Candidate("onnxruntime fp32", src, "onnxruntime")
    assert [c.path for c in runs] == [src, rw, src, rw, q]
    assert runs[-1].label == f"openvino int8 {q}"
