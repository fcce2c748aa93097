"""`build_node`: builds every stage of an edge node with its collaborators, in the order
a frame meets them, and hands them to `EdgeNode`, which only runs them (as Roboflow
Inference's InferencePipeline.init() builds and __init__ stores).

    inference  the serving model (runner, detector, version switches), then the objects
               filter (labels tracked checked against the model first)
    overload   batch policy, GPU pressure and the limits they put on batches and credits
    flow       delivery (ledger, credits), queues, final acks
    state      checkpointer (restored once every stateful part is built), takeover
    ingest     checks, then the ingest thread
    tracking   tracking and answers (EdgeCascade)
    rules      the rules stage (labels checked against the model first), the clip
               demand (edge.clips), the snapshot stage (with a cloud), then any other
               `after_tracking` stage
    publish    results, crops and track events to the uplink
    uplink     the cloud stream
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import Counter
from strata.edge.drivers.ingest_loop import Decorate, Forget, IngestLoop, IngestStages
from strata.edge.drivers.worker import Worker, WorkerStages, WorkerTicks
from strata.edge.flow.delivery import Delivery, Served
from strata.edge.flow.final_acks import FinalAcks
from strata.edge.flow.queues import CameraQueues
from strata.edge.inference.decode import FrameDecoder, RejectHook
from strata.edge.inference.detector import CPU_BACKENDS, Detector, model_labels, open_staged
from strata.edge.inference.objects import ObjectsFilter
from strata.edge.inference.scheduler import (
    BatchPolicy,
    DecisionClock,
    LoadReadings,
    SchedulerMetrics,
    SchedulerWindow,
    make_policy,
)
from strata.edge.inference.serving import ModelIdentity, ServingModel, VersionBuilder, classes_of
from strata.edge.inference.versions import ModelSwitcher, VersionMetrics, version_of
from strata.edge.ingest.frames import QueuedFrame
from strata.edge.ingest.intake import Ingest
from strata.edge.metrics import EdgeMetrics, RulesCollector
from strata.edge.node import EdgeNode, NodeStages
from strata.edge.overload.deadline import DeadlineShedder, ShedHook
from strata.edge.overload.gpu_pressure import GpuPressure
from strata.edge.overload.limits import OverloadLimits
from strata.edge.publish.clip_demand import ClipDemand
from strata.edge.publish.crops import CropSelector
from strata.edge.publish.results import Results
from strata.edge.publish.snapshots import SnapshotStage
from strata.edge.publish.to_cloud import CropsToCloud
from strata.edge.rules.engine import RulesEngine
from strata.edge.rules.stage import RulesStage
from strata.edge.state.checkpoint import Checkpointer, CheckpointMetrics, CheckpointPart
from strata.edge.state.checkpoint_file import VERSION, CheckpointBody
from strata.edge.state.parts import CountersPart, SettledPart, TrackersPart, UplinkPart
from strata.edge.state.takeover import Takeover
from strata.edge.tracking.appearance import Appearance
from strata.edge.tracking.cascade import EdgeCascade
from strata.edge.tracking.codec_probe import CodecProbe
from strata.edge.tracking.handoff import TrackedStage
from strata.edge.uplink.stream import Uplink
from strata.shared.config.edge import EdgeConfig
from strata.shared.config.objects import ObjectsConfig
from strata.shared.config.rules import RulesConfig, check_labels
from strata.shared.contracts import frame_pb2
from strata.shared.gpu_telemetry import DcgmCollector, GpuTelemetry, TelemetrySource, open_nvml
from strata.shared.models import ModelRepository
from strata.shared.models.detector import DetectorSpec, spec_beside
from strata.shared.runtime import ModelLoadError
from strata.shared.runtime.staging import StagedRunner

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NodeOptions:
    """What a node may be given besides its config and model file."""

    metrics: EdgeMetrics | None = None
    # An opened runner to serve instead of opening the model file (tests, tools).
    runner: StagedRunner | None = None
    # Labels when neither the config nor the model names its classes.
    labels: Sequence[str] = ()
    # Preprocessing, output layout and labels from the model's manifest; None: a bare
    # ONNX file, read as YOLOv8.
    spec: DetectorSpec | None = None
    telemetry: TelemetrySource | None = None
    # The model repository to watch for new versions ("" the default one); None: none.
    repository: str | None = None
    # Stages between tracking and publish (strata.edge.tracking.handoff), in order, after
    # the rules stage.
    after_tracking: Sequence[TrackedStage] = ()
    # The top-level `rules:` section (zones, lines, dwell per camera); None: no rules, yet
    # every track's lifecycle events.
    rules: RulesConfig | None = None
    # The top-level `objects:` section (labels tracked, per-label filters); None: every
    # detection is kept (a node built without the root config: tests, tools).
    objects: ObjectsConfig | None = None


@dataclass(frozen=True, slots=True)
class _Overload:
    gpu: GpuPressure
    telemetry: GpuTelemetry
    limits: OverloadLimits


@dataclass(frozen=True, slots=True)
class _Flow:
    delivery: Delivery
    queues: CameraQueues
    acks: FinalAcks
    window: SchedulerWindow


@dataclass(frozen=True, slots=True)
class _Built:
    """The stages up to publish, before the threads' loops are built around them."""

    cfg: EdgeConfig
    metrics: EdgeMetrics
    serving: ServingModel
    objects: ObjectsFilter
    policy: BatchPolicy
    overload: _Overload
    checkpointer: Checkpointer
    flow: _Flow
    takeover: Takeover
    ingest: Ingest
    cascade: EdgeCascade
    rules: RulesStage
    uplink: Uplink | None
    results: Results
    clips: ClipDemand | None


