"""Reducto-style online calibration at the edge: what each gap would have cost.

The agent sends a burst of consecutive frames marked `calibration` now and then. The
node detects all of them; when the burst ends, it replays the burst through a fresh copy
of its own answering code (tracker and answer mode) keeping one frame in g, for g = 1 to
`max_gap`, and scores what it would have published against the detector on every frame
of the burst: box F1 and counting agreement per gap. That goes back in the acks'
CascadeFeedback; the agent picks the longest gap meeting its target. The first `warmup`
frames of a burst are all kept (the live tracker has velocities; a cold one would not)
and not scored.

The estimate of what the camera's current spacing achieves (`estimate`): the node notes
the gap before each kept frame that is not part of a burst (frames since the camera's
previous kept frame). When a burst starts, the gaps seen since the previous burst are the
spacing the device used over that calibration window; when the burst ends, each gap g is
scored with the accuracy at g of the mean curve over the camera's last `window` bursts
(gaps past `max_gap` at `max_gap`), weighted by the g frames it spans: the share of frames
the detector would agree with. It rides in the feedback (`estimated_accuracy`, box F1, and
`estimated_counting`); a window without a kept frame outside bursts has no estimate. A
scene change forgets the camera's curves and gaps (they describe the old scene).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from strata.edge.tracking.answers import Answers
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
) -> list[TrackedBoxes]:
    """Per frame: the detector's boxes where `kept`, else what the node would answer."""
    answers = Answers(cfg.model_copy(update={"hold_s": 1e9}))
    out: list[TrackedBoxes | None] = [None] * len(reference)
    for i, dets in enumerate(reference):
        h = frame_pb2.FrameHeader(
            camera_id="replay", session_id=1, frame_index=i, width=width, height=height
        )
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


def measure_gaps(
    burst: Sequence[FrameBoxes],
    cfg: TrackingConfig,
    width: int,
    height: int,
    max_gap: int,
    warmup: int = 5,
) -> GapAccuracy:
    """Box F1 and counting of every gap 1..max_gap over `burst` (consecutive frames)."""
    n = len(burst)
    scored = range(min(warmup, n), n)
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
    return GapAccuracy(tuple(f1), tuple(counting), len(ref))


def estimate(curves: Sequence[Sequence[float]], gaps: Mapping[int, int]) -> float | None:
    """Accuracy of a spacing: `gaps` (gap in frames -> times seen) scored on the mean of
    `curves` (accuracy by gap, index g - 1), each gap weighted by the frames it spans."""
    if not curves or not gaps:
        return None
    curve = np.mean(np.asarray(curves, np.float64), axis=0)
    g = np.fromiter(gaps.keys(), np.int64, len(gaps))
    frames = g * np.fromiter(gaps.values(), np.int64, len(gaps))
    if frames.sum() <= 0:
        return None
    acc = curve[np.clip(g, 1, len(curve)) - 1]
    return float((acc * frames).sum() / frames.sum())


@dataclass(frozen=True, slots=True)
class Estimate:
    """What a camera's current spacing achieves, as estimated after a burst."""

    camera_id: str
    f1: float
    counting: float


@dataclass
class _Burst:
    frames: list[tuple[int, FrameBoxes]] = field(default_factory=list)
    width: int = 0
    height: int = 0
    # The gaps of the calibration window before this burst (gap -> times seen).
    gaps: dict[int, int] = field(default_factory=dict)


