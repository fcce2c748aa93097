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
scores it against the detector (`Still`): the share of answered boxes that match, and the
detector's boxes the answer misses per frame. Once a camera's bursts measured it, a span's
unchanged frames are scored with those, in boxes as F1 pools them: the answer there holds
the last kept frame's boxes, of which the measured share match, and the detector has those
plus the measured misses. The rest of the span (the frames spaced by the gap, and the kept
one) is scored at the curve, at the gap they make without them. A kept frame after 49
unchanged frames of an empty street, the first of a passage, was scored as a 50-frame gap
with the passage's boxes spread over it (0.27 on the quiet clip), and the estimate fell
0.04 under the measured F1; bursts that found no box in what the gate called unchanged
put none there. Until measured (and for a span whose held boxes meet no measured share),
the whole span is scored at the curve (the pessimistic side): a gate blind to the objects
(it drops them as unchanged) shows in bursts as unchanged frames whose answers miss, and
the estimate falls as it should.

With few samples the estimate leans low: what goes back to the device for its target is
the lower confidence bound (`lower_bound`, Wilson's, z = ESTIMATE_Z) of the window's
estimate, its sample the boxes (F1) or frames (counting) the curves were measured on: two
bursts over a handful of people are a small sample, and the device keeps more frames on
their doubt rather than fewer on their luck. Spans of gap 1 (every frame detected) were
measured, not estimated, and are not lowered (`Tally.bounded`).

What the payload codec costs comes on top of what a gap costs (the bursts' curves compare
the detector on JPEG frames with itself): the device sends a burst's first frames as raw
pixels (codec probes), the edge detects each again after a JPEG round trip at the camera's
quality, and `Codec` pools the two over the camera's recent probes. Once they hold
`MIN_CODEC_BOXES`, that loss is taken off every gap of the curves the device hears and off
the estimate. On megamind with JPEG 95 the frames sent scored F1 0.956 against the
detector on the camera's own frames, and the estimate, blind to it, said 1.000 for 0.948.

A `Tally` sums spans: one per calibration window (the feedback's estimate, against the
device's target) and increments for the run (counters, so a bench divides one by the
other and compares with the every-frame reference over the same frames).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from strata.shared.contracts import CODEC_MIN_BOXES
from strata.shared.vision import FrameBoxes
from strata.shared.vision.agreement import agreement


@dataclass(frozen=True, slots=True)
class Span:
    """The frames from one kept frame (excluded) to the next (included)."""

    gap: int
    # The detector's boxes in those frames (estimated from the kept frames at both ends).
    boxes: float
    # Of those frames: the ones the motion gate dropped as unchanged, and the boxes
    # answered on them (the last kept frame's, held).
    still: int = 0
    held: float = 0.0


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


# One-sided confidence of the estimate sent to the device (1: about 84%).
ESTIMATE_Z = 1.0


def lower_bound(p: float, n: float, z: float = ESTIMATE_Z) -> float:
    """Wilson's lower confidence bound of a proportion `p` measured on `n` samples (boxes,
    frames); `n` <= 0: 0 (nothing measured says nothing)."""
    if n <= 0:
        return 0.0
    p = min(max(p, 0.0), 1.0)
    z2 = z * z
    centre = p + z2 / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z2 / n))


