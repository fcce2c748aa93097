"""The detector on real ONNX Runtime sessions: the colour model (whose right answer is the
synthetic clip's ground truth) and the starter YOLO; labels from config or model metadata."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from edge_testkit import MODEL_SIZE
from strata.edge.inference.detector import Detector, model_labels, open_staged
from strata.edge.ingest.frames import DecodedFrame, QueuedFrame
from strata.shared.config.edge import DetectionConfig, EdgeConfig
from strata.shared.contracts import frame_pb2
from strata.shared.runtime import ModelLoadError, create_runner
from strata.shared.runtime.staging import HostStagedRunner
from strata.shared.synthetic import CLASSES, GroundTruthBox, SyntheticClip
from strata.shared.vision import COCO80, FrameBoxes, iou

STARTER_YOLO = Path(__file__).parents[2] / "shared/starter_models/yolov8n/model.onnx"


def decoded(seq: int, image: np.ndarray) -> DecodedFrame:
    h = frame_pb2.FrameHeader(
        camera_id="cam", sequence=seq, width=image.shape[1], height=image.shape[0]
    )
    return DecodedFrame(QueuedFrame(h, memoryview(b""), time.time_ns(), time.monotonic()), image)


def cfg(**runtime: object) -> EdgeConfig:
    return EdgeConfig.model_validate({"model": {"input_size": MODEL_SIZE}, "runtime": runtime})


def matches_truth(
    found: FrameBoxes, truth: tuple[GroundTruthBox, ...], min_iou: float = 0.9
) -> bool:
    """Every ground-truth box found once, of its class, in source pixels."""
    if len(found) != len(truth):
        return False
    for gt in truth:
        want = np.array([[gt.x1, gt.y1, gt.x2, gt.y2]], np.float32)
        same = found.class_ids == gt.class_id
        if not same.any() or float(iou(want, found.boxes[same]).max()) < min_iou:
            return False
    return True


@pytest.mark.parametrize("threads", [1, 2])
def test_a_batch_is_letterboxed_launched_and_decoded_in_source_pixels(
    colour_model: Path, threads: int
) -> None:
    # Frames of two sizes in one batch: each keeps its own letterbox.
    clips = [
        SyntheticClip(width=320, height=240, frames=4, objects=3, seed=1),
        SyntheticClip(width=200, height=300, frames=4, objects=2, seed=2),
    ]
    frames = [c.frame(i) for c in clips for i in range(2)]
    runner = open_staged(colour_model, cfg(), 4)
    det = Detector(runner, [c[0] for c in CLASSES], DetectionConfig(), threads)
    try:
        assert (det.max_batch, det.input_size, det.classes) == (4, MODEL_SIZE, len(CLASSES))
        start = time.time_ns()
        job = det.launch([decoded(i, f.image) for i, f in enumerate(frames)], start)
        assert job.start_ns == start and len(job.letterboxes) == 4
        assert [lb.width for lb in job.letterboxes] == [320, 320, 200, 200]
        assert job.elapsed() >= 0.0
        boxes = det.finish(job)
        assert len(boxes) == 4
        for f, found in zip(frames, boxes, strict=True):
            assert f.boxes, "the clip must show objects for the test to mean anything"
            assert matches_truth(found, f.boxes)
    finally:
        det.close()
        runner.close()


def test_the_detection_config_filters_scores_and_caps_boxes(colour_model: Path) -> None:
    frame = SyntheticClip(width=320, height=240, frames=2, objects=3, seed=1).frame(0)
    assert len(frame.boxes) >= 2
    runner = open_staged(colour_model, cfg(), 1)
    try:
        few = Detector(runner, [], DetectionConfig(max_detections=1))
        assert len(few.finish(few.launch([decoded(1, frame.image)], 0))[0]) == 1
        # The colour model scores 0.9: a higher threshold leaves nothing.
        none = Detector(runner, [], DetectionConfig(score_threshold=0.95))
        assert len(none.finish(none.launch([decoded(2, frame.image)], 0))[0]) == 0
    finally:
        runner.close()


def test_a_non_square_input_is_refused(colour_model: Path) -> None:
    runner = HostStagedRunner(create_runner(colour_model), 2, (3, MODEL_SIZE, MODEL_SIZE // 2))
    try:
        with pytest.raises(ModelLoadError, match="square input"):
            Detector(runner, [], DetectionConfig())
    finally:
        runner.close()


def test_open_staged_takes_the_fixed_input_of_the_model_over_the_config() -> None:
    # The starter YOLO is exported at 320 x 320; the config says 256.
    runner = open_staged(STARTER_YOLO, cfg(threads=1), 2)
    try:
        assert runner.host_input(0).shape == (2, 3, 320, 320)
        det = Detector(runner, model_labels(STARTER_YOLO, 1, []), DetectionConfig())
        assert det.labels == ("person",) and det.input_size == 320
        grey = np.full((240, 320, 3), 114, np.uint8)
        assert det.finish(det.launch([decoded(1, grey)], 0))[0].class_ids.tolist() == []
    finally:
        runner.close()
    standby = open_staged(STARTER_YOLO, cfg(), 2, allocate=False)
    try:
        assert not standby.allocated  # type: ignore[attr-defined]
    finally:
        standby.close()


def test_labels_come_from_config_then_metadata_then_coco_or_numbers(
    colour_model: Path, tmp_path: Path
) -> None:
    names = tuple(c[0] for c in CLASSES)
    assert model_labels(colour_model, 3, ["a", "b", "c"]) == ("a", "b", "c")
    with pytest.raises(ModelLoadError, match="2 labels given for a model with 3 classes"):
        model_labels(colour_model, 3, ["a", "b"])
    assert model_labels(colour_model, 3, []) == names
    # The metadata's names do not fit a model of another class count: numbered.
    assert model_labels(colour_model, 4, []) == ("class0", "class1", "class2", "class3")
    bare = onnx.load(str(colour_model))
    del bare.metadata_props[:]
    onnx.save(bare, str(tmp_path / "bare.onnx"))
    assert model_labels(tmp_path / "bare.onnx", 3, []) == ("class0", "class1", "class2")
    assert model_labels(tmp_path / "bare.onnx", 80, []) == COCO80
    # An OpenVINO IR is not read as ONNX (it would not parse): COCO or numbered.
    (tmp_path / "model.int8-openvino.xml").write_text("<net name='picodet'/>")
    assert model_labels(tmp_path / "model.int8-openvino.xml", 80, []) == COCO80


STARTER_PICODET = Path(__file__).parents[2] / "shared/starter_models/picodet_s_416/model.onnx"


def test_the_starter_coco_detector_boxes_vtest_people_and_the_van(vtest_mp4: Path) -> None:
    """PicoDet-S 416 as the edge runs it (its manifest's stretch, mean/std and gfl layout,
    read from beside the file): the walking people of vtest's first frame, and the parked
    white van, in the frame's pixels."""
    import av
    from strata.shared.models.detector import spec_beside

    spec = spec_beside(STARTER_PICODET)
    assert spec is not None and spec.layout.format == "gfl"
    with av.open(str(vtest_mp4)) as c:
        image = next(c.decode(video=0)).to_ndarray(format="bgr24")
    runner = open_staged(STARTER_PICODET, cfg(), 2)
    try:
        det = Detector(runner, spec.labels, DetectionConfig(score_threshold=0.5), spec=spec)
        assert det.max_batch == 2, "the starter's batch axis is dynamic"
        (boxes,) = det.finish(det.launch([decoded(1, image)], 0))
    finally:
        runner.close()
    labels = [spec.labels[int(c)] for c in boxes.class_ids]
    assert labels.count("person") >= 3, labels
    assert {"car", "truck"} & set(labels), labels  # the van in the top right corner
    h, w = image.shape[:2]
    assert (boxes.boxes[:, 2] <= w).all() and (boxes.boxes[:, 3] <= h).all()
    people = boxes.boxes[[lb == "person" for lb in labels]]
    # Standing people are taller than wide.
    assert ((people[:, 3] - people[:, 1]) > (people[:, 2] - people[:, 0])).all()


