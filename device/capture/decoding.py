"""How a source decodes (device/capture/sources.py): the hardware decoder a camera uses
(`DecoderChoice`), the rate gate that delivers at most `max_fps` (`RateGate`), the frames the
camera's cascade will hold back (`HeldAhead`), and the skip_frame bookkeeping built on the
two (`NonRefSkipper`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from strata.shared.config.device import SourceConfig

log = logging.getLogger(__name__)

SOFTWARE = "software"
# `hwaccel: auto` tries these, in this order, among the types FFmpeg was built with.
AUTO_ORDER = ("cuda", "vaapi", "qsv", "videotoolbox", "v4l2m2m", "drm")


class RateGate:
    """At most `fps` frames a second, spread evenly by timestamp: a frame is delivered when
    it reaches the next slot of a 1/fps grid anchored at the first frame.

    Invariant (what makes skip_frame safe): a frame that is not delivered leaves the state
    as it was, and while timestamps rise, `due` only grows; so a frame whose timestamp
    is at or after the last frame seen and before `due` now will be passed over whenever
    it is decoded (`passes_over`). A timestamp going back (a broken or restarted stream)
    re-anchors the grid at that frame, which is delivered.
    """

    _EPS = 1e-6

    def __init__(self, fps: float) -> None:
        self.period = 1.0 / fps
        self._origin = 0.0
        self.due = -math.inf  # the next slot's start; -inf: nothing seen yet
        self.last = -math.inf  # the latest timestamp seen

    def keep(self, ts: float) -> bool:
        """Deliver the frame at stream time `ts`?"""
        if ts < self.last or self.due == -math.inf:
            self._origin, self.due = ts, ts
        self.last = ts
        if ts < self.due - self._EPS:
            return False
        slot = math.floor((ts - self._origin) / self.period + self._EPS)
        self.due = self._origin + (slot + 1) * self.period
        return True

    def passes_over(self, ts: float) -> bool:
        """Whether a frame at `ts`, not decoded yet, is sure to be passed over by `keep`."""
        return self.last <= ts < self.due - self._EPS


class HeldAhead:
    """The frames a camera's cascade will hold back whatever they show, told to its source
    so that it need not decode those no other frame refers to: stream times in (`start`,
    `until`). Written by the camera after each decision, read by the source before each
    packet: both on the camera's thread (decode ahead off), so the source never skips on a
    hold older than the last frame decided. What the edge asks in the meantime can end a
    hold early: a frame already skipped then reaches the camera without pixels, counted."""

    __slots__ = ("start", "until")

    def __init__(self) -> None:
        self.start = 0.0
        self.until = -math.inf

    def hold(self, start: float, until: float) -> None:
        """Frames after stream time `start` and before `until` will be held back."""
        self.start, self.until = start, until

    def covers(self, ts: float) -> bool:
        """Whether the frame at stream time `ts` will be held back."""
        return self.start < ts < self.until


class DecoderChoice:
    """One camera's decoder: `hwaccel` resolved at its first open and kept across reopens
    (probing again at every reconnect would only repeat the same answer)."""

    def __init__(self, camera_id: str, cfg: SourceConfig) -> None:
        self.camera_id = camera_id
        self.setting = cfg.hwaccel
        self.device = cfg.hwaccel_device or None
        self.kind: str | None = None  # None: not probed yet

    def resolve(self, codec: str) -> str:
        """The decoder for a stream of `codec`: "software" or a device type that works."""
        if self.kind is None:
            self.kind = self._probe(codec)
        return self.kind

    def give_up(self, why: str) -> None:
        """The chosen device failed in use: software from now on (one line)."""
        log.warning(
            "camera %s: hardware decoding on %s failed (%s); decoding in software",
            self.camera_id,
            self.kind,
            why,
        )
        self.kind = SOFTWARE

    def _probe(self, codec: str) -> str:
        if self.setting == "none":
            return SOFTWARE
        tried: list[str] = []
        for kind in AUTO_ORDER if self.setting == "auto" else (self.setting,):
            why = device_problem(kind, codec, self.device)
            if not why:
                log.info(
                    "camera %s: decoding %s on %s (hwaccel %s)",
                    self.camera_id,
                    codec,
                    kind,
                    self.setting,
                )
                return kind
            tried.append(f"{kind}: {why}")
        log.warning(
            "camera %s: no hardware decoder for %s (hwaccel %s; %s); decoding in software",
            self.camera_id,
            codec,
            self.setting,
            "; ".join(tried),
        )
        return SOFTWARE


def device_problem(kind: str, codec: str, device: str | None = None) -> str:
    """Why `kind` cannot decode `codec` on this host ("" when it can)."""
    import av
    from av.codec.hwaccel import HWAccel, hwdevices_available

    if kind == "v4l2m2m":  # not an FFmpeg device type: decoders of their own
        name = f"{codec}_v4l2m2m"
        if name not in av.codecs_available:
            return f"FFmpeg has no {name} decoder"
        try:
            av.CodecContext.create(name, "r").open()
        except (av.FFmpegError, OSError) as exc:
            return error_text(exc)
        return ""
    if kind not in hwdevices_available():
        return "FFmpeg was built without it"
    try:
        HWAccel(kind, device=device).create(av.Codec(codec, "r"))
    except NotImplementedError:
        return f"no {kind} decoder for {codec}"
    except (av.FFmpegError, OSError, ValueError) as exc:
        return error_text(exc) or type(exc).__name__
    return ""


class NonRefSkipper:
    """skip_frame over one pass of a stream: a packet whose frame the RateGate is sure to
    pass over, or the camera to hold back (`HeldAhead`), goes to the decoder with
    non-reference frames skipped; its pts stays marked until its frame shows (a reference
    frame, decoded anyway) or a later one does (it was never decoded: counted, and a held
    one is delivered in its place without pixels)."""

    def __init__(
        self,
        ctx: Any,
        rate: RateGate | None,
        held: HeldAhead | None,
        report: Callable[[str, int], None],
    ) -> None:
        self.ctx = ctx
        self.rate = rate
        self.held = held
        self.report = report
        self.marked: dict[int, bool] = {}  # pts -> held back (else passed over by rate)
        self.skipping = False

    def before(self, pts: int | None, ts: float | None) -> None:
        """Before the decoder gets the packet at `pts` (stream time `ts`)."""
        skip = held = False
        if pts is not None and ts is not None:
            if self.rate is not None and self.rate.passes_over(ts):
                skip = True
            elif self.held is not None and self.held.covers(ts):
                skip = held = True
        if skip != self.skipping:
            self.ctx.skip_frame = "NONREF" if skip else "DEFAULT"
            self.skipping = skip
        if skip and pts is not None:
            self.marked[pts] = held

    def after(self, pts: int | None) -> Sequence[int]:
        """A frame came out of the decoder (they come out in timestamp order): the pts of
        the held frames before it that were never decoded, in order."""
        if pts is None or not self.marked:
            return ()
        self.marked.pop(pts, None)
        return self._gone(sorted(p for p in self.marked if p < pts))

    def finish(self) -> Sequence[int]:
        """The stream ended: what is still marked was never decoded."""
        return self._gone(sorted(self.marked))

    def _gone(self, gone: list[int]) -> Sequence[int]:
        held = [p for p in gone if self.marked.pop(p)]
        if len(gone) > len(held):
            self.report("not_decoded", len(gone) - len(held))
        if held:
            self.report("held", len(held))
        return held


def error_text(exc: BaseException) -> str:
    # PyAV's messages repeat the path; the strerror part is what a user needs.
    return str(getattr(exc, "strerror", None) or exc)
