"""The default detector on the openvino back end, as the edge opens it (`open_staged`): the
same boxes as ONNX Runtime on vtest's frames, batches kept in flight on its infer requests."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from required_testkit import require_module
from strata.edge.inference.detector import Detector, open_staged
from strata.edge.ingest.frames import DecodedFrame, QueuedFrame
from strata.shared.config.edge import DetectionConfig, EdgeConfig
from strata.shared.contracts import frame_pb2
from strata.shared.models.detector import spec_beside
from strata.shared.vision import FrameBoxes, iou
from strata.shared.vision.agreement import agreement

require_module("openvino", "the test extra installs it: pip install -e '.[cpu,test]'")

PICODET = Path(__file__).parents[2] / "shared/starter_models/picodet_s_416/model.onnx"
BATCH = 4


def _cfg(backend: str, cache: Path) -> EdgeConfig:
    return EdgeConfig.model_validate(
        {"runtime": {"backend": backend, "openvino_cache": str(cache)}}
    )


def _frames(vtest_mp4: Path, count: int) -> list[np.ndarray]:
    import av

    out: list[np.ndarray] = []
    with av.open(str(vtest_mp4)) as c:
        for i, frame in enumerate(c.decode(video=0)):
            if i % 5 == 0:  # a second and more of the street, not eight near-copies
                out.append(frame.to_ndarray(format="bgr24"))
            if len(out) == count:
                break
    return out


def _decoded(seq: int, image: np.ndarray) -> DecodedFrame:
    h = frame_pb2.FrameHeader(
        camera_id="cam", sequence=seq, width=image.shape[1], height=image.shape[0]
    )
    return DecodedFrame(QueuedFrame(h, memoryview(b""), time.time_ns(), time.monotonic()), image)


def _detect(
    backend: str, cache: Path, images: list[np.ndarray], model: Path = PICODET, score: float = 0.3
) -> list[FrameBoxes]:
    """Every frame through the detector, as many batches in flight as the runner has slots."""
    spec = spec_beside(model)
    assert spec is not None
    runner = open_staged(model, _cfg(backend, cache), BATCH)
    det = Detector(runner, spec.labels, DetectionConfig(score_threshold=score), spec=spec)
    try:
        frames = [_decoded(i, im) for i, im in enumerate(images)]
        starts = list(range(0, len(frames), BATCH))
        first = starts[: runner.slots]
        jobs = [det.launch(frames[i : i + BATCH], 0) for i in first]
        done = [b for job in jobs for b in det.finish(job)]
        for i in starts[len(first) :]:
            done += det.finish(det.launch(frames[i : i + BATCH], 0))
        return done
    finally:
        det.close()
        runner.close()


def test_openvino_boxes_agree_with_onnx_runtime_on_vtest(vtest_mp4: Path, tmp_path: Path) -> None:
    images = _frames(vtest_mp4, 10)  # batches of 4, 4 and a partial 2
    ort = _detect("onnxruntime-cpu", tmp_path, images)
    ov = _detect("openvino", tmp_path, images)
    a = agreement(ort, ov)
    assert a.true_positives >= 30, a  # vtest's street: people in every frame
    assert a.f1 >= 0.99, a
    for r, o in zip(ort, ov, strict=True):
        for box, cls in zip(r.boxes, r.class_ids, strict=True):
            same = o.boxes[o.class_ids == cls]
            if len(same):
                best = float(iou(box[None, :], same).max())
                assert best > 0.98 or best < 0.5, (box, same)  # the same box, or another


def test_the_openvino_runner_offers_one_slot_per_stream(tmp_path: Path) -> None:
    runner = open_staged(PICODET, _cfg("openvino", tmp_path), BATCH)
    try:
        assert runner.backend == "openvino"
        assert runner.slots >= 1
        assert runner.host_input(0).shape == (BATCH, 3, 416, 416)
    finally:
        runner.close()


def test_the_shipped_int8_ir_runs_in_batches_and_agrees_with_fp32(
    vtest_mp4: Path, tmp_path: Path
) -> None:
    """The starter's int8-openvino variant (an IR, dynamic batch kept) through the edge's
    own detector, batches of 4 in flight: box F1 against FP32 on the same back end at the
    score the edge publishes (0.5) meets the quantizer's threshold (0.95)."""
    ir = PICODET.with_name("model.int8-openvino.xml")
    images = _frames(vtest_mp4, 10)
    fp32 = _detect("openvino", tmp_path / "a", images, score=0.5)
    int8 = _detect("openvino", tmp_path / "b", images, ir, score=0.5)
    a = agreement(fp32, int8)
    assert a.true_positives >= 30, a
    assert a.f1 >= 0.95, a
