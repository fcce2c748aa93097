"""Layout inference on import: each rule on a small ONNX graph built with onnx.helper."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper
from strata.shared.models import Manifest
from strata.tools.models.importer import ImportRequest, plan_manifest, read_facts
from strata.tools.models.infer_layout import ImportRefusedError

Shape = list[int | str]


def _graph(path: Path, outputs: list[tuple[str, Shape]], size: int = 64) -> Path:
    """An image input and outputs of the declared shapes (plan_manifest reads, never runs)."""
    nodes = [helper.make_node("Identity", ["images"], [name]) for name, _ in outputs]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _plan(path: Path, labels: int, **kw: Any) -> Manifest:
    names = tuple(f"l{i}" for i in range(labels))
    req = ImportRequest("m", path, path.parent / "repo", labels=names, **kw)
    return plan_manifest(req, read_facts(path), "0" * 64)


def test_yolov8(tmp_path: Path) -> None:
    m = _plan(_graph(tmp_path / "a.onnx", [("out", [1, 7, 84])]), 3)
    assert (m.task, m.output.format, m.output.name, m.output.names) == (
        "detect",
        "yolov8",
        "out",
        (),
    )
    assert (m.input.resize, m.input.colour, m.input.scale) == ("letterbox", "RGB", 1 / 255)


def test_yolov5_and_yolox_share_a_shape_and_ask_for_format(tmp_path: Path) -> None:
    # 64 px input, strides 8, 16, 32: 64 + 16 + 4 = 84 anchors.
    path = _graph(tmp_path / "det.onnx", [("output", [1, 84, 8])])
    with pytest.raises(ImportRefusedError, match="both yolov5 and yolox; say which") as err:
        _plan(path, 3)
    assert "--format yolox" in str(err.value) and "--format yolov5" in str(err.value)
    named = _graph(tmp_path / "yolox_nano.onnx", [("output", [1, 84, 8])])
    with pytest.raises(ImportRefusedError, match="the file says YOLOX: --format yolox"):
        _plan(named, 3)
    v5 = _plan(path, 3, output_format="yolov5")
    assert v5.output.format == "yolov5" and v5.input.resize == "letterbox"
    x = _plan(path, 3, output_format="yolox")
    assert (x.output.format, x.output.strides) == ("yolox", (8, 16, 32))
    # YOLOX's own preprocessing: BGR, 0-255, top-left letterbox; each part overridable.
    assert (x.input.colour, x.input.scale, x.input.resize) == ("BGR", 1.0, "letterbox_topleft")
    over = _plan(path, 3, output_format="yolox", colour="RGB", pad_value=0.0, scale=0.5)
    assert (over.input.colour, over.input.pad_value, over.input.scale) == ("RGB", 0.0, 0.5)
    with pytest.raises(ImportRefusedError, match="not the grids of strides 8, 16, 32"):
        _plan(_graph(tmp_path / "odd.onnx", [("output", [1, 90, 8])]), 3, output_format="yolox")


def test_end2end_one_output_and_paddles_rows_with_a_count(tmp_path: Path) -> None:
    m = _plan(_graph(tmp_path / "v10.onnx", [("output0", [1, 300, 6])]), 80)
    assert (m.output.format, m.output.name, m.num_classes) == ("end2end", "output0", 80)
    assert m.input.resize == "letterbox"
    paddle = _graph(tmp_path / "p.onnx", [("rows", [-1, 6]), ("count", [-1])])
    p = _plan(paddle, 80)
    assert (p.output.format, p.output.names) == ("end2end", ("rows", "count"))
    # Paddle's detectors: stretch, RGB, ImageNet mean and std.
    assert (p.input.resize, p.input.colour, p.input.mean) == (
        "stretch",
        "RGB",
        (0.485, 0.456, 0.406),
    )


def test_gfl_pairs_class_and_box_maps_and_reads_reg_max_and_strides(tmp_path: Path) -> None:
    # 64 px: strides 8, 16, 32, 64 -> 64, 16, 4, 1 anchors; reg_max 7 -> 32 bins.
    outs: list[tuple[str, Shape]] = [
        *[(f"cls{i}", [1, a, 5]) for i, a in enumerate((64, 16, 4, 1))],
        *[(f"box{i}", [1, a, 32]) for i, a in enumerate((64, 16, 4, 1))],
    ]
    m = _plan(_graph(tmp_path / "picodet.onnx", outs), 5)
    o = m.output
    assert (o.format, o.reg_max, o.strides, o.grid_centre) == (
        "gfl",
        7,
        (8, 16, 32, 64),
        "half_cell",
    )
    assert o.names == tuple(n for n, _ in outs)  # every output, model order
    assert (m.input.resize, m.input.std) == ("stretch", (0.229, 0.224, 0.225))
    # NanoDet: batch-less maps, names that do not match shapes, reg_max 16; its own centres.
    nano: list[tuple[str, Shape]] = [
        ("cls_score0", [64, 80]), ("bbox_pred0", [16, 80]), ("cls_score1", [4, 80]),
        ("bbox_pred1", [64, 68]), ("cls_score2", [16, 68]), ("bbox_pred2", [4, 68]),
    ]  # fmt: skip
    n = _plan(_graph(tmp_path / "nanodet_m.onnx", nano), 80)
    assert (n.output.reg_max, n.output.strides, n.output.grid_centre) == (
        16,
        (8, 16, 32),
        "nanodet",
    )
    assert n.output.names == tuple(name for name, _ in nano)
    # Both widths could be box maps (32 and 16 bins): the labels' count says which are classes.
    amb: list[tuple[str, Shape]] = [("c", [1, 64, 16]), ("b", [1, 64, 32])]
    assert _plan(_graph(tmp_path / "g.onnx", amb), 16).output.reg_max == 7


def test_detr_and_ssd(tmp_path: Path) -> None:
    detr = _graph(tmp_path / "d.onnx", [("logits", [1, 300, 80]), ("boxes", [1, 300, 4])])
    m = _plan(detr, 80)
    assert (m.output.format, m.output.name, m.output.names) == (
        "detr",
        "boxes",
        ("logits", "boxes"),
    )
    assert m.input.resize == "stretch"
    ssd: list[tuple[str, Shape]] = [
        ("detection_boxes", [1, 10, 4]), ("detection_scores", [1, 10]),
        ("detection_classes", [1, 10]), ("num_detections", [1]),
    ]  # fmt: skip
    s = _plan(_graph(tmp_path / "s.onnx", ssd), 90)
    assert s.output.format == "ssd"
    # The decoder's order: boxes, classes, scores, count (by name where the shapes agree).
    assert s.output.names == (
        "detection_boxes",
        "detection_classes",
        "detection_scores",
        "num_detections",
    )


def test_classifier_and_format_checked_against_the_shapes(tmp_path: Path) -> None:
    path = _graph(tmp_path / "c.onnx", [("y", [1, 4])])
    m = _plan(path, 4)
    assert (m.task, m.output.format, m.input.resize) == ("classify", "logits", "stretch")
    assert _plan(path, 4, output_format="probabilities").output.format == "probabilities"
    with pytest.raises(ImportRefusedError, match="--format gfl: outputs y \\[1, 4\\] do not fit"):
        _plan(path, 4, output_format="gfl")


def test_unknown_layout_lists_the_layouts_and_the_flag(tmp_path: Path) -> None:
    path = _graph(tmp_path / "u.onnx", [("a", [1, 3, 7]), ("b", [1, 9]), ("c", [1, 2, 2])])
    with pytest.raises(ImportRefusedError) as err:
        _plan(path, 3)
    text = str(err.value)
    assert "a [1, 3, 7], b [1, 9], c [1, 2, 2]" in text
    assert "layouts: yolov8, yolov5, yolox, gfl, end2end, detr, ssd, logits, probabilities" in text
    assert "give --format LAYOUT" in text


def test_the_import_command_offers_every_layout() -> None:
    from strata.tools.models.cli import FORMATS
    from strata.tools.models.infer_layout import LAYOUTS

    assert FORMATS == LAYOUTS
