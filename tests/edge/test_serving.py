"""The serving model: a version switch only between batches, with the old runner freed; the
builder of other versions refusing what cannot replace the serving one; class counts of
real ONNX outputs, declared or found by a dummy run."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from edge_colour_model import build_colour_detector
from edge_testkit import MODEL_SIZE
from onnx import TensorProto, helper, numpy_helper
from prometheus_client import CollectorRegistry
from strata.edge.inference.detector import Detector, open_staged
from strata.edge.inference.serving import ModelIdentity, ServingModel, VersionBuilder, classes_of
from strata.edge.inference.versions import ModelSwitcher, VersionMetrics
from strata.edge.ingest.frames import DecodedFrame, QueuedFrame
from strata.shared.config.edge import DetectionConfig, EdgeConfig, ModelVersionsConfig
from strata.shared.contracts import frame_pb2
from strata.shared.metrics import sample
from strata.shared.models import ModelRepository
from strata.shared.models.repository import promote_version
from strata.shared.runtime import ModelLoadError
from strata.shared.runtime.pool import host_pool
from strata.shared.synthetic import CLASSES, SyntheticClip
from strata.tools.models.importer import ImportRequest, import_model

STARTERS = Path(__file__).parents[2] / "shared/starter_models"
LABELS = [c[0] for c in CLASSES]
CFG = EdgeConfig.model_validate(
    {"model": {"input_size": MODEL_SIZE}, "batching": {"max_batch": 4}, "runtime": {"threads": 1}}
)


def detector(path: Path, max_batch: int = 4) -> Detector:
    return Detector(open_staged(path, CFG, max_batch), LABELS, DetectionConfig())


def frames(n: int) -> tuple[DecodedFrame, ...]:
    clip = SyntheticClip(width=320, height=240, frames=n, objects=3, seed=1)
    out = []
    for f in clip:
        h = frame_pb2.FrameHeader(camera_id="cam", sequence=f.index + 1, width=320, height=240)
        q = QueuedFrame(h, memoryview(b""), time.time_ns(), time.monotonic())
        out.append(DecodedFrame(q, f.image))
    return tuple(out)


def until(cond: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def polled(serving: ServingModel, idle: bool) -> bool:
    """One poll of the worker's (between two batches when `idle`); True to chain."""
    serving.poll(idle)
    return True


def test_without_a_switcher_the_serving_model_stays_and_closes_its_runner(
    colour_model: Path,
) -> None:
    det = detector(colour_model)
    serving = ServingModel(ModelIdentity("colour", colour_model), det, 4)
    owner = serving.runner.pool_owner  # type: ignore[attr-defined]
    assert serving.runner is det.runner and serving.labels == tuple(LABELS)
    assert (serving.name, serving.version, serving.max_batch) == ("colour", 0, 4)
    serving.poll(idle=True)
    serving.remember(frames(1), [])
    assert serving.detector is det and serving.version == 0
    assert host_pool().leaks(owner)
    serving.close()
    assert host_pool().leaks(owner) == []


def test_a_new_version_is_served_only_when_idle_and_the_old_runner_is_freed(
    colour_model: Path, tmp_path: Path
) -> None:
    import_model(ImportRequest("colour", colour_model, tmp_path / "repo"))
    repo = ModelRepository(tmp_path / "repo")
    _m, _key, v0_path = repo.file_of("colour", version=0)
    first = detector(v0_path)
    reg = CollectorRegistry()
    versions = ModelVersionsConfig(poll_s=0, canary_frames=4, canary_wait_s=20)
    switcher = ModelSwitcher(
        repo, "colour", 0, versions, VersionBuilder(CFG, first, 4), VersionMetrics(reg)
    )
    serving = ServingModel(ModelIdentity("colour", v0_path), first, 4, switcher)
    old_owner = serving.runner.pool_owner  # type: ignore[attr-defined]
    try:
        # The serving version's answers on recent frames: what the canary compares with.
        recent = frames(4)
        reference = first.finish(first.launch(list(recent), 0))
        serving.remember(recent, reference)
        v1 = build_colour_detector(tmp_path / "v1.onnx", MODEL_SIZE, extra_anchors=9)
        assert promote_version(repo, "colour", v1)[0] == 1
        switcher.request()
        # A batch in flight: the loaded version waits, however long that takes.
        canaried = "strata_edge_model_canary_agreement"
        assert until(lambda: polled(serving, False) and sample(reg, canaried) == 1.0)
        for _ in range(5):
            serving.poll(idle=False)
        assert serving.version == 0 and serving.detector is first
        assert until(lambda: polled(serving, True) and serving.version == 1)
        assert serving.detector is not first and serving.runner is serving.detector.runner
        assert serving.path.parent.name == "1"
        assert sample(reg, "strata_edge_model_switches_total") == 1
        assert sample(reg, "strata_edge_model_version") == 1
        assert host_pool().leaks(old_owner) == []  # the old runner was closed
        new = serving.detector
        boxes = new.finish(new.launch(list(recent), 0))
        assert [b.class_ids.tolist() for b in boxes] == [b.class_ids.tolist() for b in reference]
        assert sum(len(b) for b in boxes) > 0
    finally:
        switcher.stop()
        serving.close()


