"""The edge node's Prometheus metrics, in one registry per node instance."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from strata.edge.overload.gpu_pressure import GpuPressureMetrics
from strata.edge.rules.engine import RuleCount
from strata.shared.metrics import BATCH_BUCKETS, LATENCY_BUCKETS
from strata.shared.runtime.pool import PoolCollector

# Breaker state gauge values.
BREAKER_CLOSED, BREAKER_HALF_OPEN, BREAKER_OPEN = 0, 1, 2


class EdgeMetrics:
    """Counters, gauges and histograms of one edge node."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.frames = Counter(
            "strata_edge_frames",
            "Frame messages by what the node answered (accepted, busy, requeued, duplicate, "
            "rejected, shed).",
            ["status"],
            registry=r,
        )
        self.rejected = Counter(
            "strata_edge_rejected", "Rejected frame messages by reason.", ["reason"], registry=r
        )
        self.drops = Counter(
            "strata_edge_drops", "Frames or crops dropped, by reason.", ["reason"], registry=r
        )
        self.label_drops = Counter(
            "strata_edge_label_drops",
            "Detections dropped after detection by the objects section, per label and reason "
            "(untracked: not in objects.track; score: under its filter's min_score; area: "
            "box area outside [min_area, max_area]).",
            ["label", "reason"],
            registry=r,
        )
        self.peers_refused = Counter(
            "strata_edge_peers_refused",
            "Connections refused (auth: an agent's CURVE key not allowed on the frame socket; "
            "subscriber: a key not allowed on the results socket; handshake: not ZMTP or the "
            "wrong mechanism).",
            ["reason"],
            registry=r,
        )
        self.peer_events = Counter(
            "strata_edge_peer_events",
            "Frame socket connections made and lost (a part over max_payload_mib drops one).",
            ["event"],
            registry=r,
        )
        self.cameras_forgotten = Counter(
            "strata_edge_cameras_forgotten",
            "Cameras forgotten after ingest.camera_idle_s of silence (slot freed).",
            registry=r,
        )
        self.queue_depth = Gauge(
            "strata_edge_queue_depth", "Frames waiting for a batch, all cameras.", registry=r
        )
        self.cameras = Gauge("strata_edge_cameras", "Cameras with a queue.", registry=r)
        self.batch_size = Histogram(
            "strata_edge_batch_size", "Frames per batch.", buckets=BATCH_BUCKETS, registry=r
        )
        self.batch_limit = Gauge(
            "strata_edge_batch_limit", "Current batch size limit (after degradation).", registry=r
        )
        self.queue_delay = Histogram(
            "strata_edge_queue_delay_seconds",
            "Receive to inference start.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inference = Histogram(
            "strata_edge_inference_seconds",
            "Batch copy-in, inference and copy-out.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.node_latency = Histogram(
            "strata_edge_node_latency_seconds",
            "Receive to publish, per frame.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "strata_edge_e2e_seconds",
            "Capture to publish, per frame (device and node clocks).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.processed = Counter(
            "strata_edge_frames_processed", "Frames detected and published.", registry=r
        )
        self.redelivered = Counter(
            "strata_edge_frames_redelivered",
            "Frames published flagged redelivery (resent, no record: maybe published before).",
            registry=r,
        )
        self.capacity = Gauge(
            "strata_edge_capacity_fps",
            "Frames per second of busy time the node measured it finishes (sizes credits).",
            registry=r,
        )
        self.pressure = Gauge(
            "strata_edge_pressure", "Smoothed queue delay over the delay target.", registry=r
        )
        self.fps = Gauge(
            "strata_edge_fps", "Frames published per second (last window).", registry=r
        )
        self.credits = Gauge(
            "strata_edge_credits",
            "Frames the node lets all cameras have in it at once (credits granted).",
            registry=r,
        )
        self.held = Gauge(
            "strata_edge_frames_held",
            "Frames taken and not yet settled (queued, decoding or in a batch).",
            registry=r,
        )
        self.worker_idle = Counter(
            "strata_edge_worker_idle_seconds",
            "Seconds the worker waited with no batch to run (its rate is 1 - utilization).",
            registry=r,
        )
        self.detections = Counter("strata_edge_detections", "Boxes published.", registry=r)
        self.crops = Counter(
            "strata_edge_crops", "Crops by outcome at the cloud.", ["status"], registry=r
        )
        self.uplink_bytes = Counter(
            "strata_edge_uplink_bytes",
            "Crop image bytes sent to the cloud (resends included).",
            registry=r,
        )
        self.crop_queue = Gauge(
            "strata_edge_crop_queue_depth", "Crops waiting for the cloud.", registry=r
        )
        self.spool_crops = Gauge(
            "strata_edge_uplink_spool_crops",
            "Crops waiting in the uplink's disk spool.",
            registry=r,
        )
        self.spool_bytes = Gauge(
            "strata_edge_uplink_spool_bytes",
            "Bytes of crops, track snapshots and events in the uplink's disk spool.",
            registry=r,
        )
        # Track events on the uplink (edge/uplink/stream.py): offered = stored + duplicate +
        # invalid + dropped (by reason) + still waiting, in the end.
        self.uplink_events = Counter(
            "strata_edge_uplink_events",
            "Track events on the uplink by outcome: offered, sent, stored, duplicate, invalid, "
            "retry, timeout (resent), spooled (written to disk), adopted (from a failed peer).",
            ["status"],
            registry=r,
        )
        self.uplink_event_drops = Counter(
            "strata_edge_uplink_event_drops",
            "Track events the uplink dropped, by reason.",
            ["reason"],
            registry=r,
        )
        self.uplink_event_queue = Gauge(
            "strata_edge_uplink_event_queue_depth",
            "Track events waiting for the cloud in memory.",
            registry=r,
        )
        self.spool_events = Gauge(
            "strata_edge_uplink_spool_events",
            "Track events waiting in the uplink's disk spool.",
            registry=r,
        )
        # Track snapshots on the uplink (edge/publish/snapshots.py, edge/uplink/stream.py):
        # offered = stored + duplicate + invalid + dropped (by reason) + still waiting.
        self.uplink_snapshots = Counter(
            "strata_edge_uplink_snapshots",
            "Track snapshots on the uplink by outcome: offered, sent, stored, duplicate, "
            "invalid, retry, timeout (resent).",
            ["status"],
            registry=r,
        )
        self.uplink_snapshot_drops = Counter(
            "strata_edge_uplink_snapshot_drops",
            "Track snapshots the uplink dropped, by reason (dropped before track events).",
            ["reason"],
            registry=r,
        )
        self.snapshot_queue = Gauge(
            "strata_edge_uplink_snapshot_queue_depth",
            "Track snapshots waiting for the cloud in memory.",
            registry=r,
        )
        self.spool_snapshots = Gauge(
            "strata_edge_uplink_spool_snapshots",
            "Track snapshots waiting in the uplink's disk spool.",
            registry=r,
        )
        self.snapshots_chosen = Counter(
            "strata_edge_snapshots_chosen",
            "Snapshots the edge made (best crop and full frame JPEGs), by reason: first, "
            "better, final.",
            ["reason"],
            registry=r,
        )
        self.uplink_latency = Histogram(
            "strata_edge_uplink_latency_seconds",
            "Crop sent to ack received.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.breaker_state = Gauge(
            "strata_edge_breaker_state", "Cloud breaker: 0 closed, 1 half-open, 2 open.", registry=r
        )
        self.breaker_trips = Counter(
            "strata_edge_breaker_trips",
            "Times the cloud breaker opened from closed (trips).",
            registry=r,
        )
        self.gpu_memory = Gauge(
            "strata_edge_gpu_memory_bytes", "GPU memory in use on the device.", registry=r
        )
        # Cost accounting per camera (strata cost): each batch's time split over its frames.
        self.camera_gpu_seconds = Counter(
            "strata_edge_camera_gpu_seconds",
            "Inference seconds (batch copy-in, inference, copy-out) apportioned to frames.",
            ["camera"],
            registry=r,
        )
        self.camera_frames = Counter(
            "strata_edge_camera_frames", "Frames published, by camera.", ["camera"], registry=r
        )
        self.camera_bytes = Counter(
            "strata_edge_camera_bytes",
            "Bytes by camera: in (frame payloads received), uplink (crops offered to the cloud).",
            ["camera", "direction"],
            registry=r,
        )
        # Series per camera, removed when the node forgets a camera (forget_camera), so
        # made-up camera ids cannot grow the exposition without bound.
        self._per_camera: tuple[tuple[Counter, tuple[str, ...]], ...] = (
            (self.camera_gpu_seconds, ()),
            (self.camera_frames, ()),
            (self.camera_bytes, ("in",)),
            (self.camera_bytes, ("uplink",)),
        )
        self.memory_leaks = Counter(
            "strata_edge_memory_leaks",
            "Pool blocks the runner had not returned at stop.",
            registry=r,
        )
        self.unclean_stops = Counter(
            "strata_edge_unclean_stops",
            "Stops whose worker was still running after the join timeout (buffers kept).",
            registry=r,
        )
        # The clip demand (edge/publish/clip_demand.py).
        self.clip_demand_sent = Counter(
            "strata_edge_clip_demand_sent",
            "Acks that carried a camera's clip demand (changed, a new session, or resend_s).",
            registry=r,
        )
        self.clip_demand_cut = Counter(
            "strata_edge_clip_demand_cut",
            "Tracks left out of a camera's clip demand over edge.clips.max_tracks (no clip "
            "asked for them).",
            registry=r,
        )
        r.register(PoolCollector("strata_edge"))
        self.gpu_pressure = GpuPressureMetrics(r)

    def forget_camera(self, camera_id: str) -> None:
        """Drop a forgotten camera's series (a camera that comes back starts them at 0)."""
        for metric, rest in self._per_camera:
            metric.remove(camera_id, *rest)


