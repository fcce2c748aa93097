"""Config of the edge tier (`strata edge`)."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .appearance import AppearanceConfig
from .base import StrictModel
from .common import MetricsConfig

# The starter repository's COCO detector (shared/starter_models/picodet_s_416/MODEL_CARD.md).
DEFAULT_DETECTOR = "picodet_s_416"


class EdgeModelConfig(StrictModel):
    """Which detector runs and how its output is read."""

    name: str = Field(DEFAULT_DETECTOR, description="Model name in the model repository.")
    path: str = Field(
        "",
        description="ONNX file to load instead of the repository's model; read with the "
        "manifest.yaml beside it when there is one, else as a YOLOv8 export.",
    )
    input_size: int = Field(
        640, ge=32, le=4096, description="Square input side when the model's is dynamic."
    )
    labels: list[str] = Field(
        default_factory=list,
        description="Class labels by id; empty: the model's metadata, else COCO-80.",
    )


class RuntimeConfig(StrictModel):
    """Back end and GPU execution options."""

    backend: Literal[
        "onnxruntime-cpu",
        "onnxruntime-cuda",
        "onnxruntime-tensorrt",
        "tensorrt",
        "torch-cuda",
        "openvino",
    ] = Field(
        "onnxruntime-cpu",
        description="Inference back end (see shared/runtime); openvino needs the openvino extra.",
    )
    threads: int = Field(0, ge=0, description="CPU intra-op threads; 0: the runtime's default.")
    cpu_streams: int = Field(
        1,
        ge=0,
        le=16,
        description="ONNX Runtime on the CPU: batches run side by side, sharing `threads` "
        "between them; 0: one a core plus one, each single-threaded (more frames/s at "
        "saturation, a longer batch: docs/edge.md).",
    )
    device_id: int = Field(0, ge=0, description="CUDA device ordinal.")
    streams: int = Field(2, ge=1, le=16, description="CUDA streams (pinned buffer sets) on GPU.")
    fp16: bool = Field(True, description="Build engines in FP16 where the GPU supports it.")
    min_batch: int = Field(1, ge=1, description="Optimization profile minimum batch.")
    opt_batch: int = Field(4, ge=1, description="Optimization profile optimal batch.")
    max_batch: int = Field(8, ge=1, description="Optimization profile maximum batch.")
    engine_cache: str = Field(
        "", description="Folder for TensorRT engines; empty: next to the ONNX file."
    )
    workspace_mib: int = Field(1024, ge=64, description="TensorRT builder workspace limit.")
    preprocess_threads: int = Field(
        1, ge=1, le=64, description="Threads letterboxing a batch (OpenCV and numpy free the GIL)."
    )
    openvino_device: Literal["CPU", "GPU", "NPU"] = Field(
        "CPU", description="OpenVINO device (only CPU has been run: docs/edge.md)."
    )
    openvino_precision: Literal["f32", "bf16", "f16"] = Field(
        "f32",
        description="OpenVINO inference precision hint; f32, since OpenVINO's own default on a "
        "bf16 CPU is bf16, which moves boxes (an INT8 model's int8 layers stay int8).",
    )
    openvino_streams: int = Field(
        0, ge=0, le=64, description="OpenVINO streams (parallel infer requests); 0: its choice."
    )
    openvino_cache: str = Field(
        "~/.cache/strata/openvino",
        description="Folder of OpenVINO's compiled models: compiled at the first start, loaded "
        "from here at the next; empty: compile at every start.",
    )

    @model_validator(mode="after")
    def _profile_order(self) -> RuntimeConfig:
        if not self.min_batch <= self.opt_batch <= self.max_batch:
            raise ValueError("runtime profile needs min_batch <= opt_batch <= max_batch")
        return self


class BatchingConfig(StrictModel):
    """Triton-style dynamic batching across cameras."""

    max_batch: int = Field(4, ge=1, le=256, description="A batch leaves as soon as it is full.")
    max_queue_delay_ms: float = Field(
        10.0, ge=0.0, description="Or when its oldest frame has waited this long."
    )
    queue_per_camera: int = Field(
        64,
        ge=1,
        description="Most frames held per camera (a cap on its credits); beyond, BUSY.",
    )
    delay_target_ms: float = Field(
        200.0,
        ge=0.0,
        description="Queue delay target (receive to inference) of the credits and the batch "
        "limit; 0 turns the adaptive batch limit off.",
    )
    max_cameras: int = Field(
        256, ge=1, description="Cameras one node serves; frames of more are rejected."
    )


class ModelVersionsConfig(StrictModel):
    """Run-time model version switches (edge/inference/versions.py; docs/edge.md).

    When the detector comes from a repository, the node loads a newer version beside the
    serving one (on SIGHUP, or found by polling), runs a canary on recent frames, and
    switches between two batches; a load or canary failure keeps the old version."""

    poll_s: float = Field(
        10.0, ge=0.0, description="Seconds between repository checks; 0: on SIGHUP only."
    )
    canary_frames: int = Field(
        8, ge=1, le=256, description="Recent frames the new version must agree on."
    )
    canary_floor: float = Field(
        0.9,
        ge=0.0,
        le=1.0,
        description="Least mean box F1 (IoU 0.5, same class) with the serving version.",
    )
    canary_wait_s: float = Field(
        60.0, gt=0.0, description="Longest wait for canary frames before giving up (rollback)."
    )


class CheckpointConfig(StrictModel):
    """Checkpoints of edge state (edge/state/checkpoint.py; docs/edge.md)."""

    path: str = Field(
        "",
        description="Checkpoint file, written periodically and at clean stop, restored at "
        "start; empty: no checkpoints.",
    )
    dir: str = Field(
        "",
        description="Shared checkpoint directory of the edges (<dir>/<edge_id>.checkpoint.json "
        "and .journal): this edge writes its own there, and restores a failed peer's for the "
        "cameras that move here; use it or path, not both.",
    )
    interval_s: float = Field(
        900.0, gt=0.0, description="Seconds between checkpoints (15 minutes, as designed)."
    )
    journal: bool = Field(
        True,
        description="Also append every frame's final status to <checkpoint>.journal (one write "
        "per batch), so resends after a kill -9 are answered DUPLICATE, not processed again.",
    )
    on_events: bool = Field(
        True,
        description="Write the checkpoint before acking a frame that caused track events, so "
        "a kill -9 never derives them again under new keys (one atomic write per such frame).",
    )

    @model_validator(mode="after")
    def _one_place(self) -> CheckpointConfig:
        if self.path and self.dir:
            raise ValueError("checkpoint: set path or dir, not both")
        return self


class SchedulerConfig(StrictModel):
    """Who sets the batch limit and max queue delay (edge/inference/scheduler.py, docs/edge.md)."""

    policy: Literal["rule", "learned"] = Field(
        "rule",
        description="rule: halve/double the batch on the queue-delay target; learned: "
        "on-line Q-learning (off by default until it wins on the node's own traffic).",
    )
    decide_every_s: float = Field(
        2.0, gt=0.0, description="Seconds between two decisions (several batches each)."
    )
    sla_ms: float = Field(
        1000.0, gt=0.0, description="Latency SLA (receive to publish) of the reward's p99 term."
    )
    batch_choices: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8],
        min_length=1,
        description="Batch limits the learned policy picks from (capped at the model's).",
    )
    delay_choices_ms: list[float] = Field(
        default_factory=lambda: [0.0, 10.0, 50.0],
        min_length=1,
        description="Max queue delays the learned policy picks from.",
    )
    learning_rate: float = Field(0.2, gt=0.0, le=1.0, description="Q-learning step size.")
    discount: float = Field(
        0.5, ge=0.0, lt=1.0, description="Q-learning discount; 0: a contextual bandit."
    )
    epsilon: float = Field(
        0.2, ge=0.0, le=1.0, description="Initial chance of trying a neighbouring action."
    )
    epsilon_min: float = Field(0.02, ge=0.0, le=1.0, description="Exploration never below this.")
    epsilon_decay: float = Field(
        0.995, gt=0.0, le=1.0, description="Exploration multiplied by this per decision."
    )
    q_table: str = Field(
        "", description="JSON table to warm-start from and save to at stop; empty: none."
    )
    seed: int = Field(0, description="Seed of the exploration's random choices.")


class GpuPressureConfig(StrictModel):
    """GPU pressure triggers (design: temperature, memory, inference p99) and actions.

    Actions, cheapest first, one level per `step_s` while a trigger holds: 1 stop cloud
    crops, 2 lower the batch size, 3 ask devices for fewer frames (credits and
    degrade_level in acks), 4 answer low-priority cameras from cached results. Undone one
    level per `step_s` once every trigger has been clear for `clear_for_s`.
    """

    enabled: Literal["auto"] | bool = Field(
        "auto",
        description="Run the GPU pressure levels; auto: only when the model runs on a GPU "
        "(its SLA and triggers are GPU figures; on a CPU the credits handle overload).",
    )
    interval_s: float = Field(1.0, gt=0.0, description="Seconds between telemetry checks.")
    gpu_temp_c: float = Field(85.0, description="Trigger: GPU temperature above this...")
    gpu_temp_for_s: float = Field(60.0, ge=0.0, description="...for this long.")
    gpu_temp_clear_c: float = Field(80.0, description="Temperature trigger clears below this.")
    gpu_memory_fraction: float = Field(
        0.9, gt=0.0, le=1.0, description="Trigger: GPU memory used over total above this."
    )
    gpu_memory_clear_fraction: float = Field(
        0.85, gt=0.0, le=1.0, description="Memory trigger clears below this."
    )
    inference_sla_ms: float = Field(
        100.0, gt=0.0, description="Inference SLA per batch (copy-in, inference, copy-out)."
    )
    p99_factor: float = Field(
        2.0, gt=1.0, description="Trigger: inference p99 above SLA times this."
    )
    p99_clear_factor: float = Field(
        1.5, gt=0.0, description="p99 trigger clears below SLA times this."
    )
    p99_window: int = Field(200, ge=10, description="Batches in the p99 window.")
    p99_min_samples: int = Field(20, ge=1, description="Batches needed before p99 counts.")
    step_s: float = Field(5.0, ge=0.0, description="Least time between two level changes.")
    clear_for_s: float = Field(
        30.0, ge=0.0, description="Every trigger clear this long before a level is undone."
    )
    max_level: int = Field(4, ge=0, le=4, description="Highest level the controller goes to.")
    batch_divisor: int = Field(2, ge=2, description="Level 2+: max batch divided by this.")
    credit_scale: float = Field(
        0.5, gt=0.0, le=1.0, description="Level 3+: credits granted to devices scaled by this."
    )
    low_priority_cameras: list[str] = Field(
        default_factory=list,
        description="Cameras answered from their last result at level 4 (no inference).",
    )


class BatchLimitConfig(StrictModel):
    """The adaptive batch limit of the rule policy (edge/overload/batch_limit.py)."""

    min_batch: int = Field(1, ge=1, description="The batch limit never goes below this.")
    adapt_every: int = Field(8, ge=1, description="Batches between two batch-limit decisions.")


class DeadlineConfig(StrictModel):
    """Deadline shedding (edge/overload/deadline.py)."""

    enabled: bool = Field(
        False,
        description="Shed (final ack SHED, reason deadline) a frame taken for a batch that "
        "would finish past scheduler.sla_ms after it arrived: it could not count as goodput.",
    )


# Keys that moved into `edge.overload`, by old path: the error names the new one.
MOVED_KEYS = {
    ("degradation",): "edge.degradation moved to edge.overload.gpu_pressure",
    ("scheduler", "deadline_shed"): (
        "edge.scheduler.deadline_shed moved to edge.overload.deadline.enabled"
    ),
    (
        "batching",
        "min_batch",
    ): "edge.batching.min_batch moved to edge.overload.batch_limit.min_batch",
    ("batching", "adapt_every"): (
        "edge.batching.adapt_every moved to edge.overload.batch_limit.adapt_every"
    ),
}


def _moved(data: object) -> None:
    """Raise the clear error of a key that moved (see MOVED_KEYS)."""
    if not isinstance(data, dict):
        return
    for path, why in MOVED_KEYS.items():
        node: object = data
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None or (len(path) == 1 and path[0] in data):
            raise ValueError(why)


class OverloadConfig(StrictModel):
    """Every overload mechanism of the edge, one sub-section each (edge/overload has the
    order they act in; the credits are edge.flow, the device's source degradation is
    device.degrade)."""

    batch_limit: BatchLimitConfig = Field(
        default_factory=BatchLimitConfig, description="Adaptive batch limit (rule policy)."
    )
    deadline: DeadlineConfig = Field(
        default_factory=DeadlineConfig, description="Deadline shedding of batched frames."
    )
    gpu_pressure: GpuPressureConfig = Field(
        default_factory=GpuPressureConfig, description="GPU pressure levels 1-4."
    )


class FlowConfig(StrictModel):
    """Credits, BUSY answers, degradation levels and duplicate records (delivery)."""

    initial_credits: int = Field(
        4, ge=1, description="Credit per camera until the node has measured its throughput."
    )
    min_credits: int = Field(1, ge=1, description="No camera's credit goes below this.")
    credit_headroom: float = Field(
        0.4,
        gt=0,
        description="Credits over all cameras: one batch plus capacity x delay target x "
        "this (Little's law: the mean queue delay comes to about this share of the target, "
        "under the half where the batch rule raises a lowered batch back).",
    )
    batches_in_node: float = Field(
        2.0,
        ge=0,
        description="Credits over all cameras never fall below this many batches of the "
        "current batch limit, and never below one a runner slot plus one (one in service, "
        "the next already queued: the worker never waits on acks travelling back); 0: no "
        "floor.",
    )
    active_s: float = Field(
        2.0, gt=0, description="A camera that sent within this long shares the credits."
    )
    retry_min_ms: int = Field(5, ge=1, description="Shortest retry_after_ms of a BUSY answer.")
    period_s: float = Field(0.5, gt=0, description="How often degradation levels are decided.")
    loaded_pressure: float = Field(
        0.5, ge=0, description="Pressure (queue delay / target) from which cameras degrade."
    )
    saturated_fraction: float = Field(
        0.5,
        gt=0,
        le=1,
        description="A camera whose admissions found its credit used up this often saturates.",
    )
    up_s: float = Field(1.0, gt=0, description="Seconds at a level before going one up.")
    down_s: float = Field(
        3.0, gt=0, description="Calm seconds before a level comes one down (hysteresis)."
    )
    settled_per_stream: int = Field(
        4096, ge=64, description="Final statuses remembered per (session, camera) for resends."
    )
    stream_idle_s: float = Field(
        300.0, gt=0, description="A (session, camera) idle this long, nothing held, is forgotten."
    )


class DetectionConfig(StrictModel):
    """Decoding and NMS."""

    score_threshold: float = Field(0.25, ge=0.0, le=1.0, description="Minimum class score.")
    iou_threshold: float = Field(0.45, ge=0.0, le=1.0, description="NMS IoU threshold.")
    max_detections: int = Field(300, ge=1, description="Most boxes kept per frame.")


class CropsConfig(StrictModel):
    """Which detections go to the cloud for a second opinion."""

    classes: list[str] = Field(
        default_factory=list, description="Labels eligible for the cloud; empty: every label."
    )
    score_min: float = Field(0.25, ge=0.0, le=1.0, description="Lowest score sent.")
    score_max: float = Field(
        0.6, ge=0.0, le=1.0, description="Scores above this are trusted; not sent."
    )
    max_per_frame: int = Field(4, ge=0, description="Most crops per frame; 0: none.")
    jpeg_quality: int = Field(85, ge=1, le=100, description="JPEG quality of crops.")
    pad: float = Field(0.1, ge=0.0, le=1.0, description="Margin added around a box, by its size.")
    max_per_track: int = Field(
        3, ge=1, description="Most crops of one tracked object (one cloud look per object)."
    )
    track_interval_s: float = Field(
        10.0, ge=0.0, description="A track is sent again no sooner than this (capture time)."
    )
    track_change_iou: float = Field(
        0.3,
        ge=0.0,
        le=1.0,
        description="...and only if its box overlaps the last one sent less than this.",
    )
    track_score_change: float = Field(
        0.2, ge=0.0, le=1.0, description="...or its score moved by more than this."
    )


class SnapshotsConfig(StrictModel):
    """Track snapshots: each track's best crop and a full-frame JPEG of that moment, sent
    to the cloud with the track's events (edge/publish/snapshots.py; docs/events.md)."""

    enabled: bool = Field(True, description="Make snapshots of tracks (needs a cloud).")
    max_width: int = Field(
        1280, ge=32, le=8192, description="Full frames wider than this are scaled down to it."
    )
    jpeg_quality: int = Field(85, ge=1, le=100, description="JPEG quality of snapshots.")
    crop_pad: float = Field(
        0.15, ge=0.0, le=1.0, description="Margin added around the box of a best crop, by its size."
    )
    edge_margin: float = Field(
        0.005,
        ge=0.0,
        le=0.2,
        description="A box side this close to the frame's border (share of the frame) touches it.",
    )
    edge_penalty: float = Field(
        0.3,
        ge=0.0,
        le=1.0,
        description="Quality lost per box side touching the border (score x (1 - this)^sides).",
    )
    min_gain: float = Field(
        0.05, ge=0.0, description="A new best must beat the last one's quality by this share."
    )
    update_every_s: float = Field(
        10.0,
        ge=0.0,
        description="A better snapshot is sent at most this often while the track lives "
        "(capture time); 0: only the first (with `new`) and the final (with `end`).",
    )
    max_tracks: int = Field(
        4096, ge=1, description="Tracks whose best snapshot is held at once (all cameras)."
    )


