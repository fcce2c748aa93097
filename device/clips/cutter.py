"""Clips cut from a camera's packet ring: stream copy into fragmented MP4, never re-encoded.

A `ClipRequest` names a span of the camera's capture clock. Its clip starts at the keyframe
at or before start - pre_roll_s (from the ring) and runs until its first frame at or after
end + post_roll_s and every frame shown before it are in, at most max_s from that keyframe. Packets
are copied as demuxed, their pts/dts rebased to the clip's first packet, into a fragmented
MP4 (a fragment per keyframe: a clip cut short by a crash plays up to its last one).

A clip follows its own track: each key (a track, an event) gets a clip of its own, cut to
its own span plus the rolls, even where tracks overlap (issue 39: overlapping tracks merged
into one clip made a 20 s track's clip the whole 79 s file on a busy scene). Overlapping
clips hold the same packets twice: bytes are traded for a clip that shows its track. A
request for a key whose clip is still open extends that clip (a track asked for again).

A live track (`open_track`) has no end yet: its clip runs until `end_track` gives it one
(its last seen capture time, then post_roll_s more), or max_s. That end arrives late: the
edge knows a track ended only the tracker's lost-track wait after it was last seen
(edge.tracking.max_lost, seconds), and the clip, written live, has run on meanwhile. Such
a clip ends at once at the first fragment boundary (a keyframe) whose frames before it
reach the end, and the fragments after it are cut off the file when it is finished: a
byte prefix of what was written (the uploader tells the cloud to keep that prefix:
ClipChunk.cut_back). It then ends at most a GOP past its track's end plus the post-roll,
never before it; the bytes cut off are counted (strata_device_clip_bytes_cut_back) and
logged. A clip whose end is still ahead, or in the fragment being written, ends at the
first frame at or after it as any other.

Ids are unique forever: "<camera_id>/<session>/<n>" (the agent's session); the file is
`<dir>/<camera>/<session>-<n>.mp4`. A `ClipJournal` (the clip spool) hears a clip's
`ClipInfo` when its file starts, when a track joins it, and when it ends (final).

Every clip ends as a `Clip` with an outcome (counted in strata_device_clips):
  - complete: it covers its request (`notes` say where it falls short: a pre-roll the ring
    no longer held, max_s reached);
  - disconnected: the source closed mid-clip; what was written stays and plays;
  - ended: a file source reached its end before the clip's end (not an error: there is no
    more to show); what was written plays;
  - no_keyframe: the ring held no keyframe and none came before the clip's end, or the
    ring no longer holds the span asked for;
  - codec: the stream's codec cannot be stream-copied into MP4;
  - error: writing failed (disk full, a muxer error): the camera reads on.

The cutter is the ring's listener: packets reach open clips on the camera's thread, with
the ring's lock held; `request` takes that lock too, so a clip is caught up from the ring
and then fed packet by packet, none missed, none twice.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import secrets
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from strata.shared.config.device import ClipsConfig
from strata.shared.contracts import clips_pb2
from strata.shared.fsnames import path_component

from ..capture.packet_ring import MP4_OPTIONS, PacketRing, RingPacket
from ..metrics import ClipMetrics

log = logging.getLogger(__name__)

OUTCOMES = ("complete", "disconnected", "no_keyframe", "codec", "error", "cut_short", "ended")
# Outcome names as the contract has them (ClipInfo.outcome).
OUTCOME_CODES: dict[str, clips_pb2.ClipOutcome] = {
    name: getattr(clips_pb2, f"CLIP_OUTCOME_{name.upper()}") for name in OUTCOMES
}


class ClipJournal(Protocol):
    """Hears a clip's ClipInfo as it goes (the clip spool keeps it beside the file), on
    the thread that cut it, the ring's lock held."""

    def opened(self, path: Path, info: clips_pb2.ClipInfo) -> None:
        """The clip's file has its first packet; `info` is not final."""

    def changed(self, path: Path, info: clips_pb2.ClipInfo) -> None:
        """A track joined the open clip."""

    def done(self, path: Path, info: clips_pb2.ClipInfo) -> None:
        """The clip ended (`info` final); `path` may not exist: nothing was written."""