@dataclass
class _Camera:
    """One camera's spacing since its last burst and its recent bursts' curves."""

    window: int
    last_index: int = -1
    gaps: dict[int, int] = field(default_factory=dict)
    f1: deque[tuple[float, ...]] = field(init=False)
    counting: deque[tuple[float, ...]] = field(init=False)

    def __post_init__(self) -> None:
        self.f1 = deque(maxlen=self.window)
        self.counting = deque(maxlen=self.window)

    def saw(self, index: int, calibration: bool) -> None:
        if not calibration and 0 <= self.last_index < index:
            gap = index - self.last_index
            self.gaps[gap] = self.gaps.get(gap, 0) + 1
        self.last_index = max(self.last_index, index)


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
    ) -> None:
        self.cfg = cfg
        self.max_gap = max_gap
        self.warmup = warmup
        self.window = window
        self.on_estimate = on_estimate
        self._cameras: dict[tuple[int, str], _Camera] = {}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="calibration")
        self._lock = threading.Lock()
        self._bursts: dict[tuple[int, str], _Burst] = {}
        self._feedback: dict[tuple[int, str], frame_pb2.CascadeFeedback] = {}
        self.measured = 0

    def detected(
        self, h: frame_pb2.FrameHeader, boxes: FrameBoxes
    ) -> Future[GapAccuracy | None] | None:
        """A detected frame (worker thread); when it ends a burst, the measurement's future."""
        key = (h.session_id, h.camera_id)
        with self._lock:
            if h.scene_change:
                # Measured on the scene before the cut: says nothing of this one.
                self._bursts.pop(key, None)
                self._feedback.pop(key, None)
                self._cameras.pop(key, None)
            cam = self._cameras.get(key)
            if cam is None:
                cam = self._cameras[key] = _Camera(self.window)
            cam.saw(h.frame_index, h.calibration)
            burst = self._bursts.get(key)
            if h.calibration:
                if burst is None or (burst.frames and h.frame_index != burst.frames[-1][0] + 1):
                    burst = self._bursts[key] = _Burst(gaps=cam.gaps)
                    cam.gaps = {}
                burst.frames.append((h.frame_index, boxes))
                burst.width = h.source_width or h.width
                burst.height = h.source_height or h.height
                return None
            if burst is None:
                return None
            del self._bursts[key]
        return self._pool.submit(self._finish, key, burst)

    def _finish(self, key: tuple[int, str], burst: _Burst) -> GapAccuracy | None:
        if len(burst.frames) < self.warmup + 2:
            log.info(
                "camera %s: calibration burst of %d frames too short", key[1], len(burst.frames)
            )
            return None
        try:
            return self._measure(key, burst)
        except Exception:  # a bug here must not stop calibrating the other cameras
            log.exception("camera %s: calibration failed", key[1])
            return None

    def _measure(self, key: tuple[int, str], burst: _Burst) -> GapAccuracy:
        acc = measure_gaps(
            [b for _, b in burst.frames],
            self.cfg,
            burst.width,
            burst.height,
            self.max_gap,
            self.warmup,
        )
        fb = frame_pb2.CascadeFeedback(f1_by_gap=acc.f1, counting_by_gap=acc.counting)
        with self._lock:
            cam = self._cameras.get(key)
            if cam is None:  # a scene change while measuring: the new scene starts afresh
                cam = self._cameras[key] = _Camera(self.window)
            cam.f1.append(acc.f1)
            cam.counting.append(acc.counting)
            f1 = estimate(cam.f1, burst.gaps)
            counting = estimate(cam.counting, burst.gaps)
            if f1 is not None and counting is not None:
                fb.estimated_accuracy = f1
                fb.estimated_counting = counting
            self._feedback[key] = fb
            self.measured += 1
        if f1 is not None and counting is not None:
            log.info(
                "camera %s: the spacing of the last calibration window is estimated at box F1 "
                "%.3f, counting %.3f",
                key[1],
                f1,
                counting,
            )
            if self.on_estimate is not None:
                self.on_estimate(Estimate(key[1], f1, counting))
        log.info(
            "camera %s: calibration over %d frames: box F1 by gap %s",
            key[1],
            acc.frames,
            " ".join(f"{v:.2f}" for v in acc.f1),
        )
        return acc

    def close(self) -> None:
        """Finish what is being measured and stop the thread."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def take_feedback(self, session: int, camera: str) -> frame_pb2.CascadeFeedback | None:
        """The feedback waiting for this camera's next ack (ingest thread), once."""
        with self._lock:
            return self._feedback.pop((session, camera), None)
