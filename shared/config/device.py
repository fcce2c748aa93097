"""Config of the device tier (`strata device`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import StrictModel
from .common import MetricsConfig
from .edge import UplinkTlsConfig


class CameraConfig(StrictModel):
    """One camera: a source and the id its frames carry."""

    id: str = Field("", description="Camera id on the wire; empty: derived from the source.")
    source: str = Field(
        ...,
        min_length=1,
        description="File path, rtsp://HOST:PORT/PATH, or synthetic://?frames=N&seed=S&...",
    )
    model: str = Field(
        "", description="Model this camera asks for (edge affinity); empty: routing.model."
    )


class SourceConfig(StrictModel):
    """How sources are opened, read and reopened."""

    open_timeout_s: float = Field(5.0, gt=0, description="Give up opening a stream after this.")
    read_timeout_s: float = Field(
        5.0, gt=0, description="A stream with no data (or no decoded frame) this long is dead."
    )
    loop: bool = Field(False, description="Files and synthetic clips start over at the end.")
    realtime: bool = Field(
        False,
        description="Files are read at their frame rate, like a camera; off: as fast as they "
        "decode (latencies then include the queueing this causes).",
    )
    backoff_initial_s: float = Field(0.5, gt=0, description="First wait before reopening.")
    backoff_max_s: float = Field(30.0, gt=0, description="Longest wait before reopening.")
    backoff_jitter: float = Field(
        0.25, ge=0, le=1, description="Each wait is scaled by a random factor in 1 +/- this."
    )
    max_reopen_attempts: int = Field(
        0, ge=0, description="Consecutive failed reopens before a camera gives up; 0: never."
    )
    decode_threads: int = Field(
        0,
        ge=0,
        description="FFmpeg frame+slice decoder threads per camera; 0: PyAV's default "
        "(slice threads), leaving cores to the gates.",
    )
    decode_ahead: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Decode on a thread of its own, a few frames ahead of the camera's "
        "handling, so the two overlap; auto: on while the agent has fewer cameras than cores.",
    )
    hwaccel: Literal["auto", "none", "vaapi", "cuda", "qsv", "videotoolbox", "v4l2m2m", "drm"] = (
        Field(
            "none",
            description="Hardware decoding: auto (the first device the host has, probed once "
            "per camera), none (software), or one device type; a host without it decodes in "
            "software (one log line, metric strata_device_decoder).",
        )
    )
    hwaccel_device: str = Field(
        "",
        description="The hardware device to decode on (a DRI render node such as "
        "/dev/dri/renderD128, a CUDA index); empty: the default one.",
    )
    max_fps: float = Field(
        0.0,
        ge=0,
        description="Most frames per second a camera delivers (frames spread evenly by "
        "timestamp, the rest not passed on); 0: the source's rate.",
    )
    skip_frame: bool = Field(
        True,
        description="With max_fps below the source's rate, non-reference frames max_fps "
        "would drop anyway are not decoded (never one it keeps: the frames delivered are the "
        "same; metric strata_device_source_skipped).",
    )
    skip_held: bool = Field(
        True,
        description="Frames the cascade's gap holds back whatever they show are not decoded "
        "where no other frame refers to them (B-frames; never with decode_ahead on): a cut on "
        "one is seen on the next decoded frame (strata_device_source_skipped, reason held).",
    )


class IgnoreRect(StrictModel):
    """A region the motion gate ignores, in fractions of the frame (0..1)."""

    x1: float = Field(..., ge=0, le=1, description="Left edge.")
    y1: float = Field(..., ge=0, le=1, description="Top edge.")
    x2: float = Field(..., ge=0, le=1, description="Right edge (exclusive).")
    y2: float = Field(..., ge=0, le=1, description="Bottom edge (exclusive).")

    @model_validator(mode="after")
    def _ordered(self) -> IgnoreRect:
        if self.x2 <= self.x1 or self.y2 <= self.y1:
            raise ValueError("need x1 < x2 and y1 < y2")
        return self


class MotionConfig(StrictModel):
    """The motion gate: difference to the last kept frame, grey and down-scaled."""

    enabled: bool = Field(True, description="Off: every decoded frame passes.")
    width: int = Field(192, ge=8, description="Width of the down-scaled grey frame.")
    height: int = Field(144, ge=8, description="Height of the down-scaled grey frame.")
    threshold: float = Field(
        10.0,
        ge=0,
        description="Keep a frame whose RMS grey difference to the last kept one (L2 norm / "
        "sqrt(pixels), 0-255) reaches this.",
    )
    max_interval_s: float = Field(
        5.0, ge=0, description="Keep a frame anyway this long (stream time) after the last kept."
    )
    ignore: list[IgnoreRect] = Field(
        default_factory=list, description="Regions left out of the difference (e.g. a clock)."
    )
    scene_change: float = Field(
        0.6,
        ge=0,
        le=1,
        description="A frame whose grey differs from the last kept one in at least this "
        "share of 8x8 cells (a cut, a pan) is a scene change: kept, flagged, the edge "
        "re-seeds tracking; 0: off.",
    )


class SiteGateConfig(StrictModel):
    """The relevance gate that knows the site (device/filters/site_gate.py; docs/device.md):
    a frozen ImageNet backbone's pooled features and a per-camera head learned online from
    the edge's answers. It keeps every frame until its held-out recall of object frames
    passes `min_recall`, and keeps every frame again as soon as it no longer does."""

    enabled: bool = Field(
        False,
        description="On: the site gate replaces the classifier gate (model, threshold, "
        "positive_class_ids are not used).",
    )
    model: str = Field(
        "mobilenetv3_small_imagenet",
        description="The backbone in the model repository (cut at its global average pool).",
    )
    drop_below: float = Field(
        0.2, gt=0, lt=1, description="Drop a frame when the head's P(object) is under this."
    )
    min_recall: float = Field(
        0.98,
        gt=0,
        le=1,
        description="Least held-out recall of object frames (share the head would keep) for "
        "the gate to drop anything.",
    )
    holdout_every: int = Field(
        5, ge=2, description="One frame in this many is a held-out probe: sent, never trained on."
    )
    window: int = Field(300, ge=20, description="Probes in the rolling agreement window.")
    min_positives: int = Field(
        50, ge=1, description="Object probes in the window before the gate may switch on."
    )
    min_negatives: int = Field(
        50, ge=1, description="Empty probes in the window before the gate may switch on."
    )
    min_training: int = Field(
        100, ge=1, description="Answers the head learned from before the gate may switch on."
    )
    learning_rate: float = Field(0.05, gt=0, description="The head's SGD step.")


class GateConfig(StrictModel):
    """The MobileNetV3 relevance gate over frames that passed motion (ONNX Runtime, CPU)."""

    enabled: bool = Field(True, description="Off: every frame that passed motion is sent.")
    model: str = Field(
        "mobilenetv3_small", description="Model name in the model repository (models section)."
    )
    model_path: str = Field(
        "", description="An ONNX file to use instead of the repository model (ImageNet input)."
    )
    positive_class_ids: list[int] = Field(
        default_factory=list,
        description="Classes that make a frame relevant; empty: any class.",
    )
    threshold: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Keep a frame when the summed probability of the positive classes "
        "(or the top probability, with no classes listed) reaches this; 0 keeps all (the "
        "starter gate is trained on vtest.avi only: [1] and 0.5 suit that camera).",
    )
    max_batch: int = Field(8, ge=1, le=256, description="Largest batch per inference.")
    max_delay_ms: float = Field(
        10.0, ge=0, description="Longest wait for a batch to fill after its first frame."
    )
    queue_frames: int = Field(
        16, ge=1, description="Frames per camera waiting for the gate; beyond, live drops."
    )
    threads: int = Field(1, ge=0, description="ONNX Runtime intra-op threads; 0: all cores.")
    site: SiteGateConfig = Field(
        default_factory=SiteGateConfig,
        description="The gate that learns the site from the edge's answers.",
    )


class GateVersionsConfig(StrictModel):
    """Run-time gate version switches (device/filters/versions.py; docs/models.md).

    When the gate comes from a repository, the agent loads a newer version beside the
    serving one (on SIGHUP, or found by polling), runs a canary on recent frames, and
    switches between two batches; a load or canary failure keeps the old version."""

    poll_s: float = Field(
        10.0, ge=0.0, description="Seconds between repository checks; 0: on SIGHUP only."
    )
    canary_frames: int = Field(
        16, ge=1, le=256, description="Recent frames the new version must agree on."
    )
    canary_floor: float = Field(
        0.9,
        ge=0.0,
        le=1.0,
        description="Least share of canary frames with the serving version's keep/drop decision.",
    )
    canary_wait_s: float = Field(
        60.0, gt=0.0, description="Longest wait for canary frames before giving up (rollback)."
    )


class CurveClientConfig(StrictModel):
    """ZeroMQ CURVE encryption and authentication towards the edge node."""

    secret_key: str = Field(
        "", description="This agent's key pair (a `strata keys` .key_secret file); empty: off."
    )
    server_key: str = Field("", description="The edge node's public key file (.key).")

    @model_validator(mode="after")
    def _both(self) -> CurveClientConfig:
        if bool(self.secret_key) != bool(self.server_key):
            raise ValueError("curve needs both secret_key and server_key (or neither)")
        return self


class CascadeConfig(StrictModel):
    """Which frames go to the edge: an accuracy target, calibrated online with the edge."""

    enabled: bool = Field(
        True,
        description="Off: the motion gate alone decides, and dropped frames get no answer.",
    )
    metric: Literal["f1", "counting"] = Field(
        "f1", description="What the target is about: box F1 or counting agreement."
    )
    target: float = Field(
        0.9,
        gt=0,
        le=1,
        description="Accuracy to keep against the detector on every frame (e.g. f1 0.9, "
        "counting 0.95); the cheapest settings that meet it are used.",
    )
    min_gap: int = Field(
        1, ge=1, description="Frames between kept ones with motion, until calibration says."
    )
    max_min_gap: int = Field(
        15, ge=1, description="Calibration never spaces frames with motion further than this."
    )
    max_gap: int = Field(50, ge=1, description="A quiet scene still sends one frame in this many.")
    budget: float = Field(
        0.15,
        ge=0,
        le=1,
        description="The camera's budget as a share of its frames: while the edge tracks "
        "objects, kept frames are never spaced wider than uniform sampling at this share "
        "(the floor: one in floor(1 / budget)); motion, scene changes and the edge's asks "
        "keep frames above it. Nothing tracked: no floor. 0: no floor.",
    )
    max_share: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Most share of its frames a camera keeps for an estimate under the "
        "target (its gaps never under ceil(1 / max_share)); an estimate still under the "
        "target there, or while the edge's overload degrades the camera, is reported as "
        "missed (metric, log, status).",
    )
    calibrate_every: int = Field(
        900, ge=0, description="Source frames between calibration bursts; 0: never."
    )
    burst_frames: int = Field(
        20,
        ge=0,
        description="Frames a calibration burst sends, every one (burst_stride 1); a "
        "strided burst sends half as many, spanning stride times as many.",
    )
    burst_stride: int = Field(
        0,
        ge=0,
        le=16,
        description="A calibration burst sends one frame in this many (the edge measures "
        "gaps of two strides and more on them, and draws the shorter ones): a burst's frames "
        "spaced near the floor's cost little more than the floor. 0: half the floor's gap "
        "(1 with no floor); 1: every frame.",
    )
    codec_probes: int = Field(
        2,
        ge=0,
        le=16,
        description="Of each calibration burst's frames, the first this many go as raw "
        "pixels (with `sender.encoding: jpeg`; every one of a burst while the edge's sample "
        "holds under 8 boxes, as in a camera's first, for its first three bursts at most): "
        "the edge detects each as sent and "
        "after a JPEG round trip at `sender.jpeg_quality`, and takes what the codec costs the "
        "detector off the camera's curves and estimate. About 8x a JPEG frame's bytes each; "
        "0: none (the estimate then leaves the codec out).",
    )
    concurrent_bursts: int = Field(
        0,
        ge=0,
        description="Cameras of the agent in a calibration burst at once, over all its "
        "processes (the rest wait their turn, so bursts do not all land together); 0: one "
        "per CPU core.",
    )
    smoothing: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Weight of the newest burst in the running estimate (1: newest only).",
    )
    recover_margin: float = Field(
        0.02,
        ge=0,
        le=1,
        description="Under the target, the edge's estimate halves the gaps each calibration "
        "window; they double back once it is this far above the target.",
    )
    send_skipped: bool = Field(
        True, description="Tell the edge about every dropped frame (it answers from tracking)."
    )
    notice_run: int = Field(
        8,
        ge=1,
        description="Dropped frames told in one message, at most this many (1: a message "
        "each); a run goes before the camera's next kept frame, when full, after "
        "notice_run_ms, and when the camera's frames stop.",
    )
    notice_run_ms: float = Field(
        200.0,
        gt=0,
        description="The longest a run's first notice waits (ms), judged by the camera's "
        "last frame interval: a camera slower than this sends each notice alone.",
    )


class PayloadConfig(StrictModel):
    """How kept frames are sized and compressed before they are sent."""

    scale_to_model: bool = Field(
        True,
        description="Scale frames to fit the edge model's input (from the edge's EdgeInfo) "
        "while converting out of the decoder.",
    )
    max_width: int = Field(
        0, ge=0, description="Scale frames to fit this width (0: the edge model's, or none)."
    )
    max_height: int = Field(
        0, ge=0, description="Scale frames to fit this height (0: the edge model's, or none)."
    )
    keyframe_interval: int = Field(
        250, ge=0, description="H.264: a keyframe every this many kept frames (0: on demand)."
    )
    crf: int = Field(
        18,
        ge=0,
        le=51,
        description="H.264 quality (x264 CRF; lower is better; 18 costs vtest 0.016 box F1).",
    )
    preset: str = Field("veryfast", description="x264 preset (speed against size).")


class SenderConfig(StrictModel):
    """ZeroMQ sender to the edge node: in-flight window and spool."""

    encoding: Literal["jpeg", "bgr", "h264"] = Field(
        "jpeg", description="Payload encoding (h264: a stream of the kept frames per camera)."
    )
    jpeg_quality: int = Field(
        95,
        ge=1,
        le=100,
        description="JPEG quality (1-100). At 95 the detector's boxes agree with those on "
        "the camera's own frames at box F1 0.92-0.99 on five clips (0.89-0.97 at 80), for "
        "about twice 80's bytes; `encoding: h264` spends fewer (docs/benchmarks.md, Cascade).",
    )
    window: int = Field(
        32,
        ge=1,
        description="Most frames per camera sent and not finally acked; the edge's credits "
        "lower it.",
    )
    spool_frames: int = Field(
        2000, ge=1, description="Frames per camera waiting to be sent; beyond, oldest dropped."
    )
    spool_mb: float = Field(
        256.0, gt=0, description="Bytes per camera waiting to be sent (MiB); beyond, oldest go."
    )
    spool_dir: str = Field(
        "",
        description="Keep unacked frames on disk here too, so a restart resends them; "
        "empty: memory only.",
    )
    ack_timeout_s: float = Field(
        3.0,
        gt=0,
        description="Frames with no word from the edge (no ack, QUEUED or final) this long "
        "are sent again, oldest first.",
    )
    drain_timeout_s: float = Field(
        10.0, ge=0, description="At the end of finite sources, wait this long for acks."
    )
    curve: CurveClientConfig = Field(
        default_factory=CurveClientConfig, description="CURVE encryption and authentication."
    )


class DegradeConfig(StrictModel):
    """What a camera gives up, cheapest first, when the edge asks it to degrade."""

    enabled: bool = Field(True, description="Off: the edge's degradation levels are ignored.")
    motion_factor: float = Field(
        2.0, ge=1.0, description="Level 1+: the motion threshold is multiplied by this."
    )
    rate_headroom: float = Field(
        1.5,
        ge=1.0,
        description="Level 2+: keep at most this times the frame rate the edge finishes.",
    )
    min_fps: float = Field(1.0, gt=0, description="Level 2+: never cap the kept rate below this.")
    backlog_s: float = Field(
        1.0,
        ge=0,
        description="A backlog is more than this many seconds of frames (at the rate the "
        "edge finishes them) waiting to be sent; only a backlog raises the level.",
    )
    up_s: float = Field(
        1.0,
        gt=0,
        description="More than a window waiting this long: one level up (to the edge's at most).",
    )
    down_s: float = Field(
        3.0, gt=0, description="Nothing waiting this long: one level down (hysteresis)."
    )
    drop_policy: Literal["oldest", "newest"] = Field(
        "oldest",
        description="Level 3: beyond one credit window waiting, drop the oldest (freshest "
        "results) or the newest (steady backlog) frames.",
    )


class RoutingConfig(StrictModel):
    """How cameras are spread over several edge nodes (a consistent-hash ring)."""

    model: str = Field(
        "", description="Model a camera asks for when it names none; empty: any edge's default."
    )
    vnodes_per_weight: int = Field(
        160, ge=1, description="Ring points per unit of an edge's announced weight."
    )
    load_factor: float = Field(
        1.15,
        ge=1.0,
        description="No edge takes more than this times its fair share of cameras. The bound "
        "holds per worker process (device.processes): each worker routes its own cameras on "
        "its own ring, so an edge may hold up to this bound from every worker.",
    )
    use_capacity: bool = Field(
        False,
        description="Weight edges by their announced capacity_fps (times their weight) "
        "instead of their weight alone.",
    )
    warmup_s: float = Field(
        30.0, ge=0, description="A joining edge takes half its weight (and share) this long."
    )
    ramp_s: float = Field(30.0, ge=0, description="Then ramps linearly to full weight over this.")
    moves_per_s: float = Field(
        2.0, gt=0, description="Cameras moved per second when membership changes (progressive)."
    )
    heartbeat_interval_s: float = Field(
        0.5, gt=0, description="Heartbeat to every edge this often (answered with EdgeInfo)."
    )
    edge_timeout_s: float = Field(
        2.0,
        gt=0,
        description="An edge with no ack or heartbeat answer this long leaves the ring; "
        "its cameras move to their next edge.",
    )
    resolve_interval_s: float = Field(
        10.0, gt=0, description="dns:// edge names are resolved again this often."
    )


class ClipUploadConfig(StrictModel):
    """Clips to the cloud (Analytics.UploadClip, resumable) and the clips folder's bound
    (device/clips/uploader.py, device/clips/spool.py)."""

    target: str = Field(
        "",
        description="Cloud HOST:PORT (or dns:///NAME:PORT) clips are uploaded to; empty: "
        "clips stay on the device.",
    )
    tls: UplinkTlsConfig = Field(
        default_factory=UplinkTlsConfig, description="TLS and mTLS (as edge.uplink.tls)."
    )
    token_file: str = Field(
        "", description="File holding the bearer token the cloud expects; empty: none."
    )
    allow_insecure: bool = Field(
        False,
        description="Upload in plaintext to a target off loopback (clips and token readable "
        "on the way); refused otherwise.",
    )
    chunk_kib: int = Field(256, ge=4, le=4096, description="Bytes per ClipChunk (KiB).")
    spool_max_mib: float = Field(
        2048.0,
        gt=0,
        description="Most MiB of clip files kept on the device, uploaded or not; beyond it "
        "the oldest finished clips are deleted (counted).",
    )
    connect_timeout_s: float = Field(5.0, gt=0, description="Wait for the channel to connect.")
    ack_timeout_s: float = Field(
        15.0, gt=0, description="A chunk unacked this long fails the upload (retried)."
    )
    backoff_initial_s: float = Field(1.0, gt=0, description="First wait after a failed upload.")
    backoff_max_s: float = Field(60.0, gt=0, description="Longest wait between upload tries.")
    poll_s: float = Field(
        1.0, gt=0, description="How often open clips' new bytes and new clips are looked for."
    )


class ClipsConfig(StrictModel):
    """Event clips cut on the device from the camera's own compressed stream (no re-encode)."""

    enabled: bool = Field(
        False, description="Keep a ring of each camera's compressed packets to cut clips from."
    )
    dir: str = Field("clips", description="Folder the clips are written to (fragmented MP4).")
    pre_roll_s: float = Field(
        5.0, ge=0, description="A clip starts at the keyframe at or before its start minus this."
    )
    post_roll_s: float = Field(
        5.0,
        ge=0,
        description="A clip runs this long past its end (a track's last seen time; when the "
        "end is heard after the clip ran past it, cut back to the next keyframe after it).",
    )
    max_s: float = Field(120.0, gt=0, description="Longest clip, from its first keyframe.")
    ring_s: float = Field(
        15.0,
        gt=0,
        description="Seconds of packets each camera keeps: at least pre_roll_s plus one "
        "keyframe interval plus the delay before a clip is asked for.",
    )
    ring_mib: float = Field(
        64.0, gt=0, description="Most packet bytes (MiB) a camera's ring holds, oldest GOP freed."
    )
    upload: ClipUploadConfig = Field(
        default_factory=ClipUploadConfig,
        description="Upload to the cloud and the bound of the clips folder.",
    )

    @model_validator(mode="after")
    def _ring_covers_pre_roll(self) -> ClipsConfig:
        if self.ring_s <= self.pre_roll_s:
            raise ValueError(
                f"clips: ring_s ({self.ring_s:g}) must exceed pre_roll_s ({self.pre_roll_s:g}) "
                "by at least one keyframe interval"
            )
        return self


