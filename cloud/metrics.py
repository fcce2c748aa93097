"""The cloud endpoint's Prometheus metrics, named after Triton's where they fit."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from strata.shared.metrics import BATCH_BUCKETS, LATENCY_BUCKETS

from .outbox.metrics import SinkMetrics


class CloudMetrics:
    """One registry per server instance (tests run several side by side)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # Triton: nv_inference_request_success / nv_inference_request_failure{reason}.
        self.request_success = Counter(
            "strata_cloud_request_success",
            "Requests (Classify calls and uplinked crops) answered successfully.",
            ["method"],
            registry=r,
        )
        self.request_failure = Counter(
            "strata_cloud_request_failure",
            "Requests that failed, by reason.",
            ["method", "reason"],
            registry=r,
        )
        # Triton: nv_inference_queue_duration_us, nv_inference_compute_infer_duration_us.
        self.queue_duration = Histogram(
            "strata_cloud_queue_duration_seconds",
            "Time a request waited in the batcher queue.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.compute_input_duration = Histogram(
            "strata_cloud_compute_input_duration_seconds",
            "Time to fill the batch buffer (normalize, layout) per batch.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.compute_duration = Histogram(
            "strata_cloud_compute_infer_duration_seconds",
            "Model execution time per batch.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "strata_cloud_batch_size",
            "Requests per executed batch.",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        # Triton: nv_inference_count (items) and nv_inference_exec_count (batches).
        self.inference_count = Counter(
            "strata_cloud_inference_count", "Images run through the model.", registry=r
        )
        self.exec_count = Counter(
            "strata_cloud_inference_exec_count", "Batches run through the model.", registry=r
        )
        self.expired_skipped = Counter(
            "strata_cloud_expired_skipped",
            "Queued requests not computed because their deadline passed or they were cancelled.",
            registry=r,
        )
        self.queue_depth = Gauge(
            "strata_cloud_queue_depth", "Requests waiting in the batcher queue.", registry=r
        )
        self.store_latency = Histogram(
            "strata_cloud_store_latency_seconds",
            "Time from handing an event to the writer until its transaction committed.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.store_commit_duration = Histogram(
            "strata_cloud_store_commit_duration_seconds",
            "Duration of one write transaction (insert and commit).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.store_batch_size = Histogram(
            "strata_cloud_store_batch_size",
            "Events per write transaction.",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.events_stored = Counter(
            "strata_cloud_events_stored", "Events newly stored.", registry=r
        )
        self.crops_duplicate = Counter(
            "strata_cloud_crops_duplicate",
            "Crops received again (already stored; acked with the stored event).",
            registry=r,
        )
        # Track lifecycle and rule events (events.proto), by type (`line_crossed`, ...):
        # received = stored + duplicate + invalid + answered RETRY.
        self.track_events_received = Counter(
            "strata_cloud_track_events_received",
            "Track events received on Uplink streams, by type.",
            ["type"],
            registry=r,
        )
        self.track_events_stored = Counter(
            "strata_cloud_track_events_stored",
            "Track events newly stored (acked STORED), by type.",
            ["type"],
            registry=r,
        )
        self.track_events_duplicate = Counter(
            "strata_cloud_track_events_duplicate",
            "Track events whose idempotency key was stored before (acked DUPLICATE), by type.",
            ["type"],
            registry=r,
        )
        self.track_events_invalid = Counter(
            "strata_cloud_track_events_invalid",
            "Track events refused as bad input (acked INVALID), by type and reason.",
            ["type", "reason"],
            registry=r,
        )
        self.track_events_retry = Counter(
            "strata_cloud_track_events_retry",
            "Track events not stored now (acked RETRY: store busy or down), by type.",
            ["type"],
            registry=r,
        )
        # Track snapshots (events.proto Snapshot), by kind (`best_crop`, `full_frame`):
        # received = stored + duplicate + invalid + answered RETRY.
        self.snapshots_received = Counter(
            "strata_cloud_snapshots_received",
            "Snapshots received on Uplink streams, by kind.",
            ["kind"],
            registry=r,
        )
        self.snapshots_stored = Counter(
            "strata_cloud_snapshots_stored",
            "Snapshots newly stored (acked STORED), by kind.",
            ["kind"],
            registry=r,
        )
        self.snapshots_duplicate = Counter(
            "strata_cloud_snapshots_duplicate",
            "Snapshots whose id or a higher revision was stored before (DUPLICATE), by kind.",
            ["kind"],
            registry=r,
        )
        self.snapshots_invalid = Counter(
            "strata_cloud_snapshots_invalid",
            "Snapshots refused (acked INVALID: too large, not a JPEG that decodes, ...), by "
            "kind and reason; never stored.",
            ["kind", "reason"],
            registry=r,
        )
        self.snapshots_retry = Counter(
            "strata_cloud_snapshots_retry",
            "Snapshots not stored now (acked RETRY: store busy or down), by kind.",
            ["kind"],
            registry=r,
        )
        self.snapshot_bytes = Counter(
            "strata_cloud_snapshot_bytes",
            "JPEG bytes of snapshots newly stored, by camera.",
            ["camera"],
            registry=r,
        )
        # Event clips (UploadClip): chunks = stored + resent + refused (INVALID or RETRY).
        self.clip_chunks_received = Counter(
            "strata_cloud_clip_chunks_received",
            "Clip chunks received on UploadClip streams.",
            registry=r,
        )
        self.clip_chunks_resent = Counter(
            "strata_cloud_clip_chunks_resent",
            "Clip chunks wholly below the committed size (a resend; acked, nothing changed).",
            registry=r,
        )
        self.clip_chunks_refused = Counter(
            "strata_cloud_clip_chunks_refused",
            "Clip chunks not stored, by ack status (invalid, retry) and reason.",
            ["status", "reason"],
            registry=r,
        )
        self.clips_started = Counter(
            "strata_cloud_clips_started",
            "Clips whose first chunk was stored, by camera.",
            ["camera"],
            registry=r,
        )
        self.clips_stored = Counter(
            "strata_cloud_clips_stored",
            "Clips stored whole (final chunk committed), by outcome (complete, cut_short...).",
            ["outcome"],
            registry=r,
        )
        self.camera_clip_bytes = Counter(
            "strata_cloud_camera_clip_bytes",
            "Clip bytes newly committed to the store, by camera (strata cost).",
            ["camera"],
            registry=r,
        )
        self.clip_bytes_cut_back = Counter(
            "strata_cloud_clip_bytes_cut_back",
            "Committed clip bytes a device's cut-back last chunk dropped (its clip ran past "
            "its track's end plus the post-roll; issue 39), by camera.",
            ["camera"],
            registry=r,
        )
        # Retention (cloud.snapshots.retention): what the background pruner deleted.
        self.retention_pruned = Counter(
            "strata_cloud_retention_pruned",
            "What retention deleted, by what: tracks, track_events, snapshots, clips (rows), "
            "clip_bytes.",
            ["what"],
            registry=r,
        )
        self.retention_failures = Counter(
            "strata_cloud_retention_failures",
            "Prune passes that failed (the store could not be written); retried next pass.",
            registry=r,
        )
        # Identities and search by example (cloud.identity, issue 42).
        self.identity_tracks_linked = Counter(
            "strata_cloud_identity_tracks_linked",
            "Tracks the linker gave a cross-camera identity (or moved to another).",
            registry=r,
        )
        self.identity_passes = Counter(
            "strata_cloud_identity_passes",
            "Linker passes, by outcome: ok, failed (retried next pass).",
            ["outcome"],
            registry=r,
        )
        self.search_duration = Histogram(
            "strata_cloud_search_duration_seconds",
            "SearchSimilar: time to refresh the index and rank the tracks.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.search_index_tracks = Gauge(
            "strata_cloud_search_index_tracks", "Tracks in the search index.", registry=r
        )
        # Cost accounting per camera (strata cost).
        self.camera_gpu_seconds = Counter(
            "strata_cloud_camera_gpu_seconds",
            "Classifier batch seconds (fill and run) apportioned to the crops in it.",
            ["camera"],
            registry=r,
        )
        self.camera_events = Counter(
            "strata_cloud_camera_events", "Events newly stored, by camera.", ["camera"], registry=r
        )
        self.camera_stored_bytes = Counter(
            "strata_cloud_camera_stored_bytes",
            "Bytes of events newly stored (serialized event), by camera.",
            ["camera"],
            registry=r,
        )
        self.camera_crop_bytes = Counter(
            "strata_cloud_camera_crop_bytes",
            "Crop image bytes received from edges, by camera.",
            ["camera"],
            registry=r,
        )
        self.watchers = Gauge("strata_cloud_watchers", "Open WatchEvents streams.", registry=r)
        self.watchers_dropped = Counter(
            "strata_cloud_watchers_dropped",
            "WatchEvents streams closed because they fell behind or the event feed broke.",
            registry=r,
        )
        self.event_feed_lost = Counter(
            "strata_cloud_event_feed_lost",
            "Breaks of the PostgreSQL event feed (LISTEN connection lost, or a fetch failed).",
            registry=r,
        )

        # Event delivery to MQTT and webhooks (cloud/outbox).
        self.sinks = SinkMetrics(r)

    def fail(self, method: str, reason: str) -> None:
        """Count one failed request."""
        self.request_failure.labels(method=method, reason=reason).inc()

    def ok(self, method: str, n: int = 1) -> None:
        """Count successful requests."""
        self.request_success.labels(method=method).inc(n)
