"""Config of the cloud tier (`strata cloud`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from .base import StrictModel
from .common import MetricsConfig
from .sinks import SinksConfig

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class CloudTlsConfig(StrictModel):
    """Transport security; TLS is on when cert_file and key_file are both set."""

    cert_file: str = Field("", description="PEM server certificate chain; empty: no TLS.")
    key_file: str = Field("", description="PEM private key of cert_file.")
    client_ca_file: str = Field(
        "", description="PEM CA bundle; set: clients must present a certificate it signed (mTLS)."
    )


class CloudAuthConfig(StrictModel):
    """Bearer-token authentication (metadata `authorization: Bearer TOKEN`)."""

    token_file: str = Field(
        "", description="File holding the bearer token clients must send; empty: no token."
    )
    health_without_token: bool = Field(
        True, description="Let health checks through without a token (for load balancers)."
    )


class CloudModelConfig(StrictModel):
    """The classifier: MobileNetV2 ImageNet by default (Swin for sites that bring one)."""

    name: str = Field(
        "mobilenetv2_imagenet",
        description="Model name in the model repository; its verdicts.yaml says which of its "
        "labels confirm which detector labels.",
    )
    variant: str = Field("", description="Repository variant (e.g. int8); empty: primary file.")
    path: str = Field("", description="ONNX file to load instead of the repository model.")
    labels_file: str = Field(
        "", description="Text file, one label per line, for `path`; empty: class_N."
    )
    backend: str = Field("onnxruntime-cpu", description="Runtime back end (shared.runtime).")
    threads: int = Field(0, ge=0, description="Intra-op threads; 0: the runtime's default.")
    spin: bool = Field(
        False,
        description="Let idle ONNX Runtime CPU threads spin (lower latency, burns idle CPU).",
    )
    dynamic_block_base: int = Field(
        0,
        ge=0,
        le=64,
        description="ONNX Runtime CPU session.dynamic_block_base: shrinking work blocks; 0: off.",
    )
    input_size: int = Field(
        224, ge=8, le=4096, description="Input side when `path`'s spatial axes are dynamic."
    )
    mean: tuple[float, float, float] = Field(
        (0.485, 0.456, 0.406), description="RGB mean (0..1) for `path` (manifests say their own)."
    )
    std: tuple[float, float, float] = Field(
        (0.229, 0.224, 0.225), description="RGB standard deviation (0..1) for `path`."
    )
    top_k: int = Field(5, ge=1, le=100, description="Labels returned when a request says 0.")


class CloudBatcherConfig(StrictModel):
    """The one dynamic batcher behind every call (Triton's dynamic_batching)."""

    max_batch: int = Field(8, ge=1, le=1024, description="Largest batch sent to the model.")
    max_queue_delay_ms: float = Field(
        5.0, ge=0, description="Longest the oldest queued request waits for a batch to fill."
    )
    max_queue_size: int = Field(
        64, ge=1, description="Queued requests; beyond it a call gets RESOURCE_EXHAUSTED."
    )
    retry_after_ms: int = Field(
        200, ge=1, description="Retry hint sent with RESOURCE_EXHAUSTED and RETRY acks."
    )
    instances: int = Field(
        1, ge=1, le=16, description="Model instances (worker threads) draining the queue."
    )
    adaptive_close: bool = Field(
        True,
        description="No queue delay for a lone caller (no two requests in flight lately).",
    )


class CloudLimitsConfig(StrictModel):
    """What a request may carry; beyond it is INVALID_ARGUMENT, never a crash."""

    max_message_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, description="Largest gRPC message received or sent."
    )
    max_crops_per_batch: int = Field(64, ge=1, description="Crops in one CropBatch.")
    max_events_per_batch: int = Field(
        256, ge=1, description="Track events in one CropBatch; beyond it each is INVALID."
    )
    max_event_bytes: int = Field(
        65536, ge=256, description="Largest serialized track event accepted (path included)."
    )
    max_image_width: int = Field(4096, ge=1, description="Widest image accepted, in pixels.")
    max_image_height: int = Field(4096, ge=1, description="Tallest image accepted, in pixels.")
    max_image_pixels: int = Field(
        16_000_000, ge=1, description="Largest width x height accepted (decode-bomb guard)."
    )
    max_inflight_batches: int = Field(
        8, ge=1, description="CropBatches of one Uplink stream being worked on at once."
    )
    max_streams_per_connection: int = Field(
        1024, ge=1, description="Concurrent calls on one client connection (HTTP/2 streams)."
    )
    default_page_size: int = Field(100, ge=1, description="QueryEvents page size when 0.")
    max_page_size: int = Field(1000, ge=1, description="Largest QueryEvents page.")