class EdgeClipsConfig(StrictModel):
    """The clip demand: which tracks each camera's device should cut clips of, sent on its
    acks (edge/publish/clip_demand.py; docs/edge.md, "Clip demand")."""

    enabled: bool = Field(
        True, description="Tell each camera's device, on its acks, which tracks to cut clips of."
    )
    keep_ended_s: float = Field(
        30.0,
        gt=0.0,
        description="An ended track stays in the demand this long after its end (capture "
        "time), so the device hears of the end.",
    )
    resend_s: float = Field(
        5.0, gt=0.0, description="The demand is sent again this often even when unchanged."
    )
    max_tracks: int = Field(
        32,
        ge=1,
        le=1024,
        description="Most tracks in one camera's demand (live ones first); the rest are left "
        "out and counted.",
    )


class TrackingConfig(StrictModel):
    """The per-camera tracker (ids, and boxes for frames the device did not send)."""

    enabled: bool = Field(True, description="Track objects; off: skipped frames get no boxes.")
    # At the detector's own score threshold: a box the tracker leaves untracked is never
    # answered on a skipped frame (vtest, 1 frame in 5: box F1 0.924 at 0.4, 0.933 here).
    high_score: float = Field(
        0.25, ge=0.0, le=1.0, description="Detections at or above this are matched first."
    )
    new_track_score: float = Field(
        0.25, ge=0.0, le=1.0, description="Lowest score that starts a new track."
    )
    match_iou: float = Field(
        0.3, ge=0.0, le=1.0, description="A detection this IoU with a predicted box may match."
    )
    match_distance: float = Field(
        0.8, ge=0.0, description="Or one whose centre is this close, in box heights."
    )
    min_hits: int = Field(1, ge=1, description="Detections before a track is predicted.")
    # vtest, saved detections replayed (`strata bench rules --from DIR --retrack`): tracks
    # 46 -> 35 (reference) and 45 -> 30 (cascade), cascade count agreement 0.929 -> 0.938,
    # box F1 equal or up at 1 frame in 5; 1.5 and more merges different people.
    # vtest, replayed as above: cascade F1 of rule events 0.842 -> 0.856, count 0.938 ->
    # 0.951, box F1 up 0.001-0.002; 0.35 to 1.0 all raise the F1, the count moves +-0.013.
    direction_weight: float = Field(
        0.5,
        ge=0.0,
        description="Added cost, in box heights, of a detection straight behind a moving "
        "track's last observed box (half that at right angles); 0: off.",
    )
    # vtest, saved detections replayed through the tracker at 1 frame in 5 (5 phases,
    # `strata bench rules-policy`): rule events F1 0.835 -> 0.872, count 0.899 -> 0.915,
    # box F1 0.931 -> 0.934; id switches against the every-frame run 81 -> 64.
    size_weight: float = Field(
        1.0,
        ge=0.0,
        description="Added cost per unit of |log| of the height ratio of a detection and a "
        "track's predicted box (people near and far); 0: off.",
    )
    recover_distance: float = Field(
        1.0,
        ge=0.0,
        description="A track missed at the last detected frame may take a confident detection "
        "this close (in box heights) to its last observed box; 0: off.",
    )
    answer: Literal["predict", "interpolate"] = Field(
        "predict",
        description="Skipped frames: the tracker's prediction (no wait), or interpolated "
        "between the detected frames around them (more accurate; waits up to a gap).",
    )
    hold_s: float = Field(
        2.0, gt=0, description="A skipped frame waits at most this long, then is predicted."
    )
    send_next_uncertainty: float = Field(
        0.0,
        ge=0.0,
        description="Ask the agent for the next frame when a track's predicted position is "
        "this uncertain (std over box height); 0: never.",
    )
    calibration_max_gap: int = Field(
        15, ge=1, description="Calibration measures keeping 1 frame in g for g up to this."
    )
    calibration_window: int = Field(
        4,
        ge=1,
        description="The estimate of a camera's accuracy scores its spacing on the mean of "
        "its last this many calibration bursts.",
    )
    max_lost: int = Field(
        60, ge=0, description="Source frames a track lives on without a detection."
    )
    max_predict: int = Field(
        0,
        ge=0,
        description="Predicted only if seen at most this many frames before the last detected one.",
    )


