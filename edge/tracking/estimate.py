"""What a camera's spacing achieves, estimated from its calibration bursts' curves.

A kept frame ends a span: the `gap` frames since the camera's previous kept frame (the
ones answered by the tracker, and itself). A span is scored with the accuracy at its gap
of the mean curve of the camera's recent bursts (a gap past the curve: its loss grown on
linearly) and
weighted the way the figure it estimates is pooled against the every-frame reference:

- box F1 pools boxes, so a span weighs the detector's boxes in it (gap x the mean of the
  boxes on the kept frames at its two ends), and the bursts' F1 curves are averaged
  weighted by the boxes each scored. A burst over an empty street has an F1 of 1 at every
  gap (nothing to miss): frame-weighted, it would lift the estimate of the next busy
  passage, which it says nothing about; box-weighted, it counts for nothing.
- counting is a mean over frames, so a span weighs its frames, and so do the curves.

The frames of a span the device's motion gate dropped as unchanged (skip reason
"motion") are answered as the gate's verdict allows (no track first seen on the next kept
frame is drawn over them). What that costs is measured, not assumed: on the burst frames
the gate alone would have dropped (`FrameHeader.unchanged`) the edge replays its answer and
scores it against the detector (`Still`). Once a camera's bursts measured it, a span's
unchanged frames are scored at that agreement and the rest of the span (the frames spaced
by the gap, and the kept one) at the curve, at the gap they make without them: a kept frame
after 49 unchanged frames of an empty street, the first of a passage, was scored as a
50-frame gap (0.27 on the quiet clip), and the estimate fell 0.04 under the measured F1.
Until measured, the whole span is scored at the curve (the pessimistic side): a gate
blind to the objects (it drops them as unchanged) shows as unchanged frames that agree
badly, and the estimate falls as it should.

A `Tally` sums spans: one per calibration window (the feedback's estimate, against the
device's target) and increments for the run (counters, so a bench divides one by the
other and compares with the every-frame reference over the same frames).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class Span:
    """The frames from one kept frame (excluded) to the next (included)."""

    gap: int
    # The detector's boxes in those frames (estimated from the kept frames at both ends).
    boxes: float
    # Of those frames: the ones the motion gate dropped as unchanged.
    still: int = 0


# What a camera's bursts must have scored on unchanged frames before the estimate trusts
# the measure: boxes (F1), frames (counting).
MIN_STILL_BOXES = 10
MIN_STILL_FRAMES = 10


@dataclass(frozen=True, slots=True)
class Still:
    """One burst's agreement on the frames the motion gate alone would have dropped as
    unchanged, answered as the edge answers them: matched boxes, the detector's and the
    answer's boxes, and counting summed over the frames."""

    frames: int = 0
    matched: int = 0
    detected: int = 0
    answered: int = 0
    counting_sum: float = 0.0


class Curves:
    """A camera's last `window` bursts' accuracy by gap (index g - 1), averaged by weight."""

    def __init__(self, window: int) -> None:
        self._f1: deque[tuple[np.ndarray, float]] = deque(maxlen=window)
        self._counting: deque[np.ndarray] = deque(maxlen=window)
        self.f1: np.ndarray | None = None
        self.counting: np.ndarray | None = None
        self._still: deque[Still] = deque(maxlen=window)
        # The agreement on unchanged frames, once measured on enough of them.
        self.still_f1: float | None = None
        self.still_counting: float | None = None

    def add_still(self, still: Still) -> None:
        """One burst's measure of what an unchanged frame costs."""
        self._still.append(still)
        frames = sum(s.frames for s in self._still)
        matched = sum(s.matched for s in self._still)
        boxes = sum(s.detected + s.answered for s in self._still)
        self.still_f1 = 2 * matched / boxes if boxes >= MIN_STILL_BOXES else None
        counting = sum(s.counting_sum for s in self._still)
        self.still_counting = counting / frames if frames >= MIN_STILL_FRAMES else None

    def add(self, f1: tuple[float, ...], counting: tuple[float, ...], boxes: int) -> None:
        """One burst's curves; `boxes`: the detector's boxes in the frames it scored."""
        self._f1.append((np.asarray(f1, np.float64), float(boxes)))
        self._counting.append(np.asarray(counting, np.float64))
        weights = np.array([w for _, w in self._f1])
        self.f1 = (
            np.average(np.stack([c for c, _ in self._f1]), axis=0, weights=weights)
            if weights.sum() > 0
            else None
        )
        self.counting = np.mean(np.stack(list(self._counting)), axis=0)


