"""The node's side of the cascade, in one place the node calls into.

- Skipped frames (FRAME_KIND_SKIPPED, header only) are answered from the camera's tracker
  (`answers`), flagged predicted; kept frames feed the tracker after detection.
- Detector boxes come back in the payload's pixels; everything published, tracked and
  calibrated is in the source frame's pixels (`source_width` / `source_height`).
- H.264 payloads decode per (session, camera) in order (`h264`); a stream that lost a
  reference makes the next ack of that camera ask for a keyframe.
- Calibration bursts are replayed at every gap (`calibration`); the result (with the
  estimated accuracy of the camera's current spacing, also a gauge per camera), and
  `send_next` when the tracker's prediction for the camera is uncertain or a rule is about
  to be decided (`ask_next`, the rules stage), ride on that camera's next ack
  (CascadeFeedback): the QUEUED ack of its next message, or the PROCESSED ack of the
  frame whose answer raised them, whichever goes first.
- The acks carry the detector's input size (EdgeInfo) so agents scale frames to it.
- A frame flagged `scene_change` (a cut, a pan, seen by the device's motion gate) ends the
  camera's tracks and its calibration burst: nothing is predicted across the cut.

Every answer is counted by how it was made; every lost H.264 frame by reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge
from strata.edge.inference.h264 import H264Decoders
from strata.edge.tracking.answers import Answer, Answers
from strata.edge.tracking.appearance import Appearance, AppearanceCollector
from strata.edge.tracking.calibration import Calibration, Estimate
from strata.edge.tracking.estimate import Tally
from strata.edge.tracking.tracker import TrackedBoxes
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import events_pb2, frame_pb2
from strata.shared.logs import RateLimitedLog
from strata.shared.vision import FrameBoxes

log = logging.getLogger(__name__)


class CascadeMetrics:
    """The cascade's counters, in the node's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.answers = Counter(
            "strata_edge_answers",
            "Results published for frames the device did not send, by how they were made "
            "(predicted, interpolated, timeout: predicted after waiting hold_s).",
            ["how"],
            registry=r,
        )
        self.skipped = Counter(
            "strata_edge_skipped_frames",
            "Header-only messages of frames the device dropped, by the device's reason.",
            ["reason"],
            registry=r,
        )
        self.h264_lost = Counter(
            "strata_edge_h264_lost",
            "H.264 frames that could not be decoded (a keyframe was asked for), by reason.",
            ["reason"],
            registry=r,
        )
        self.keyframe_requests = Counter(
            "strata_edge_keyframe_requests", "Acks that asked an agent for a keyframe.", registry=r
        )
        self.calibrations = Counter(
            "strata_edge_calibrations", "Calibration bursts measured.", registry=r
        )
        self.tracks = Counter("strata_edge_tracks_started", "Tracks started.", registry=r)
        self.scene_changes = Counter(
            "strata_edge_scene_changes",
            "Kept frames flagged a scene change (a cut, a pan): tracks re-seeded, the "
            "camera's calibration restarted.",
            registry=r,
        )
        self.send_next = Counter(
            "strata_edge_send_next",
            "Times the edge asked a camera's device for its next frames, by why (line, zone, "
            "dwell: a rule is about to be decided).",
            ["reason"],
            registry=r,
        )
        self.send_next_refused = Counter(
            "strata_edge_send_next_refused",
            "Asks for a camera's next frames the rules wanted and did not make: over "
            "rules.ask_budget (the cascade's spacing decides those frames).",
            registry=r,
        )
        self.held = Gauge(
            "strata_edge_skipped_held", "Skipped frames waiting for their answer.", registry=r
        )
        self.estimated_accuracy = Gauge(
            "strata_edge_estimated_accuracy",
            "Box F1 against the detector on every frame that the camera's current spacing is "
            "estimated to achieve (from its calibration bursts), after each burst.",
            ["camera"],
            registry=r,
        )
        self.estimate_weight = Counter(
            "strata_edge_estimate_weight",
            "What the camera's estimate has scored since start, by metric: the detector's "
            "boxes in the frames (f1), the frames (counting).",
            ["camera", "metric"],
            registry=r,
        )
        (self.codec_probes, self.codec_deferred, self.codec_loss, self.codec_boxes) = (
            _codec_metrics(r)
        )
        self.estimate_agreeing = Counter(
            "strata_edge_estimate_agreeing",
            "strata_edge_estimate_weight, each frame's part times the accuracy estimated at "
            "its gap: over the weight, the estimate of the whole run so far.",
            ["camera", "metric"],
            registry=r,
        )