def build_node(
    cfg: EdgeConfig,
    model_path: str | Path,
    model_name: str = "",
    options: NodeOptions | None = None,
) -> EdgeNode:
    """An edge node serving `model_path`, every stage built and its state restored.
    UntrackableLabelError or UnknownLabelError (the model closed again) when objects.track
    or the rules name a label the model lacks."""
    opts = options or NodeOptions()
    import cv2  # here: cv2 stays out of `strata --help`

    # The cores belong to the detector: cv2's worker pool, woken for every frame's resize
    # of a few hundred pixels, preempts its threads (process-wide: the node owns its
    # process; docs/benchmarks.md, "Edge node").
    cv2.setNumThreads(1)
    metrics = opts.metrics or EdgeMetrics()
    serving = _serving(cfg, Path(model_path), model_name, opts, metrics)
    rules_cfg = opts.rules or RulesConfig()
    try:
        objects = ObjectsFilter(
            opts.objects, serving.labels, metrics.label_drops, cfg.detection.score_threshold
        )
        check_labels(rules_cfg, serving.labels)
        # AppearanceError (a ValueError) when its model is missing or not an embedding one.
        appearance = Appearance.for_node(cfg.appearance, tuple(serving.labels), opts.repository)
    except ValueError:
        if serving.switcher is not None:
            serving.switcher.stop()
        serving.detector.close()
        serving.runner.close()
        raise
    policy = make_policy(cfg, serving.max_batch)
    metrics.batch_limit.set(serving.max_batch)
    overload = _overload(cfg, serving, policy, metrics, opts.telemetry)
    checkpointer = _checkpointer(cfg, serving, metrics)
    flow = _flow(cfg, serving, overload, metrics, checkpointer)
    takeover = Takeover(cfg.edge_id, checkpointer, flow.delivery.precheck)
    ingest = Ingest(cfg, metrics, precheck=takeover.precheck)
    cascade = EdgeCascade(cfg, metrics.registry, serving.detector.input_size, appearance)
    flow.acks.decorate = cascade.decorate
    rules = _rules(cfg, rules_cfg, serving, cascade, metrics)
    uplink = Uplink(cfg.cloud, cfg.uplink, metrics) if cfg.cloud else None
    if uplink is None:
        log.warning(
            "no cloud configured: track events go only to the PUB socket (a copy that drops "
            "without a subscriber), they are not durable"
        )
    to_cloud = _to_cloud(cfg, uplink, overload.gpu, metrics, serving, rules)
    results = Results(cfg.edge_id, serving, metrics, flow.acks, to_cloud, checkpointer)
    clips = ClipDemand(cfg.clips, metrics) if cfg.clips.enabled else None
    built = _Built(
        cfg, metrics, serving, objects, policy, overload, checkpointer, flow, takeover, ingest,
        cascade, rules, uplink, results, clips,
    )  # fmt: skip
    _restore(built)
    # The clip demand and snapshots follow the rules (they read and name their events);
    # snapshots need the uplink.
    after: tuple[TrackedStage, ...] = (rules,) if clips is None else (rules, clips)
    if uplink is not None and cfg.snapshots.enabled:
        after += (SnapshotStage(cfg.snapshots, serving.labels, cfg.edge_id, metrics),)
    return _node(built, (*after, *opts.after_tracking))


