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
"motion") cost nothing: the picture is the last kept frame's, and the edge answers them
with its boxes held. Only the rest of the span (the frames dropped for the spacing and the
kept frame) is scored at the curve, at the gap they make without the still ones: a kept
frame after 49 frames of an unchanged empty street, the first of a passage, was scored
as a 50-frame gap (at 0.27 on the quiet clip) for boxes drawn over the whole span, and
the estimate fell 0.04 under the measured F1 (its window's to 0.54, boosting the device).
This trusts the gate: a detector whose boxes flicker on an unchanged picture (the bench's
synthetic shapes) loses on those frames, and the estimate does not see it.

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
    # Of those: the frames the motion gate dropped as unchanged, and their boxes (the
    # last kept frame's); they agree whatever the gap.
    still: int = 0
    still_boxes: float = 0.0


class Curves:
    """A camera's last `window` bursts' accuracy by gap (index g - 1), averaged by weight."""

    def __init__(self, window: int) -> None:
        self._f1: deque[tuple[np.ndarray, float]] = deque(maxlen=window)
        self._counting: deque[np.ndarray] = deque(maxlen=window)
        self.f1: np.ndarray | None = None
        self.counting: np.ndarray | None = None

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
        A gap of 1 (every frame detected) agrees by construction, curves or not, and so do
        the still frames (unchanged since the last kept one)."""
        gap = max(1, span.gap - span.still)
        moving_boxes = span.boxes - span.still_boxes
        if gap <= 1:
            f1, counting = 1.0, 1.0
        elif curves.counting is None or (moving_boxes > 0 and curves.f1 is None):
            return False
        else:
            f1 = _at(curves.f1, gap) if curves.f1 is not None else 1.0
            counting = _at(curves.counting, gap)
        if span.boxes > 0:
            self.f1_weight += span.boxes
            self.f1_sum += moving_boxes * f1 + span.still_boxes
        self.counting_weight += span.gap
        self.counting_sum += (span.gap - span.still) * counting + span.still
        return True

    def f1(self) -> float | None:
        """The estimated box F1 of the spans (None: no box in them)."""
        return self.f1_sum / self.f1_weight if self.f1_weight > 0 else None

    def counting(self) -> float | None:
        """The estimated counting agreement of the spans (None: no span)."""
        return self.counting_sum / self.counting_weight if self.counting_weight > 0 else None


# Still frames remembered per camera (kept frames that never come would grow them).
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
    # before the kept frame that ends it is detected).
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
            still = min(gap - 1, sum(1 for i in self.stills if self.last_index < i < index))
            held = float(still * self.last_boxes)
            moving = (gap - still) * (self.last_boxes + boxes) / 2
            span = Span(gap, moving + held, still, held)
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