def _codec_metrics(r: CollectorRegistry) -> tuple[Counter, Counter, Gauge, Gauge]:
    """What the camera's payload codec costs (strata.edge.tracking.codec_probe)."""
    return (
        Counter(
            "strata_edge_codec_probes",
            "Codec probes detected twice (as sent, raw, and after a JPEG round trip at the "
            "camera's quality): device.cascade.codec_probes.",
            ["camera"],
            registry=r,
        ),
        Counter(
            "strata_edge_codec_probes_deferred",
            "Codec probes not detected a second time because the node was loaded: their "
            "result stands, their codec measure is not taken (the device probes again on "
            "later bursts while the camera's codec sample is short).",
            ["camera"],
            registry=r,
        ),
        Gauge(
            "strata_edge_codec_loss",
            "What the camera's payload codec costs the detector, by metric (box F1, counting "
            "agreement lost), pooled over its recent codec probes; taken off its curves and "
            "estimate once the probes hold enough boxes (codec_boxes).",
            ["camera", "metric"],
            registry=r,
        ),
        Gauge(
            "strata_edge_codec_boxes",
            "Boxes of the camera's recent codec probes (the codec's loss is taken from 8).",
            ["camera"],
            registry=r,
        ),
    )


class EdgeCascade:
    """Tracking, answers, H.264 decoders and calibration of one node. Thread-safe."""

    def __init__(
        self,
        cfg: EdgeConfig,
        registry: CollectorRegistry,
        model_input: int,
        appearance: Appearance | None = None,
    ) -> None:
        self.cfg = cfg
        self.model_input = model_input
        self.metrics = CascadeMetrics(registry)
        self.appearance = appearance
        if appearance is not None:
            registry.register(AppearanceCollector(appearance, self._looks))
        self.answers = Answers(cfg.tracking, appearance)
        self.h264 = H264Decoders()
        self.calibration = Calibration(
            cfg.tracking,
            cfg.tracking.calibration_max_gap,
            window=cfg.tracking.calibration_window,
            on_estimate=self._estimated,
            on_scored=self._scored,
        )
        self._lock = threading.Lock()
        self._refused_log = RateLimitedLog(log, 10.0, logging.INFO)
        self._send_next: set[tuple[int, str]] = set()
        self._keyframe: set[tuple[int, str]] = set()
        # Per camera: whether its last ack told the device of tracked objects.
        self._tracking: dict[tuple[int, str], bool] = {}

    # -- ingest thread ---------------------------------------------------------------------

    def skipped(
        self, h: frame_pb2.FrameHeader, received: float, receive_ns: int, token: object = None
    ) -> None:
        """A skipped frame's message was accepted: answer it when its turn comes (`token`
        comes back on its Answer)."""
        self.metrics.skipped.labels(h.skip_reason or "unspecified").inc()
        self.calibration.skipped(h)
        self.answers.skipped(h, received, receive_ns, token)

    def expect(self, h: frame_pb2.FrameHeader) -> None:
        """A kept frame was queued for the detector."""
        self.answers.expect(h)

    def abandon(self, h: frame_pb2.FrameHeader) -> None:
        """A kept frame will not be detected (shed, rejected, undecodable)."""
        self.answers.abandon(h)

    def decorate(self, ack: frame_pb2.FrameAck, h: frame_pb2.FrameHeader) -> None:
        """Add what the agent should hear to this camera's ack: a keyframe request,
        calibration feedback, send_next. (The model's input size is in the node's EdgeInfo,
        on the first ack of a stream and on answers to resends; an EdgeInfo made here
        would lack the node's session, and agents took that for a restart.)"""
        key = (h.session_id, h.camera_id)
        with self._lock:
            key_wanted = key in self._keyframe
            self._keyframe.discard(key)
            send_next = key in self._send_next
            self._send_next.discard(key)
        if key_wanted:
            ack.keyframe_request = True
            self.metrics.keyframe_requests.inc()
        fb = self.calibration.take_feedback(*key)
        if fb is not None:
            ack.feedback.CopyFrom(fb)
        if send_next:
            ack.feedback.send_next = True
        tracker = self.answers.tracker(*key)
        tracks = len(tracker) if tracker is not None else 0
        moving = tracker.moving() if tracker is not None else 0
        with self._lock:
            # The device's floor spaces frames only while tracked objects move: it hears
            # when that starts and stops, not only with calibration feedback.
            changed = self._tracking.get(key, False) != (moving > 0)
            if changed and tracker is not None:
                self._tracking[key] = moving > 0
        if tracker is not None and (fb is not None or send_next or changed):
            ack.feedback.SetInParent()
            ack.feedback.tracked_objects = tracks
            ack.feedback.moving_objects = moving

    # -- worker thread ---------------------------------------------------------------------

    def ask_next(self, session_id: int, camera_id: str, why: Iterable[str]) -> None:
        """Ask the camera's device for its next frames on its next ack (`why`: counted)."""
        for reason in why:
            self.metrics.send_next.labels(reason).inc()
        with self._lock:
            self._send_next.add((session_id, camera_id))

    def ask_refused(self, camera_id: str) -> None:
        """The rules wanted a camera's next frames over their budget: counted, logged."""
        self.metrics.send_next_refused.inc()
        self._refused_log.warn(
            camera_id,
            "camera %s: rules wanted its next frames over rules.ask_budget; not asked",
            camera_id,
        )

    def lost_h264(self, h: frame_pb2.FrameHeader, reason: str) -> None:
        """An H.264 frame did not decode: count it, and ask for a keyframe on the next ack."""
        self.metrics.h264_lost.labels(reason).inc()
        with self._lock:
            self._keyframe.add((h.session_id, h.camera_id))

    def detected(
        self, h: frame_pb2.FrameHeader, boxes: FrameBoxes, image: np.ndarray | None = None
    ) -> tuple[TrackedBoxes, list[Answer]]:
        """A kept frame's boxes (payload pixels): them in source pixels with track ids, and
        the skipped frames this completes. `image`: the decoded payload (appearance's crops)."""
        src = to_source(h, boxes)
        if h.scene_change:
            self.metrics.scene_changes.inc()
        tracker = self.answers.tracker(h.session_id, h.camera_id)
        started = tracker.started if tracker is not None else 0
        tracked, done = self.answers.detected(h, src, image)
        tracker = self.answers.tracker(h.session_id, h.camera_id)
        if tracker is not None:
            self.metrics.tracks.inc(tracker.started - started)
            limit = self.cfg.tracking.send_next_uncertainty
            if limit > 0 and tracker.uncertainty(h.frame_index + 1) > limit:
                with self._lock:
                    self._send_next.add((h.session_id, h.camera_id))
        if self.calibration.detected(h, src) is not None:
            self.metrics.calibrations.inc()
        self._count(done)
        return tracked, done

    def codec_probed(self, h: frame_pb2.FrameHeader, raw: FrameBoxes, jpeg: FrameBoxes) -> None:
        """A codec probe's boxes as sent (raw pixels) and after a JPEG round trip
        (strata.edge.inference.codec_probe): pooled into the camera's codec loss."""
        loss = self.calibration.codec_probed(h.camera_id, raw, jpeg)
        m = self.metrics
        m.codec_probes.labels(h.camera_id).inc()
        m.codec_boxes.labels(h.camera_id).set(loss.boxes)
        m.codec_loss.labels(h.camera_id, "f1").set(loss.f1)
        m.codec_loss.labels(h.camera_id, "counting").set(loss.counting)

    def codec_deferred(self, h: frame_pb2.FrameHeader) -> None:
        """A codec probe left undetected a second time (the node was loaded): counted."""
        self.metrics.codec_deferred.labels(h.camera_id).inc()

    def appearance_of(
        self, session: int, camera_id: str, track_id: int
    ) -> events_pb2.Appearance | None:
        """A track's embedding as its events carry it (None: appearance off there, or the
        track has none yet)."""
        tracker = self.answers.tracker(session, camera_id)
        if self.appearance is None or tracker is None:
            return None
        look = tracker.appearance(track_id)
        return None if look is None else self.appearance.message(*look)

    def _looks(self) -> tuple[int, int, int]:
        """(crops skipped over the budget, lost tracks re-linked, tracks with an embedding)
        over every camera's tracker."""
        skipped = relinked = tracks = 0
        for t in self.answers.trackers():
            if t.looks is not None:
                skipped += t.looks.skipped
                relinked += t.looks.relinked
                tracks += len(t.looks.tracks)
        return skipped, relinked, tracks

    def _estimated(self, e: Estimate) -> None:
        if e.f1 is not None:
            self.metrics.estimated_accuracy.labels(e.camera_id).set(e.f1)

    def _scored(self, camera_id: str, t: Tally) -> None:
        m = self.metrics
        if t.f1_weight:
            m.estimate_weight.labels(camera_id, "f1").inc(t.f1_weight)
            m.estimate_agreeing.labels(camera_id, "f1").inc(t.f1_sum)
        m.estimate_weight.labels(camera_id, "counting").inc(t.counting_weight)
        m.estimate_agreeing.labels(camera_id, "counting").inc(t.counting_sum)

    def ready(self) -> list[Answer]:
        """Skipped frames that can be answered now (or have waited long enough)."""
        done = self.answers.ready()
        self._count(done)
        return done

    def _count(self, done: list[Answer]) -> None:
        for a in done:
            self.metrics.answers.labels(a.how).inc()
        self.metrics.held.set(self.answers.held())

    def forget_idle(self, idle_s: float) -> None:
        """Drop the state of cameras silent for `idle_s`."""
        self.answers.forget_idle(idle_s)
        with self._lock:
            keys = list(self._tracking)
        gone = [k for k in keys if self.answers.tracker(*k) is None]
        with self._lock:
            for key in gone:
                self._tracking.pop(key, None)
        self.h264.forget_idle()

    def close(self) -> None:
        """Stop the calibration thread."""
        self.calibration.close()


def to_source(h: frame_pb2.FrameHeader, boxes: FrameBoxes) -> FrameBoxes:
    """Boxes in payload pixels to the source frame's pixels (the header's source size)."""
    sw, sh = h.source_width or h.width, h.source_height or h.height
    if (sw, sh) == (h.width, h.height) or not h.width or not h.height:
        return boxes
    scale = np.array([sw / h.width, sh / h.height] * 2, np.float32)
    return FrameBoxes(boxes.boxes * scale, boxes.scores, boxes.class_ids)