def _rules(
    cfg: EdgeConfig,
    rules: RulesConfig,
    serving: ServingModel,
    cascade: EdgeCascade,
    metrics: EdgeMetrics,
) -> RulesStage:
    """The rules stage: every camera's rules engine; it asks devices for their next frames
    through the cascade's feedback; its counts are on /metrics."""
    engine = RulesEngine(rules, cfg.edge_id)
    stage = RulesStage(engine, serving.labels, cascade.ask_next, cascade.ask_refused)
    stage.appearance_of = cascade.appearance_of
    metrics.registry.register(RulesCollector(stage.counts))
    if rules.cameras:
        log.info("rules for camera(s) %s", ", ".join(sorted(rules.cameras)))
    return stage


def _restore(b: _Built) -> None:
    """Every stateful stage registers its checkpoint part, restored from the checkpoint
    loaded (before any thread runs)."""
    counters = [v for v in vars(b.metrics).values() if isinstance(v, Counter)]
    parts: list[CheckpointPart] = [
        SettledPart(b.flow.delivery.ledger, b.ingest),
        TrackersPart(b.cascade.answers),
        CountersPart(counters),
        UplinkPart(b.uplink, b.cfg.uplink, b.checkpointer.metrics.adopted_crops),
        b.rules,
    ]
    b.checkpointer.register_all(parts if b.clips is None else [*parts, b.clips])


def _node(b: _Built, after_tracking: Sequence[TrackedStage]) -> EdgeNode:
    """The worker and ingest loops around the stages, and the node that runs them."""
    cfg, flow, cascade = b.cfg, b.flow, b.cascade
    # Frames are decoded in the worker, only once taken for a batch.
    decoder = FrameDecoder(
        b.metrics, cfg.ingest.decode_threads, _undecodable(cascade, flow.acks), cascade.h264
    )
    shedder = DeadlineShedder(
        cfg.overload.deadline, cfg.scheduler.sla_ms / 1e3, _shed(cascade, flow)
    )
    stop, worker_done = threading.Event(), threading.Event()
    stages = WorkerStages(
        queues=flow.queues,
        limits=b.overload.limits,
        policy=b.policy,
        window=flow.window,
        shedder=shedder,
        decoder=decoder,
        serving=b.serving,
        objects=b.objects,
        codec_probe=CodecProbe(b.serving, b.objects, cascade, lambda: flow.delivery.credits.loaded),
        cascade=cascade,
        after_tracking=after_tracking,
        results=b.results,
        acks=flow.acks,
        credits=flow.delivery.credits,
    )
    decisions = _decisions(cfg, b.policy, flow, b.overload.telemetry, b.metrics)
    ticks = WorkerTicks(b.metrics, b.overload.gpu, b.overload.telemetry, decisions, b.checkpointer)
    ingest_loop = IngestLoop(_ingest_stages(b), cfg.ingest.camera_idle_s, stop, worker_done)
    return EdgeNode(
        NodeStages(
            cfg=cfg,
            metrics=b.metrics,
            ingest=b.ingest,
            ingest_loop=ingest_loop,
            delivery=flow.delivery,
            queues=flow.queues,
            serving=b.serving,
            policy=b.policy,
            decoder=decoder,
            worker=Worker(stages, ticks, stop),
            cascade=cascade,
            rules=b.rules,
            results=b.results,
            uplink=b.uplink,
            checkpointer=b.checkpointer,
            gpu_pressure=b.overload.gpu,
            telemetry=b.overload.telemetry,
            stop=stop,
            worker_done=worker_done,
            clips=b.clips,
        )
    )


