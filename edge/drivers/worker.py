"""The worker thread: the pipeline from the queues to publish, one batch at a time.

Each turn: take a batch (the batch limit in force, strata.edge.overload.limits) ->
shed what would miss its deadline (overload.deadline) -> answer low-priority cameras
from cache at GPU pressure 4 -> decode -> launch on the detector; when the runner's
slots are full (or nothing new came) finish the oldest batch -> the `objects` section's
labels and filters (edge/inference/objects.py) -> a codec probe detected again after a
JPEG round trip (edge/tracking/codec_probe.py) -> tracking -> the
`after_tracking` stages (strata.edge.tracking.handoff: the rules stage first) -> publish
(results, track events, final acks, crops to the uplink); a camera's skipped frames
answered by tracking take the same way, in capture order with its detected ones.
Between batches: model version switches, tracking's answers for skipped frames, and the
periodic ticks (gauges, GPU pressure, the batch policy's window, checkpoints).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from strata.edge.flow.credits import CreditGate
from strata.edge.flow.final_acks import FinalAcks
from strata.edge.flow.queues import CameraQueues
from strata.edge.inference.decode import FrameDecoder
from strata.edge.inference.detector import InFlight
from strata.edge.inference.objects import ObjectsFilter
from strata.edge.inference.scheduler import BatchPolicy, DecisionClock, SchedulerWindow
from strata.edge.inference.serving import ServingModel
from strata.edge.ingest.frames import QueuedFrame
from strata.edge.metrics import EdgeMetrics
from strata.edge.overload.deadline import DeadlineShedder
from strata.edge.overload.gpu_pressure import GpuPressure
from strata.edge.overload.limits import OverloadLimits
from strata.edge.publish.results import Results
from strata.edge.state.checkpoint import Checkpointer
from strata.edge.tracking.answers import Answer
from strata.edge.tracking.cascade import EdgeCascade
from strata.edge.tracking.codec_probe import CodecProbe
from strata.edge.tracking.handoff import AnsweredFrame, TrackedFrame, TrackedStage
from strata.shared.gpu_telemetry import GpuTelemetry

log = logging.getLogger(__name__)

POLL_S = 0.1


# Built by keyword only: too many fields to match by position.
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStages:
    """What the worker drives, in the order a frame meets them."""

    queues: CameraQueues
    limits: OverloadLimits
    policy: BatchPolicy
    window: SchedulerWindow
    shedder: DeadlineShedder
    decoder: FrameDecoder
    serving: ServingModel
    objects: ObjectsFilter
    # A codec probe detected again after a JPEG round trip (before tracking: a probe is
    # a calibration frame, measured with the others).
    codec_probe: CodecProbe
    cascade: EdgeCascade
    after_tracking: Sequence[TrackedStage]
    results: Results
    acks: FinalAcks
    credits: CreditGate


@dataclass(frozen=True, slots=True)
class WorkerTicks:
    """What the worker updates between batches: gauges, GPU pressure, the batch policy's
    decision window, checkpoints."""

    metrics: EdgeMetrics
    gpu: GpuPressure
    telemetry: GpuTelemetry
    decisions: DecisionClock
    checkpointer: Checkpointer


class Worker:
    """Runs the stages on the worker thread until stopped and nothing is in flight."""

    def __init__(self, stages: WorkerStages, ticks: WorkerTicks, stop: threading.Event) -> None:
        self.s = stages
        self.t = ticks
        self.m = ticks.metrics
        self._stop = stop
        self._inflight: deque[InFlight] = deque()
        self._window_start, self._window_frames = time.monotonic(), 0
        # Busy time (for the capacity estimate): wall time minus waits with nothing to do.
        self._mark, self._idle = time.monotonic(), 0.0

    def run(self, pub: Any, acks_out: Any) -> None:
        """The thread's body: `pub` publishes results, `acks_out` carries final acks."""
        self.s.results.open(pub)
        self.s.acks.open(acks_out)
        self._window_start = self._mark = time.monotonic()
        while not self._stop.is_set() or self._inflight:
            frames = self._take()
            if frames:
                self._launch(frames)
            if self._inflight and (
                len(self._inflight) >= self.s.serving.runner.slots or not frames
            ):
                self._finish(self._inflight.popleft())
            # Between two batches: nothing in flight on the old runner.
            self.s.serving.poll(idle=not self._inflight)
            self._answer(self.s.cascade.ready())
            self._tick()

    def _take(self) -> list[QueuedFrame]:
        """The next batch, less what was shed or answered from cache."""
        s = self.s
        t0 = time.monotonic()
        frames = (
            []
            if self._stop.is_set()
            else s.queues.next_batch(
                s.limits.batch_limit(),
                s.policy.current().max_delay_s,
                0.0 if self._inflight else POLL_S,
            )
        )
        if not self._inflight:
            waited = time.monotonic() - t0
            self._idle += waited
            self.m.worker_idle.inc(waited)
            if not frames:
                s.credits.decay_delay()
        frames = s.shedder.keep(frames)
        if frames and self.t.gpu.level >= 4:
            frames = s.results.from_cache(frames, self.t.gpu, s.cascade.abandon)
        return frames

    def _launch(self, frames: list[QueuedFrame]) -> None:
        s = self.s
        now = time.monotonic()
        delays = [now - f.received for f in frames]
        for d in delays:
            self.m.queue_delay.observe(d)
        self.m.queue_depth.set(len(s.queues))
        decoded = s.decoder.decode(frames)
        if decoded:
            self.m.batch_size.observe(len(decoded))
            self._inflight.append(s.serving.detector.launch(decoded, time.time_ns()))
        s.policy.on_batch(delays)
        s.window.add_batch(len(frames))
        self.m.batch_limit.set(s.policy.current().max_batch)

    def _finish(self, job: InFlight) -> None:
        s = self.s
        results = s.serving.detector.finish(job)
        end_ns = time.time_ns()
        elapsed = job.elapsed()
        s.shedder.batch_took(elapsed)
        self.m.inference.observe(elapsed)
        self.t.gpu.observe_inference(elapsed)
        share = elapsed / max(1, len(job.frames))
        for frame in job.frames:
            cam = frame.header.camera_id
            self.m.camera_gpu_seconds.labels(cam).inc(share)
            self.m.camera_bytes.labels(cam, "in").inc(frame.header.payload_size)
        for frame, detected in zip(job.frames, results, strict=True):
            # Labels objects.track lacks and detections under their filters go first.
            boxes = s.objects(frame.header, detected)
            s.codec_probe(frame, boxes)
            # Boxes go out in the source frame's pixels with their track ids; the skipped
            # frames this detection completes are answered right after it, in order.
            tracked, answers = s.cascade.detected(frame.header, boxes, frame.image)
            # In capture order, so the rules follow each track's path step by step.
            idx = frame.header.frame_index
            self._answer([a for a in answers if a.header.frame_index < idx])
            tf = TrackedFrame(frame, tracked.as_frame_boxes(), tracked, job.start_ns, end_ns, boxes)
            for stage in s.after_tracking:
                tf = stage(tf)
            s.results.frame(tf)
            self._answer([a for a in answers if a.header.frame_index >= idx])
        # The model's own answers (before objects): a new version is canaried on those.
        s.serving.remember(job.frames, results)
        done = time.monotonic()
        s.window.add_latencies([done - f.frame.received for f in job.frames])
        self._window_frames += len(results)
        s.credits.observe_batch(
            len(results),
            max(1e-6, done - self._mark - self._idle),
            [job.launched - f.frame.received for f in job.frames],
        )
        self._mark, self._idle = done, 0.0

    def _answer(self, answers: list[Answer]) -> None:
        """Skipped frames' answers (from tracking) through the stages after tracking, then
        published."""
        for a in answers:
            af = AnsweredFrame(a)
            for stage in self.s.after_tracking:
                af = stage.answered(af)
            self.s.results.answer(af.answer, af.events, af.snapshots)

    def _tick(self) -> None:
        t = self.t
        now = time.monotonic()
        if now - self._window_start >= 1.0:
            credits = self.s.credits
            self.m.fps.set(self._window_frames / (now - self._window_start))
            self.m.capacity.set(credits.capacity.fps)
            self.m.pressure.set(credits.pressure)
            self._window_start, self._window_frames = now, 0
            used = getattr(self.s.serving.runner, "memory_used", None)
            if callable(used):
                self.m.gpu_memory.set(float(used()))
        if t.gpu.due():
            t.gpu.tick(t.telemetry.samples())
        t.decisions.tick()
        t.checkpointer.tick()