class CloudStoreConfig(StrictModel):
    """The event store: a SQLite file (one box), or PostgreSQL shared by several replicas."""

    path: str = Field("strata-events.sqlite", description="SQLite file (`--db`).")
    url: str = Field(
        "",
        description="PostgreSQL URL (postgresql://USER@HOST:PORT/DB); set: use it, not `path`.",
    )
    url_file: str = Field(
        "", description="File holding the PostgreSQL URL (a mounted Secret); instead of `url`."
    )
    pool_size: int = Field(
        8,
        ge=2,
        le=256,
        description="PostgreSQL connections per replica at most (pool; one more LISTENs).",
    )
    connect_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="How long to wait for PostgreSQL: to connect, or for a free pooled connection.",
    )
    write_batch: int = Field(256, ge=1, description="Events committed in one transaction at most.")
    write_delay_ms: float = Field(
        2.0, ge=0, description="How long the writer waits to fill a transaction."
    )
    max_pending: int = Field(
        4096, ge=1, description="Events waiting for the writer; beyond it crops get RETRY."
    )
    synchronous: Literal["FULL", "NORMAL"] = Field(
        "FULL", description="SQLite synchronous mode; FULL fsyncs each commit (durable acks)."
    )

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, v: str) -> str:
        if v and not v.startswith(POSTGRES_SCHEMES):
            raise ValueError("must start with postgresql:// or postgres://")
        return v

    @model_validator(mode="after")
    def _one_url(self) -> CloudStoreConfig:
        if self.url and self.url_file:
            raise ValueError("set url or url_file, not both")
        return self


class CloudRetentionConfig(StrictModel):
    """How long tracks (their track events and snapshots) are kept, in days since the track's
    last event; 0: forever. A track is kept as long as the longest that applies to it: its
    labels' days (`labels`, else `days`) and the days of every rule it fired (`rules`)."""

    days: float = Field(0.0, ge=0, description="Days a track is kept; 0: forever.")
    labels: dict[str, float] = Field(
        default_factory=dict,
        description="Days per edge label (e.g. {car: 7}) instead of `days`; 0: forever.",
    )
    rules: dict[str, float] = Field(
        default_factory=dict,
        description="Days per rule name: a track that fired the rule is kept at least so long.",
    )
    prune_every_s: float = Field(
        3600.0, gt=0, description="Seconds between background prune passes (each replica)."
    )
    prune_batch: int = Field(
        500, ge=1, le=100_000, description="Tracks deleted per transaction while pruning."
    )

    @field_validator("labels", "rules")
    @classmethod
    def _days(cls, v: dict[str, float]) -> dict[str, float]:
        for name, days in v.items():
            if days < 0:
                raise ValueError(f"{name}: days must be >= 0 (0: forever)")
        return v

    @property
    def active(self) -> bool:
        """Some track can expire."""
        return bool(self.days or any(self.labels.values()) or any(self.rules.values()))


class CloudSnapshotsConfig(StrictModel):
    """Track snapshots from edges (best crop and full frame JPEGs; docs/events.md)."""

    max_bytes: int = Field(
        2 * 1024 * 1024,
        ge=1024,
        description="Largest snapshot JPEG accepted; a larger one is acked INVALID (too_large).",
    )
    retention: CloudRetentionConfig = Field(
        default_factory=CloudRetentionConfig,
        description="How long tracks, their events and snapshots are kept (pruned in background).",
    )


class CloudClipsConfig(StrictModel):
    """Event clips uploaded by devices (UploadClip; docs/events.md). Their bytes live in the
    event store, so every replica serves every clip; they are kept with their tracks
    (cloud.snapshots.retention)."""

    max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Largest clip stored; a chunk past it is acked INVALID (too_large).",
    )
    max_writers: int = Field(
        4,
        ge=1,
        description="Clip chunks written at once (all streams); more are acked RETRY (busy).",
    )
    serve_chunk_bytes: int = Field(
        1024 * 1024,
        ge=4096,
        description="Most clip bytes in one GetClip message or read from the store at once.",
    )
    max_age_s: int = Field(
        86400, ge=0, description="Cache-Control max-age of a complete clip in the console."
    )