class UplinkTlsConfig(StrictModel):
    """TLS of a connection to the cloud (the cloud's cloud.tls); on when `enabled` or ca_file
    is set. Used under edge.uplink.tls and device.clips.upload.tls: its errors name no
    section (the config error's path does)."""

    enabled: bool = Field(False, description="Use TLS, trusting the system's CA roots.")
    ca_file: str = Field(
        "", description="PEM CA bundle that signed the cloud's certificate; set: TLS on."
    )
    cert_file: str = Field(
        "", description="PEM client certificate, for a cloud that requires mTLS."
    )
    key_file: str = Field("", description="PEM private key of cert_file.")
    server_name: str = Field(
        "", description="Name to verify the cloud's certificate against; empty: the target's."
    )

    @property
    def on(self) -> bool:
        """Whether the uplink uses TLS."""
        return self.enabled or bool(self.ca_file)

    @model_validator(mode="after")
    def _pair(self) -> UplinkTlsConfig:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("cert_file and key_file go together (mTLS): set both or neither")
        if self.cert_file and not self.on:
            raise ValueError("cert_file needs TLS: set ca_file or enabled")
        return self


class UplinkConfig(StrictModel):
    """The gRPC streams to the cloud, their buffer and spool, and the circuit breaker."""

    queue: int = Field(
        256, ge=1, description="Crops held in memory; more spill to the spool (or drop)."
    )
    spool_path: str = Field(
        "",
        description="SQLite file crops spill to while the cloud is away (one per edge "
        "process); empty: memory only.",
    )
    spool_max_mib: float = Field(
        512.0, gt=0, description="Spool size bound (MiB); beyond it the oldest crops drop."
    )
    batch: int = Field(8, ge=1, description="Most crops per CropBatch.")
    snapshot_queue: int = Field(
        32,
        ge=1,
        description="Track snapshots held in memory; with a spool all wait on disk too, "
        "else the oldest drop.",
    )
    max_inflight: int = Field(
        64, ge=1, description="Crops sent and not yet acked, all streams together."
    )
    streams: int = Field(
        2, ge=1, le=64, description="Uplink streams; round_robin spreads them over endpoints."
    )
    stream_max_age_s: float = Field(
        30.0, gt=0.0, description="Streams are renewed after this, spreading them anew."
    )
    ack_timeout_s: float = Field(5.0, gt=0.0, description="A crop unacked this long failed.")
    failure_threshold: int = Field(
        3, ge=1, description="Consecutive failures that open the breaker."
    )
    p99_limit_ms: float = Field(
        2000.0, gt=0.0, description="Open the breaker when the p99 ack latency exceeds this."
    )
    latency_window: int = Field(100, ge=10, description="Acks in the p99 window.")
    min_latency_samples: int = Field(
        20, ge=1, description="Acks in the window before the p99 rule may open the breaker."
    )
    close_ratio: float = Field(
        0.8,
        gt=0.0,
        le=1.0,
        description="A probe closes the breaker only under this share of p99_limit_ms.",
    )
    open_s: float = Field(5.0, gt=0.0, description="Seconds open before a half-open probe.")
    connect_timeout_s: float = Field(2.0, gt=0.0, description="Wait for the channel to connect.")
    tls: UplinkTlsConfig = Field(default_factory=UplinkTlsConfig, description="TLS and mTLS.")
    token_file: str = Field(
        "", description="File holding the bearer token the cloud expects; empty: none."
    )


