"""Publishing results: each frame's detections on the node's PUB socket (topic: camera
id), a skipped frame's answer from tracking, and at GPU pressure level 4 a low-priority
camera's last result again. Published first, acked second: the frame's final ack
(PROCESSED) leaves only after its result was published, so a crash in between means a
resend, flagged as a redelivery by the next life of the node, never a lost frame.

Track events (the rules stage's, on the frame) go out after the frame's result and
before its ack: a copy on the PUB socket (topic `events_topic(camera)`) and the durable
copy to the uplink; without a cloud only the copy. The copy leaves out the track's
appearance embedding (edge.appearance): it travels the durable uplink only.

Worker thread only (the PUB socket is the worker's). The PUB socket is a live tap: a
result without subscribers is dropped by ZeroMQ; crops and events travel the durable
uplink.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from strata.edge.flow.final_acks import FinalAcks
from strata.edge.inference.serving import ServingModel
from strata.edge.ingest.frames import DecodedFrame, QueuedFrame
from strata.edge.metrics import EdgeMetrics
from strata.edge.overload.gpu_pressure import GpuPressure
from strata.edge.publish.moving import MovingObjects
from strata.edge.publish.to_cloud import CropsToCloud
from strata.edge.tracking.answers import Answer
from strata.edge.tracking.handoff import TrackedFrame
from strata.edge.tracking.tracker import TrackedBoxes
from strata.shared.contracts import current_version, events_pb2, frame_pb2
from strata.shared.vision import FrameBoxes
from strata.shared.wire import detections_topic, events_topic

# The image of a frame answered without decoding it (from its camera's cache).
_NO_IMAGE = np.zeros((0, 0, 3), np.uint8)


class EventState(Protocol):
    """Where the state behind emitted events is made durable (the checkpointer): called
    after a frame's events are on the uplink and before its ack."""

    def events_emitted(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Cached:
    """A camera's last detected result, what level 4 answers its frames with."""

    boxes: FrameBoxes
    tracked: TrackedBoxes | None


class Results:
    """Builds, publishes and counts results; sends final acks and crops after."""

    def __init__(
        self,
        edge_id: str,
        serving: ServingModel,
        metrics: EdgeMetrics,
        acks: FinalAcks,
        to_cloud: CropsToCloud | None = None,
        state: EventState | None = None,
    ) -> None:
        self.edge_id = edge_id
        self.serving = serving
        self.metrics = metrics
        self.acks = acks
        self.to_cloud = to_cloud
        self.state = state
        self.last: dict[str, Cached] = {}
        self.moving = MovingObjects()
        self._pub: Any = None

    def open(self, pub: Any) -> None:
        """The worker thread's PUB socket (from its start on)."""
        self._pub = pub

    def forget_cameras(self, cameras: list[str]) -> None:
        for cam in cameras:
            self.last.pop(cam, None)
            self.moving.forget(cam)

    def frame(self, tf: TrackedFrame) -> None:
        """Publish a detected (or cached) frame's result, then its crops and final ack."""
        frame = tf.decoded.frame
        h = frame.header
        msg = self._result(h, tf.predicted, "degraded" if tf.predicted else "", frame.redelivery)
        ids = tf.tracked.track_ids.tolist() if tf.tracked is not None else [0] * len(tf.boxes)
        self._add_detections(msg, tf.boxes, ids)
        t = msg.timing
        t.capture_ns, t.device_send_ns, t.edge_receive_ns = (
            h.capture_ns,
            h.send_ns,
            frame.receive_ns,
        )
        t.inference_start_ns, t.inference_end_ns = tf.start_ns, tf.end_ns
        t.edge_send_ns = time.time_ns()
        self._pub.send_multipart([detections_topic(h.camera_id), msg.SerializeToString()])
        self._count(tf, msg)
        if not tf.predicted:
            self.last[h.camera_id] = Cached(tf.boxes, tf.tracked)
        if self.to_cloud is not None:
            self.to_cloud.send(tf, msg)
        self.events(tf.events, tf.snapshots)
        moving = None
        if not tf.predicted:
            moving = self.moving.count(h.session_id, h.camera_id, tf.tracked, len(tf.boxes))
        self.acks.send(frame, frame_pb2.ACK_STATUS_PROCESSED, moving_objects=moving)

    def events(
        self,
        events: Sequence[events_pb2.TrackEvent],
        snapshots: Sequence[events_pb2.Snapshot] = (),
    ) -> None:
        """Track events: a copy on the PUB socket, the durable copy to the uplink; the
        snapshots they name go to the uplink first."""
        if snapshots and self.to_cloud is not None:
            self.to_cloud.snapshots(snapshots)
        if not events:
            return
        for ev in events:
            self._pub.send_multipart([events_topic(ev.camera_id), _pub_copy(ev)])
        if self.to_cloud is not None:
            self.to_cloud.events(events)
        if self.state is not None:  # before the frame's ack (see EventState)
            self.state.events_emitted()

    def _count(self, tf: TrackedFrame, msg: frame_pb2.FrameDetections) -> None:
        frame = tf.decoded.frame
        m = self.metrics
        m.processed.inc()
        if frame.redelivery:
            m.redelivered.inc()
        m.camera_frames.labels(msg.camera_id).inc()
        m.detections.inc(len(tf.boxes))
        m.node_latency.observe(time.monotonic() - frame.received)
        if msg.timing.capture_ns:
            m.e2e.observe(max(0.0, (msg.timing.edge_send_ns - msg.timing.capture_ns) / 1e9))

    def answer(
        self,
        a: Answer,
        events: Sequence[events_pb2.TrackEvent] = (),
        snapshots: Sequence[events_pb2.Snapshot] = (),
    ) -> None:
        """A skipped frame's result, from the tracker (flagged predicted; no crops), and
        the track events (and snapshots) it caused."""
        h = a.header
        msg = self._result(h, True, f"skipped:{h.skip_reason or 'unspecified'}:{a.how}")
        self._add_detections(msg, a.boxes, a.boxes.track_ids.tolist())
        t = msg.timing
        t.capture_ns, t.device_send_ns, t.edge_receive_ns = h.capture_ns, h.send_ns, a.receive_ns
        t.edge_send_ns = time.time_ns()
        self._pub.send_multipart([detections_topic(h.camera_id), msg.SerializeToString()])
        self.metrics.camera_frames.labels(h.camera_id).inc()
        self.events(events, snapshots)
        if isinstance(a.token, QueuedFrame):  # the skipped notice is settled: published
            self.acks.send(a.token, frame_pb2.ACK_STATUS_PROCESSED)

    def from_cache(
        self,
        frames: list[QueuedFrame],
        gpu: GpuPressure,
        abandon: Callable[[frame_pb2.FrameHeader], None],
    ) -> list[QueuedFrame]:
        """GPU pressure level 4: publish low-priority cameras' last result for their
        frames (flagged predicted, no inference); returns the frames that still need
        the detector. `abandon` tells tracking a frame will not be detected."""
        rest = []
        for f in frames:
            last = self.last.get(f.header.camera_id)
            if last is None or not gpu.from_cache(f.header.camera_id):
                rest.append(f)
                continue
            self.metrics.queue_delay.observe(time.monotonic() - f.received)
            gpu.metrics.skipped.labels("cached_result").inc()
            now = time.time_ns()
            # Never decoded: a predicted answer needs no pixels (and sends no crops).
            abandon(f.header)
            decoded = DecodedFrame(f, _NO_IMAGE)
            self.frame(TrackedFrame(decoded, last.boxes, last.tracked, now, now, predicted=True))
        return rest

    def _result(
        self, h: frame_pb2.FrameHeader, predicted: bool, note: str = "", redelivery: bool = False
    ) -> frame_pb2.FrameDetections:
        """A result message for this frame, without its detections and timing."""
        return frame_pb2.FrameDetections(
            version=current_version(),
            edge_id=self.edge_id,
            camera_id=h.camera_id,
            sequence=h.sequence,
            frame_index=h.frame_index,
            width=h.source_width or h.width,
            height=h.source_height or h.height,
            model=self.serving.name,
            model_version=self.serving.version,
            predicted=predicted,
            session_id=h.session_id,
            redelivery=redelivery,
            note=note,
        )

    def _add_detections(
        self,
        msg: frame_pb2.FrameDetections,
        boxes: FrameBoxes | TrackedBoxes,
        track_ids: list[int],
    ) -> None:
        labels = self.serving.labels
        nlab = len(labels)
        # Serialization is per box by nature of the message; the numbers go over in bulk.
        for (x1, y1, x2, y2), score, cid, tid in zip(
            boxes.boxes.tolist(),
            boxes.scores.tolist(),
            boxes.class_ids.tolist(),
            track_ids,
            strict=True,
        ):
            d = msg.detections.add(score=score, class_id=cid, track_id=tid)
            d.box.x1, d.box.y1, d.box.x2, d.box.y2 = x1, y1, x2, y2
            d.label = labels[cid] if 0 <= cid < nlab else str(cid)


def _pub_copy(ev: events_pb2.TrackEvent) -> bytes:
    """The PUB socket's copy of an event: without its appearance embedding (a person's
    description goes only to the cloud, over the uplink)."""
    if not ev.HasField("appearance"):
        return ev.SerializeToString()
    copy = events_pb2.TrackEvent()
    copy.CopyFrom(ev)
    copy.ClearField("appearance")
    return copy.SerializeToString()