class CloudVersionsConfig(StrictModel):
    """Run-time classifier version switches (cloud/classify/versions.py; docs/cloud.md).

    When the classifier comes from a repository, the server loads a newer version beside
    the serving one (on SIGHUP, or found by polling), runs a canary on recent crops, and
    switches between two batches; a load or canary failure keeps the old version."""

    poll_s: float = Field(
        10.0, ge=0.0, description="Seconds between repository checks; 0: on SIGHUP only."
    )
    canary_crops: int = Field(
        32, ge=1, le=1024, description="Recent crops the new version must agree on."
    )
    canary_floor: float = Field(
        0.9,
        ge=0.0,
        le=1.0,
        description="Least share of canary crops with the serving version's top-1 label.",
    )
    canary_wait_s: float = Field(
        60.0, gt=0.0, description="Longest wait for canary crops before giving up (rollback)."
    )


class CloudHttpConfig(StrictModel):
    """The web console (cloud/console, docs/console.md): pages and JSON over the event store.

    Off loopback the same rules as the gRPC server: TLS, and the bearer token (or the session
    cookie a login with it sets); anything else is refused at start unless allow_insecure."""

    enabled: bool = Field(False, description="Serve the console beside the gRPC server.")
    listen: str = Field("127.0.0.1:8080", description="HOST:PORT the console binds to.")
    allow_insecure: bool = Field(
        False,
        description="Allow a non-loopback address without TLS or token (a trusted network only).",
    )
    tls: CloudTlsConfig = Field(
        default_factory=CloudTlsConfig,
        description="TLS of the console; empty cert_file and key_file: those of cloud.tls.",
    )
    token_file: str = Field(
        "",
        description="File holding the token pages and API need; empty: cloud.auth.token_file.",
    )
    session_hours: float = Field(
        12.0, gt=0, le=24 * 90, description="How long a login's session cookie is valid."
    )
    page_size: int = Field(50, ge=1, le=1000, description="Events on one page of the list.")
    max_page_size: int = Field(
        500, ge=1, le=10000, description="Largest `limit` the events API accepts."
    )
    thumbnail_max_age_s: int = Field(
        300, ge=0, description="Cache-Control max-age of snapshot images (ETag revalidates)."
    )
    scrape: list[str] = Field(
        default_factory=list,
        description="URLs of the daemons' /metrics read for camera state and rates; empty: none.",
    )
    scrape_timeout_s: float = Field(
        2.0, gt=0, le=60, description="How long one /metrics scrape may take."
    )


# Least cosine similarity of a search-by-example result (cloud.identity.min_similarity).
DEFAULT_MIN_SIMILARITY = 0.5