class Curves:
    """A camera's last `window` bursts' accuracy by gap (index g - 1), averaged by weight."""

    def __init__(self, window: int) -> None:
        self._f1: deque[tuple[np.ndarray, float]] = deque(maxlen=window)
        self._counting: deque[np.ndarray] = deque(maxlen=window)
        # Frames each burst scored (the counting curve's sample).
        self._frames: deque[int] = deque(maxlen=window)
        self.f1: np.ndarray | None = None
        self.counting: np.ndarray | None = None
        self._still: deque[Still] = deque(maxlen=window)
        # What answering an unchanged frame costs, once measured on enough of them: the
        # share of answered boxes that match the detector's, the detector's boxes missed
        # per frame, and counting agreement.
        self.still_match: float | None = None
        self.still_missed: float | None = None
        self.still_counting: float | None = None

    def add_still(self, still: Still) -> None:
        """One burst's measure of what an unchanged frame costs."""
        self._still.append(still)
        frames = sum(s.frames for s in self._still)
        matched = sum(s.matched for s in self._still)
        answered = sum(s.answered for s in self._still)
        missed = sum(s.detected for s in self._still) - matched
        enough = frames >= MIN_STILL_FRAMES
        self.still_match = matched / answered if answered >= MIN_STILL_BOXES else None
        self.still_missed = missed / frames if enough else None
        counting = sum(s.counting_sum for s in self._still)
        self.still_counting = counting / frames if enough else None

    @property
    def boxes(self) -> float:
        """The detector's boxes the F1 curve was measured on (its sample)."""
        return float(sum(w for _, w in self._f1))

    @property
    def frames(self) -> int:
        """The frames the counting curve was measured on (its sample)."""
        return sum(self._frames)

    def add(
        self, f1: tuple[float, ...], counting: tuple[float, ...], boxes: int, frames: int = 0
    ) -> None:
        """One burst's curves; `boxes`: the detector's boxes in the frames it scored (and
        `frames` of them). A burst without boxes (0) weighs nothing in F1, and does not
        push the last bursts that saw some out of the window: with a window of one, a
        burst over a passage's last straggler left no F1 curve, the spans with boxes went
        unscored, and the estimate was its gap-1 spans alone."""
        if boxes > 0:
            self._f1.append((np.asarray(f1, np.float64), float(boxes)))
        self._counting.append(np.asarray(counting, np.float64))
        self._frames.append(frames)
        # Bursts of other strides measure other gaps: the shorter curves grown to the
        # longest's gaps as `_at` scores past a curve's end.
        n = max(len(c) for c in self._counting)
        self.f1 = (
            np.average(
                np.stack([_grown(c, n) for c, _ in self._f1]),
                axis=0,
                weights=[w for _, w in self._f1],
            )
            if self._f1
            else None
        )
        self.counting = np.mean(np.stack([_grown(c, n) for c in self._counting]), axis=0)


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


def _grown(curve: np.ndarray, n: int) -> np.ndarray:
    """`curve` over gaps 1..`n`: past its end as `_at` scores it."""
    if len(curve) >= n:
        return curve[:n]
    return np.array([_at(curve, g) for g in range(1, n + 1)], np.float64)


def _part(curve: np.ndarray | None, span: Span, still: float | None) -> float:
    """`span`'s agreement per frame (counting): its unchanged frames at `still` once
    measured, the rest at the curve at the gap they make; unmeasured, all at the curve."""
    if curve is None:
        return 1.0
    if still is None or span.still <= 0:
        return _at(curve, span.gap)
    unchanged = min(span.still, span.gap - 1)
    spaced = span.gap - unchanged
    return (spaced * _at(curve, spaced) + unchanged * still) / span.gap


def _boxes(curves: Curves, span: Span) -> tuple[float, float]:
    """`span`'s box F1 as pooled: its weight (boxes) and the weight that agrees. Its
    unchanged frames, once measured: the held boxes answered, the measured share of them
    matched, the detector's the matched ones and the measured misses; the rest of the span
    at the curve at the gap it makes. Unmeasured: all of it at the curve at its gap."""
    unchanged = min(span.still, span.gap - 1)
    trusted = (
        unchanged > 0
        and curves.still_missed is not None
        and (span.held <= 0 or curves.still_match is not None)
    )
    if not trusted or curves.still_missed is None:
        f1 = _at(curves.f1, span.gap) if curves.f1 is not None else 1.0
        return span.boxes, span.boxes * f1
    spaced = span.gap - unchanged
    spaced_boxes = span.boxes * spaced / span.gap
    f1 = _at(curves.f1, spaced) if curves.f1 is not None else 1.0
    matched = span.held * (curves.still_match or 0.0)
    detected = matched + curves.still_missed * unchanged
    return spaced_boxes + (detected + span.held) / 2, spaced_boxes * f1 + matched


# Boxes the codec probes of a camera must hold before their loss is taken; probes kept.
MIN_CODEC_BOXES = CODEC_MIN_BOXES
CODEC_PROBES_KEPT = 40


@dataclass(frozen=True, slots=True)
class CodecLoss:
    """What the payload codec costs the detector: box F1 and counting agreement lost."""

    f1: float = 0.0
    counting: float = 0.0
    boxes: int = 0  # the detector's boxes on the raw probes it was measured on


@dataclass(frozen=True, slots=True)
class CodecSample:
    """One probe: boxes matched between the detector on the raw frame and on its JPEG,
    each side's count, and the frame's counting agreement."""

    matched: int
    raw: int
    jpeg: int
    counting: float

    @classmethod
    def of(cls, raw: FrameBoxes, jpeg: FrameBoxes) -> CodecSample:
        """The probe's boxes on the raw frame and on its JPEG round trip, compared."""
        a = agreement([raw], [jpeg])
        tp = a.true_positives
        return cls(tp, tp + a.false_negatives, tp + a.false_positives, a.counting)


