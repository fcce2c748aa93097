"""To the cloud: the boxes of a published result that need a second opinion are cut from
the decoded image and offered to the uplink (strata.edge.uplink.stream), unless GPU
pressure level 1+ stopped cloud crops (counted); track events, and the track snapshots
before them, are offered always (the uplink acks, spools and keeps events in order per
camera)."""

from __future__ import annotations

from collections.abc import Sequence

from strata.edge.metrics import EdgeMetrics
from strata.edge.overload.gpu_pressure import GpuPressure
from strata.edge.publish.crops import CropSelector
from strata.edge.tracking.handoff import TrackedFrame
from strata.edge.uplink.stream import Uplink
from strata.shared.contracts import events_pb2, frame_pb2


class CropsToCloud:
    """Selects, cuts and hands crops of detected frames to the uplink."""

    def __init__(
        self, selector: CropSelector, uplink: Uplink, gpu: GpuPressure, metrics: EdgeMetrics
    ) -> None:
        self.selector = selector
        self.uplink = uplink
        self.gpu = gpu
        self.metrics = metrics

    def send(self, tf: TrackedFrame, msg: frame_pb2.FrameDetections) -> None:
        """Crops of `tf`, whose result `msg` was just published (its timing copied)."""
        if not len(tf.boxes) or tf.predicted:
            return
        if not self.gpu.crops_enabled:
            self.gpu.metrics.skipped.labels("cloud_crops").inc()
            return
        cut = tf.image_boxes if tf.image_boxes is not None else tf.boxes
        crops = self.selector.crops(tf.decoded, cut, msg.detections, tf.tracked)
        for c in crops:
            c.timing.CopyFrom(msg.timing)
        self.metrics.camera_bytes.labels(msg.camera_id, "uplink").inc(
            sum(len(c.image) for c in crops)
        )
        self.uplink.offer(crops)

    def snapshots(self, snaps: Sequence[events_pb2.Snapshot]) -> None:
        """Track snapshots (before the events naming them), to the uplink."""
        self.uplink.offer_snapshots(list(snaps))

    def events(self, events: Sequence[events_pb2.TrackEvent]) -> None:
        """Track events of a published frame, to the durable uplink."""
        self.uplink.offer_events(list(events))
