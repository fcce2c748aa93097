"""The device's cascade policy per camera: which frames go to the edge, tuned to a target.

The user states an accuracy target (`device.cascade`: box F1 or counting agreement with
the detector on every frame) instead of raw knobs. Reducto-style online calibration: now
and then the camera sends a short burst (`FrameHeader.calibration`) of `burst_frames`
frames, one in `burst_stride` (default: half the floor's gap); the edge replays that burst
through its tracker at every gap it could have used (a strided burst: gaps of two strides
and more, the shorter drawn) and answers, in the acks' CascadeFeedback, the accuracy each
gap would have had.
The policy then uses the longest gap that still meets the target (the cheapest setting): a
frame with motion is kept once `min_gap` frames have passed since the last kept one. A
quiet scene (motion under the threshold) is kept only every `max_gap` frames. The edge
can also ask for the next frame (`send_next`: its prediction is uncertain).

A target that holds or says so: the edge also estimates, after each burst, the accuracy
the spacing the camera actually used over the last calibration window achieved
(`estimated_accuracy`, `estimated_counting`). While that estimate is under the target, each
feedback halves both gaps once more (`boost`: min_gap and max_gap are shifted right by it,
never under 1), so the camera moves towards uniform spacing at a higher rate, the full rate
at worst; once the estimate is `recover_margin` above the target, each feedback undoes one
halving. In between, nothing changes (no flapping around the target). The estimate is a
gauge per camera, and every change is logged.

A periodic burst that falls due while the scene is empty and still (the edge's last
feedback tracked no object, the motion gate's last verdict was "nothing changed") waits
for motion: over an empty street it would measure nothing and cost its frames. A burst
asked for (the edge, a scene change) starts at once, and so does one where the edge tracks
objects (a gate blind to them is what the target's estimate must catch).

A camera that pans or tilts (the motion gate measures how far the whole picture moved
between kept frames: device/filters/camera_shift.py) keeps a frame whenever the picture has moved
about PAN_SHIFT of the gate's pixels at its speed, whatever the calibrated gap: the edge's
tracker associates boxes across a gap by overlap, and a gap the still scene allowed moves
them past it (pans clip, gap 15 at 4 px a frame: box F1 0.4-0.6 over those frames). Back
to the calibrated gap once a kept frame shows the camera still.

The floor (`device.cascade.budget`): while the edge tracks moving objects for the camera
(its acks' `moving_objects`: a parked car or a static false detection does not count), kept
frames are never spaced wider than uniform sampling at the
camera's budget would space them (one in floor(1 / budget)), whatever the motion gate says
and whatever gap the calibration allows: a calibrated gap longer than that, or a gate blind
to the objects, would make the cascade worse than lowering the frame rate. Motion, scene
changes, pans and the edge's asks keep frames above the floor, never instead of it. With
nothing tracked there is no floor: quiet frames cost nothing (max_gap aside).

A target it cannot reach: an estimate under the target while the camera's gaps are already
as short as `max_share` lets them be, or while the edge's overload degrades the camera (it
drops frames the target would want), is a missed target: the gauge
strata_device_cascade_target_missed says by how much (target - estimate; 0: held or still
recovering), a warning says it, and the camera's status carries it. Frames given up before
the edge had them (its overload, a full spool) have no answer at all, while the edge's
estimate covers only the frames it answered: the estimate is scaled by the share of the
window's frames not given up before it is held against the target.

Each decision has a reason, counted per camera: kept first/motion/max_gap/calibration/
uncertain/pan/floor; dropped motion (nothing changed) or min_gap (changed, but the target
allows the wait, or a strided burst's frame between).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge
from strata.shared.config.device import CascadeConfig
from strata.shared.contracts import frame_pb2

from .burst_slots import BurstSlots
from .camera_shift import PAN_SHIFT

log = logging.getLogger(__name__)

KEEP_REASONS = ("first", "motion", "max_gap", "calibration", "uncertain", "pan", "floor")
DROP_REASONS = ("motion", "min_gap")


class CascadeMetrics:
    """Every cascade decision, per camera, kept or dropped, and why."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "strata_device_cascade_decisions",
            "Frames by the cascade's decision (kept, dropped) and its reason.",
            ["camera", "decision", "reason"],
            registry=registry,
        )
        self.recalibrations = Counter(
            "strata_device_cascade_recalibrations",
            "Times calibration feedback changed a camera's gap.",
            ["camera"],
            registry=registry,
        )
        self.estimated = Gauge(
            "strata_device_estimated_accuracy",
            "The edge's estimate of the accuracy (device.cascade.metric) the camera's spacing "
            "achieved over its last calibration window.",
            ["camera"],
            registry=registry,
        )
        self.calibrated = Gauge(
            "strata_device_cascade_calibrated_accuracy",
            "The calibration bursts' accuracy (device.cascade.metric) at the gap the camera "
            "keeps: their prediction, before a calibration window's estimate measures it.",
            ["camera"],
            registry=registry,
        )
        self.boost = Gauge(
            "strata_device_cascade_boost",
            "Times the camera's gaps are halved because the edge's estimate fell under the "
            "target (0: the calibrated spacing).",
            ["camera"],
            registry=registry,
        )
        self.under_target = Counter(
            "strata_device_cascade_under_target",
            "Edge estimates under the target the camera received (each halves its gaps once "
            "more, up to every frame).",
            ["camera"],
            registry=registry,
        )
        self.burst_waits = Counter(
            "strata_device_cascade_burst_waits",
            "Frames a due calibration burst waited for one of the agent's burst slots "
            "(device.cascade.concurrent_bursts).",
            ["camera"],
            registry=registry,
        )
        self.target_missed = Gauge(
            "strata_device_cascade_target_missed",
            "By how much the edge's estimate misses device.cascade.target while the camera "
            "cannot keep more frames (its gaps at max_share, or degraded by the edge's "
            "overload); 0: held, or still keeping more frames to recover.",
            ["camera"],
            registry=registry,
        )
        self.target = Gauge(
            "strata_device_cascade_target",
            "The camera's device.cascade.target, labelled with what it is about "
            "(device.cascade.metric: f1 or counting); beside strata_device_estimated_accuracy.",
            ["camera", "metric"],
            registry=registry,
        )
        self.floor_gap = Gauge(
            "strata_device_cascade_floor_gap",
            "Widest spacing of kept frames while the edge tracks objects (the floor: uniform "
            "sampling at device.cascade.budget, halved with the boost); 0: no floor.",
            ["camera"],
            registry=registry,
        )
        self.boosted_kept = Counter(
            "strata_device_cascade_boosted_kept",
            "Frames kept while the camera's gaps were halved for an estimate under the target "
            "(calibration bursts aside): the frames the target asked for.",
            ["camera"],
            registry=registry,
        )