def _ingest_stages(b: _Built) -> IngestStages:
    """What the ingest thread hands frames to, and every stage that forgets idle cameras."""
    forget: tuple[Forget, ...] = (b.takeover.forget_cameras, b.results.forget_cameras)
    decorate: tuple[Decorate, ...] = ()
    if b.clips is not None:
        forget += (b.clips.forget_cameras,)
        decorate = (b.clips.decorate,)
    return IngestStages(
        ingest=b.ingest,
        delivery=b.flow.delivery,
        cascade=b.cascade,
        queues=b.flow.queues,
        metrics=b.metrics,
        forget=forget,
        decorate=decorate,
    )


def _flow(
    cfg: EdgeConfig,
    serving: ServingModel,
    overload: _Overload,
    metrics: EdgeMetrics,
    journal: Checkpointer,
) -> _Flow:
    """Delivery (ledger, credits under the overload limits), queues, final acks."""
    served = Served(
        serving.name,
        (serving.detector.input_size,) * 2,
        serving.max_batch,
        serving.runner.slots,
    )
    delivery = Delivery(cfg, served, metrics, overload.limits)
    # Read at scrape time: whether the granted credits are in use.
    metrics.credits.set_function(lambda: delivery.credits.total_credits)
    metrics.held.set_function(lambda: delivery.credits.held)
    window = SchedulerWindow(
        cfg.scheduler.sla_ms / 1e3, cfg.batching.max_cameras * cfg.batching.queue_per_camera
    )
    return _Flow(
        delivery,
        CameraQueues(cfg.batching.queue_per_camera),
        FinalAcks(delivery, journal, metrics),
        window,
    )


def _undecodable(cascade: EdgeCascade, acks: FinalAcks) -> RejectHook:
    """What happens to a frame taken for a batch that did not decode (the decoder counts
    and logs it): tracking stops waiting for it, its final ack says why."""

    def reject(frame: QueuedFrame, reason: str, detail: str) -> None:
        cascade.abandon(frame.header)
        if reason.startswith("h264"):
            cascade.lost_h264(frame.header, reason)
        acks.send(frame, frame_pb2.ACK_STATUS_REJECTED, f"{reason}: {detail}")

    return reject


def _shed(cascade: EdgeCascade, flow: _Flow) -> ShedHook:
    """What happens to a frame deadline shedding drops: tracking stops waiting for it,
    the batch policy's window counts it, its final ack is SHED with the reason."""

    def shed(frame: QueuedFrame, reason: str) -> None:
        cascade.abandon(frame.header)
        flow.window.add_shed()
        flow.acks.send(frame, frame_pb2.ACK_STATUS_SHED, reason)

    return shed


