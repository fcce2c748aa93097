"""One camera: its own thread reads the source, applies the motion gate, and hands what it
keeps to its outlet (the camera's pipeline: converted, encoded and submitted on this same
thread, device/pipeline.py).

A stream that dies or stalls is reopened with exponential backoff and jitter; an error
that retrying cannot fix (missing file, not a video) ends this camera with one clear log
line, and never touches the other cameras.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from strata.shared.config.device import CascadeConfig, MotionConfig, SourceConfig
from strata.shared.logs import RateLimitedLog

from .capture.decode_ahead import DecodeAhead
from .capture.decoding import DecoderChoice, HeldAhead
from .capture.frames import Frame
from .capture.sources import PacketTap, Source, SourceError, error_kind, is_live, open_source
from .filters.burst_slots import BurstSlots
from .filters.cascade import CascadeMetrics, CascadePolicy
from .filters.codec_probes import codec_probes
from .filters.inbox import GateItem
from .filters.motion import MotionDecision, MotionGate
from .metrics import CameraMetrics, DropLog
from .pipeline import FrameOutlet
from .transport.degrade import REASON_MOTION, REASON_RATE, SourceDegrader

log = logging.getLogger(__name__)

# A held-back frame the source did not decode, no longer held when it came (the edge asked).
REASON_NOT_DECODED = "not_decoded"

# At most one reopen line per camera this often (the first failure is always logged).
RETRY_LOG_PERIOD_S = 5.0


class CameraState(Enum):
    """Where a camera is in its life."""

    STARTING = "starting"
    RUNNING = "running"
    RECONNECTING = "reconnecting"
    ENDED = "ended"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class CameraStatus:
    """A snapshot for the CLI, tests and the bench."""

    camera_id: str
    source: str
    state: CameraState
    error: str
    frames: int
    reconnects: int
    # By how much the camera misses device.cascade.target where it cannot keep more frames
    # (strata_device_cascade_target_missed); 0: held, recovering, or no cascade.
    target_missed: float = 0.0


class _SourceMetrics:
    """What the camera's source reports, into the camera's metrics."""

    def __init__(self, metrics: CameraMetrics) -> None:
        self.m = metrics
        self._skipped = {"max_fps": metrics.skipped_rate, "held": metrics.skipped_held}

    def decoder(self, kind: str) -> None:
        self.m.set_decoder(kind)

    def skipped(self, reason: str, frames: int) -> None:
        self._skipped.get(reason, self.m.skipped_undecoded).inc(frames)

    def lag(self, seconds: float) -> None:
        self.m.lag(seconds)


def backoff_delay(attempt: int, cfg: SourceConfig, rng: random.Random) -> float:
    """Wait before reopen attempt `attempt` (1-based): doubling, capped, with jitter."""
    base = min(cfg.backoff_max_s, cfg.backoff_initial_s * 2 ** max(0, attempt - 1))
    return float(base * (1.0 + cfg.backoff_jitter * rng.uniform(-1.0, 1.0)))


class CameraWorker:
    """Reads one source in its own thread until it ends, fails for good, or is stopped."""

    def __init__(
        self,
        camera_id: str,
        source: str,
        source_cfg: SourceConfig,
        motion_cfg: MotionConfig,
        outlet: FrameOutlet,
        metrics: CameraMetrics,
        cascade: CascadeConfig | None = None,
        cascade_metrics: CascadeMetrics | None = None,
        degrader: SourceDegrader | None = None,
        ring: PacketTap | None = None,
        bursts: BurstSlots | None = None,
    ) -> None:
        self.camera_id = camera_id
        self.source = source
        self.cfg = source_cfg
        self.live = is_live(source)
        # The decoder (hwaccel) is chosen at the first open and kept for the reopens.
        self.decoder = DecoderChoice(camera_id, source_cfg)
        self.motion = MotionGate(motion_cfg) if motion_cfg.enabled else None
        # The accuracy-targeted policy in front of the motion gate (None: motion alone).
        self.policy: CascadePolicy | None = None
        self.send_skipped = False
        if cascade is not None and cascade.enabled:
            self.policy = CascadePolicy(cascade, cascade_metrics, camera_id, bursts)
            self.send_skipped = cascade.send_skipped
        # What the cascade will hold back, for the source to skip decoding (skip_held);
        # only where the source decodes on this thread, so no hold is stale when read.
        holds = self.policy is not None and source_cfg.skip_held
        self._held = HeldAhead() if holds and source_cfg.decode_ahead != "on" else None
        self._last_ts: float | None = None
        # The picture held still at the last frame whose whole picture was looked at.
        self._settled = True
        self._calibrating = False
        self._scene_change = False
        # The kept calibration frame is one the motion gate alone would have dropped.
        self._unchanged = False
        # The kept frame is a codec probe, and how many of the burst's frames still will be.
        self._codec_probe = False
        self._probes_left = 0
        self._whole_bursts = 0  # bursts sent whole as probes (a short codec sample)
        self.outlet = outlet
        self.m = metrics
        self._source_events = _SourceMetrics(metrics)
        self._state = CameraState.STARTING
        # What the edge asks this camera to give up under overload (None: nothing).
        self.degrader = degrader
        # Hears every packet the source reads (the clip ring; None: clips off).
        self.ring = ring
        self._degrade_log = DropLog(log, camera_id, "edge overloaded, degraded at the source")
        self.state = CameraState.STARTING
        self.error = ""
        self._retry_log = RateLimitedLog(log, period=RETRY_LOG_PERIOD_S)
        self.frames = 0
        self.reconnects = 0
        self._stop = threading.Event()
        self._rng = random.Random()
        self._motion_log = DropLog(log, camera_id, "motion gate dropped")
        self._undecoded_log = DropLog(
            log, camera_id, "held-back frames not decoded when the edge asked for a frame"
        )
        self._overload_log = DropLog(
            log, camera_id, "gate queue full, dropped the oldest", logging.WARNING
        )
        self._thread = threading.Thread(target=self._run, name=f"camera-{camera_id}", daemon=True)

    @property
    def state(self) -> CameraState:
        """Where the camera is; every change is mirrored in strata_device_camera_state."""
        return self._state

    @state.setter
    def state(self, value: CameraState) -> None:
        self._state = value
        self.m.set_state(value.value)
        if value is not CameraState.RECONNECTING:
            self.m.retry_attempt.set(0)
            self.m.retry_at.set(0)

    def start(self) -> None:
        """Start the camera's thread."""
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to finish (a blocked read returns within the read timeout)."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when it has finished."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def done(self) -> bool:
        """The thread has finished."""
        return not self._thread.is_alive()

    def status(self) -> CameraStatus:
        """A snapshot of this camera."""
        return CameraStatus(
            self.camera_id,
            self.source,
            self.state,
            self.error,
            self.frames,
            self.reconnects,
            self.policy.target_missed if self.policy is not None else 0.0,
        )

    def _run(self) -> None:
        failures = 0  # consecutive failed opens/reads
        lost = False  # we had the stream and lost it: the next success is a reconnect
        try:
            while not self._stop.is_set():
                try:
                    src = open_source(
                        self.source,
                        self.cfg,
                        self.decoder,
                        self._source_events,
                        self.ring,
                        self._held,
                    )
                except SourceError as exc:
                    if not self._failed(exc, failures := failures + 1):
                        return
                    continue
                if lost or failures:
                    if lost:
                        self.reconnects += 1
                        self.m.reconnects.inc()
                    log.info("camera %s: %s open again", self.camera_id, self.source)
                try:
                    got = self._read(src)
                except SourceError as exc:
                    lost = lost or self.frames > 0
                    failures = 0 if self.state == CameraState.RUNNING else failures
                    if not self._failed(exc, failures := failures + 1):
                        return
                    continue
                finally:
                    src.close()
                    self.m.camera_up.set(0)
                failures = 0
                if self._stop.is_set():
                    break
                if self.live:
                    lost, failures = True, 1
                    if not self._failed(SourceError(f"{self.source}: stream ended"), failures):
                        return
                    continue
                if self.cfg.loop and got:
                    if self.motion:
                        self.motion.reset()
                    continue
                self.state = CameraState.ENDED
                log.info("camera %s: %s ended after %d frames", self.camera_id, self.source, got)
                return
            self.state = CameraState.STOPPED
        except Exception as exc:  # a bug must not take the other cameras down
            self.state = CameraState.FAILED
            self.error = f"unexpected error: {exc!r}"
            log.exception("camera %s: %s", self.camera_id, self.error)
        finally:
            self._motion_log.flush()
            self._undecoded_log.flush()
            self._overload_log.flush()
            self._degrade_log.flush()

    def _failed(self, exc: SourceError, attempt: int) -> bool:
        """Log and count a failure; wait the backoff. False: the camera gives up."""
        if self._stop.is_set():  # a read cut short by shutdown is not a failure
            self.state = CameraState.STOPPED
            return False
        self.m.source_errors.inc()
        self.error = str(exc)
        self.m.set_error(error_kind(self.error))
        limit = self.cfg.max_reopen_attempts
        if exc.fatal or not self.live or (limit and attempt > limit):
            self.state = CameraState.FAILED
            log.error("camera %s: %s", self.camera_id, exc)
            return False
        delay = backoff_delay(attempt, self.cfg, self._rng)
        self.state = CameraState.RECONNECTING
        self.m.retry_attempt.set(attempt)
        self.m.retry_at.set(time.time() + delay)
        self._log_retry(exc, attempt, delay)
        if self._stop.wait(delay):
            self.state = CameraState.STOPPED
            return False
        return True

    def _log_retry(self, exc: SourceError, attempt: int, delay: float) -> None:
        """The first failure always gets a line; every retry after it too, at most one per
        RETRY_LOG_PERIOD_S per camera, saying how many it stands for."""
        fmt = "camera %s: %s; retry %d in %.1fs (backoff up to %gs)"
        args = (self.camera_id, exc, attempt, delay, self.cfg.backoff_max_s)
        if attempt == 1:
            log.error(fmt, *args)
        else:
            self._retry_log.warn(self.camera_id, fmt, *args)

    def _whole_picture(self, frame: Frame) -> MotionDecision | None:
        """A frame the cascade's gap holds back: kept all the same when the whole picture
        changed (a cut, seen on its frame) or moved (a pan, followed from its start)."""
        if self.motion is None:
            return None
        # While the whole picture changes (a pan), every frame is decoded: the gate follows
        # it frame by frame, and a frame or three unseen would read as a cut.
        self._settled = self.motion.quiet(frame)
        if self._settled:
            return None
        return self.motion.cut(self.motion.score_input(frame), frame.ts)

    def _decide(self, frame: Frame) -> tuple[bool, str, float]:
        """Keep the frame or drop it, why, and its motion score; counted per reason."""
        index = self.frames - 1
        policy = self.policy
        self._calibrating = False
        self._scene_change = False
        self._unchanged = False
        self._codec_probe = False
        pre = policy.before_motion(index) if policy is not None else None
        # A burst frame after its burst's first (a strided burst drops the frames between).
        in_burst = bool(pre and pre.calibration and not pre.burst_start)
        cut = None
        if policy is not None and pre is not None and pre.block:
            cut = self._whole_picture(frame)
            if cut is None:
                policy.count("dropped", "min_gap")
                return False, "min_gap", 0.0
        if cut is not None:
            verdict = cut
        elif self.motion is None:
            verdict = MotionDecision(True, 0.0, pre.force if pre and pre.force else "motion_off")
        elif pre is not None and pre.force:
            verdict = self.motion.keep_now(self.motion.score_input(frame), frame.ts, pre.force)
        else:
            base = self.motion.cfg.threshold
            deg = self.degrader
            raised = deg.motion_threshold(base) if deg is not None else base
            verdict = self.motion.check(self.motion.score_input(frame), frame.ts, raised)
            if not verdict.keep and verdict.score >= base:  # kept but for the degradation
                self.m.dropped(REASON_MOTION).inc()
                self._degrade_log.add(1, f"motion threshold raised to {raised:g}")
                if policy is not None:
                    policy.count("dropped", REASON_MOTION)
                    policy.overloaded()
                return False, REASON_MOTION, verdict.score
        if not verdict.keep:
            self.m.dropped_motion.inc()
            self._motion_log.add()
            if policy is not None:
                policy.count("dropped", "motion")
            return False, "motion", verdict.score
        forced = bool(pre is not None and pre.force)
        if (
            self.degrader is not None
            and not forced
            and not verdict.scene_change
            and not self.degrader.keep_by_rate()
        ):
            self.m.dropped(REASON_RATE).inc()
            self._degrade_log.add(1, f"frame rate capped at {self.degrader.rate_cap():.1f}/s")
            if policy is not None:
                policy.count("dropped", REASON_RATE)
                policy.overloaded()
            return False, REASON_RATE, verdict.score
        if policy is not None:
            self._kept_by_policy(policy, index, verdict, bool(pre and pre.calibration), in_burst)
        self._scene_change = verdict.scene_change
        if verdict.scene_change:
            self.m.scene_changes.inc()
            if policy is not None:
                policy.scene_changed()
        return True, verdict.why, verdict.score

    def _undecoded(self) -> tuple[bool, str, float]:
        """`_decide` for a frame the source did not decode as the cascade was to hold it
        back."""
        self._calibrating = self._scene_change = self._unchanged = False
        self._codec_probe = False
        policy = self.policy
        pre = policy.before_motion(self.frames - 1) if policy is not None else None
        if policy is not None and pre is not None and pre.block:
            policy.count("dropped", "min_gap")
            return False, "min_gap", 0.0
        # The edge's feedback ended the hold after the source skipped the frame: the frame
        # it asked for is the next one decoded.
        self._undecoded_log.add()
        if policy is not None:
            policy.count("dropped", REASON_NOT_DECODED)
        return False, REASON_NOT_DECODED, 0.0

    def _hold_ahead(self, frame: Frame) -> None:
        """Tell the source which of the next frames the cascade will hold back, by stream
        time: up to half a frame interval past the last of them, so timestamps a little
        off the camera's rate still fall on the right side."""
        held, policy = self._held, self.policy
        if held is None or policy is None:
            return
        ts, last = frame.ts, self._last_ts
        self._last_ts = ts
        ahead = policy.held_ahead(self.frames - 1) if self._settled else 0
        dt = ts - last if last is not None else 0.0
        held.hold(ts, ts + (ahead + 0.5) * dt if ahead and dt > 0 else ts)

    def _kept_by_policy(
        self,
        policy: CascadePolicy,
        index: int,
        verdict: MotionDecision,
        calibration: bool,
        in_burst: bool,
    ) -> None:
        """The cascade's frame `index` is kept: tell the policy; a calibration frame is
        also checked against the motion gate alone (would it have been dropped?)."""
        # A cut's shift (a jump within one view, or nothing shared) is no speed.
        policy.camera_moved(index, None if verdict.scene_change else verdict.shift)
        # The frame after it is decoded: skipping starts once a held frame shows the
        # picture still (a pan's start is often kept as motion, its speed unknown yet).
        self._settled = False
        policy.kept(index)
        policy.count("kept", verdict.why)
        self._calibrating = calibration
        if calibration and self.motion is not None:
            self._unchanged = self.motion.burst_unchanged(start=not in_burst)
        if calibration:
            if not in_burst:
                cfg = policy.cfg
                self._probes_left = codec_probes(cfg, policy.codec_boxes, self._whole_bursts)
                if self._probes_left > cfg.codec_probes:
                    self._whole_bursts += 1
            self._codec_probe = self._probes_left > 0
            self._probes_left -= int(self._codec_probe)

    def _read(self, src: Source) -> int:
        """Run the source until it ends; returns frames read. SourceError when it dies."""
        frames = src.frames()
        self._last_ts = None  # a new pass's timestamps may start again
        if self._held is not None:
            self._held.hold(0.0, -math.inf)
        try:
            if self.cfg.decode_ahead == "on":
                with DecodeAhead(frames, name=f"decode-{self.camera_id}") as ahead:
                    return self._handle(ahead)
            return self._handle(frames)
        finally:
            self.outlet.flush()  # dropped frames' notices waiting for a run go now
            if self.policy is not None:
                self.policy.frames_stopped()

    def _handle(self, frames: Iterator[Frame]) -> int:
        """Decide and pass on each frame until the frames end or the camera stops."""
        got = 0
        wait = not self.live
        for frame in frames:
            if got == 0:
                self.state = CameraState.RUNNING
                self.error = ""
                self.m.set_error("")
                self.m.camera_up.set(1)
            got += 1
            self.frames += 1
            if frame.has_pixels:
                self.m.decoded.inc()
            keep, reason, score = self._decide(frame) if frame.has_pixels else self._undecoded()
            self._hold_ahead(frame)
            if not keep and not self.send_skipped:
                if self._stop.is_set():
                    break
                continue
            item = GateItem(
                self.camera_id,
                self.frames - 1,
                frame.capture_ns,
                frame,
                score,
                time.monotonic(),
                "" if keep else reason,
                self._calibrating,
                keep and self._scene_change,
                keep and self._unchanged,
                keep and self._codec_probe,
            )
            dropped = self.outlet.put(item, wait, self._stop)
            if dropped is item:
                break  # stopping while waiting for room
            if dropped is not None:
                self.m.dropped_overload.inc()
                self._overload_log.add(1, "the gate is slower than the camera")
            if self._stop.is_set():
                break
        return got
