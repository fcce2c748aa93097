"""`strata models import`: real tiny ONNX files in, manifests out, or a clear refusal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from models_testkit import tiny_classifier, tiny_detector
from onnx import TensorProto, helper
from strata.shared.models import ModelRepository, sha256_of
from strata.tools.cli import main


def _graph(
    path: Path,
    inputs: list[tuple[str, int, list[int | str]]],
    outputs: list[tuple[str, list[int | str]]],
    op: str = "Identity",
    metadata: dict[str, str] | None = None,
) -> Path:
    """A one-node model: each output is `op` of the first input (shapes as declared)."""
    first = inputs[0][0]
    nodes = [helper.make_node(op, [first], [name]) for name, _ in outputs]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for k, v in (metadata or {}).items():
        model.metadata_props.add(key=k, value=v)
    onnx.save(model, str(path))
    return path


def _labels(tmp_path: Path, *names: str) -> Path:
    path = tmp_path / "labels.txt"
    path.write_text("\n".join(names) + "\n")
    return path


def test_import_a_detector_writes_a_manifest_that_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "det.onnx"
    tiny_detector(src, size=32, classes=2)
    repo = tmp_path / "repo"
    rc = main(["models", "import", "det", str(src), "-r", str(repo),
               "--labels", str(_labels(tmp_path, "person", "car"))])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert "imported det" in capsys.readouterr().out
    m = ModelRepository(repo).manifest("det")
    assert m.task == "detect" and m.output.format == "yolov8" and m.output.name == "output0"
    assert m.input.shape == (None, 3, 32, 32) and m.input.resize == "letterbox"
    assert m.labels == ("person", "car") and m.opset == 17
    assert m.sha256 == sha256_of(src) == sha256_of(repo / "det" / "model.onnx")
    assert m.source.weights == "det.onnx"  # the name, not this machine's path
    assert str(tmp_path) not in (repo / "det" / "manifest.yaml").read_text()
    loaded = ModelRepository(repo).open("det")
    (out,) = loaded.runner.run(np.zeros((3, 3, 32, 32), np.float32))
    assert out.shape == (3, 6, 16)
    loaded.close()


def test_import_a_classifier_reads_labels_from_metadata_and_softmax(tmp_path: Path) -> None:
    src = _graph(
        tmp_path / "cls.onnx",
        [("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [("prob", ["N", 3])],
    )
    # A real classifier: tiny_classifier's logits, then a Softmax; labels in `names`.
    base = tmp_path / "base.onnx"
    tiny_classifier(base, size=8, classes=3)
    model = onnx.load(str(base))
    model.graph.output[0].name = "logits_raw"
    model.graph.node[-1].output[0] = "logits_raw"
    model.graph.node.append(helper.make_node("Softmax", ["logits_raw"], ["prob"], axis=1))
    model.graph.output[0].CopyFrom(
        helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 3])
    )
    model.metadata_props.add(key="names", value="{0: 'cat', 1: 'dog', 2: 'bird'}")
    onnx.save(model, str(src))
    repo = tmp_path / "repo"
    assert main(["models", "import", "cls", str(src), "-r", str(repo), "--colour", "BGR"]) == 0
    m = ModelRepository(repo).manifest("cls")
    assert m.task == "classify" and m.output.format == "probabilities"
    assert m.labels == ("cat", "dog", "bird") and m.input.colour == "BGR"
    assert m.input.resize == "stretch" and m.input.mean == (0.485, 0.456, 0.406)


def test_dynamic_size_needs_imgsz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "c.onnx"
    tiny_classifier(src, size=16, classes=3)
    model = onnx.load(str(src))
    for d, name in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], "HW", strict=True):
        d.dim_param = name
    onnx.save(model, str(src))
    repo, labels = tmp_path / "repo", str(_labels(tmp_path, "a", "b", "c"))
    assert main(["models", "import", "c", str(src), "-r", str(repo), "--labels", labels]) == 2
    assert "dynamic size; give --imgsz N" in capsys.readouterr().err
    assert not (repo / "c").exists()
    args = ["models", "import", "c", str(src), "-r", str(repo), "--labels", labels]
    assert main([*args, "--imgsz", "24"]) == 0
    assert ModelRepository(repo).manifest("c").input.shape == (None, 3, 24, 24)
    assert main([*args, "--imgsz", "24"]) == 2  # exists
    assert "give --force" in capsys.readouterr().err
    assert main([*args, "--imgsz", "24", "--force"]) == 0


REFUSALS = {
    "two inputs": (
        [("a", TensorProto.FLOAT, ["N", 3, 8, 8]), ("b", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [("y", ["N", 3])],
        "2 inputs (a, b); the tiers feed one image",
    ),
    "uint8 input": (
        [("x", TensorProto.UINT8, ["N", 3, 8, 8])],
        [("y", ["N", 3])],
        "is not float32",
    ),
    "NHWC input": (
        [("x", TensorProto.FLOAT, ["N", 8, 8, 3])],
        [("y", ["N", 3])],
        "NCHW images with 3 channels",
    ),
    "two outputs of no known layout": (
        [("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [("boxes", ["N", 100, 4]), ("scores", ["N", 100])],
        "no known layout reads them (layouts: yolov8, yolov5, yolox, gfl, end2end, detr, ssd, "
        "logits, probabilities); if the model is one of these, give --format LAYOUT",
    ),
    "YOLOv5 or YOLOX layout": (
        [("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [("y", ["N", 25200, 85])],
        "the layout of both yolov5 and yolox; say which: --format yolox",
    ),
    "segmentation map": (
        [("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [("y", ["N", 3, 8, 8])],
        "no known layout reads them",
    ),
    "label count": (
        [("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [("y", ["N", 5])],
        "--labels has 3 labels for 5 classes (the model's logits output); give a label file "
        "of 5 lines",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_what_the_tiers_cannot_run_is_refused_with_the_reason(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs, outputs, reason = REFUSALS[case]
    src = _graph(tmp_path / "m.onnx", inputs, outputs)
    repo = tmp_path / "repo"
    labels = str(_labels(tmp_path, "a", "b", "c"))
    assert main(["models", "import", "m", str(src), "-r", str(repo), "--labels", labels]) == 2
    err = capsys.readouterr().err
    assert "strata models import: refused:" in err and reason in err, err
    assert not (repo / "m").exists()


def test_a_file_ort_cannot_run_is_refused_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Declared [N, 3] but computes Identity of the image: the shapes lie, the run shows it.
    src = _graph(tmp_path / "liar.onnx", [("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                 [("y", ["N", 3])])  # fmt: skip
    repo = tmp_path / "repo"
    labels = str(_labels(tmp_path, "a", "b", "c"))
    assert main(["models", "import", "liar", str(src), "-r", str(repo), "--labels", labels]) == 2
    err = capsys.readouterr().err
    assert "refused" in err and ("cannot run" in err or "cannot load" in err), err
    assert not (repo / "liar").exists()


def test_no_labels_and_not_onnx_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "det.onnx"
    tiny_detector(src)
    repo = str(tmp_path / "repo")
    assert main(["models", "import", "det", str(src), "-r", repo]) == 2
    assert "names no labels: give --labels FILE" in capsys.readouterr().err
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    labels = str(_labels(tmp_path, "a"))
    assert main(["models", "import", "j", str(junk), "-r", repo, "--labels", labels]) == 2
    assert "is not a valid ONNX model" in capsys.readouterr().err


def test_a_fixed_batch_model_comes_in_with_one_warning_and_every_tier_runs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch-1 export (what ultralytics writes unless told dynamic=True) is imported, says
    once what it costs, records its batch in the manifest, and the device's gate and the
    cloud's classifier run it at their usual max batch (the edge: test_edge_model_batch.py)."""
    from prometheus_client import CollectorRegistry
    from strata.cloud.classify.batcher import DynamicBatcher
    from strata.cloud.classify.classifier import load_classifier
    from strata.cloud.metrics import CloudMetrics
    from strata.device.filters.gate import load_gate
    from strata.shared.config.cloud import CloudBatcherConfig, CloudModelConfig
    from strata.shared.config.device import GateConfig

    src = tmp_path / "b1.onnx"
    tiny_classifier(src, size=16, classes=3, dynamic=False)
    repo = tmp_path / "repo"
    labels = str(_labels(tmp_path, "a", "b", "c"))
    assert main(["models", "import", "b1", str(src), "-r", str(repo), "--labels", labels]) == 0
    captured = capsys.readouterr()
    # The command's own lines (a log handler an earlier test installed may add log records).
    warnings = [ln for ln in captured.err.splitlines() if ln.startswith("strata models import")]
    assert len(warnings) == 1, captured.err
    assert "warning" in warnings[0] and "batches of exactly 1" in warnings[0], warnings
    assert "imported b1" in captured.out and "1x3x16x16" in captured.out
    manifest = ModelRepository(repo).manifest("b1")
    assert manifest.input.shape[0] == 1 and manifest.input.fixed_batch == 1

    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (24, 32, 3), np.uint8) for _ in range(5)]

    # Device: the gate batches up to 8 frames; the model takes one at a time.
    gate = load_gate(GateConfig(model="b1", max_batch=8), repository=str(repo))
    try:
        together = gate.score(images)
        alone = np.concatenate([gate.score([im]) for im in images])
    finally:
        gate.runner.close()
    assert together.shape == (5,)
    np.testing.assert_allclose(together, alone, rtol=1e-5)

    # Cloud: the classifier and its batcher, asked for batches of 8.
    clf = load_classifier(CloudModelConfig(name="b1"), str(repo), max_batch=8)
    batcher = DynamicBatcher(
        clf, CloudBatcherConfig(max_batch=8), CloudMetrics(CollectorRegistry())
    )
    assert batcher.max_batch == 1
    batcher.start()
    try:
        futures = [batcher.submit(np.ascontiguousarray(im[:16, :16])) for im in images]
        scored = [f.result(timeout=30) for f in futures]
    finally:
        batcher.stop()
        clf.close()
    assert len(scored) == 5