class RulesCollector:
    """The rules stage's counts (strata.edge.rules.engine.RulesEngine.counts), read at
    scrape time: crossings per camera, line, direction and label; zone entries, dwell
    events and occupancy per camera, zone (or rule) and label; events per camera and type.
    They live in the rules checkpoint, so they go on after a restart or a takeover."""

    def __init__(self, counts: Callable[[], list[RuleCount]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        fams = {
            "crossings": CounterMetricFamily(
                "strata_edge_rule_crossings",
                "Line crossings counted, by camera, line, direction (in, out) and label.",
                labels=["camera", "line", "direction", "label"],
            ),
            "entries": CounterMetricFamily(
                "strata_edge_rule_zone_entries",
                "Zone entries, by camera, zone and label.",
                labels=["camera", "zone", "label"],
            ),
            "dwell": CounterMetricFamily(
                "strata_edge_rule_dwell",
                "Dwell limits exceeded, by camera, dwell rule and label.",
                labels=["camera", "rule", "label"],
            ),
            "occupancy": GaugeMetricFamily(
                "strata_edge_rule_zone_occupancy",
                "Confirmed tracks in a zone now, by camera, zone and label.",
                labels=["camera", "zone", "label"],
            ),
            "events": CounterMetricFamily(
                "strata_edge_track_events",
                "Track events the rules stage sent, by camera and type.",
                labels=["camera", "type"],
            ),
            "unseen": GaugeMetricFamily(
                "strata_edge_rules_camera_unseen",
                "1 for a camera the rules name that sent no frame in rules.unseen_camera_s "
                "of serving (a misspelt id, or another edge's camera).",
                labels=["camera"],
            ),
        }
        for c in self._counts():
            if c.kind == "unseen":
                labels = [c.camera]
            elif c.kind == "crossings":
                labels = [c.camera, c.rule, c.direction, c.label]
            elif c.kind == "events":
                labels = [c.camera, c.rule]
            else:
                labels = [c.camera, c.rule, c.label]
            fams[c.kind].add_metric(labels, c.value)
        yield from fams.values()
