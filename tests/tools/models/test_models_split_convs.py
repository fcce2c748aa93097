"""split_convs: a channel Split of a conv's output folded into one conv per piece, for
OpenVINO; the same numbers out (ONNX Runtime runs both graphs, built ones and the real
PicoDet-S 416 on vtest frames), and what cannot be folded left alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from ort_testkit import run_cpu
from strata.shared.models import ModelRepository, starter_repository
from strata.tools.models.hard_swish import hard_swish_file
from strata.tools.models.site_int8 import edge_batch, site_frames
from strata.tools.models.split_convs import fold_conv_splits, fold_file, piece_names


def _graph(opset: int) -> onnx.ModelProto:
    """x [N, 4, 5, 5] -> conv A (6 out) -> Split(2, 4) -> a0, a1 (outputs);
    x -> conv B (6 out) -> Relu -> Split(3, 3) -> b0, b1;
    x -> grouped conv G (groups 2) -> Split -> g0, g1 (left alone);
    x -> conv S (weight shared with T) -> Split -> s0, s1 (left alone); T -> t."""
    rng = np.random.default_rng(0)
    init = [
        numpy_helper.from_array(rng.standard_normal((6, 4, 3, 3)).astype(np.float32), "wa"),
        numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "ba"),
        numpy_helper.from_array(rng.standard_normal((6, 4, 1, 1)).astype(np.float32), "wb"),
        numpy_helper.from_array(rng.standard_normal((4, 2, 1, 1)).astype(np.float32), "wg"),
        numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32), "ws"),
    ]
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["ya"], name="A", pads=[1, 1, 1, 1])]
    nodes.append(helper.make_node("Conv", ["x", "wb"], ["yb"], name="B"))
    nodes.append(helper.make_node("Relu", ["yb"], ["rb"], name="R"))
    nodes.append(helper.make_node("Conv", ["x", "wg"], ["yg"], name="G", group=2))
    nodes.append(helper.make_node("Conv", ["x", "ws"], ["ys"], name="S"))
    nodes.append(helper.make_node("Conv", ["x", "ws"], ["t"], name="T"))
    splits = [("ya", "a", [2, 4]), ("rb", "b", [3, 3]), ("yg", "g", [2, 2]), ("ys", "s", [1, 1])]
    for src, out, sizes in splits:
        outs = [f"{out}0", f"{out}1"]
        if opset >= 13:
            init.append(numpy_helper.from_array(np.array(sizes, np.int64), f"{out}_sizes"))
            nodes.append(
                helper.make_node("Split", [src, f"{out}_sizes"], outs, name=f"split_{out}", axis=1)
            )
        else:
            nodes.append(
                helper.make_node("Split", [src], outs, name=f"split_{out}", axis=1, split=sizes)
            )
    info = helper.make_tensor_value_info
    names = ["a0", "a1", "b0", "b1", "g0", "g1", "s0", "s1", "t"]
    graph = helper.make_graph(
        nodes,
        "g",
        [info("x", TensorProto.FLOAT, [None, 4, 5, 5])],
        [info(n, TensorProto.FLOAT, [None, None, 5, 5]) for n in names],
        init,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_splits_of_a_conv_fold_into_one_conv_per_piece() -> None:
    x = np.random.default_rng(1).standard_normal((2, 4, 5, 5)).astype(np.float32)
    for opset in (11, 13):
        model = _graph(opset)
        folded, folds = fold_conv_splits(model)
        onnx.checker.check_model(folded)
        assert [(f.split, f.conv, f.pieces) for f in folds] == [
            ("split_a", "A", ("A.part0", "A.part1")),
            ("split_b", "B", ("B.part0", "B.part1")),
        ], opset
        ops = {n.name: n.op_type for n in folded.graph.node}
        assert "split_a" not in ops and "split_b" not in ops and "A" not in ops
        assert ops["split_g"] == "Split", "a grouped conv's split stays"
        assert ops["split_s"] == "Split", "a conv whose weight is shared stays"
        assert ops["R.part0"] == "Relu" and ops["R.part1"] == "Relu"
        for a, b in zip(run_cpu(folded, {"x": x}), run_cpu(model, {"x": x}), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        assert len(model.graph.node) == 10, "input untouched"
    assert piece_names(("A", "other"), folds) == ("A", "other", "A.part0", "A.part1")
    assert piece_names(("other",), folds) == ("other",)


def test_nothing_to_fold_gives_the_file_itself(tmp_path: Path) -> None:
    model = _graph(13)
    folded, _ = fold_conv_splits(model)
    src = tmp_path / "g.onnx"
    onnx.save(folded, str(src))
    dst, folds = fold_file(src, tmp_path / "again")
    assert (dst, folds) == (src, [])


def test_picodet_decode_splits_fold_with_the_same_outputs_on_vtest(
    tmp_path: Path, vtest_mp4: Path
) -> None:
    """The head's 4 Conv -> Split(80, 32) and, after the hard-swish fusion, the backbone's 3
    Conv -> HardSwish -> Split: the outputs on real frames within 1e-4 of the original."""
    repo = ModelRepository(starter_repository())
    manifest, _, src = repo.file_of("picodet_s_416")
    batch, _ = edge_batch(manifest, site_frames([vtest_mp4], 3))
    ref = run_cpu(str(src), {"image": batch})
    plain, folds = fold_file(src, tmp_path)
    assert sorted(f.conv for f in folds) == ["Conv_117", "Conv_122", "Conv_127", "Conv_132"]
    fused, _ = hard_swish_file(src, tmp_path)
    both, folds = fold_file(fused, tmp_path)
    assert len(folds) == 7
    assert {"Conv_9", "Conv_28", "Conv_67"} <= {f.conv for f in folds}
    ops = [n.op_type for n in onnx.load(str(both)).graph.node]
    assert ops.count("Split") == 14 - 7, "the splits of channel shuffles stay"
    for path in (plain, both):
        for a, b in zip(run_cpu(str(path), {"image": batch}), ref, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
