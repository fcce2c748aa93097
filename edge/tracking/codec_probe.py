"""What the payload codec costs the detector, measured on the device's codec probes.

A codec probe (`FrameHeader.codec_probe_quality`, `device.cascade.codec_probes`) is one of a
calibration burst's first frames, sent as raw pixels though the camera's other frames go as
JPEG at that quality. Its boxes as sent are the camera's result like any frame's; the probe
runs the detector once more, on the same pixels after a JPEG round trip at that quality (a
batch of one on the worker, a few a burst), and the cascade pools the two box sets into the
camera's codec loss (edge/tracking/estimate.py, `Codec`), which comes off its calibration
curves and its estimate. The bursts alone compare the detector on JPEG frames with itself,
so the estimate was blind to the codec: on megamind it said 1.000 where the frames scored
0.948, 0.044 of it JPEG 95's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np
import simplejpeg
from strata.edge.inference.detector import Detector
from strata.edge.inference.objects import ObjectsFilter
from strata.edge.ingest.frames import DecodedFrame, QueuedFrame
from strata.edge.tracking.cascade import EdgeCascade
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.logs import RateLimitedLog
from strata.shared.vision import FrameBoxes

log = logging.getLogger(__name__)


class Serving(Protocol):
    """The model in service (strata.edge.inference.serving.ServingModel): its detector now."""

    @property
    def detector(self) -> Detector: ...


class CodecProbe:
    """Detects a codec probe again after a JPEG round trip; the cascade pools the two.
    While `loaded()` says the node is loaded the second run waits for a later probe: it
    is a batch of one on the worker that no result needs, and a camera's first bursts are
    mostly probes (at the capacity bench's 32 quiet cameras, 42% of the detector's time)."""

    def __init__(
        self,
        serving: Serving,
        objects: ObjectsFilter,
        cascade: EdgeCascade,
        loaded: Callable[[], bool] = lambda: False,
    ) -> None:
        self.serving = serving
        self.objects = objects
        self.cascade = cascade
        self.loaded = loaded
        self._log = RateLimitedLog(log)

    def __call__(self, frame: DecodedFrame, boxes: FrameBoxes) -> None:
        """`frame` was detected with `boxes` (after `objects`); a probe is looked at again."""
        h = frame.header
        quality = h.codec_probe_quality
        if not quality or h.encoding != common_pb2.ENCODING_BGR:
            return  # not a probe (a JPEG frame claiming to be one has no raw pixels)
        if not len(boxes):
            # Nothing seen on the raw pixels: the JPEG's copy is taken to agree (no boxes,
            # the count 0) without a second detection. Empty probes are most of a quiet
            # camera's, and each cost a batch of one on the worker.
            self.cascade.codec_probed(h, boxes, boxes)
            return
        if self.loaded():
            self.cascade.codec_deferred(h)
            self._log.warn(
                "loaded",
                "camera %s: codec probe not detected again, the node is loaded (its result "
                "stands; the device probes again on later bursts)",
                h.camera_id,
            )
            return
        try:
            image = _round_trip(frame, int(quality))
        except Exception as exc:  # the camera's result stands; only the measure is lost
            self._log.warn(
                h.camera_id, "camera %s: codec probe not re-encoded: %s", h.camera_id, exc
            )
            return
        detector = self.serving.detector
        job = detector.launch([DecodedFrame(frame.frame, image)], time.time_ns())
        jpeg = detector.finish(job)[0]
        self.cascade.codec_probed(h, boxes, self.objects(h, jpeg, count=False))


def _round_trip(frame: DecodedFrame, quality: int) -> np.ndarray:
    """The probe's pixels as the device's JPEG of them would read here: libjpeg-turbo at
    `quality`, 4:2:0 as the device's (it encodes the decoder's YUV planes; this, the BGR
    they became: a rounding apart), decoded by the edge's own JPEG path."""
    h = frame_pb2.FrameHeader()
    h.CopyFrom(frame.header)
    data = simplejpeg.encode_jpeg(
        np.ascontiguousarray(frame.image), quality, colorspace="BGR", colorsubsampling="420"
    )
    h.encoding = common_pb2.ENCODING_JPEG
    h.payload_size = len(data)
    return QueuedFrame(h, memoryview(data), 0, 0.0).decode()