@dataclass(frozen=True, slots=True)
class ClipRequest:
    """A span of the camera's capture clock (ns, `Frame.capture_ns`) to show, and what it
    is for (a track id, an event id: the clip lists the keys it serves)."""

    start_ns: int
    end_ns: int
    key: str = ""

    def __post_init__(self) -> None:
        if self.end_ns < self.start_ns:
            raise ValueError(
                f"clip request ends ({self.end_ns}) before it starts ({self.start_ns})"
            )


@dataclass(frozen=True, slots=True)
class Clip:
    """A finished clip. Times of its first and last frame in stream seconds and in the
    capture clock; `path` None when nothing was written."""

    clip_id: str
    camera_id: str
    path: Path | None
    outcome: str
    reason: str
    notes: tuple[str, ...]
    keys: tuple[str, ...]
    start_ts: float
    end_ts: float
    start_ns: int
    end_ns: int
    packets: int
    bytes: int


class _OpenClip:
    """A clip being written (or waiting for a keyframe when `out` is None)."""

    __slots__ = (
        "base",
        "clip_id",
        "cut",
        "end_ts",
        "frags",
        "keys",
        "notes",
        "out",
        "packets",
        "path",
        "start_ts",
        "stream",
        "target_ts",
        "targets",
        "want_ts",
    )

    def __init__(self, clip_id: str, path: Path, want_ts: float, target_ts: float) -> None:
        self.clip_id = clip_id
        self.path = path
        self.want_ts = want_ts
        self.target_ts = target_ts  # the first packet at or after it is the last one
        self.keys: list[str] = []
        # Each key's end (stream s; inf while its track lives); target_ts is their max.
        self.targets: dict[str, float] = {}
        self.notes: list[str] = []
        self.out: Any = None
        self.stream: Any = None
        self.base = 0  # the first packet's dts (or pts): the clip's zero
        self.start_ts = 0.0
        self.end_ts = 0.0
        self.packets = 0
        # Per keyframe after the first: the latest frame shown before it, the packets
        # before it, and the file offset where its fragment starts (a place to cut back to).
        self.frags: list[tuple[float, int, int]] = []
        self.cut: tuple[float, int, int] | None = None  # the one cut back to, if any