def _at(curve: np.ndarray, gap: int) -> float:
    """The curve at `gap`; past its end, the loss grows on as it did from gap 1 to the end
    (linearly: a frame's error grows with its distance from a kept frame), not held at the
    end's value (a max_gap span of 50 frames scored as the burst's 7)."""
    n = len(curve)
    if gap <= n:
        return float(curve[max(gap, 1) - 1])
    end = float(curve[-1])
    if n < 2:
        return end
    return max(0.0, 1.0 - (1.0 - end) * (gap - 1) / (n - 1))


def _part(curve: np.ndarray | None, span: Span, still: float | None) -> float:
    """`span`'s agreement per frame: its unchanged frames at `still` (once measured; the
    detector's boxes in a span are spread evenly over its frames) and the rest at the
    curve at the gap they make; unmeasured, the whole span at the curve."""
    if curve is None:
        return 1.0
    if still is None or span.still <= 0:
        return _at(curve, span.gap)
    unchanged = min(span.still, span.gap - 1)
    spaced = span.gap - unchanged
    return (spaced * _at(curve, spaced) + unchanged * still) / span.gap


@dataclass
class Tally:
    """Weighted sums of the estimate over some spans: box F1 over boxes, counting over
    frames. `f1()` is None when no span had a box (nothing to agree on)."""

    f1_weight: float = 0.0
    f1_sum: float = 0.0
    counting_weight: float = 0.0
    counting_sum: float = 0.0

    def add(self, span: Span, curves: Curves) -> bool:
        """Score `span` on `curves`; False (nothing added) when they cannot score it yet.
        A gap of 1 (every frame detected) agrees by construction, curves or not."""
        if span.gap <= 1:
            f1, counting = 1.0, 1.0
        elif curves.counting is None or (span.boxes > 0 and curves.f1 is None):
            return False
        else:
            f1 = _part(curves.f1, span, curves.still_f1)
            counting = _part(curves.counting, span, curves.still_counting)
        if span.boxes > 0:
            self.f1_weight += span.boxes
            self.f1_sum += span.boxes * f1
        self.counting_weight += span.gap
        self.counting_sum += span.gap * counting
        return True

    def f1(self) -> float | None:
        """The estimated box F1 of the spans (None: no box in them)."""
        return self.f1_sum / self.f1_weight if self.f1_weight > 0 else None

    def counting(self) -> float | None:
        """The estimated counting agreement of the spans (None: no span)."""
        return self.counting_sum / self.counting_weight if self.counting_weight > 0 else None


# Unchanged frames remembered per camera (kept frames that never come would grow them).
_STILLS_MAX = 4096


@dataclass
class Spacing:
    """One camera's spans since its last calibration burst started, and those not yet
    scored for the run (no burst measured yet)."""

    last_index: int = -1
    last_boxes: int = 0
    window: list[Span] = field(default_factory=list)
    unscored: list[Span] = field(default_factory=list)
    # Frames the motion gate dropped as unchanged, not yet in a span (their headers come
    # in before the kept frame that ends it is detected).
    stills: list[int] = field(default_factory=list)

    def still(self, index: int) -> None:
        """Frame `index` was dropped by the motion gate: unchanged since the last kept."""
        if index > self.last_index:
            self.stills.append(index)
            del self.stills[:-_STILLS_MAX]

    def saw(self, index: int, boxes: int, calibration: bool) -> Span | None:
        """A detected frame with `boxes` boxes: the span it ends (None: the first, or out
        of order). A burst's frames end spans too (for the run) but not the window's."""
        span = None
        if 0 <= self.last_index < index:
            gap = index - self.last_index
            still = sum(1 for i in self.stills if self.last_index < i < index)
            span = Span(gap, gap * (self.last_boxes + boxes) / 2, min(still, gap - 1))
            if not calibration:
                self.window.append(span)
        if index >= self.last_index:
            self.last_index, self.last_boxes = index, boxes
            if self.stills:
                self.stills = [i for i in self.stills if i > index]
        return span

    def take_window(self) -> list[Span]:
        """The window's spans (a burst starts: they are what the device did since the last)."""
        out, self.window = self.window, []
        return out
