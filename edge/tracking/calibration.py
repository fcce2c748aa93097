"""Reducto-style online calibration at the edge: what each gap would have cost.

The agent sends a burst of consecutive frames marked `calibration` now and then. The
node detects all of them; when the burst ends, it replays the burst through a fresh copy
of its own answering code (tracker and answer mode) keeping one frame in g, for g = 1 to
`max_gap`, and scores what it would have published against the detector on every frame
of the burst: box F1 and counting agreement per gap. That goes back in the acks'
CascadeFeedback; the agent picks the longest gap meeting its target. The first `warmup`
frames of a burst are all kept (the live tracker has velocities; a cold one would not)
and not scored.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
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


@dataclass
class _Burst:
    frames: list[tuple[int, FrameBoxes]] = field(default_factory=list)
    width: int = 0
    height: int = 0


class Calibration:
    """Collects each camera's burst and turns it into CascadeFeedback for its next ack.

    The replays (a fraction of a second of CPU per burst) run in a thread of their own, off
    the detector's worker.
    """

    def __init__(self, cfg: TrackingConfig, max_gap: int = 15, warmup: int = 5) -> None:
        self.cfg = cfg
        self.max_gap = max_gap
        self.warmup = warmup
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
            burst = self._bursts.get(key)
            if h.calibration:
                if burst is None or (burst.frames and h.frame_index != burst.frames[-1][0] + 1):
                    burst = self._bursts[key] = _Burst()
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
            self._feedback[key] = fb
            self.measured += 1
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