def _serving(
    cfg: EdgeConfig, path: Path, name: str, opts: NodeOptions, metrics: EdgeMetrics
) -> ServingModel:
    """The model to serve: runner, detector, batch, and version switches if watched."""
    name = name or cfg.model.name or path.stem
    runner = opts.runner or open_staged(path, cfg, cfg.batching.max_batch)
    try:
        spec = opts.spec or spec_beside(path)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None
    classes = len(spec.labels) if spec is not None else classes_of(runner)
    # Config first, then the repository manifest's, then the ONNX metadata.
    manifest_labels = tuple(spec.labels) if spec is not None else ()
    labels = model_labels(path, classes, cfg.model.labels or opts.labels or manifest_labels)
    detector = Detector(runner, labels, cfg.detection, cfg.runtime.preprocess_threads, spec)
    max_batch = min(cfg.batching.max_batch, detector.max_batch)
    if max_batch < cfg.batching.max_batch:
        # A fixed-batch export (batch 1 is common) or an engine built for less.
        log.warning(
            "model %s takes at most %d frames per batch: batching.max_batch lowered from %d to %d",
            name,
            detector.max_batch,
            cfg.batching.max_batch,
            max_batch,
        )
    if opts.repository is None:
        return ServingModel(ModelIdentity(name, path), detector, max_batch)
    # Run-time version switches of a repository model (edge/inference/versions.py).
    repo = ModelRepository(opts.repository or None)
    version = version_of(repo, name, path)
    switcher = ModelSwitcher(
        repo,
        name,
        version,
        cfg.versions,
        VersionBuilder(cfg, detector, max_batch),
        VersionMetrics(metrics.registry),
    )
    return ServingModel(ModelIdentity(name, path, version), detector, max_batch, switcher)


def _overload(
    cfg: EdgeConfig,
    serving: ServingModel,
    policy: BatchPolicy,
    metrics: EdgeMetrics,
    source: TelemetrySource | None,
) -> _Overload:
    """GPU telemetry (absent without NVML), the GPU pressure levels it drives, and the
    limits they and the batch policy put on batches and credits."""
    gp = cfg.overload.gpu_pressure
    telemetry = GpuTelemetry(source if source is not None else open_nvml(), gp.interval_s)
    metrics.registry.register(DcgmCollector(telemetry))
    on_gpu = serving.runner.backend not in CPU_BACKENDS
    gpu = GpuPressure(gp, metrics.gpu_pressure, on_gpu=on_gpu)
    if not gpu.enabled:
        log.info("GPU pressure levels off (overload.gpu_pressure.enabled: %s)", gp.enabled)
    return _Overload(gpu, telemetry, OverloadLimits(policy, gpu))


def _checkpointer(cfg: EdgeConfig, serving: ServingModel, metrics: EdgeMetrics) -> Checkpointer:
    """The checkpointer, its checkpoint loaded: the parts restore when they register."""

    def header() -> CheckpointBody:
        return CheckpointBody(
            version=VERSION,
            edge_id=cfg.edge_id,
            written_unix=time.time(),
            model=serving.name,
            model_version=serving.version,
        )

    checkpointer = Checkpointer(
        cfg.checkpoint, cfg.edge_id, header, CheckpointMetrics(metrics.registry)
    )
    checkpointer.load()
    return checkpointer


def _to_cloud(
    cfg: EdgeConfig,
    uplink: Uplink | None,
    gpu: GpuPressure,
    metrics: EdgeMetrics,
    serving: ServingModel,
    rules: RulesStage,
) -> CropsToCloud | None:
    """Crops for the cloud's second opinion (none of a stationary track) and track
    events, when there is an uplink."""
    if uplink is None:
        return None
    selector = CropSelector(cfg.crops, serving.labels, cfg.edge_id, rules.is_stationary)
    return CropsToCloud(selector, uplink, gpu, metrics)


def _decisions(
    cfg: EdgeConfig,
    policy: BatchPolicy,
    flow: _Flow,
    telemetry: GpuTelemetry,
    metrics: EdgeMetrics,
) -> DecisionClock:
    """The batch policy's decision windows."""
    queues = flow.queues

    def power_w() -> float | None:
        # The GPUs' power draw (NVML); None without a GPU that reports it.
        watts = [s.power_w for s in telemetry.samples() if s.power_w is not None]
        return sum(watts) if watts else None

    return DecisionClock(
        policy,
        flow.window,
        cfg.scheduler.decide_every_s,
        LoadReadings(
            lambda: len(queues),
            # The queues of the cameras seen, not of every camera the node may take.
            lambda: max(1, queues.cameras) * cfg.batching.queue_per_camera,
            power_w,
        ),
        SchedulerMetrics(metrics.registry, policy.name),
    )