class Codec:
    """One camera's recent codec probes, pooled as F1 pools boxes."""

    def __init__(self, kept: int = CODEC_PROBES_KEPT) -> None:
        self._samples: deque[CodecSample] = deque(maxlen=kept)
        self._loss = CodecLoss()

    def add(self, sample: CodecSample) -> None:
        """Keep a probe; the pooled loss is computed here, once a probe, since every
        detected frame reads it."""
        self._samples.append(sample)
        raw = sum(s.raw for s in self._samples)
        if raw < MIN_CODEC_BOXES:
            self._loss = CodecLoss(boxes=raw)
            return
        matched = sum(s.matched for s in self._samples)
        jpeg = sum(s.jpeg for s in self._samples)
        f1 = 2.0 * matched / (raw + jpeg)
        counting = sum(s.counting for s in self._samples) / len(self._samples)
        self._loss = CodecLoss(1.0 - f1, 1.0 - counting, raw)

    def loss(self) -> CodecLoss:
        """The pooled loss; none until the probes hold MIN_CODEC_BOXES raw boxes."""
        return self._loss


@dataclass
class Tally:
    """Weighted sums of the estimate over some spans: box F1 over boxes, counting over
    frames. `f1()` is None when no span had a box (nothing to agree on)."""

    f1_weight: float = 0.0
    f1_sum: float = 0.0
    counting_weight: float = 0.0
    counting_sum: float = 0.0
    # The weights of spans of gap 1: measured, not estimated from the curves.
    exact_f1_weight: float = 0.0
    exact_counting_weight: float = 0.0
    taken: CodecLoss = CodecLoss()

    def add(self, span: Span, curves: Curves) -> bool:
        """Score `span` on `curves`; False (nothing added) when they cannot score it yet.
        A gap of 1 (every frame detected) agrees by construction, curves or not."""
        if span.gap <= 1:
            f1_weight, f1_sum, counting = span.boxes, span.boxes, 1.0
            self.exact_f1_weight += span.boxes
            self.exact_counting_weight += span.gap
        elif curves.counting is None or (span.boxes > 0 and curves.f1 is None):
            return False
        else:
            f1_weight, f1_sum = _boxes(curves, span)
            counting = _part(curves.counting, span, curves.still_counting)
        if f1_weight > 0:
            self.f1_weight += f1_weight
            self.f1_sum += f1_sum
        self.counting_weight += span.gap
        self.counting_sum += span.gap * counting
        return True

    def less(self, loss: CodecLoss) -> None:
        """Take the payload codec's loss off what the spans scored."""
        self.f1_sum = max(0.0, self.f1_sum - loss.f1 * self.f1_weight)
        self.counting_sum = max(0.0, self.counting_sum - loss.counting * self.counting_weight)
        self.taken = loss

    def bounded(self, boxes: float, frames: float) -> tuple[float | None, float | None]:
        """(F1, counting) with the part scored on the curves at its lower bound on their
        sample (`boxes`, `frames`); spans of gap 1 were measured and stay as they are (a
        camera keeping every frame, its bursts too sparse to weigh, was sent 0)."""
        return (
            _bounded(self.f1_weight, self.f1_sum, self.exact_f1_weight, self.taken.f1, boxes),
            _bounded(
                self.counting_weight,
                self.counting_sum,
                self.exact_counting_weight,
                self.taken.counting,
                frames,
            ),
        )

    def f1(self) -> float | None:
        """The estimated box F1 of the spans (None: no box in them)."""
        return self.f1_sum / self.f1_weight if self.f1_weight > 0 else None

    def counting(self) -> float | None:
        """The estimated counting agreement of the spans (None: no span)."""
        return self.counting_sum / self.counting_weight if self.counting_weight > 0 else None


def _bounded(weight: float, total: float, exact: float, loss: float, n: float) -> float | None:
    """`total` / `weight` with its part past `exact` (weight) at its lower bound on `n`."""
    if weight <= 0:
        return None
    exact_sum = exact * max(0.0, 1.0 - loss)
    rest = weight - exact
    if rest <= 0:
        return total / weight
    return (exact_sum + rest * lower_bound(max(0.0, total - exact_sum) / rest, n)) / weight


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
            still = min(gap - 1, sum(1 for i in self.stills if self.last_index < i < index))
            held = float(still * self.last_boxes)
            span = Span(gap, gap * (self.last_boxes + boxes) / 2, still, held)
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
