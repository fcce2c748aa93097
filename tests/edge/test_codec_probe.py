"""A codec probe (raw pixels, the quality its JPEG would have had) detected again after a
JPEG round trip: the two box sets pooled into the camera's codec loss."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry
from strata.edge.inference.detector import Detector, open_staged
from strata.edge.inference.objects import ObjectsFilter
from strata.edge.ingest.frames import DecodedFrame, QueuedFrame
from strata.edge.tracking.cascade import EdgeCascade
from strata.edge.tracking.codec_probe import CodecProbe
from strata.shared.config.edge import DetectionConfig, EdgeConfig
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.models.detector import spec_beside


@dataclass
class _Serving:
    detector: Detector


def _probe(image: np.ndarray, quality: int, encoding: int) -> DecodedFrame:
    h = frame_pb2.FrameHeader(
        camera_id="cam",
        session_id=1,
        width=image.shape[1],
        height=image.shape[0],
        encoding=encoding,  # type: ignore[arg-type]
        codec_probe_quality=quality,
        calibration=True,
    )
    return DecodedFrame(QueuedFrame(h, memoryview(b""), time.time_ns(), time.monotonic()), image)


PICODET = Path(__file__).parents[2] / "shared/starter_models/picodet_s_416/model.onnx"


def _frames(vtest: Path, n: int) -> list[np.ndarray]:
    import av
    import cv2

    with av.open(str(vtest)) as f:
        frames = itertools.islice(f.decode(video=0), n)
        images = [fr.to_ndarray(format="bgr24") for fr in frames]
    # As the device sends them: scaled to the detector's input.
    return [cv2.resize(im, (416, 312), interpolation=cv2.INTER_AREA) for im in images]


def _loss(
    images: list[np.ndarray],
    quality: int,
    encoding: int = common_pb2.ENCODING_BGR,
    loaded: Callable[[], bool] = lambda: False,
) -> dict[str, float | None]:
    """The starter detector (PicoDet-S 416) over `images` sent as codec probes."""
    cfg = EdgeConfig.model_validate({"model": {"input_size": 416}})
    spec = spec_beside(PICODET)
    assert spec is not None
    runner = open_staged(PICODET, cfg, 1)
    det = Detector(runner, list(spec.labels), DetectionConfig(), 1, spec)
    registry = CollectorRegistry()
    cascade = EdgeCascade(cfg, registry, 416)
    objects = ObjectsFilter(None, list(spec.labels), _drops(registry))
    probe = CodecProbe(_Serving(det), objects, cascade, loaded)
    try:
        for image in images:
            f = _probe(image, quality, encoding)
            job = det.launch([f], time.time_ns())
            probe(f, objects(f.header, det.finish(job)[0]))
        get = registry.get_sample_value
        return {
            "probes": get("strata_edge_codec_probes_total", {"camera": "cam"}),
            "boxes": get("strata_edge_codec_boxes", {"camera": "cam"}),
            "f1": get("strata_edge_codec_loss", {"camera": "cam", "metric": "f1"}),
            "deferred": get("strata_edge_codec_probes_deferred_total", {"camera": "cam"}),
        }
    finally:
        cascade.close()
        det.close()
        runner.close()


def _drops(registry: CollectorRegistry):  # type: ignore[no-untyped-def]
    from prometheus_client import Counter

    return Counter("drops", "test", ["label", "reason"], registry=registry)


def test_a_probe_s_jpeg_at_its_quality_is_detected_and_the_loss_pooled(vtest_mp4: Path) -> None:
    images = _frames(vtest_mp4, 6)
    fine = _loss(images, 95)
    assert fine["probes"] == 6 and (fine["boxes"] or 0) >= 8
    assert fine["f1"] is not None and fine["f1"] < 0.1
    # At quality 3 the blocks smear the people: boxes are lost or moved.
    coarse = _loss(images, 3)
    assert coarse["boxes"] == fine["boxes"]
    assert coarse["f1"] is not None and coarse["f1"] > fine["f1"] + 0.1


def test_a_loaded_node_defers_the_second_detection_to_a_later_probe(vtest_mp4: Path) -> None:
    """While the node is loaded a probe's result stands but its JPEG copy is not detected
    (counted as deferred); the probes after the load are pooled as ever."""
    images = _frames(vtest_mp4, 8)
    states = iter([True] * 4 + [False] * 4)
    out = _loss(images, 95, loaded=lambda: next(states))
    assert out["deferred"] == 4
    assert out["probes"] == 4
    assert (out["boxes"] or 0) >= 8  # the four after the load hold the sample's boxes


def test_a_frame_that_is_no_probe_or_came_as_jpeg_is_not_looked_at_again(
    vtest_mp4: Path,
) -> None:
    images = _frames(vtest_mp4, 2)
    assert _loss(images, 0)["probes"] is None
    assert _loss(images, 95, common_pb2.ENCODING_JPEG)["probes"] is None


def test_a_probe_with_nothing_on_it_is_pooled_without_a_second_detection() -> None:
    """An empty street's probe: counted as agreeing (no boxes either way) and no batch of
    one is run on the worker for its JPEG copy."""
    cfg = EdgeConfig.model_validate({"model": {"input_size": 416}})
    spec = spec_beside(PICODET)
    assert spec is not None
    runner = open_staged(PICODET, cfg, 1)
    det = Detector(runner, list(spec.labels), DetectionConfig(), 1, spec)
    launches: list[int] = []

    class Counting:
        @property
        def detector(self) -> Detector:
            launches.append(1)
            return det

    registry = CollectorRegistry()
    cascade = EdgeCascade(cfg, registry, 416)
    objects = ObjectsFilter(None, list(spec.labels), _drops(registry))
    probe = CodecProbe(Counting(), objects, cascade)
    try:
        blank = np.full((312, 416, 3), 128, np.uint8)
        for _ in range(3):
            f = _probe(blank, 95, common_pb2.ENCODING_BGR)
            boxes = objects(f.header, det.finish(det.launch([f], time.time_ns()))[0])
            assert len(boxes) == 0
            probe(f, boxes)
        get = registry.get_sample_value
        assert get("strata_edge_codec_probes_total", {"camera": "cam"}) == 3
        assert get("strata_edge_codec_boxes", {"camera": "cam"}) == 0
        assert launches == []
    finally:
        cascade.close()
        det.close()
        runner.close()