@dataclass(frozen=True, slots=True)
class PreDecision:
    """Before the motion score: keep regardless (`force`), drop (`block`), or ask motion."""

    force: str  # a KEEP_REASONS entry, or ""
    block: bool
    calibration: bool
    # The first frame of a calibration burst.
    burst_start: bool = False


# Speed (gate pixels a frame) under which the camera counts as still: the phase
# correlation of two still frames with noise or people moving reads 0.1-0.3 px in all.
PAN_SPEED = 0.5


def pan_gap(shift: float | None, gap: int) -> int:
    """The gap that keeps a camera moving `shift` gate pixels over `gap` frames within
    PAN_SHIFT between kept frames; 0: the camera is still (or the shift is unknown)."""
    if shift is None or gap <= 0:
        return 0
    speed = shift / gap
    return max(1, int(PAN_SHIFT / speed)) if speed >= PAN_SPEED else 0


def floor_gap(budget: float) -> int:
    """The spacing of uniform sampling at `budget` (a share of frames): the floor's widest
    gap while objects are tracked; 0: no floor."""
    if budget <= 0:
        return 0
    # 1e-9: a budget of 0.2 is one frame in 5, not in 4 for a float's rounding.
    return max(1, int(1.0 / budget + 1e-9))


def shortest_gap(max_share: float) -> int:
    """The shortest gap the target may ask for: ceil(1 / max_share)."""
    return max(1, math.ceil(1.0 / max_share - 1e-9))