class CloudIdentityConfig(StrictModel):
    """Cross-camera identities and search by example (issue 42; docs/cloud.md). The cloud
    keeps the appearance embeddings that cameras with `appearance.enabled` send; it never
    forwards them to MQTT or webhooks."""

    link: bool = Field(
        True, description="Link tracks of different cameras that look alike into identities."
    )
    dim: int = Field(
        512,
        ge=0,
        le=4096,
        description="Values in an embedding (OSNet: 512); an event whose embedding has "
        "another size is refused (INVALID bad_appearance); 0: any size.",
    )
    # vtest cut into two cameras (`strata bench identities --ceiling`): on the every-frame
    # reference's own tracks (one person each) precision / recall of links 0.63 / 0.61 at
    # 0.7, 0.76 / 0.61 at 0.8, 0.78 / 0.58 at 0.85, 0.94 / 0.52 at 0.9: only 0.9 reaches the
    # precision of 0.9 asked for (a wrong link puts two people in one identity; a missed one
    # leaves two identities). On the cameras' own tracks (they change person where people
    # meet) 0.12 / 0.08 at 0.8 and 0.20 / 0.04 at 0.9; against tracks seen together
    # 0.59 / 0.13 and 0.80 / 0.05.
    threshold: float = Field(
        0.9,
        ge=-1.0,
        le=1.0,
        description="Least cosine similarity of two tracks' embeddings to link them.",
    )
    window_s: float = Field(
        60.0,
        ge=0,
        description="Most seconds between two tracks' lives (0 when they overlap) to link them.",
    )
    neighbours: dict[str, list[str]] = Field(
        default_factory=dict,
        description="camera -> the cameras a person can walk to from it (either direction "
        "counts); empty: any two cameras may link.",
    )
    link_every_s: float = Field(
        5.0, gt=0, description="Seconds between linker passes over recent tracks."
    )
    lookback_s: float = Field(
        600.0,
        gt=0,
        description="A pass relinks tracks last seen this many seconds (capture time) before "
        "the newest stored appearance.",
    )
    max_tracks_per_pass: int = Field(
        20000, ge=2, description="Most recent tracks one linker pass considers."
    )
    # vtest cut into two cameras (`strata bench identities`, tracks' mean embeddings): pairs
    # of tracks on the same person at once have cosine >= 0.5 93% of the time (min 0.37,
    # median 0.69); other pairs 0.27-0.97, median 0.52: 0.5 drops 41% of them. Linking at
    # 0.9 (threshold) stays the precise choice; search ranks and lets a person judge.
    min_similarity: float = Field(
        DEFAULT_MIN_SIMILARITY,
        ge=-1.0,
        le=1.0,
        description="Search by example (SearchSimilar, the console's /similar and "
        "/api/similar, `strata cloud query --similar-to`) leaves out tracks less similar "
        "than this (cosine) when the request names no minimum (0); -1: every track.",
    )
    search_limit: int = Field(
        20, ge=1, description="Tracks SearchSimilar returns when the request says 0."
    )
    max_search_limit: int = Field(500, ge=1, description="Most tracks one SearchSimilar returns.")


class CloudConfig(StrictModel):
    """Options of `strata cloud`."""

    listen: str = Field("127.0.0.1:50051", description="HOST:PORT the gRPC server binds to.")
    allow_insecure: bool = Field(
        False, description="Allow a non-loopback address without TLS (plaintext on a network)."
    )
    workers: int = Field(
        8,
        ge=2,
        description="Threads for blocking work (store reads, large decodes); streams hold none.",
    )
    serving_nice: int = Field(
        0,
        ge=0,
        le=19,
        description="Added to the nice value of the gRPC and decode threads: the model's go first.",
    )
    max_watchers: int = Field(16, ge=0, description="Concurrent WatchEvents streams.")
    watch_queue: int = Field(
        1024, ge=1, description="Events buffered per watcher; a slower watcher is dropped."
    )
    grace_s: float = Field(5.0, ge=0, description="Shutdown grace for calls in flight.")
    tls: CloudTlsConfig = Field(default_factory=CloudTlsConfig, description="TLS and mTLS.")
    auth: CloudAuthConfig = Field(default_factory=CloudAuthConfig, description="Bearer token.")
    model: CloudModelConfig = Field(default_factory=CloudModelConfig, description="Classifier.")
    versions: CloudVersionsConfig = Field(
        default_factory=CloudVersionsConfig,
        description="Run-time version switches of a repository classifier.",
    )
    batcher: CloudBatcherConfig = Field(
        default_factory=CloudBatcherConfig, description="Dynamic batcher."
    )
    limits: CloudLimitsConfig = Field(
        default_factory=CloudLimitsConfig, description="Request limits."
    )
    store: CloudStoreConfig = Field(default_factory=CloudStoreConfig, description="Event store.")
    metrics: MetricsConfig = Field(
        default_factory=MetricsConfig, description="Prometheus endpoint of this daemon."
    )
    snapshots: CloudSnapshotsConfig = Field(
        default_factory=CloudSnapshotsConfig,
        description="Track snapshots: size limit and retention of tracks.",
    )
    clips: CloudClipsConfig = Field(
        default_factory=CloudClipsConfig,
        description="Event clips from devices: size cap and upload back-pressure.",
    )
    sinks: SinksConfig = Field(
        default_factory=SinksConfig, description="Event delivery to MQTT and webhooks (outbox)."
    )
    http: CloudHttpConfig = Field(
        default_factory=CloudHttpConfig, description="The web console (docs/console.md)."
    )
    identity: CloudIdentityConfig = Field(
        default_factory=CloudIdentityConfig,
        description="Cross-camera identities and search by example (appearance embeddings).",
    )