def _batch_one(path: Path) -> Path:
    """tiny_detector's graph with its batch fixed at 1 (an export without dynamic=True)."""
    tiny_detector(path, size=32, classes=2)
    model = onnx.load(str(path))
    for v in (model.graph.input[0], model.graph.output[0]):
        v.type.tensor_type.shape.dim[0].dim_value = 1
    onnx.save(model, str(path))
    return path


def test_a_batch_one_detector_imports_and_the_gate_and_cloud_keep_the_starter_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`strata models import NAME FILE --labels FILE -r DIR` then `models.repository: DIR`
    and `edge.model.name: NAME`: DIR holds only the detector, and the device's gate and the
    cloud's classifier still load their own (default) models from the starter repository."""
    from strata.cloud.classify.classifier import load_classifier
    from strata.device.filters.gate import load_gate
    from strata.shared.config.cloud import CloudModelConfig
    from strata.shared.config.device import GateConfig
    from strata.shared.models import starter_repository

    src = _batch_one(tmp_path / "det.onnx")
    repo = tmp_path / "repo"
    labels = str(_labels(tmp_path, "person", "car"))
    assert main(["models", "import", "det", str(src), "-r", str(repo), "--labels", labels]) == 0
    out = capsys.readouterr().out
    assert "imported det" in out and "1x3x32x32 RGB letterbox pad 114, scale 0.00392157" in out
    loaded = ModelRepository(repo).open("det")
    try:
        assert loaded.manifest.input.fixed_batch == 1
        (boxes,) = loaded.runner.run(np.zeros((1, 3, 32, 32), np.float32))
        assert boxes.shape == (1, 6, 16)
    finally:
        loaded.close()
    assert ModelRepository(repo).names() == ["det"]
    gate = load_gate(GateConfig(), repository=str(repo))
    try:
        assert gate.score([np.zeros((48, 64, 3), np.uint8)]).shape == (1,)
    finally:
        gate.runner.close()
    clf = load_classifier(CloudModelConfig(), str(repo), max_batch=2)
    try:
        assert clf.name == CloudModelConfig().name
        assert (starter_repository() / clf.name).is_dir()
    finally:
        clf.close()


def test_a_gate_model_no_repository_holds_says_where_it_looked_and_the_fix(
    tmp_path: Path,
) -> None:
    from strata.device.filters.gate import GateLoadError, load_gate
    from strata.shared.config.device import GateConfig

    repo = tmp_path / "repo"
    repo.mkdir()
    with pytest.raises(GateLoadError) as err:
        load_gate(GateConfig(model="mine"), repository=str(repo))
    text = str(err.value)
    assert f"not found in repository {repo}" in text and "nor in the starter repository" in text
    assert "strata models import mine FILE" in text and "device.gate.model" in text


def test_an_input_that_is_not_an_image_is_refused_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _graph(tmp_path / "seq.onnx", [("x", TensorProto.FLOAT, ["N", 3, 64])], [("y", ["N", 3])])
    repo = str(tmp_path / "repo")
    labels = str(_labels(tmp_path, "a", "b", "c"))
    assert main(["models", "import", "s", str(src), "-r", repo, "--labels", labels]) == 2
    err = capsys.readouterr().err
    assert "input 'x' is [N, 3, 64]: not an image" in err and "[N, 3, H, W]" in err