class ClipCutter:
    """Cuts one camera's clips from its ring (see the module docstring)."""

    def __init__(
        self,
        ring: PacketRing,
        cfg: ClipsConfig,
        metrics: ClipMetrics | None = None,
        journal: ClipJournal | None = None,
        session: str = "",
    ) -> None:
        self.ring = ring
        self.cfg = cfg
        self.session = session or secrets.token_hex(8)
        self.dir = Path(cfg.dir) / path_component(ring.camera_id)
        self.journal = journal
        self.finished: deque[Clip] = deque(maxlen=256)  # the latest, for status and tests
        self._open: list[_OpenClip] = []
        self._m = metrics
        self._seq = itertools.count()
        self._anon = itertools.count()
        ring.listener = self

    @property
    def open_clips(self) -> int:
        """Clips still being written."""
        return len(self._open)

    def request(self, req: ClipRequest) -> str:
        """Cut the clip `req` asks for, or extend its key's clip still open; the clip's id.
        Never raises for the stream's sake: a clip that cannot be cut ends with a reason."""
        return self._ask(req, live=False)

    def open_track(self, key: str, start_ns: int) -> str:
        """A live track from capture time `start_ns`: its clip runs until `end_track`."""
        return self._ask(ClipRequest(start_ns, start_ns, key), live=True)

    def end_track(self, key: str, end_ns: int) -> bool:
        """The track `key` was last seen at capture time `end_ns`: its clip ends
        post_roll_s later, cut back to there if it ran past (the module docstring).
        False: no open clip has it."""
        ring = self.ring
        with ring.lock:
            for clip in self._open:
                if key in clip.targets:
                    clock = ring.clock
                    end = clock.to_stream(end_ns) if not clock.empty else clip.end_ts
                    clip.targets[key] = end + self.cfg.post_roll_s
                    clip.target_ts = max(clip.targets.values())
                    self._cut_back(clip)
                    return True
        return False

    def close(self, reason: str = "the camera stopped") -> None:
        """End the open clips (shutdown)."""
        with self.ring.lock:
            self.on_end(reason)

    # The ring's listener (the camera's thread, the ring's lock held).

    def on_packet(self, packet: RingPacket) -> None:
        for clip in list(self._open):
            self._feed(clip, packet)

    def on_end(self, reason: str, finished: bool = False) -> None:
        for clip in list(self._open):
            self._source_gone(clip, reason, finished)

    # Internals.

    def _ask(self, req: ClipRequest, live: bool) -> str:
        ring = self.ring
        with ring.lock:
            want = target = 0.0
            if not ring.clock.empty:
                want = ring.clock.to_stream(req.start_ns) - self.cfg.pre_roll_s
                target = (
                    math.inf if live else ring.clock.to_stream(req.end_ns) + self.cfg.post_roll_s
                )
                for clip in self._open:
                    # Only the key's own clip: another track's never grows to hold this one.
                    if req.key and req.key in clip.keys and want <= clip.target_ts:
                        self._extend(clip, target, req.key)
                        return clip.clip_id
            clip = self._new(req, want, target)
            if ring.template is None:
                outcome = "codec" if ring.codec_problem else "disconnected"
                self._finish(clip, outcome, ring.codec_problem or "the source has not opened")
            elif ring.clock.empty:
                self._finish(clip, "no_keyframe", "the source has sent no packet yet")
            else:
                self._start(clip)
            return clip.clip_id

    def _new(self, req: ClipRequest, want: float, target: float) -> _OpenClip:
        n = next(self._seq)
        clip_id = f"{self.ring.camera_id}/{self.session}/{n}"
        clip = _OpenClip(clip_id, self.dir / f"{self.session}-{n}.mp4", want, target)
        self._add_key(clip, req.key, target)
        return clip

    def _add_key(self, clip: _OpenClip, key: str, target: float) -> bool:
        """True when `key` is new to the clip."""
        new = bool(key) and key not in clip.keys
        if new:
            clip.keys.append(key)
        slot = key or f"#{next(self._anon)}"
        clip.targets[slot] = max(clip.targets.get(slot, -math.inf), target)
        clip.target_ts = max(clip.targets.values())
        return new

    def _extend(self, clip: _OpenClip, target: float, key: str) -> None:
        if self._add_key(clip, key, target) and clip.out is not None and self.journal:
            self.journal.changed(clip.path, self._info(clip, ""))

    def _end_ts(self, clip: _OpenClip) -> float:
        """Where the clip ends: its target, at most max_s from its first frame (from its
        earliest wanted start while it waits for a keyframe)."""
        first = clip.start_ts if clip.out is not None else clip.want_ts + self.cfg.pre_roll_s
        return min(clip.target_ts, first + self.cfg.max_s)

    def _cut_back(self, clip: _OpenClip) -> None:
        """End a clip written past its end at the first fragment boundary that reaches it
        (the fragments after it are cut off in `_finish`); one whose end is ahead, or in
        the fragment being written, is left to `_feed`."""
        end = self._end_ts(clip)
        if clip.out is None or clip.end_ts < end:
            return
        clip.cut = next((f for f in clip.frags if f[0] >= end), None)
        if clip.cut is not None:
            self._finish(clip, "complete", "")

    def _cut_file(self, clip: _OpenClip, cut: tuple[float, int, int]) -> None:
        """Truncate the closed clip's file to the fragment boundary `cut`; counted and
        logged. A file without a fragment there is left whole (said why)."""
        shown, packets, offset = cut
        try:
            with open(clip.path, "r+b") as f:
                f.seek(offset)
                head = f.read(8)
                if head[4:8] != b"moof":
                    raise ValueError(f"no fragment starts at byte {offset} ({head!r})")
                size = os.fstat(f.fileno()).st_size
                f.truncate(offset)
        except (OSError, ValueError) as exc:
            log.error(
                "camera %s: clip %s not cut back to its end (it runs %.2fs past it): %s",
                self.ring.camera_id,
                clip.clip_id,
                clip.end_ts - shown,
                exc,
            )
            return
        if self._m is not None:
            self._m.clip_cut_back.inc(size - offset)
        log.info(
            "camera %s: clip %s cut back by %.2fs (%d packets, %d bytes): its track's end "
            "came after the clip had run past it plus the post-roll",
            self.ring.camera_id,
            clip.clip_id,
            clip.end_ts - shown,
            clip.packets - packets,
            size - offset,
        )
        clip.end_ts, clip.packets = shown, packets

    def _start(self, clip: _OpenClip) -> None:
        ring = self.ring
        self._open.append(clip)
        found = ring.start_index(clip.want_ts)
        if found is None:
            clip.notes.append("the ring held no keyframe: the clip starts at the next one")
        else:
            index, key_ts = found
            if key_ts > clip.target_ts:  # all of it is older than the ring
                self._finish(
                    clip,
                    "no_keyframe",
                    f"the ring no longer holds it: it ended {key_ts - clip.target_ts:.2f}s "
                    "before the oldest keyframe held",
                )
                return
            if key_ts > clip.want_ts:
                clip.notes.append(
                    f"pre-roll short by {key_ts - clip.want_ts:.2f}s: the ring held no "
                    "earlier keyframe"
                )
            for packet in ring.packets_from(index):
                if not self._feed(clip, packet):
                    return
        if not ring.live:
            self._source_gone(clip, ring.end_reason or "it is not open", ring.finished)

    def _source_gone(self, clip: _OpenClip, reason: str, finished: bool = False) -> None:
        if clip.out is None:  # still waiting for its first keyframe
            self._finish(clip, "no_keyframe", f"no keyframe before the source closed: {reason}")
        elif clip.end_ts >= self._end_ts(clip):  # its last frames were in: nothing is missing
            self._finish(clip, "complete", "")
        elif finished:  # a file read to its end: nothing is lost, there is no more
            self._finish(
                clip, "ended", f"the file ended before the clip's end, at {clip.end_ts:.2f}s"
            )
        else:
            self._finish(clip, "disconnected", f"the source closed mid-clip: {reason}")

    def _feed(self, clip: _OpenClip, packet: RingPacket) -> bool:
        """Write `packet` to `clip` if it belongs there; False once the clip is finished.

        The clip is finished once a frame at or after its end is written and every frame
        shown before that one is too: at the next packet that shows later than every frame
        written (the frames B-frames fill in before it come first in decode order)."""
        if clip.packets and clip.end_ts >= self._end_ts(clip) and packet.pts_ts > clip.end_ts:
            self._finish(clip, "complete", "")
            return False
        try:
            first = clip.out is None
            if first:
                if not packet.key:
                    if packet.ts >= self._end_ts(clip):
                        self._finish(clip, "no_keyframe", "no keyframe before the clip's end")
                        return False
                    return True
                self._open_output(clip, packet)
            self._mux(clip, packet)
            if first and self.journal is not None:
                self.journal.opened(clip.path, self._info(clip, ""))
        except Exception as exc:  # a clip must never take the camera down
            log.exception("camera %s: clip %s failed", self.ring.camera_id, clip.clip_id)
            self._finish(clip, "error", f"writing failed: {exc}")
            return False
        return True

    def _open_output(self, clip: _OpenClip, first: RingPacket) -> None:
        import av

        template = self.ring.template
        if template is None:  # the ring was reset under an open clip: never (on_end first)
            raise RuntimeError("the stream's parameters are gone")
        self.dir.mkdir(parents=True, exist_ok=True)
        out = av.open(str(clip.path), "w", format="mp4", options=MP4_OPTIONS)
        try:
            with template.stream() as stream:
                clip.stream = out.add_stream_from_template(stream)
        except BaseException:
            out.close()
            raise
        clip.out = out
        clip.base = first.dts if first.dts is not None else (first.pts or 0)
        clip.start_ts = clip.end_ts = first.pts_ts

    def _mux(self, clip: _OpenClip, packet: RingPacket) -> None:
        import av

        out = av.Packet(packet.data)
        out.time_base = self.ring.template.time_base if self.ring.template else None
        base = clip.base
        out.pts = packet.pts - base if packet.pts is not None else None
        out.dts = packet.dts - base if packet.dts is not None else None
        out.is_keyframe = packet.key
        out.stream = clip.stream
        boundary = (clip.end_ts, clip.packets) if packet.key and clip.packets else None
        clip.out.mux(out)
        if boundary is not None:  # muxing a keyframe flushed the fragment before it
            clip.frags.append((*boundary, clip.path.stat().st_size))
        clip.packets += 1
        clip.end_ts = max(clip.end_ts, packet.pts_ts)

    def _capture_span(self, clip: _OpenClip) -> tuple[int, int]:
        """Capture times of the clip's first and last frame (0, 0: none written)."""
        clock = self.ring.clock
        if not clip.packets or clock.empty:
            return 0, 0
        return clock.to_capture(clip.start_ts), clock.to_capture(clip.end_ts)

    def _info(self, clip: _OpenClip, outcome: str) -> clips_pb2.ClipInfo:
        """The clip's ClipInfo; final when `outcome` is given."""
        template = self.ring.template
        start_ns, end_ns = self._capture_span(clip)
        info = clips_pb2.ClipInfo(
            clip_id=clip.clip_id,
            camera_id=self.ring.camera_id,
            track_uids=clip.keys,
            start_ns=start_ns,
            codec=template.codec if template else "",
            width=template.width if template else 0,
            height=template.height if template else 0,
        )
        if outcome:
            info.end_ns = end_ns
            info.outcome = OUTCOME_CODES[outcome]
            info.notes.extend(clip.notes)
            info.final = True
        return info

    def _finish(self, clip: _OpenClip, outcome: str, reason: str) -> None:
        if clip in self._open:
            self._open.remove(clip)
        if outcome == "complete" and clip.out is not None and clip.target_ts > self._end_ts(clip):
            clip.notes.append(f"capped at max_s ({self.cfg.max_s:g}s)")
        path: Path | None = None
        if clip.out is not None:
            try:
                clip.out.close()
            except Exception as exc:  # the fragments written so far still play
                if outcome == "complete":
                    outcome, reason = "error", f"closing failed: {exc}"
            clip.out = None
            path = clip.path if clip.path.exists() else None
            if path is not None and clip.cut is not None:
                self._cut_file(clip, clip.cut)
        size = path.stat().st_size if path is not None else 0
        start_ns, end_ns = self._capture_span(clip)
        done = Clip(
            clip.clip_id,
            self.ring.camera_id,
            path,
            outcome,
            reason,
            tuple(clip.notes),
            tuple(clip.keys),
            clip.start_ts,
            clip.end_ts,
            start_ns,
            end_ns,
            clip.packets,
            size,
        )
        self.finished.append(done)
        self._tell(clip, done)

    def _tell(self, clip: _OpenClip, done: Clip) -> None:
        """Count, log and journal a finished clip."""
        if self._m is not None:
            self._m.clip(done.outcome)
            self._m.clip_bytes.inc(done.bytes)
        level = logging.INFO if done.outcome == "complete" else logging.WARNING
        log.log(
            level,
            "camera %s: clip %s %s (%d packets, %d bytes, %.2fs)%s%s",
            self.ring.camera_id,
            clip.clip_id,
            done.outcome,
            clip.packets,
            done.bytes,
            clip.end_ts - clip.start_ts,
            f": {done.reason}" if done.reason else "",
            f" [{'; '.join(clip.notes)}]" if clip.notes else "",
        )
        if self.journal is None:
            return
        info = self._info(clip, done.outcome)
        info.reason, info.size_bytes = done.reason, done.bytes
        try:
            self.journal.done(clip.path, info)
        except Exception:  # the journal's failure is not the camera's
            log.exception("camera %s: clip %s not journaled", self.ring.camera_id, clip.clip_id)
