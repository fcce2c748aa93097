"""shuffle: a channel shuffle after a concat (ShuffleNet's Concat-Reshape-Transpose-Reshape)
as one concat on a new axis; the same outputs (ONNX Runtime runs both graphs: a built
one, bit for bit, and the real PicoDet-S 416 on vtest frames), other transposes left alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from ort_testkit import run_cpu
from strata.shared.models import ModelRepository, starter_repository
from strata.tools.models.hard_swish import hard_swish_file
from strata.tools.models.shuffle import fold_shuffles, shuffle_file
from strata.tools.models.site_int8 import edge_batch, site_frames


def _graph(opset: int, perm: tuple[int, ...] = (0, 2, 1, 3, 4)) -> onnx.ModelProto:
    """a, b [N, 3, 2, 2] -> Concat -> Reshape(N, 2, 3, 2, 2) -> Transpose(perm) ->
    Reshape(N, 6, 2, 2) -> y."""
    init = [
        numpy_helper.from_array(np.array([-1, 2, 3, 2, 2], np.int64), "five"),
        numpy_helper.from_array(np.array([-1, 6, 2, 2], np.int64), "four"),
    ]
    nodes = [
        helper.make_node("Concat", ["a", "b"], ["cat"], name="cat", axis=1),
        helper.make_node("Reshape", ["cat", "five"], ["r5"], name="r5"),
        helper.make_node("Transpose", ["r5"], ["t"], name="t", perm=list(perm)),
        helper.make_node("Reshape", ["t", "four"], ["y"], name="r4"),
    ]
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "g",
        [info(n, TensorProto.FLOAT, [None, 3, 2, 2]) for n in ("a", "b")],
        [info("y", TensorProto.FLOAT, [None, 6, 2, 2])],
        init,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_shuffle_becomes_one_concat_on_a_new_axis() -> None:
    rng = np.random.default_rng(0)
    feed = {n: rng.standard_normal((2, 3, 2, 2)).astype(np.float32) for n in ("a", "b")}
    for opset in (11, 13):
        model = _graph(opset)
        folded, folds = fold_shuffles(model)
        onnx.checker.check_model(folded)
        assert [(f.concat, f.output) for f in folds] == [("cat", "y")]
        ops = [n.op_type for n in folded.graph.node]
        assert ops == ["Unsqueeze", "Unsqueeze", "Concat", "Reshape"], ops
        (got,), (want,) = run_cpu(folded, feed), run_cpu(model, feed)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(want[:, 0::2], feed["a"])  # what a shuffle is
    _, none = fold_shuffles(_graph(13, perm=(0, 1, 2, 4, 3)))
    assert none == [], "another transpose is left alone"


def test_picodet_shuffles_fold_with_the_same_outputs_on_vtest(
    tmp_path: Path, vtest_mp4: Path
) -> None:
    repo = ModelRepository(starter_repository())
    manifest, _, src = repo.file_of("picodet_s_416")
    fused, _ = hard_swish_file(src, tmp_path)
    dst, folds = shuffle_file(fused, tmp_path)
    assert len(folds) == 10
    ops = [n.op_type for n in onnx.load(str(dst)).graph.node]
    assert "Transpose" in ops and ops.count("Transpose") == 18 - 10, "the decode's stay"
    batch, _ = edge_batch(manifest, site_frames([vtest_mp4], 2))
    for got, want in zip(
        run_cpu(str(dst), {"image": batch}), run_cpu(str(src), {"image": batch}), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert shuffle_file(dst, tmp_path / "again") == (dst, [])