def test_the_builder_refuses_other_classes_or_a_smaller_batch_and_frees_the_runner(
    colour_model: Path, tmp_path: Path
) -> None:
    first = detector(colour_model)
    build = VersionBuilder(CFG, first, 4)
    try:
        runner, det = build(build_colour_detector(tmp_path / "same.onnx", MODEL_SIZE, 7))
        assert det.labels == tuple(LABELS) and det.max_batch >= 4
        det.close()
        runner.close()
        held = host_pool().stats().blocks_in_use
        with pytest.raises(ModelLoadError, match="1 classes, the serving version has 3"):
            build(STARTERS / "yolov8n/model.onnx")
        b1 = build_colour_detector(tmp_path / "b1.onnx", MODEL_SIZE, batch=1)
        with pytest.raises(ModelLoadError, match="takes 1 frames, not 4"):
            build(b1)
        assert host_pool().stats().blocks_in_use == held
    finally:
        first.close()
        first.runner.close()


def unknown_rows(src: Path, dst: Path) -> Path:
    """`src` with output0 sliced along its rows by a length computed from the pixels (all
    of them), so no shape inference can declare that axis."""
    model = onnx.load(str(src))
    g = model.graph
    for node in g.node:
        node.output[:] = ["full" if o == "output0" else o for o in node.output]
    g.initializer.extend(
        [
            numpy_helper.from_array(np.array([1], np.int64), "rows_axis"),
            numpy_helper.from_array(np.array([0], np.int64), "rows_start"),
        ]
    )
    g.node.extend(
        [
            # rows + 0 * max(pixel): the whole output, at a length only a run knows.
            helper.make_node("Shape", ["full"], ["full_shape"], start=1, end=2),
            helper.make_node("ReduceMax", ["images"], ["px"], keepdims=0),
            helper.make_node("Mul", ["px", "half"], ["px_half"]),
            helper.make_node("Mul", ["px_half", "zero_f"], ["px_zero"]),
            helper.make_node("Cast", ["px_zero"], ["px_zero_i"], to=TensorProto.INT64),
            helper.make_node("Add", ["full_shape", "px_zero_i"], ["rows_end"]),
            helper.make_node("Slice", ["full", "rows_start", "rows_end", "rows_axis"], ["output0"]),
        ]
    )
    g.initializer.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero_f"))
    g.output[0].type.tensor_type.shape.dim[1].dim_param = "rows"
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return dst


def test_classes_come_from_the_declared_output_or_a_dummy_run(
    colour_model: Path, tmp_path: Path
) -> None:
    runner = open_staged(colour_model, CFG, 2)
    try:
        assert runner.outputs[0].shape[1] == 4 + 3
        assert classes_of(runner) == 3
    finally:
        runner.close()
    # The same output cut to a length known only at run time: a dummy batch finds it.
    runner = open_staged(unknown_rows(colour_model, tmp_path / "dynamic.onnx"), CFG, 2)
    try:
        assert not runner.outputs[0].shape[1]
        assert classes_of(runner) == 3
    finally:
        runner.close()
    # A classifier's [N, classes] output is not a detector's.
    runner = open_staged(STARTERS / "mobilenetv3_small/model.onnx", CFG, 1)
    try:
        with pytest.raises(ModelLoadError, match="not a YOLO detection output"):
            classes_of(runner)
    finally:
        runner.close()
