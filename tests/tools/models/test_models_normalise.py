"""Graph normalisation on import: same outputs, fewer nodes, weights unchanged."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from models_testkit import tiny_detector
from onnx import TensorProto, helper, numpy_helper
from strata.shared.models import ModelRepository
from strata.tools.cli import main
from strata.tools.models.normalise import BatchNotFreeError, check_equal, normalise

ROOT = Path(__file__).resolve().parents[3]
MODELS = Path(os.environ.get("STRATA_MODELS_DIR") or ROOT.parent / "shared" / "models")


def _old_export() -> onnx.ModelProto:
    """Conv, then two hard-swish subgraphs as old exporters split them (Paddle's Add, Clip,
    Mul, Div; a Relu6 as Relu, Min and * 1/6 before the Mul), weights listed as inputs, and
    an Add of 3 that feeds two nodes (not a hard-swish: left alone)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 2, (4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array(3.0, np.float32), "three"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.array(6.0, np.float32), "six"),
        numpy_helper.from_array(np.array(1 / 6, np.float32), "sixth"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "three"], ["a1"]),
        helper.make_node("Clip", ["a1", "zero", "six"], ["r1"]),
        helper.make_node("Mul", ["c", "r1"], ["m1"]),
        helper.make_node("Div", ["m1", "six"], ["h1"]),
        helper.make_node("Add", ["three", "h1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["p2"]),
        helper.make_node("Min", ["p2", "six"], ["r2"]),
        helper.make_node("Mul", ["r2", "sixth"], ["d2"]),
        helper.make_node("Mul", ["h1", "d2"], ["h2"]),
        helper.make_node("Add", ["h2", "three"], ["a3"]),  # used twice: no pattern
        helper.make_node("Clip", ["a3", "zero", "six"], ["r3"]),
        helper.make_node("Mul", ["a3", "r3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "old",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
        + [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in inits],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def test_weight_inputs_and_hard_swish_are_normalised_with_equal_outputs() -> None:
    model = _old_export()
    norm = normalise(model, "x", (8, 8))
    assert (norm.weight_inputs, norm.hard_swish, norm.folded) == (5, 2, ())
    out = norm.model
    onnx.checker.check_model(out)
    assert [i.name for i in out.graph.input] == ["x"]
    ops = Counter(n.op_type for n in out.graph.node)
    assert ops["HardSigmoid"] == 2 and ops["Relu"] == 0 and ops["Div"] == 0 and ops["Min"] == 0
    assert ops["Clip"] == 1 and ops["Add"] == 1  # the Add used twice and its Clip stay
    hs = next(n for n in out.graph.node if n.op_type == "HardSigmoid")
    attrs = {a.name: helper.get_attribute_value(a) for a in hs.attribute}
    assert attrs["alpha"] == pytest.approx(1 / 6) and attrs["beta"] == pytest.approx(0.5)
    # Weights unchanged; the constants the patterns used are gone.
    w = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    np.testing.assert_array_equal(w["w"], numpy_helper.to_array(model.graph.initializer[0]))
    assert "sixth" not in w
    rng = np.random.default_rng(1)
    samples = [rng.uniform(-3, 3, (1, 3, 8, 8)).astype(np.float32) for _ in range(2)]
    assert check_equal(model.SerializeToString(), norm, "x", samples) < 1e-4
    assert len(norm.notes) == 2 and "2 hard-swish subgraphs" in norm.notes[1]


def test_a_model_that_needs_nothing_is_left_as_it_is(tmp_path: Path) -> None:
    tiny_detector(tmp_path / "d.onnx")
    model = onnx.load(str(tmp_path / "d.onnx"))
    norm = normalise(model, "images", (32, 32))
    assert not norm.changed and norm.notes == ()
    assert norm.model.SerializeToString() == model.SerializeToString()


def test_scale_factor_is_folded_and_the_import_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A detector with Paddle's extra `scale_factor` input [1, 2] (boxes divided by it) and
    weights listed as inputs imports: the input becomes [[1, 1]], the boxes input pixels."""
    tiny_detector(tmp_path / "d.onnx")
    model = onnx.load(str(tmp_path / "d.onnx"))
    g = model.graph
    out = g.output[0].name
    g.node[-1].output[0] = "raw"
    g.node.extend(
        [
            helper.make_node("ReduceMean", ["scale_factor"], ["sf"], keepdims=0),
            helper.make_node("Div", ["raw", "sf"], [out]),
        ]
    )
    g.input.append(helper.make_tensor_value_info("scale_factor", TensorProto.FLOAT, [1, 2]))
    g.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in g.initializer
    )
    src = tmp_path / "paddle_like.onnx"
    onnx.save(model, str(src))
    repo = tmp_path / "repo"
    argv = ["models", "import", "det", str(src), "-r", str(repo), "--labels", "coco"]
    assert main(argv) == 2  # coco has 80 labels, the model 2 classes
    assert "--labels has 80 labels for 2 classes" in capsys.readouterr().err
    labels = tmp_path / "l.txt"
    labels.write_text("person\ncar\n")
    assert main([*argv[:-1], str(labels)]) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert "normalised: input 'scale_factor' folded into a constant [[1, 1]]" in text
    assert "weights listed as graph inputs dropped" in text
    assert "normalised: outputs equal to the file's within" in text
    # One row of constants: the graph runs one frame at a time, and the manifest says so.
    assert "the image input's batch fixed at 1" in text
    loaded = ModelRepository(repo).open("det")
    try:
        assert [i.name for i in loaded.runner.inputs] == ["images"]
        assert loaded.manifest.input.fixed_batch == 1
        (boxes,) = loaded.runner.run(np.ones((1, 3, 32, 32), np.float32))
        assert boxes.shape == (1, 6, 16)
    finally:
        loaded.close()
    saved = onnx.load(str(repo / "det" / "model.onnx"))
    sf = next(t for t in saved.graph.initializer if t.name == "scale_factor")
    np.testing.assert_array_equal(numpy_helper.to_array(sf), [[1.0, 1.0]])
    assert "normalised on import" in ModelRepository(repo).manifest("det").source.notes


@pytest.mark.skipif(
    not (MODELS / "picodet_s_416_coco" / "upstream.onnx").is_file(),
    reason=f"no real models at {MODELS} (set STRATA_MODELS_DIR)",
)
def test_picodet_upstream_is_normalised_as_its_cleaned_file_with_equal_outputs() -> None:
    import cv2

    folder = MODELS / "picodet_s_416_coco"
    model = onnx.load(str(folder / "upstream.onnx"))
    norm = normalise(model, "image", (416, 416))
    assert (norm.weight_inputs, norm.hard_swish) == (279, 87)
    cleaned = onnx.load(str(folder / "cleaned.onnx"))
    ops = Counter(n.op_type for n in norm.model.graph.node)
    assert ops == Counter(n.op_type for n in cleaned.graph.node)  # the same operators
    clip = ROOT / "data" / "vtest.avi"
    rng = np.random.default_rng(0)
    samples = [rng.uniform(-2, 2, (1, 3, 416, 416)).astype(np.float32)]
    if clip.is_file():
        cap = cv2.VideoCapture(str(clip))
        ok, frame = cap.read()
        cap.release()
        assert ok
        rgb = cv2.resize(frame, (416, 416))[:, :, ::-1].astype(np.float32)
        x = (rgb - [123.675, 116.28, 103.53]) / [58.395, 57.12, 57.375]
        samples.append(x.transpose(2, 0, 1)[None].astype(np.float32))
    assert check_equal(model.SerializeToString(), norm, "image", samples) < 1e-4


@pytest.mark.skipif(
    not (MODELS / "picodet_s_416_coco" / "upstream.onnx").is_file(),
    reason=f"no real models at {MODELS} (set STRATA_MODELS_DIR)",
)
@pytest.mark.skipif(
    not hasattr(__import__("strata.shared.vision.layouts").shared.vision.layouts, "check_shapes"),
    reason="the repository's gfl output check (shared/vision/layouts.py check_shapes) is not here",
)
def test_picodet_upstream_imports_in_one_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = MODELS / "picodet_s_416_coco" / "upstream.onnx"
    repo = tmp_path / "repo"
    assert main(["models", "import", "picodet", str(src), "-r", str(repo), "--labels", "coco"]) == 0
    out = capsys.readouterr().out
    assert "87 hard-swish subgraphs" in out and "279 weights" in out
    m = ModelRepository(repo).manifest("picodet")
    assert (m.output.format, m.output.reg_max, m.output.strides) == ("gfl", 7, (8, 16, 32, 64))
    assert len(m.output.names) == 8 and m.input.resize == "stretch" and m.num_classes == 80


def _batch_one(flatten_all: bool) -> onnx.ModelProto:
    """x [1, 3, 4, 4] -> Conv -> Reshape to [1, 2, 24] (channel groups, batch kept) or to
    [2, 24], the batch folded into the rows (a graph that cannot be batched)."""
    rng = np.random.default_rng(1)
    shape = np.array([2, 24] if flatten_all else [1, 2, 24], np.int64)
    inits = [
        numpy_helper.from_array(rng.normal(0, 1, (3, 3, 1, 1)).astype(np.float32), "w"),
        numpy_helper.from_array(shape, "shape"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Reshape", ["c", "shape"], ["y"]),
    ]
    out = [2, 24] if flatten_all else [1, 2, 24]
    graph = helper.make_graph(
        nodes,
        "b1",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_batch_fixed_at_one_is_made_dynamic_and_runs_batches_as_frames() -> None:
    model = _batch_one(flatten_all=False)
    norm = normalise(model, "x", (4, 4), free_batch=True)
    assert norm.batch_freed and any("batch axis made dynamic" in n for n in norm.notes)
    assert norm.model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    rng = np.random.default_rng(2)
    samples = [rng.random((1, 3, 4, 4), dtype=np.float32) for _ in range(2)]
    assert check_equal(model.SerializeToString(), norm, "x", samples) < 1e-5
    kept = normalise(model, "x", (4, 4))
    assert not kept.batch_freed and not kept.changed, "only when asked"


def test_a_graph_that_cannot_be_batched_is_refused_the_dynamic_batch() -> None:
    model = _batch_one(flatten_all=True)
    norm = normalise(model, "x", (4, 4), free_batch=True)
    rng = np.random.default_rng(3)
    samples = [rng.random((1, 3, 4, 4), dtype=np.float32) for _ in range(2)]
    # Its Reshape folds the batch into fixed rows: a batch of two cannot run.
    with pytest.raises(BatchNotFreeError):
        check_equal(model.SerializeToString(), norm, "x", samples)