def test_cpu_streams_run_batches_side_by_side_with_the_same_boxes(vtest_mp4: Path) -> None:
    """`runtime.cpu_streams: 2`: two slots, each batch on its own thread with half the
    cores; two batches in flight at once give each frame the boxes one stream gives it."""
    import av
    from strata.shared.models.detector import spec_beside

    spec = spec_beside(STARTER_PICODET)
    assert spec is not None
    with av.open(str(vtest_mp4)) as c:
        frames = c.decode(video=0)
        batches = [[decoded(2 * k + i, next(frames).to_ndarray(format="bgr24")) for i in range(2)]
                   for k in range(2)]  # fmt: skip
    found: dict[int, list[FrameBoxes]] = {}
    for streams in (1, 2):
        runner = open_staged(STARTER_PICODET, cfg(threads=2, cpu_streams=streams), 2)
        det = Detector(runner, spec.labels, DetectionConfig(), spec=spec)
        try:
            assert runner.slots == streams
            if streams == 1:
                found[1] = [b for batch in batches for b in det.finish(det.launch(batch, 0))]
            else:
                assert isinstance(runner, HostStagedRunner)
                opts = runner.runner.session.get_session_options()  # type: ignore[attr-defined]
                assert opts.intra_op_num_threads == 1  # the 2 threads split between streams
                jobs = [det.launch(batch, 0) for batch in batches]  # both in flight
                found[2] = [b for job in jobs for b in det.finish(job)]
        finally:
            det.close()
            runner.close()
    assert len(found[1]) == len(found[2]) == 4
    for one, two in zip(found[1], found[2], strict=True):
        assert len(one) > 0 and len(one) == len(two)
        assert np.allclose(one.boxes, two.boxes, atol=0.5)


def test_cpu_streams_auto_is_one_a_core_plus_one_single_threaded() -> None:
    from strata.edge.inference.detector import cpu_streams

    assert cpu_streams(2, 0) == (3, 1)
    assert cpu_streams(1, 0) == (2, 1)
    assert cpu_streams(32, 0) == (16, 2)
    assert cpu_streams(4, 1) == (1, 4)  # one stream keeps every thread in its session
    assert cpu_streams(0, 1) == (1, 0)  # ... and ONNX Runtime's own default
    assert cpu_streams(8, 2) == (2, 4)
    from strata.shared.config.edge import RuntimeConfig

    assert RuntimeConfig().cpu_streams == 1  # one run at a time unless asked (docs/edge.md)
