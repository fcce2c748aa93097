"""Per-camera Prometheus metrics of the device agent, and rate-limited drop logging."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, fields
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from strata.shared.metrics import BATCH_BUCKETS, LATENCY_BUCKETS, sample


class DeviceMetrics:
    """Every metric of one agent, in its own registry; `camera(id)` gives the labelled set."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r, cam = self.registry, ["camera"]

        def counter(name: str, doc: str) -> Counter:
            return Counter(f"strata_device_{name}", doc, cam, registry=r)

        self.decoded = counter("frames_decoded", "Frames decoded from the source.")
        self.dropped_motion = counter("frames_dropped_motion", "Frames the motion gate dropped.")
        self.dropped_gate = counter("frames_dropped_gate", "Frames the relevance gate dropped.")
        self.scene_changes = counter(
            "scene_changes", "Frames the motion gate kept as a scene change (a cut, a pan)."
        )
        self.dropped_overload = counter(
            "frames_dropped_overload", "Live frames dropped because the gate queue was full."
        )
        self.sent = counter("frames_sent", "Frames sent to the edge (first sends).")
        self.skipped_sent = counter(
            "skipped_sent",
            "Header-only messages of dropped frames sent to the edge (first sends).",
        )
        self.retransmitted = counter("frames_retransmitted", "Frames sent again after no ack.")
        self.acked = counter(
            "frames_acked", "Frames the edge finally acked as processed (incl. duplicates)."
        )
        self.processed = counter("frames_processed", "Frames acked PROCESSED (result published).")
        self.duplicate = counter(
            "frames_duplicate", "Frames acked DUPLICATE (processed before, ack lost)."
        )
        self.busy = counter("frames_busy", "BUSY answers (over credit; the frame is resent).")
        self.dropped_reason = Counter(
            "strata_device_frames_dropped",
            "Frames the agent gave up on after keeping them, by reason (spool_full, rejected, "
            "shed_*, degraded_motion, degraded_rate, degraded_policy, encode_error, removed).",
            ["camera", "reason"],
            registry=r,
        )
        self.rejected = counter("frames_rejected", "Frames the edge rejected as malformed.")
        self.spooled = counter(
            "frames_spooled", "Frames queued behind a full window (edge slow, away or not acking)."
        )
        self.overflowed = counter("frames_overflowed", "Frames dropped from a full spool.")
        self.bytes_sent = counter("bytes_sent", "Payload bytes sent (first sends).")
        self.reconnects = counter("reconnects", "Sources reopened after a loss.")
        self.edge_unreachable = counter(
            "edge_unreachable",
            "Times the camera's edge answered nothing for routing.edge_timeout_s after being "
            "sent something (killed, crashed, cut off).",
        )
        self.edge_reconnects = counter(
            "edge_reconnects", "Times the camera's edge answered again after it was unreachable."
        )
        # Routing over several edges (label: the edge endpoint).
        self.edge_up = Gauge(
            "strata_device_edge_up",
            "1 while the edge answers (acks or heartbeats) within routing.edge_timeout_s.",
            ["edge"],
            registry=r,
        )
        self.edge_cameras = Gauge(
            "strata_device_edge_cameras",
            "This agent's cameras sending to the edge.",
            ["edge"],
            registry=r,
        )
        self.edge_down = Counter(
            "strata_device_edge_down",
            "Times the edge went silent and left this agent's ring.",
            ["edge"],
            registry=r,
        )
        self.moves = Counter(
            "strata_device_camera_moves",
            "Cameras moved to another edge (failover: their edge went; rebalance: membership).",
            ["reason"],
            registry=r,
        )
        self.source_errors = counter("source_errors", "Failures to open or read a source.")
        self.source_skipped = Counter(
            "strata_device_source_skipped",
            "Source frames not delivered because of source.max_fps: decoded and passed over "
            "(max_fps), or never decoded (not_decoded: skip_frame); or delivered without "
            "pixels, held back by the cascade (held: skip_held).",
            ["camera", "reason"],
            registry=r,
        )
        self.source_lag = Gauge(
            "strata_device_source_lag_seconds",
            "How far behind its schedule a file played at its frame rate (source.realtime) "
            "delivers frames: decoding or the gates not keeping up.",
            cam,
            registry=r,
        )
        self.decoder = Gauge(
            "strata_device_decoder",
            "1 for the decoder the camera uses (software, or the hwaccel device type).",
            ["camera", "kind"],
            registry=r,
        )
        self.spool_frames = Gauge(
            "strata_device_spool_frames", "Frames waiting in the spool.", cam, registry=r
        )
        self.inflight_frames = Gauge(
            "strata_device_inflight_frames", "Frames sent and not yet acked.", cam, registry=r
        )
        self.credits = Gauge(
            "strata_device_credits", "In-flight window the edge grants the camera.", cam, registry=r
        )
        self.degrade_level = Gauge(
            "strata_device_degrade_level",
            "Degradation the edge asks of the camera (0 none .. 3 drop policy).",
            cam,
            registry=r,
        )
        self.camera_up = Gauge(
            "strata_device_camera_up", "1 while the source delivers frames.", cam, registry=r
        )
        # What a camera is doing and why, for a dashboard or `strata demo`'s progress line:
        # 1 for its current state (and the kind of its last source error), 0 for the others.
        self.camera_state = Gauge(
            "strata_device_camera_state",
            "1 for the camera's current state (starting, running, reconnecting, ended, "
            "stopped, failed).",
            ["camera", "state"],
            registry=r,
        )
        self.camera_error = Gauge(
            "strata_device_camera_last_error",
            "1 for the kind of the camera's last source error (see device/sources.error_kind).",
            ["camera", "kind"],
            registry=r,
        )
        self.retry_attempt = Gauge(
            "strata_device_camera_retry_attempt",
            "Reopen attempt the camera is waiting for; 0 while it is not reconnecting.",
            cam,
            registry=r,
        )
        self.retry_at = Gauge(
            "strata_device_camera_retry_at_seconds",
            "Unix time of the camera's next reopen attempt; 0 while it is not reconnecting.",
            cam,
            registry=r,
        )
        self.gate_latency = Histogram(
            "strata_device_gate_latency_seconds",
            "Queue wait plus inference of the relevance gate, per frame.",
            cam,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.gate_batch = Histogram(
            "strata_device_gate_batch_size",
            "Frames per relevance-gate inference.",
            buckets=BATCH_BUCKETS,
            registry=r,
        )

        # Clips (device/capture/packet_ring.py, device/clips/cutter.py).
        self.ring_bytes = Gauge(
            "strata_device_clip_ring_bytes",
            "Compressed packet bytes the camera's clip ring holds.",
            cam,
            registry=r,
        )
        self.ring_seconds = Gauge(
            "strata_device_clip_ring_seconds",
            "Seconds of stream the camera's clip ring holds, from its first keyframe.",
            cam,
            registry=r,
        )
        self.ring_dropped = Counter(
            "strata_device_clip_ring_dropped_packets",
            "Packets the clip ring let go before their time: cap (ring_mib reached, oldest "
            "GOP freed), no_keyframe (a GOP larger than the ring), no_timestamp.",
            ["camera", "reason"],
            registry=r,
        )
        self.clips = Counter(
            "strata_device_clips",
            "Clips finished, by outcome: complete, disconnected (the source went mid-clip), "
            "no_keyframe, codec (cannot be stream-copied into MP4), error.",
            ["camera", "outcome"],
            registry=r,
        )
        self.clip_bytes = counter("clip_bytes", "Bytes of clips written.")
        self.clip_cut_back = counter(
            "clip_bytes_cut_back",
            "Bytes cut off clips that ran past their track's end plus the post-roll (the "
            "end heard the tracker's lost wait late; issue 39).",
        )
        # Clips to the cloud and the clips folder (device/clips/uploader.py, clip_spool.py).
        self.clip_upload_bytes = Counter(
            "strata_device_clip_upload_bytes",
            "Clip bytes the cloud acked as stored (each byte once).",
            registry=r,
        )
        self.clips_uploaded = Counter(
            "strata_device_clips_uploaded",
            "Clips the cloud holds whole (its ack said complete; the file was deleted).",
            registry=r,
        )
        self.clips_spool_dropped = Counter(
            "strata_device_clips_spool_dropped",
            "Clip files deleted before upload to keep the clips folder under "
            "clips.upload.spool_max_mib (the oldest first).",
            registry=r,
        )
        self.clip_upload_failures = Counter(
            "strata_device_clip_upload_failures",
            "Failed clip uploads, by reason: unavailable (no cloud), timeout, refused "
            "(INVALID: not resent), retry (the cloud asked to wait), error, io.",
            ["reason"],
            registry=r,
        )
        self.clip_spool_bytes = Gauge(
            "strata_device_clip_spool_bytes",
            "Bytes of clip files on the device (open clips included).",
            registry=r,
        )

    def camera(self, camera_id: str) -> CameraMetrics:
        """The metric children of one camera (cached by the caller: lookups cost)."""
        return CameraMetrics(self, camera_id)


class ClipMetrics:
    """One camera's clip metrics, resolved once (the ring updates them per packet)."""

    def __init__(self, m: DeviceMetrics, camera_id: str) -> None:
        c = camera_id
        self.ring_bytes = m.ring_bytes.labels(c)
        self.ring_seconds = m.ring_seconds.labels(c)
        self.clip_bytes = m.clip_bytes.labels(c)
        self.clip_cut_back = m.clip_cut_back.labels(c)
        self._m, self._camera = m, c

    def dropped(self, reason: str, packets: int) -> None:
        """`packets` packets left the ring early for `reason`."""
        self._m.ring_dropped.labels(self._camera, reason).inc(packets)

    def clip(self, outcome: str) -> None:
        """A clip finished with `outcome`."""
        self._m.clips.labels(self._camera, outcome).inc()


class CameraMetrics:
    """Labelled children for one camera, resolved once."""

    def __init__(self, m: DeviceMetrics, camera_id: str) -> None:
        c = camera_id
        self.decoded = m.decoded.labels(c)
        self.dropped_motion = m.dropped_motion.labels(c)
        self.scene_changes = m.scene_changes.labels(c)
        self.dropped_gate = m.dropped_gate.labels(c)
        self.dropped_overload = m.dropped_overload.labels(c)
        self.sent = m.sent.labels(c)
        self.skipped_sent = m.skipped_sent.labels(c)
        self.retransmitted = m.retransmitted.labels(c)
        self.acked = m.acked.labels(c)
        self.processed = m.processed.labels(c)
        self.duplicate = m.duplicate.labels(c)
        self.busy = m.busy.labels(c)
        self.credits = m.credits.labels(c)
        self.degrade_level = m.degrade_level.labels(c)
        self._dropped = m.dropped_reason
        self._camera = c
        self._dropped_children: dict[str, Any] = {}
        self.rejected = m.rejected.labels(c)
        self.spooled = m.spooled.labels(c)
        self.overflowed = m.overflowed.labels(c)
        self.bytes_sent = m.bytes_sent.labels(c)
        self.reconnects = m.reconnects.labels(c)
        self.edge_unreachable = m.edge_unreachable.labels(c)
        self.edge_reconnects = m.edge_reconnects.labels(c)
        self.source_errors = m.source_errors.labels(c)
        self.skipped_rate = m.source_skipped.labels(c, "max_fps")
        self.skipped_undecoded = m.source_skipped.labels(c, "not_decoded")
        self.skipped_held = m.source_skipped.labels(c, "held")
        self.source_lag = m.source_lag.labels(c)
        # The most lag reported since start (the gauge holds the latest): read without a
        # registry scan by `strata bench cameras`, whose criterion is the worst frame.
        self.worst_lag_s = 0.0
        # The lag gauge holds more than 0 (a frame on time after it must set it back).
        self._lagged = False
        self._decoder = ""
        self.spool_frames = m.spool_frames.labels(c)
        self.inflight_frames = m.inflight_frames.labels(c)
        self.camera_up = m.camera_up.labels(c)
        self.gate_latency = m.gate_latency.labels(c)
        self.retry_attempt = m.retry_attempt.labels(c)
        self.retry_at = m.retry_at.labels(c)
        self._m, self._camera = m, c
        self._state = ""
        self._error = ""

    def set_state(self, state: str) -> None:
        """Mark `state` as the camera's current one (a change of labels, not a new series
        per transition)."""
        if state != self._state:
            if self._state:
                self._m.camera_state.labels(self._camera, self._state).set(0)
            self._m.camera_state.labels(self._camera, state).set(1)
            self._state = state

    def lag(self, seconds: float) -> None:
        """A frame delivered `seconds` behind its schedule (source.realtime)."""
        if seconds or self._lagged:  # a camera on time sets its gauge once, not per frame
            self.source_lag.set(seconds)
            self._lagged = seconds > 0
        self.worst_lag_s = max(self.worst_lag_s, seconds)

    def set_decoder(self, kind: str) -> None:
        """Mark the decoder the camera uses now (software or a hwaccel device type)."""
        if kind != self._decoder:
            if self._decoder:
                self._m.decoder.labels(self._camera, self._decoder).set(0)
            self._m.decoder.labels(self._camera, kind).set(1)
            self._decoder = kind

    def set_error(self, kind: str) -> None:
        """Mark the kind of the camera's last source error ("" clears it)."""
        if kind != self._error:
            if self._error:
                self._m.camera_error.labels(self._camera, self._error).set(0)
            if kind:
                self._m.camera_error.labels(self._camera, kind).set(1)
            self._error = kind

    def dropped(self, reason: str) -> Any:
        """The give-up counter of one reason (children cached)."""
        child = self._dropped_children.get(reason)
        if child is None:
            child = self._dropped_children[reason] = self._dropped.labels(self._camera, reason)
        return child


class DropLog:
    """Logs drops without flooding: the first at once, then a summary at most every period."""

    def __init__(
        self,
        log: logging.Logger,
        camera_id: str,
        what: str,
        level: int = logging.INFO,
        period_s: float = 10.0,
    ) -> None:
        self.log, self.camera_id, self.what = log, camera_id, what
        self.level, self.period_s = level, period_s
        self.total = 0
        self._pending = 0
        self._last = 0.0
        self._lock = threading.Lock()

    def add(self, n: int = 1, detail: str = "") -> None:
        """Count `n` drops; log now if the period has passed (or it is the first)."""
        now = time.monotonic()
        with self._lock:
            self.total += n
            self._pending += n
            if self._last and now - self._last < self.period_s:
                return
            pending, self._pending, self._last = self._pending, 0, now
        self.log.log(
            self.level,
            "camera %s: %s: %d frame(s)%s (%d in all)",
            self.camera_id,
            self.what,
            pending,
            f" ({detail})" if detail else "",
            self.total,
        )

    def flush(self) -> None:
        """Log what is still unreported (at shutdown)."""
        with self._lock:
            pending, self._pending = self._pending, 0
        if pending:
            self.log.log(
                self.level,
                "camera %s: %s: %d frame(s) (%d in all)",
                self.camera_id,
                self.what,
                pending,
                self.total,
            )


@dataclass(frozen=True, slots=True)
class CameraCounts:
    """The counters of one camera, read back (for the CLI summary, the bench and tests)."""

    decoded: int
    dropped_motion: int
    dropped_gate: int
    dropped_overload: int
    sent: int
    retransmitted: int
    acked: int
    processed: int
    duplicate: int
    busy: int
    rejected: int
    spooled: int
    overflowed: int
    bytes_sent: int
    reconnects: int
    source_errors: int
    edge_unreachable: int
    edge_reconnects: int

    @classmethod
    def read(cls, registry: CollectorRegistry, camera_id: str) -> CameraCounts:
        """Current values from `registry`."""
        labels = {"camera": camera_id}

        def get(name: str) -> int:
            return int(sample(registry, f"strata_device_{name}_total", labels))

        return cls(**{f.name: get(_METRIC_OF.get(f.name, f"frames_{f.name}")) for f in fields(cls)})


def frames_handled(registry: CollectorRegistry, camera_id: str) -> int:
    """A camera's frames decided on: decoded, and held back undecoded (source.skip_held)."""
    decoded = sample(registry, "strata_device_frames_decoded_total", {"camera": camera_id})
    labels = {"camera": camera_id, "reason": "held"}
    return int(decoded + sample(registry, "strata_device_source_skipped_total", labels))


def dropped_by_reason(registry: CollectorRegistry, camera_id: str) -> dict[str, int]:
    """Frames the agent gave up on, by reason, for one camera."""
    out: dict[str, int] = {}
    for metric in registry.collect():
        if metric.name != "strata_device_frames_dropped":
            continue
        for s in metric.samples:
            if s.name.endswith("_total") and s.labels.get("camera") == camera_id:
                out[s.labels["reason"]] = out.get(s.labels["reason"], 0) + int(s.value)
    return out


_METRIC_OF = {
    "bytes_sent": "bytes_sent",
    "reconnects": "reconnects",
    "source_errors": "source_errors",
    "edge_unreachable": "edge_unreachable",
    "edge_reconnects": "edge_reconnects",
}
