"""Reducto-style online calibration at the edge: what each gap would have cost.

The agent sends a burst of consecutive frames marked `calibration` now and then. The
node detects all of them; when the burst ends, it replays the burst through a fresh copy
of its own answering code (tracker and answer mode) keeping one frame in g, for g = 1 to
`max_gap`, and scores what it would have published against the detector on every frame
of the burst: box F1 and counting agreement per gap. That goes back in the acks'
CascadeFeedback; the agent picks the longest gap meeting its target. The first `warmup`
frames of a burst are all kept (the live tracker has velocities; a cold one would not)
and not scored. A strided burst (one frame in `stride`, the device's
device.cascade.burst_stride: its second frame says the stride) is replayed on the frames
it spans, keeping one burst frame in k >= 2 and scoring the burst frames between; the
gaps under two strides are drawn (`strided_gaps`, `spread_loss`). A frame the device kept
between a strided burst's frames (a pan) does not end it.

The estimate of what the camera's current spacing achieves (edge/tracking/estimate.py):
each kept frame ends a span of frames since the camera's previous kept one. The spans of
frames outside bursts since the previous burst started are the spacing the device used
over that calibration window; when the next burst ends, they are scored on the mean
curve of the camera's last `window` bursts (box F1 weighted by boxes, counting by
frames) and the result rides in the feedback (`estimated_accuracy`, box F1, and
`estimated_counting`); a window without a kept frame outside bursts has no estimate, nor
a window without a box an F1 one. The burst frames the device's motion gate alone would
have dropped (`unchanged`) are also replayed as the edge answers such frames, and
scored: what the estimate charges the frames the gate dropped as unchanged
(estimate.py). Every span (a burst's frames too: they agree by construction) is also
scored as it comes, for the run (`on_scored`: counters a bench reads). A burst that saw
(almost) no box sends no curves: an empty street's F1 is 1 at every gap, and the device
would space the next passage by it; instead, the first kept frame with objects while no
burst of the scene has seen any asks for a burst (`burst_frames`), so the camera
calibrates on what it must space. A scene change forgets the camera's curves and spans
(they describe the old scene).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from strata.edge.tracking.answers import STILL_REASON, Answers
from strata.edge.tracking.estimate import (
    Codec,
    CodecLoss,
    CodecSample,
    Curves,
    Spacing,
    Span,
    Still,
    Tally,
)
from strata.edge.tracking.tracker import TrackedBoxes
from strata.shared.config.edge import TrackingConfig
from strata.shared.contracts import frame_pb2
from strata.shared.vision import FrameBoxes
from strata.shared.vision.agreement import agreement

log = logging.getLogger(__name__)


def replay(
    reference: Sequence[FrameBoxes],
    kept: np.ndarray,
    cfg: TrackingConfig,
    width: int,
    height: int,
    unchanged: np.ndarray | None = None,
) -> list[TrackedBoxes]:
    """Per frame: the detector's boxes where `kept`, else what the node would answer
    (frames `unchanged`: dropped by the motion gate)."""
    answers = Answers(cfg.model_copy(update={"hold_s": 1e9}))
    out: list[TrackedBoxes | None] = [None] * len(reference)
    for i, dets in enumerate(reference):
        h = frame_pb2.FrameHeader(
            camera_id="replay", session_id=1, frame_index=i, width=width, height=height
        )
        if unchanged is not None and unchanged[i]:
            h.skip_reason = STILL_REASON
        if kept[i]:
            answers.expect(h)
            tracked, done = answers.detected(h, dets)
            out[i] = tracked
        else:
            answers.skipped(h, 0.0, 0)
            done = answers.ready(now=0.0)
        for a in done:
            out[a.header.frame_index] = a.boxes
    # The end: what still waits for a next detected frame is predicted.
    for a in answers.ready(now=1e12):
        out[a.header.frame_index] = a.boxes
    missing = [i for i, o in enumerate(out) if o is None]
    if missing:
        raise RuntimeError(f"frames without an answer: {missing[:10]}")
    return [o for o in out if o is not None]


def uniform(total: int, fraction: float) -> np.ndarray:
    """Keep `fraction` of `total` frames, evenly spaced, the first one included."""
    kept = np.zeros(total, bool)
    if fraction <= 0 or total == 0:
        return kept
    idx = np.floor(np.arange(0, total, 1.0 / min(fraction, 1.0))).astype(np.int64)
    kept[idx[idx < total]] = True
    return kept


def class_boxes(b: FrameBoxes | TrackedBoxes) -> FrameBoxes:
    """What agreement compares (track data left out)."""
    return b.as_frame_boxes() if isinstance(b, TrackedBoxes) else b


@dataclass(frozen=True, slots=True)
class GapAccuracy:
    """Accuracy of keeping one frame in g (index g - 1) over one burst."""

    f1: tuple[float, ...]
    counting: tuple[float, ...]
    frames: int
    # The detector's boxes in the frames scored (what weighs the F1 curve).
    boxes: int = 0


def measure_gaps(
    burst: Sequence[FrameBoxes],
    cfg: TrackingConfig,
    width: int,
    height: int,
    max_gap: int,
    warmup: int = 5,
) -> GapAccuracy:
    """Box F1 and counting of every gap 1..max_gap over `burst` (consecutive frames), up
    to half the frames scored: a gap is measured on at least two spans of it. (One span,
    a 20-frame burst's gap 15, is one passage of luck: the pans clip's device spaced a
    still segment by it at 0.97 and got 0.71.)"""
    n = len(burst)
    scored = range(min(warmup, n), n)
    max_gap = min(max_gap, max(1, len(scored) // 2))
    ref = [class_boxes(burst[i]) for i in scored]
    f1: list[float] = []
    counting: list[float] = []
    for gap in range(1, max_gap + 1):
        kept = np.zeros(n, bool)
        kept[:warmup] = True
        start = min(warmup, n) - 1
        kept[start::gap] = True
        out = replay(burst, kept, cfg, width, height)
        a = agreement(ref, [class_boxes(out[i]) for i in scored])
        f1.append(round(a.f1, 4))
        counting.append(round(a.counting, 4))
    boxes = sum(len(r) for r in ref)
    return GapAccuracy(tuple(f1), tuple(counting), len(ref), boxes)


def _timeline(burst: Sequence[FrameBoxes], stride: int) -> list[FrameBoxes]:
    """`burst` (one frame in `stride`) on the frames it spans: the frames between carry no
    detection (a replay only answers them, and nothing scores them)."""
    out: list[FrameBoxes] = []
    for i, b in enumerate(burst):
        if i:
            out.extend([FrameBoxes.empty()] * (stride - 1))
        out.append(b)
    return out


def spread_loss(measured: dict[int, tuple[float, float]], last: int) -> list[tuple[float, float]]:
    """(F1, counting) for every gap 1..`last` from those `measured` at some gaps: gap 1
    agrees by construction (every frame detected); between two gaps the loss (1 - accuracy)
    is drawn linearly. A frame's error grows faster than linearly with its distance from a
    kept frame (an object's speed changes), so the line lies above the loss between its
    ends: the unmeasured gaps lean pessimistic."""
    points = sorted({1: (1.0, 1.0), **measured}.items())
    out: list[tuple[float, float]] = []
    for gap in range(1, last + 1):
        lo = max(p for p in points if p[0] <= gap)
        hi = min((p for p in points if p[0] >= gap), default=lo)
        w = 0.0 if hi[0] == lo[0] else (gap - lo[0]) / (hi[0] - lo[0])
        out.append(
            (
                round(lo[1][0] + w * (hi[1][0] - lo[1][0]), 4),
                round(lo[1][1] + w * (hi[1][1] - lo[1][1]), 4),
            )
        )
    return out


def strided_gaps(
    burst: Sequence[FrameBoxes],
    cfg: TrackingConfig,
    size: tuple[int, int],
    max_gap: int,
    warmup: int,
    stride: int,
) -> GapAccuracy:
    """`measure_gaps` over a strided burst: one frame in `stride` detected, the frames
    between answered. A gap of k strides (k >= 2) is replayed keeping one burst frame in k
    and scored on the burst frames between (the detector saw them); keeping every burst
    frame (gap `stride`) would score only detected frames, so it and the shorter gaps are
    not measured but drawn (`spread_loss`). The first ceil(`warmup` / `stride`) burst frames
    (two at least) are kept for the tracker's velocities and not scored. No gap of two
    strides measurable (too few frames): empty curves."""
    n = len(burst)
    warm = min(n, max(2, -(-warmup // stride)))
    scored = list(range(warm, n))
    last_k = min(max_gap // stride, len(scored) // 2)
    ref = [class_boxes(burst[i]) for i in scored]
    boxes = sum(len(r) for r in ref)
    if last_k < 2:
        return GapAccuracy((), (), len(ref), boxes)
    timeline = _timeline(burst, stride)
    at = [i * stride for i in scored]
    measured: dict[int, tuple[float, float]] = {}
    for k in range(2, last_k + 1):
        kept = np.zeros(len(timeline), bool)
        kept[: (warm - 1) * stride + 1 : stride] = True
        kept[(warm - 1) * stride :: k * stride] = True
        out = replay(timeline, kept, cfg, *size)
        a = agreement(ref, [class_boxes(out[i]) for i in at])
        measured[k * stride] = (a.f1, a.counting)
    curve = spread_loss(measured, last_k * stride)
    return GapAccuracy(tuple(f for f, _ in curve), tuple(c for _, c in curve), len(ref), boxes)


def measure_still(
    burst: Sequence[FrameBoxes],
    unchanged: Sequence[bool],
    cfg: TrackingConfig,
    width: int,
    height: int,
    stride: int = 1,
) -> Still:
    """What answering the frames the motion gate alone would have dropped as unchanged
    costs over `burst`: the frames it would have kept detected, the unchanged ones
    answered, scored against the detector. The burst's first and last frames stand for
    the kept frames around it (an interpolated answer waits for the next kept frame; a
    predicted one does not look at it), and are not scored. A strided burst's frames
    between (`stride`) are answered as the cascade's gap answers them, and not scored."""
    marks = np.asarray(unchanged, bool)
    kept = ~marks
    kept[0] = kept[-1] = True
    scored = [i for i in range(1, len(burst) - 1) if marks[i]]
    if not scored:
        return Still()
    timeline = _timeline(burst, stride)
    on = np.zeros(len(timeline), bool)
    still = on.copy()
    on[::stride] = kept
    still[::stride] = marks
    out = replay(timeline, on, cfg, width, height, still)
    a = agreement(
        [class_boxes(burst[i]) for i in scored], [class_boxes(out[i * stride]) for i in scored]
    )
    tp = a.true_positives
    return Still(
        len(scored),
        tp,
        tp + a.false_negatives,
        tp + a.false_positives,
        a.counting * len(scored),
    )


@dataclass(frozen=True, slots=True)
class Estimate:
    """What a camera's spacing achieved over its last calibration window, as estimated
    after a burst (None: nothing to estimate it on, e.g. no box for F1)."""

    camera_id: str
    f1: float | None
    counting: float | None


@dataclass
class _Burst:
    frames: list[tuple[int, FrameBoxes]] = field(default_factory=list)
    # Per frame: the motion gate alone would have dropped it as unchanged.
    unchanged: list[bool] = field(default_factory=list)
    width: int = 0
    height: int = 0
    # The spans of the calibration window before this burst.
    window: list[Span] = field(default_factory=list)

    @property
    def stride(self) -> int:
        """Source frames between the burst's frames (1: consecutive)."""
        if len(self.frames) < 2:
            return 1
        return self.frames[1][0] - self.frames[0][0]

    def follows(self, index: int) -> bool:
        """Frame `index` is the burst's next: its second at most MAX_STRIDE frames after its
        first, each later one a stride after the last."""
        if not self.frames:
            return True
        step = index - self.frames[-1][0]
        if len(self.frames) == 1:
            return 1 <= step <= MAX_STRIDE
        return step == self.stride

    def awaits(self, index: int) -> bool:
        """A frame `index` outside the burst comes before its next frame is due (a strided
        burst's: the device kept a cut or a pan between): the burst goes on."""
        stride = self.stride
        return stride > 1 and index < self.frames[-1][0] + stride


# The widest stride of a burst the edge measures (device.cascade.burst_stride).
MAX_STRIDE = 16


# The burst the edge asks for when objects appear and no burst saw any (the device sends
# its own device.cascade.burst_frames; this says how many the edge would like), at most
# once in this many gaps of `max_gap` frames per camera (objects that come and go).
ASK_BURST_FRAMES = 20
ASK_EVERY_MAX_GAPS = 10
# A burst says what a gap costs when it saw at least this many boxes per frame (1 in 2):
# fewer (an object at the edge of the view, a flicker), its curves are noise and count as
# a burst that saw nothing.
MIN_BOXES_PER_FRAME = (1, 2)

# Spans kept for the run until a first burst is measured (a camera that never calibrates
# would otherwise grow them forever); past it, the oldest are not scored.
_UNSCORED_MAX = 4096


@dataclass
class _Camera:
    """One camera's spacing and its recent bursts' curves."""

    window: int
    spacing: Spacing = field(default_factory=Spacing)
    curves: Curves = field(init=False)
    # A burst is under way, being measured, or was asked for (at frame `asked_at`).
    calibrating: bool = False
    asked_at: int = -(1 << 62)

    def __post_init__(self) -> None:
        self.curves = Curves(self.window)

    def score(self, spans: list[Span]) -> Tally:
        """`spans` scored for the run; those the curves cannot score yet wait."""
        tally = Tally()
        for span in spans:
            if not tally.add(span, self.curves):
                self.spacing.unscored.append(span)
        del self.spacing.unscored[:-_UNSCORED_MAX]
        return tally


class Calibration:
    """Collects each camera's burst and turns it into CascadeFeedback for its next ack.

    The replays (a fraction of a second of CPU per burst) run in a thread of their own, off
    the detector's worker.
    """

    def __init__(
        self,
        cfg: TrackingConfig,
        max_gap: int = 15,
        warmup: int = 5,
        window: int = 4,
        on_estimate: Callable[[Estimate], None] | None = None,
        on_scored: Callable[[str, Tally], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.max_gap = max_gap
        self.warmup = warmup
        self.window = window
        self.on_estimate = on_estimate
        # The run's estimate, as spans come: (camera, what they add).
        self.on_scored = on_scored
        self._cameras: dict[tuple[int, str], _Camera] = {}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="calibration")
        self._lock = threading.Lock()
        self._bursts: dict[tuple[int, str], _Burst] = {}
        self._feedback: dict[tuple[int, str], frame_pb2.CascadeFeedback] = {}
        # Per camera (across its sessions and scenes): what the payload codec costs.
        self._codec: dict[str, Codec] = {}
        self.measured = 0

    def codec_probed(self, camera_id: str, raw: FrameBoxes, jpeg: FrameBoxes) -> CodecLoss:
        """A codec probe's boxes, on the raw frame and on its JPEG round trip (worker
        thread): the camera's pooled loss with it (estimate.py, `Codec`)."""
        with self._lock:
            codec = self._codec.setdefault(camera_id, Codec())
            codec.add(CodecSample.of(raw, jpeg))
            return codec.loss()

    def codec_loss(self, camera_id: str) -> CodecLoss:
        """The camera's payload codec loss now (none until measured)."""
        with self._lock:
            codec = self._codec.get(camera_id)
            return codec.loss() if codec is not None else CodecLoss()

    def skipped(self, h: frame_pb2.FrameHeader) -> None:
        """A frame the device dropped (ingest thread): one its motion gate found unchanged
        is scored apart in the span it falls in (estimate.py)."""
        if h.skip_reason != STILL_REASON:
            return
        with self._lock:
            cam = self._cameras.get((h.session_id, h.camera_id))
            if cam is None:
                cam = self._cameras[(h.session_id, h.camera_id)] = _Camera(self.window)
            cam.spacing.still(h.frame_index)

    def detected(
        self, h: frame_pb2.FrameHeader, boxes: FrameBoxes
    ) -> Future[GapAccuracy | None] | None:
        """A detected frame (worker thread); when it ends a burst, the measurement's future."""
        key = (h.session_id, h.camera_id)
        with self._lock:
            burst, scored = self._note(key, h, boxes)
        if scored.counting_weight and self.on_scored is not None:
            scored.less(self.codec_loss(h.camera_id))
            self.on_scored(h.camera_id, scored)
        return None if burst is None else self._pool.submit(self._finish, key, burst)

    def _note(
        self, key: tuple[int, str], h: frame_pb2.FrameHeader, boxes: FrameBoxes
    ) -> tuple[_Burst | None, Tally]:
        """The frame noted (locked): the burst it ends, if any, and what it adds to the
        run's estimate."""
        scored = Tally()
        if h.scene_change:
            # Measured on the scene before the cut: says nothing of this one. The frames up
            # to the cut were the old scene's, and are scored on its curves (forgotten,
            # they would drop out of the run's estimate: the pans clip, +0.12).
            old = self._cameras.pop(key, None)
            if old is not None:
                span = old.spacing.saw(h.frame_index, len(boxes), calibration=True)
                scored = old.score([span] if span is not None else [])
            self._bursts.pop(key, None)
            self._feedback.pop(key, None)
        cam = self._cameras.get(key)
        if cam is None:
            cam = self._cameras[key] = _Camera(self.window)
        if h.scene_change:
            # The device calibrates the new scene from its next frame on: nothing to ask.
            cam.calibrating = True
            cam.spacing.saw(h.frame_index, len(boxes), h.calibration)
        else:
            span = cam.spacing.saw(h.frame_index, len(boxes), h.calibration)
            scored = cam.score([span] if span is not None else [])
        burst = self._bursts.get(key)
        if (
            not h.calibration
            and len(boxes)
            and cam.curves.f1 is None
            and not cam.calibrating
            and h.frame_index - cam.asked_at >= ASK_EVERY_MAX_GAPS * self.max_gap
        ):
            # Objects, and no burst of this scene ever saw one (an empty street's say nothing
            # of what a gap costs): calibrate on them now rather than at the next due burst.
            cam.calibrating = True
            cam.asked_at = h.frame_index
            self._feedback.setdefault(
                key, frame_pb2.CascadeFeedback()
            ).burst_frames = ASK_BURST_FRAMES
            log.info("camera %s: objects, and no calibration saw any: asking for a burst", key[1])
        if h.calibration:
            cam.calibrating = True
            if burst is None or not burst.follows(h.frame_index):
                burst = self._bursts[key] = _Burst(window=cam.spacing.take_window())
            burst.frames.append((h.frame_index, boxes))
            burst.unchanged.append(h.unchanged)
            burst.width = h.source_width or h.width
            burst.height = h.source_height or h.height
            return None, scored
        if burst is None or burst.awaits(h.frame_index):
            return None, scored
        del self._bursts[key]
        return burst, scored

    def _finish(self, key: tuple[int, str], burst: _Burst) -> GapAccuracy | None:
        try:
            if len(burst.frames) < self.warmup + 2:
                log.info(
                    "camera %s: calibration burst of %d frames too short",
                    key[1],
                    len(burst.frames),
                )
                return None
            return self._measure(key, burst)
        except Exception:  # a bug here must not stop calibrating the other cameras
            log.exception("camera %s: calibration failed", key[1])
            return None
        finally:
            with self._lock:
                cam = self._cameras.get(key)
                if cam is not None:
                    cam.calibrating = False

    def _measure(self, key: tuple[int, str], burst: _Burst) -> GapAccuracy:
        frames = [b for _, b in burst.frames]
        size = (burst.width, burst.height)
        acc = (
            strided_gaps(frames, self.cfg, size, self.max_gap, self.warmup, burst.stride)
            if burst.stride > 1
            else measure_gaps(frames, self.cfg, *size, self.max_gap, self.warmup)
        )
        still = measure_still(frames, burst.unchanged, self.cfg, *size, burst.stride)
        fb = frame_pb2.CascadeFeedback()
        # The bursts compare the detector on the frames as sent with itself: what the
        # codec costs it comes on top, at every gap (estimate.py, `Codec`).
        loss = self.codec_loss(key[1])
        fb.codec_boxes = loss.boxes  # under CODEC_MIN_BOXES the device probes more
        # A few boxes (an object at the edge of the view, a flicker) make a curve of noise.
        informative = (
            bool(acc.f1)
            and acc.boxes > 0
            and acc.boxes * MIN_BOXES_PER_FRAME[1] >= acc.frames * MIN_BOXES_PER_FRAME[0]
        )
        if informative:
            fb.f1_by_gap.extend(max(0.0, v - loss.f1) for v in acc.f1)
            fb.counting_by_gap.extend(max(0.0, v - loss.counting) for v in acc.counting)
        else:
            log.info(
                "camera %s: the calibration burst saw %d boxes in %d frames, too few to say "
                "what a gap costs: the gaps stay as they are",
                key[1],
                acc.boxes,
                acc.frames,
            )
        with self._lock:
            cam = self._cameras.get(key)
            if cam is None:  # a scene change while measuring: the new scene starts afresh
                cam = self._cameras[key] = _Camera(self.window)
            if acc.f1:  # none: a strided burst too short to measure a gap
                cam.curves.add(acc.f1, acc.counting, acc.boxes if informative else 0, acc.frames)
            if still.frames:
                cam.curves.add_still(still)
            window = Tally()
            for span in burst.window:
                window.add(span, cam.curves)
            window.less(loss)
            raw_f1, raw_counting = window.f1(), window.counting()
            # Few samples: the lower bound (estimate.py); the device acts on its doubt.
            f1, counting = window.bounded(cam.curves.boxes, cam.curves.frames)
            if f1 is not None:
                fb.estimated_accuracy = f1
            if counting is not None:
                fb.estimated_counting = counting
            waited, cam.spacing.unscored = cam.spacing.unscored, []
            scored = cam.score(waited)
            scored.less(loss)
            self._feedback[key] = fb
            self.measured += 1
        if scored.counting_weight and self.on_scored is not None:
            self.on_scored(key[1], scored)
        if f1 is not None or counting is not None:
            log.info(
                "camera %s: the spacing of the last calibration window is estimated at box F1 "
                "%s, counting %s (lower bounds on the bursts' sample; as measured %s, %s)",
                key[1],
                "n/a (no object)" if f1 is None else f"{f1:.3f}",
                "n/a" if counting is None else f"{counting:.3f}",
                "n/a" if raw_f1 is None else f"{raw_f1:.3f}",
                "n/a" if raw_counting is None else f"{raw_counting:.3f}",
            )
            if self.on_estimate is not None:
                self.on_estimate(Estimate(key[1], f1, counting))
        _log_burst(key[1], acc, burst.stride, still, loss)
        return acc

    def close(self) -> None:
        """Finish what is being measured and stop the thread."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def take_feedback(self, session: int, camera: str) -> frame_pb2.CascadeFeedback | None:
        """The feedback waiting for this camera's next ack (ingest or worker thread), once."""
        with self._lock:
            return self._feedback.pop((session, camera), None)


def _log_burst(camera: str, acc: GapAccuracy, stride: int, still: Still, loss: CodecLoss) -> None:
    log.info(
        "camera %s: calibration over %d frames, one in %d (%d boxes): box F1 by gap %s; "
        "%d frames the motion gate would have dropped as unchanged (%d boxes, %d matched); "
        "the payload codec costs box F1 %.3f, counting %.3f (%d boxes probed)",
        camera,
        acc.frames,
        stride,
        acc.boxes,
        " ".join(f"{v:.2f}" for v in acc.f1),
        still.frames,
        still.detected,
        still.matched,
        loss.f1,
        loss.counting,
        loss.boxes,
    )
