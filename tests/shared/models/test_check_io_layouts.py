"""check_io against a detect manifest of each layout: every output the decoder reads must
exist, with shapes that layout and the manifest's labels allow."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from layouts_testkit import constant_model
from strata.shared.models import InputSpec, Manifest, ModelError, OutputSpec, Source, check_io
from strata.shared.runtime import create_runner

SIZE = 64
LABELS = ("person", "car", "dog")
C = len(LABELS)
F = np.float32


def _z(*shape: int) -> np.ndarray:
    return np.zeros(shape, F)


# Per layout: the outputs of a well-formed model (name -> constant), and OutputSpec extras.
GOOD: dict[str, tuple[dict[str, np.ndarray], dict[str, object]]] = {
    "yolov8": ({"output0": _z(1, 4 + C, 84)}, {}),
    "yolov5": ({"output0": _z(1, 84, 5 + C)}, {}),
    "yolox": ({"output": _z(1, 84, 5 + C)}, {}),
    "gfl": (
        {f"cls{i}": _z(1, a, C) for i, a in enumerate((64, 16, 4, 1))}
        | {f"box{i}": _z(1, a, 32) for i, a in enumerate((64, 16, 4, 1))},
        {},
    ),
    "end2end": ({"rows": _z(100, 6), "count": np.zeros((1,), np.int32)}, {}),
    "detr": ({"boxes": _z(1, 300, 4), "logits": _z(1, 300, C)}, {}),
    "ssd": (
        {"b": _z(1, 10, 4), "c": _z(1, 10), "s": _z(1, 10), "n": _z(1)},
        {"class_offset": 1},
    ),
}


def _manifest(fmt: str, names: tuple[str, ...], **extra: object) -> Manifest:
    return Manifest(
        name="m",
        task="detect",
        file="model.onnx",
        sha256="0" * 64,
        input=InputSpec(name="images", shape=(1, 3, SIZE, SIZE)),
        output=OutputSpec(name=names[0], format=fmt, names=names, **extra),  # type: ignore[arg-type]
        labels=LABELS,
        source=Source(architecture="constant", made_by="tests", trained=False),
    )


def _check(tmp_path: Path, manifest: Manifest, outputs: dict[str, np.ndarray]) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(constant_model(outputs, SIZE))
    runner = create_runner(path, "onnxruntime-cpu")
    try:
        check_io(manifest, runner.inputs, runner.outputs)
    finally:
        runner.close()


@pytest.mark.parametrize("fmt", sorted(GOOD))
def test_a_well_formed_model_of_each_layout_passes(tmp_path: Path, fmt: str) -> None:
    outputs, extra = GOOD[fmt]
    _check(tmp_path, _manifest(fmt, tuple(outputs), **extra), outputs)


@pytest.mark.parametrize("fmt", sorted(GOOD))
def test_every_output_the_layout_reads_must_exist(tmp_path: Path, fmt: str) -> None:
    outputs, extra = GOOD[fmt]
    names = (*outputs, "missing")
    with pytest.raises(ModelError, match=r"no output 'missing' \(the model has: .*output.names"):
        _check(tmp_path, _manifest(fmt, names, **extra), outputs)


@pytest.mark.parametrize(
    ("fmt", "outputs", "match"),
    [
        ("yolov8", {"o": _z(1, 84, 84)}, r"yolov8 layout: output 'o' should be \[N, 4 \+ 3"),
        ("yolov5", {"o": _z(1, 84, 85)}, r"output 'o' should be \[N, anchors, 5 \+ 3\].*3 labels"),
        ("yolox", {"o": _z(1, 80, 8)}, r"\[N, 84, 5 \+ 3\].*output.strides"),
        ("gfl", {"c": _z(1, 64, 80), "b": _z(1, 64, 32)}, r"output 'c' should be a class map"),
        ("gfl", {"c": _z(1, 60, 3), "b": _z(1, 60, 32)}, r"output 'c'.*ceil\(64 / stride\)"),
        ("end2end", {"o": _z(1, 100, 7)}, r"output 'o' should be \[N, K, 6\]"),
        ("detr", {"o": _z(1, 300, 84)}, r"output 'o' should be \[N, Q, 4 \+ 3\]"),
        ("ssd", {"b": _z(1, 10, 4), "c": _z(1, 10)}, r"ssd layout reads boxes"),
    ],
)
def test_a_shape_the_layout_cannot_read_is_refused(
    tmp_path: Path, fmt: str, outputs: dict[str, np.ndarray], match: str
) -> None:
    with pytest.raises(ModelError, match=match):
        _check(tmp_path, _manifest(fmt, tuple(outputs)), outputs)


def test_a_dynamic_input_leaves_anchor_counts_unchecked(tmp_path: Path) -> None:
    outputs = {"c": _z(1, 60, C), "b": _z(1, 60, 32)}
    m = _manifest("gfl", ("c", "b"))
    dynamic = m.model_copy(update={"input": InputSpec(name="images", shape=(1, 3, None, None))})
    path = tmp_path / "model.onnx"
    path.write_bytes(constant_model(outputs, SIZE))
    runner = create_runner(path, "onnxruntime-cpu")
    # The same model as if exported with a dynamic height and width.
    (image,) = runner.inputs
    check_io(dynamic, (replace(image, shape=(1, 3, None, None)),), runner.outputs)
    runner.close()
    with pytest.raises(ModelError, match="ceil"):
        _check(tmp_path, m, outputs)