class DeviceConfig(StrictModel):
    """Options of `strata device`."""

    agent_id: str = Field("", description="Agent id on the wire; empty: the host name.")
    edge: str = Field(
        "tcp://127.0.0.1:5555",
        description="ZeroMQ endpoint of the edge node (used when `edges` is empty).",
    )
    edges: list[str] = Field(
        default_factory=list,
        description="Several edge nodes: tcp://HOST:PORT, or dns://NAME:PORT for every address "
        "NAME resolves to (re-resolved); cameras are spread over them (routing).",
    )
    routing: RoutingConfig = Field(
        default_factory=RoutingConfig, description="Camera-to-edge routing over several edges."
    )
    processes: int = Field(
        0,
        ge=0,
        description="Processes the cameras are spread over, each a whole agent (decoders, "
        "gates, sender), so one's camera threads never wait for another's interpreter lock; "
        "0 (auto): one per 8 cameras, at most one per core.",
    )
    cameras: list[CameraConfig] = Field(
        default_factory=list, description="Cameras; --source adds more."
    )
    source: SourceConfig = Field(default_factory=SourceConfig, description="Source handling.")
    motion: MotionConfig = Field(default_factory=MotionConfig, description="Motion gate.")
    gate: GateConfig = Field(default_factory=GateConfig, description="MobileNetV3 gate.")
    versions: GateVersionsConfig = Field(
        default_factory=GateVersionsConfig,
        description="Run-time version switches of a repository gate model.",
    )
    cascade: CascadeConfig = Field(
        default_factory=CascadeConfig, description="Accuracy target and calibration."
    )
    payload: PayloadConfig = Field(
        default_factory=PayloadConfig, description="Frame size and compression."
    )
    sender: SenderConfig = Field(default_factory=SenderConfig, description="Sender.")
    degrade: DegradeConfig = Field(
        default_factory=DegradeConfig, description="Degradation at the source under overload."
    )
    clips: ClipsConfig = Field(
        default_factory=ClipsConfig, description="Event clips from the camera's own stream."
    )
    metrics: MetricsConfig = Field(
        default_factory=MetricsConfig, description="Prometheus endpoint of this daemon."
    )

    @model_validator(mode="after")
    def _edges_named(self) -> DeviceConfig:
        for e in self.edges:
            scheme, sep, rest = e.partition("://")
            host, colon, port = rest.rpartition(":")
            if scheme == "dns" and not (host and colon and port.isdigit()):
                raise ValueError(f"edges: {e!r} must be dns://NAME:PORT")
            if not sep or scheme not in ("tcp", "dns", "ipc", "inproc") or not rest:
                raise ValueError(f"edges: {e!r} must be tcp://HOST:PORT or dns://NAME:PORT")
        if len(set(self.edges)) != len(self.edges):
            raise ValueError(f"edges: listed twice: {self.edges}")
        return self