def choose_gap(accuracy_by_gap: Sequence[float], target: float, current: int) -> int:
    """The longest gap (1-based index into `accuracy_by_gap`) whose accuracy meets `target`.

    Accuracy falls with the gap but not strictly (noise): the longest gap such that every
    shorter one also meets the target. None meets it: 1 (every frame with motion).
    """
    best = 0
    for gap, acc in enumerate(accuracy_by_gap, start=1):
        if acc < target:
            break
        best = gap
    return max(best, 1) if accuracy_by_gap else current


class CascadePolicy:
    """One camera's settings and decisions. Feedback arrives from the sender's thread,
    decisions are made in the camera's thread: a lock guards the settings."""

    def __init__(
        self,
        cfg: CascadeConfig,
        metrics: CascadeMetrics | None = None,
        camera_id: str = "",
        bursts: BurstSlots | None = None,
    ) -> None:
        self.cfg = cfg
        self.camera_id = camera_id
        self._metrics = metrics
        # Shared by the agent's cameras: a due burst starts when a slot is free.
        self._bursts = bursts
        self._counters: dict[tuple[str, str], Counter] = {}
        self._lock = threading.Lock()
        self.min_gap = cfg.min_gap
        self.max_gap = cfg.max_gap
        self._last_kept = -1
        self._burst_left = 0
        self._burst_due = 0 if cfg.calibrate_every > 0 else -1
        # A burst under way sends one frame in `_stride`, the next at `_burst_next`; the
        # last kept frame was one of a burst's.
        self._stride = 1
        self._burst_next = 0
        self._burst_frame = False
        self._send_next = False
        self.estimated = 0.0
        self.calibrations = 0
        self._by_gap: np.ndarray | None = None
        # The min_gap calibration chose, before any boost.
        self._calibrated_gap = cfg.min_gap
        self.boost = 0
        self.edge_estimate: float | None = None
        # The motion gate's last verdict was "nothing changed" (camera thread only), and
        # the edge's last feedback tracked no object for the camera.
        self._still = False
        self._edge_sees_nothing = False
        # While the camera moves: keep one frame in this many (0: it is still).
        self.pan_gap = 0
        # The floor while the edge tracks moving objects (its last feedback's moving_objects).
        self._floor = floor_gap(cfg.budget)
        self.floor_gap = self._floor
        # CascadeFeedback.codec_boxes (device/filters/codec_probes.py): none heard yet.
        self.codec_boxes = 0
        self.tracking = False
        self._shortest = shortest_gap(cfg.max_share)
        # The edge's overload degraded the camera since its last estimate.
        self._overloaded = False
        # Source frames seen (the last index before_motion saw) and frames given up before
        # the edge had them, since the last estimate: the edge's estimate covers the frames
        # it answered; a frame given up has no answer at all.
        self._index = -1
        self._window_start = 0
        self._lost = 0
        # By how much the target is missed where the camera cannot keep more (0: it is not).
        self.target_missed = 0.0
        if metrics is not None:
            metrics.floor_gap.labels(camera_id).set(self._floor)
            # Not missed until an estimate says so (a series from the start, as alerts want).
            metrics.target_missed.labels(camera_id).set(0.0)
            metrics.target.labels(camera_id, cfg.metric).set(cfg.target)

    def before_motion(self, index: int) -> PreDecision:
        """What to do with source frame `index` before its motion is scored."""
        with self._lock:
            self._index = index
            if self._last_kept < 0:
                first = self._start_burst_if_due(index)
                return PreDecision("first", False, first, first)
            if self._burst_left > 0:
                # A strided burst's frames between: dropped (counted as min_gap).
                on = index >= self._burst_next
                return PreDecision("calibration" if on else "", not on, on)
            if self._start_burst_if_due(index):
                return PreDecision("calibration", False, True, True)
            gap = index - self._last_kept
            if self._send_next:
                return PreDecision("uncertain", False, False)
            if self.pan_gap and gap >= self.pan_gap:
                return PreDecision("pan", False, False)
            if self.tracking and 0 < self.floor_gap <= gap < self.max_gap:
                return PreDecision("floor", False, False)
            if gap >= self.max_gap:
                return PreDecision("max_gap", False, False)
            return PreDecision("", gap < self.min_gap, False)

    def held_ahead(self, index: int) -> int:
        """How many frames after source frame `index` `before_motion` will block whatever
        they show, unless the edge's feedback (send the next frame, calibrate) comes first:
        their frames need no decoding (`device.source.skip_held`)."""
        with self._lock:
            if self._last_kept < 0 or self._send_next:
                return 0
            if self._burst_left > 0:  # up to a strided burst's next frame
                return max(self._burst_next - 1 - index, 0)
            if self._burst_due == 0 and self.cfg.burst_frames:
                return 0  # an asked-for burst (a cut, a pan, the edge) starts next frame
            gap = self.min_gap
            if self.pan_gap:
                gap = min(gap, self.pan_gap)
            if self.tracking and self.floor_gap:
                gap = min(gap, self.floor_gap)
            ahead = min(gap, self.max_gap) - 1 - (index - self._last_kept)
            # A burst due later bounds the hold; one due already waits for a slot or for
            # motion, either of which may come at any frame: a frame or two skipped
            # before it starts is one it need not have (the start is late by as much).
            if self._burst_due > index and self.cfg.burst_frames:
                ahead = min(ahead, self._burst_due - 1 - index)
            return max(ahead, 0)

    def count(self, decision: str, reason: str) -> None:
        """Count one decision ("kept" or "dropped") and its reason. A decision of the
        motion gate also says whether the scene is still (a due burst waits for motion)."""
        if reason in ("motion", "scene_change"):
            self._still = decision == "dropped"
        if self._metrics is None:
            return
        c = self._counters.get((decision, reason))
        if c is None:
            c = self._metrics.decisions.labels(self.camera_id, decision, reason)
            self._counters[(decision, reason)] = c
        c.inc()

    def camera_moved(self, index: int, shift: float | None) -> None:
        """Source frame `index` is kept and the picture moved `shift` gate pixels since the
        last kept frame (None: unknown, a cut): call before `kept(index)`."""
        with self._lock:
            old = self.pan_gap
            self.pan_gap = pan_gap(shift, index - self._last_kept if self._last_kept >= 0 else 0)
        if bool(self.pan_gap) != bool(old):
            log.info(
                "camera %s: the camera %s",
                self.camera_id,
                f"moves: 1 frame in {self.pan_gap} kept" if self.pan_gap else "is still again",
            )

    def kept(self, index: int) -> None:
        """Source frame `index` goes to the edge."""
        with self._lock:
            self._last_kept = index
            self._send_next = False
            boosted = self.boost > 0 and self._burst_left == 0
            # A cut between a strided burst's frames is kept, but is none of its frames.
            self._burst_frame = self._burst_left > 0 and index >= self._burst_next
            if self._burst_frame:
                self._burst_left -= 1
                self._burst_next = index + self._stride
                if self._burst_left == 0 and self._bursts is not None:
                    self._bursts.give_back(self.camera_id)
        if boosted and self._metrics is not None:
            self._metrics.boosted_kept.labels(self.camera_id).inc()

    def _start_burst_if_due(self, index: int) -> bool:
        if self._burst_due < 0 or index < self._burst_due or self.cfg.burst_frames == 0:
            return False
        if self._still and self._edge_sees_nothing and self._burst_due > 0:
            # A periodic burst over an empty, still scene measures nothing: it waits for
            # motion. An asked-for one (due 0) does not, nor one where the edge tracks
            # objects the motion gate may be blind to (the target's estimate needs it).
            return False
        if self._bursts is not None and not self._bursts.take(self.camera_id):
            if self._metrics is not None:
                self._metrics.burst_waits.labels(self.camera_id).inc()
            return False  # due still: tried again on the next frame
        self._stride = self.burst_stride()
        self._burst_left = self._burst_size()
        self._burst_due = index + self.cfg.calibrate_every
        self._burst_next = index
        self.calibrations += 1
        return True

    def burst_stride(self) -> int:
        """One frame in how many a burst starting now sends (locked): burst_stride, or half
        the floor's gap (1 without a floor); a panning camera's gap at most."""
        stride = self.cfg.burst_stride or max(1, self.floor_gap // 2)
        return min(stride, self.pan_gap) if self.pan_gap else stride

    def _burst_size(self) -> int:
        """Frames the burst sends: burst_frames, half as many strided (locked). 20 strided
        frames spanned 58 of the pans clip's 60-frame scenes: cut before their end, none
        was measured; 10 measure gaps of 2 to 4 strides, the floor's among them."""
        return self.cfg.burst_frames if self._stride == 1 else -(-self.cfg.burst_frames // 2)

    def frames_stopped(self) -> None:
        """The camera's frames stopped (end, failure, reopening): a burst under way ends
        and gives its slot back (another camera's may start), and one is due when frames
        come again (the scene may not be the one it measured)."""
        with self._lock:
            if self._burst_left > 0:
                self._burst_left = 0
                self._burst_due = min(0, self._burst_due)
            if self._bursts is not None:
                self._bursts.give_back(self.camera_id)

    def request_burst(self) -> None:
        """Calibrate from the next frame on (the edge asked, or its session changed)."""
        with self._lock:
            if self._burst_due >= 0 and self.cfg.burst_frames:
                self._burst_due = 0

    def scene_changed(self) -> None:
        """A cut or a pan (its frame just kept): what was measured on the old scene says
        nothing of the new one; forget it and calibrate it: a burst's frame starts the new
        scene's burst (the edge measures from the cut on), any other the next frame does."""
        with self._lock:
            self._by_gap = None
            if self._burst_due < 0 or not self.cfg.burst_frames:
                return
            slot = self._bursts is None or self._bursts.take(self.camera_id)
            if self._burst_frame and slot and self._burst_size() > 1:
                self._burst_left = self._burst_size() - 1
                self._burst_due = self._last_kept + self.cfg.calibrate_every
            else:
                self._burst_left = 0
                self._burst_due = 0

    def lost(self, frames: int) -> None:
        """Sender thread: `frames` kept frames were given up before the edge had them
        (overload, a full spool)."""
        with self._lock:
            self._lost += frames
            self._overloaded = True
            # Said now, not at the next estimate (a window can be minutes long): the last
            # estimate on the frames answered, scaled by the share not given up so far.
            est = self.edge_estimate
            if est is not None and est * self._answered() < self.cfg.target:
                why = "frames given up before the edge had them (its overload, a full spool)"
                self._judge(
                    est, min(est * self._answered(), self.cfg.target - self.target_missed), why
                )

    def overloaded(self) -> None:
        """The edge's overload made the camera drop a frame (degraded at the source): an
        estimate under the target now may be one it cannot recover."""
        self._overloaded = True

    def feedback(self, fb: frame_pb2.CascadeFeedback) -> None:
        """Apply what the edge measured (from an ack)."""
        with self._lock:
            self._edge_sees_nothing = fb.tracked_objects == 0 and not fb.send_next
            self.tracking = fb.moving_objects > 0
            if fb.send_next:
                self._send_next = True
            self.codec_boxes = fb.codec_boxes if fb.HasField("codec_boxes") else self.codec_boxes
            if fb.burst_frames and self._burst_due >= 0 and self._burst_left == 0:
                # Only where calibration is on (calibrate_every, burst_frames); asked during
                # a burst (the ask crossed it), that burst answers it.
                self._burst_due = 0
            by_gap = fb.f1_by_gap if self.cfg.metric == "f1" else fb.counting_by_gap
            if by_gap:
                # One burst is a small sample: decide on a running mean over bursts.
                new = np.asarray(by_gap, np.float64)
                prev = self._by_gap
                if prev is not None and prev.shape == new.shape:
                    new = prev + self.cfg.smoothing * (new - prev)
                self._by_gap = new
                by_gap = new.tolist()
                old = self._calibrated_gap
                gap = choose_gap(list(by_gap), self.cfg.target, self._calibrated_gap)
                self._calibrated_gap = max(1, min(gap, self.cfg.max_min_gap))
                self.estimated = float(by_gap[self._calibrated_gap - 1])
                if self._metrics is not None:
                    self._metrics.calibrated.labels(self.camera_id).set(self.estimated)
                if self._calibrated_gap != old:
                    if self._metrics is not None:
                        self._metrics.recalibrations.labels(self.camera_id).inc()
                    log.info(
                        "camera %s: keep 1 frame in %d with motion (was %d), estimated %s %.3f "
                        "against the target %.3f",
                        self.camera_id,
                        self._calibrated_gap,
                        old,
                        self.cfg.metric,
                        self.estimated,
                        self.cfg.target,
                    )
            elif fb.max_gap_frames:
                self._calibrated_gap = max(1, min(int(fb.max_gap_frames), self.cfg.max_min_gap))
            field = "estimated_accuracy" if self.cfg.metric == "f1" else "estimated_counting"
            if fb.HasField(field):
                self._estimate(float(getattr(fb, field)))
            self._apply_boost()

    def _apply_boost(self) -> None:
        """The gaps at the current boost (locked), never under max_share's."""
        low = self._shortest
        self.min_gap = max(low, self._calibrated_gap >> self.boost)
        self.max_gap = max(low, self.cfg.max_gap >> self.boost)
        self.floor_gap = max(low, self._floor >> self.boost) if self._floor else 0
        if self._metrics is not None:
            self._metrics.floor_gap.labels(self.camera_id).set(self.floor_gap)

    def _saturated(self) -> bool:
        """Every gap is as short as max_share lets it be: the target cannot get more."""
        low = self._shortest
        return self.min_gap <= low and self.max_gap <= low

    def _answered(self) -> float:
        """The share of the window's frames not given up before the edge had them (locked)."""
        seen = max(self._index - self._window_start, 1)
        return max(0.0, 1.0 - min(self._lost, seen) / seen)

    def _estimate(self, est: float) -> None:
        """The edge's estimate of the last window's accuracy: boost or recover (locked)."""
        self.edge_estimate = est
        old = self.boost
        overloaded, self._overloaded = self._overloaded, False
        # Saturated before this estimate: the window it measured had every frame allowed.
        cannot = self._saturated() or overloaded
        # What the camera's frames got: the estimate on those the edge answered, nothing on
        # those given up (the rules never saw them).
        got = est * self._answered()
        self._window_start, self._lost = self._index, 0
        if est < self.cfg.target:
            if self._metrics is not None:
                self._metrics.under_target.labels(self.camera_id).inc()
            # Past this, both gaps are 1 already: every frame is kept.
            self.boost = min(
                self.boost + 1, max(self.cfg.max_gap, self._calibrated_gap).bit_length()
            )
        elif est >= self.cfg.target + self.cfg.recover_margin:
            self.boost = max(self.boost - 1, 0)
        why = (
            "the edge's overload degrades it"
            if overloaded
            else f"it keeps every frame device.cascade.max_share {self.cfg.max_share:g} "
            "allows (raise it, or lower the target)"
        )
        self._judge(est, got if cannot else self.cfg.target, why)
        if self._metrics is not None:
            self._metrics.estimated.labels(self.camera_id).set(est)
            self._metrics.boost.labels(self.camera_id).set(self.boost)
        if self.boost > old:
            log.warning(
                "camera %s: the edge estimates %s %.3f, under the target %.3f: keeping more "
                "frames (gaps halved %d times)",
                self.camera_id,
                self.cfg.metric,
                est,
                self.cfg.target,
                self.boost,
            )
        elif self.boost < old:
            log.info(
                "camera %s: the edge estimates %s %.3f against the target %.3f: gaps halved "
                "%d times (was %d)",
                self.camera_id,
                self.cfg.metric,
                est,
                self.cfg.target,
                self.boost,
                old,
            )

    def _judge(self, est: float, got: float, why: str) -> None:
        """The target missed by target - `got` (what the camera's frames got, where it
        cannot keep more), or held: the gauge, and a log line when that changes (locked)."""
        missed = max(self.cfg.target - got, 0.0)
        if missed > 0 and self.target_missed == 0:
            log.warning(
                "camera %s: target %s %.3f MISSED by %.3f (estimated %.3f%s) and the camera "
                "cannot keep more frames: %s",
                self.camera_id,
                self.cfg.metric,
                self.cfg.target,
                missed,
                est,
                f" on the frames answered, {got:.3f} with those given up" if got < est else "",
                why,
            )
        elif missed == 0 and self.target_missed > 0:
            log.info(
                "camera %s: target %s %.3f no longer missed (estimated %.3f)",
                self.camera_id,
                self.cfg.metric,
                self.cfg.target,
                est,
            )
        self.target_missed = missed
        if self._metrics is not None:
            self._metrics.target_missed.labels(self.camera_id).set(missed)
