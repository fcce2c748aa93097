"""Did the cascade keep its promise on a clip (issue 22)? Read off one ClipResult.

- The target holds (box F1 against the every-frame reference >= target - TARGET_SLACK), or
  it says so: the edge's estimate fell under the target and the device kept the extra
  frames it asks for (frames kept while boosted).
- The edge's estimate, averaged over the run the way the measured F1 pools it (boxes), is
  within ESTIMATE_TOLERANCE of the measured F1.
- The verdict (issue 41): "held", "missed and said" (the device heard estimates under the
  target and kept more frames, or reported the target missed), or "missed silently".
- Against uniform at the same share (issue 41): the cascade's F1 and counting at least
  uniform's minus SAME_SHARE_SLACK (`not_worse_than_uniform`); where measured, also against
  uniform over the frames as the cascade's JPEG sends them (`..._through_codec`).
- Against lowering the frame rate (uniform spacing, the same tracker answering the rest):
  the cascade matches uniform's F1 and counting with at most half its frames (uniform at
  twice the cascade's share), or beats both by QUIET_MARGIN at the same share.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from strata.tools.bench.cascade import ClipResult

TARGET_SLACK = 0.02
ESTIMATE_TOLERANCE = 0.03
QUIET_MARGIN = 0.05
SAME_SHARE_SLACK = 0.01
VERDICTS = ("held", "missed and said", "missed silently")


@dataclass(frozen=True, slots=True)
class Promise:
    """The verdicts of one clip and the figures they are made of."""

    clip: str
    share: float
    f1: float
    counting: float
    uniform_f1: float | None
    uniform_counting: float | None
    # Uniform spacing at twice the cascade's share (the "half the frames" comparison).
    double_share: float
    double_f1: float | None
    double_counting: float | None
    estimated_f1: float | None
    estimate_error: float | None
    estimate_within: bool | None
    target: float
    target_held: bool
    estimates_under_target: int
    boosted_kept: int
    said_so: bool
    kept_promise: bool
    matches_with_half_the_frames: bool | None
    beats_at_the_same_share: bool | None
    # The detector on the frames sent (H.264 at the model's size) against the reference on
    # the same frames: a loss the edge's estimate cannot see (it never has the originals).
    sent_frames_f1: float | None = None
    # "held", "missed and said", "missed silently" (VERDICTS).
    verdict: str = ""
    # F1 and counting at least uniform's at the same share minus SAME_SHARE_SLACK.
    not_worse_than_uniform: bool | None = None
    # The device's last report of a missed target (strata_device_cascade_target_missed).
    target_missed: float = 0.0
    # Frames sent for calibration bursts, and all frames sent.
    calibration_kept: int = 0
    frames_sent: int = 0
    # With the bench's --uniform-through-codec: uniform at the same share over every frame
    # as the cascade's JPEG sends it (a user lowering the frame rate pays the codec too),
    # the codec alone on every frame, and the cascade at least that uniform's minus
    # SAME_SHARE_SLACK (F1, counting).
    uniform_codec_f1: float | None = None
    uniform_codec_counting: float | None = None
    codec_f1: float | None = None
    not_worse_than_uniform_through_codec: bool | None = None

    def as_dict(self) -> dict[str, object]:
        """For report.json (floats rounded)."""
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}

    def line(self) -> str:
        """One line a person reads."""

        def f(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.3f}"

        est = (
            "no estimate"
            if self.estimated_f1 is None
            else f"estimated {f(self.estimated_f1)} ({self.estimate_error:+.3f}, "
            f"{'within' if self.estimate_within else 'NOT within'} {ESTIMATE_TOLERANCE})"
        )
        if self.target_held:
            target = f"target {self.target:g}: held"
        elif self.said_so:
            target = (
                f"target {self.target:g}: missed and said ({self.estimates_under_target} "
                f"estimates under it, {self.boosted_kept} extra frames kept, reported missed "
                f"by {self.target_missed:.3f})"
            )
        else:
            target = f"target {self.target:g}: MISSED SILENTLY"
        half = {None: "n/a", True: "yes", False: "no"}
        return (
            f"{self.clip}: {self.share:.1%} of frames ({self.calibration_kept} of "
            f"{self.frames_sent} for calibration); F1 {f(self.f1)} (uniform "
            f"{f(self.uniform_f1)}), counting {f(self.counting)} (uniform "
            f"{f(self.uniform_counting)}); {est}, the frames sent alone F1 "
            f"{f(self.sent_frames_f1)}; {target}; matches uniform at "
            f"{self.double_share:.1%}: {half[self.matches_with_half_the_frames]}; beats "
            f"uniform by {QUIET_MARGIN}: {half[self.beats_at_the_same_share]}; not worse than "
            f"uniform at the same share (-{SAME_SHARE_SLACK}): "
            f"{half[self.not_worse_than_uniform]}{self._codec_line()}"
        )

    def _codec_line(self) -> str:
        if self.not_worse_than_uniform_through_codec is None:
            return ""
        return (
            f"; through the JPEG: every frame F1 {self.codec_f1:.3f}, uniform at the same "
            f"share F1 {self.uniform_codec_f1:.3f}, counting {self.uniform_codec_counting:.3f}"
            f", not worse than it (-{SAME_SHARE_SLACK}): "
            f"{'yes' if self.not_worse_than_uniform_through_codec else 'no'}"
        )


def promise(c: ClipResult) -> Promise:
    """The verdicts of clip `c`."""
    a = c.vs_reference
    share = c.frames_to_edge / c.frames_total if c.frames_total else 0.0
    u, d, uc = c.uniform, c.uniform_double, c.uniform_through_codec
    error = None if c.estimated_f1 is None else c.estimated_f1 - a.f1
    held = a.f1 >= c.target - TARGET_SLACK
    said_so = (c.estimates_under_target > 0 and c.boosted_kept > 0) or c.target_missed > 0
    verdict = VERDICTS[0] if held else VERDICTS[1] if said_so else VERDICTS[2]
    return Promise(
        clip=c.clip,
        share=share,
        f1=a.f1,
        counting=a.counting,
        uniform_f1=u.f1 if u else None,
        uniform_counting=u.counting if u else None,
        double_share=min(1.0, 2 * share),
        double_f1=d.f1 if d else None,
        double_counting=d.counting if d else None,
        estimated_f1=c.estimated_f1,
        estimate_error=error,
        estimate_within=None if error is None else abs(error) <= ESTIMATE_TOLERANCE,
        target=c.target,
        target_held=held,
        estimates_under_target=c.estimates_under_target,
        boosted_kept=c.boosted_kept,
        said_so=said_so,
        kept_promise=held or said_so,
        matches_with_half_the_frames=None
        if d is None
        else a.f1 >= d.f1 and a.counting >= d.counting,
        beats_at_the_same_share=None
        if u is None
        else a.f1 >= u.f1 + QUIET_MARGIN and a.counting >= u.counting + QUIET_MARGIN,
        sent_frames_f1=c.detected_vs_reference.f1 if c.detected_vs_reference else None,
        verdict=verdict,
        not_worse_than_uniform=None
        if u is None
        else a.f1 >= u.f1 - SAME_SHARE_SLACK and a.counting >= u.counting - SAME_SHARE_SLACK,
        target_missed=c.target_missed,
        calibration_kept=c.calibration_kept,
        frames_sent=c.frames_to_edge,
        uniform_codec_f1=uc.f1 if uc else None,
        uniform_codec_counting=uc.counting if uc else None,
        codec_f1=c.through_codec.f1 if c.through_codec else None,
        not_worse_than_uniform_through_codec=None
        if uc is None
        else a.f1 >= uc.f1 - SAME_SHARE_SLACK and a.counting >= uc.counting - SAME_SHARE_SLACK,
    )