def _is_ip(host: str) -> int:
    """4 or 6 for an IP literal, 0 for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]")).version
    except ValueError:
        return 0


def cloud_target(cloud: str | list[str]) -> str:
    """The gRPC target of edge.cloud: one HOST:PORT or dns:///NAME:PORT as given, or a list
    of IP:PORT addresses as one ipv4:/ipv6: target (round_robin balances over it)."""
    if isinstance(cloud, str):
        return cloud
    if len(cloud) == 1:
        return cloud[0]
    versions = set()
    for entry in cloud:
        host, sep, port = entry.rpartition(":")
        if not sep or not port.isdigit() or not _is_ip(host):
            raise ValueError(
                f"edge.cloud entry {entry!r}: a list takes IP:PORT addresses; for names use "
                "one DNS name that resolves to several addresses (dns:///NAME:PORT)"
            )
        versions.add(_is_ip(host))
    if len(versions) > 1:
        raise ValueError("edge.cloud: a list mixes IPv4 and IPv6 addresses")
    return f"ipv{versions.pop()}:" + ",".join(cloud)


class IngestConfig(StrictModel):
    """What one peer can make the node hold, checked before anything is decoded."""

    max_width: int = Field(8192, ge=1, description="Widest frame accepted, in pixels.")
    max_height: int = Field(8192, ge=1, description="Tallest frame accepted, in pixels.")
    max_pixels: int = Field(
        33_177_600, ge=1, description="Most pixels per frame (default: 7680x4320)."
    )
    receive_hwm: int = Field(
        64,
        ge=1,
        description="Messages queued per connected peer before ZeroMQ stops reading it "
        "(ZMQ_RCVHWM; the peer's TCP connection then waits).",
    )
    decode_threads: int = Field(
        2,
        ge=1,
        le=64,
        description="Threads decoding a batch's JPEG frames in the worker (OpenCV frees the GIL).",
    )
    camera_idle_s: float = Field(
        120.0,
        gt=0.0,
        description="A camera silent this long is forgotten (its slot and sequence state freed).",
    )
    sessions_per_camera: int = Field(
        4, ge=1, description="Sender sessions remembered per camera; the least recent is forgotten."
    )


class CurveServerConfig(StrictModel):
    """ZeroMQ CURVE encryption and client authentication of the frame and results sockets."""

    secret_key: str = Field(
        "", description="The node's key pair (a `strata keys` .key_secret file); empty: off."
    )
    clients_dir: str = Field(
        "",
        description="Folder of allowed client public keys (*.key: agents and subscribers); "
        "others are refused.",
    )

    @model_validator(mode="after")
    def _both(self) -> CurveServerConfig:
        if bool(self.secret_key) != bool(self.clients_dir):
            raise ValueError("curve needs both secret_key and clients_dir (or neither)")
        return self


class EdgeConfig(StrictModel):
    """Options of `strata edge`."""

    edge_id: str = Field("edge-1", description="This node's name in results and crops.")
    listen: str = Field(
        "tcp://127.0.0.1:5555", description="ZeroMQ ROUTER address device agents connect to."
    )
    publish: str = Field(
        "tcp://127.0.0.1:5556",
        description="ZeroMQ PUB address of detections (topic: camera id + one NUL byte).",
    )
    weight: float = Field(
        1.0,
        gt=0,
        description="Routing weight this node announces to agents (EdgeInfo): its share of "
        "cameras on their ring, 1.0 = one ordinary node.",
    )
    cloud: str | list[str] = Field(
        "",
        description="Cloud HOST:PORT, dns:///NAME:PORT (every address) or a list of IP:PORT; "
        "empty: no uplink.",
    )
    model: EdgeModelConfig = Field(default_factory=EdgeModelConfig, description="Detector.")
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig, description="Back end.")
    batching: BatchingConfig = Field(default_factory=BatchingConfig, description="Batching.")
    flow: FlowConfig = Field(default_factory=FlowConfig, description="Credits and delivery.")
    detection: DetectionConfig = Field(default_factory=DetectionConfig, description="NMS.")
    crops: CropsConfig = Field(default_factory=CropsConfig, description="Second opinions.")
    snapshots: SnapshotsConfig = Field(
        default_factory=SnapshotsConfig, description="Track snapshots to the cloud."
    )
    tracking: TrackingConfig = Field(
        default_factory=TrackingConfig, description="Per-camera tracker."
    )
    appearance: AppearanceConfig = Field(
        default_factory=AppearanceConfig,
        description="Appearance embeddings in the tracker, opt-in per camera (issue 42).",
    )
    clips: EdgeClipsConfig = Field(
        default_factory=EdgeClipsConfig, description="Clip demand sent to the devices."
    )
    uplink: UplinkConfig = Field(default_factory=UplinkConfig, description="Cloud uplink.")
    overload: OverloadConfig = Field(
        default_factory=OverloadConfig, description="Overload mechanisms (edge/overload)."
    )
    versions: ModelVersionsConfig = Field(
        default_factory=ModelVersionsConfig, description="Run-time model version switches."
    )
    checkpoint: CheckpointConfig = Field(
        default_factory=CheckpointConfig, description="Checkpoints of edge state."
    )
    scheduler: SchedulerConfig = Field(
        default_factory=SchedulerConfig, description="Batching policy (rule or learned)."
    )
    max_payload_mib: int = Field(
        32,
        ge=1,
        description="Largest message part; a bigger one drops the connection unread "
        "(ZMQ_MAXMSGSIZE).",
    )
    ingest: IngestConfig = Field(default_factory=IngestConfig, description="Input limits.")
    curve: CurveServerConfig = Field(
        default_factory=CurveServerConfig,
        description="CURVE encryption and authentication of both sockets (frames and results).",
    )
    allow_insecure: bool = Field(
        False,
        description="Allow listen or publish off loopback without CURVE (plaintext, anyone "
        "who reaches the port); the node refuses to start otherwise.",
    )
    metrics: MetricsConfig = Field(
        default_factory=MetricsConfig, description="Prometheus endpoint of this daemon."
    )

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: object) -> object:
        _moved(data)
        return data

    @field_validator("cloud")
    @classmethod
    def _cloud_target(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list):
            if not v:
                raise ValueError('edge.cloud: an empty list; use "" for no uplink')
            cloud_target(v)
        return v
