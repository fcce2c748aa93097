"""A camera's recent compressed packets, kept to cut clips from without re-encoding.

The camera's source hands the ring every packet it demuxes, before decoding it (the ring
is its `PacketTap`): the bytes, pts/dts and keyframe flag, never a decoded frame. At each
open the ring makes the stream's fragmented-MP4 init segment (`StreamTemplate`), so a codec
MP4 cannot carry is known before any clip is asked for, and a clip is muxed from the
parameters of the stream its packets came from.

Invariant: the ring is empty or starts at a keyframe, holds at most `ring_mib` bytes once
`packet` returns, and keeps at least `ring_s` of stream behind its newest packet when the
stream has run that long (a GOP is freed, oldest first and whole, only when the GOPs after
it still cover ring_s, or when the byte cap needs its room: counted). A GOP larger than the
whole ring is let go at once and packets are dropped until the next keyframe (counted,
`starved`): memory stays bounded for a source with no keyframe for longer than the ring.
Each packet is appended once and freed once: O(1) amortised.

Time: the ring works in stream seconds (pts x time_base). The camera's capture clock
(`Frame.capture_ns`, what events carry) maps to it through `CaptureClock`, fed with the
stream time and capture time of every frame the source delivers.

Threads: the camera's thread feeds the ring; clips are asked for from another. Both hold
`lock`; the ring's listener (the clip cutter) is called with it held.
"""

from __future__ import annotations

import bisect
import io
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from itertools import islice
from typing import Any, Protocol

from strata.shared.config.device import ClipsConfig

from ..metrics import ClipMetrics

log = logging.getLogger(__name__)

# Fragments end at each keyframe (a clip cut short still plays up to its last one) and at
# 1 MiB, so a source with rare keyframes does not hold a whole GOP in the muxer. Each
# fragment reaches the file when it ends (flush_packets; else the IO layer held the whole
# clip until close, and a crash left only the file type box); the file is only appended
# to, so the uploader may send an open clip's bytes as they come.
MP4_OPTIONS = {
    "movflags": "frag_keyframe+empty_moov+default_base_moof",
    "frag_size": "1048576",
    "flush_packets": "1",
}


class CodecError(ValueError):
    """The stream's codec cannot be stream-copied into MP4."""


@dataclass(frozen=True, slots=True)
class RingPacket:
    """One compressed packet as demuxed: `ts` orders it (decode time, seconds: dts, or pts
    where the stream gives none), `pts_ts` is when its frame shows."""

    data: bytes
    pts: int | None
    dts: int | None
    ts: float
    pts_ts: float
    key: bool


@dataclass(frozen=True, slots=True)
class StreamTemplate:
    """A stream's codec parameters, kept as a fragmented-MP4 init segment: they outlive
    the container they came from (closed at a reconnect) and prove MP4 can carry them."""

    codec: str
    time_base: Fraction
    init: bytes
    width: int = 0
    height: int = 0

    @classmethod
    def of(cls, stream: Any) -> StreamTemplate:
        """The template of a PyAV video stream; CodecError when MP4 cannot carry it."""
        import av

        codec = stream.codec_context.name if stream.codec_context else "unknown"
        if not stream.time_base:
            raise CodecError(f"{codec}: the stream has no time base")
        buf = io.BytesIO()
        try:
            with av.open(buf, "w", format="mp4", options=MP4_OPTIONS) as out:
                out.add_stream_from_template(stream)
                out.start_encoding()
        except (av.FFmpegError, ValueError, NotImplementedError) as exc:
            raise CodecError(f"{codec} cannot be stream-copied into MP4: {exc}") from None
        ctx = stream.codec_context
        width, height = (ctx.width or 0, ctx.height or 0) if ctx else (0, 0)
        return cls(codec, Fraction(stream.time_base), buf.getvalue(), width, height)

    @contextmanager
    def stream(self) -> Iterator[Any]:
        """A PyAV stream with these parameters, to `add_stream_from_template` from."""
        import av

        with av.open(io.BytesIO(self.init), "r", format="mp4") as container:
            yield container.streams.video[0]


class CaptureClock:
    """Maps the camera's capture clock (ns) to stream time (s) and back, through the frames
    the source delivered (anchors); between anchors, by the earlier anchor's offset, clamped
    to the next anchor; before or after them, by the nearest one's offset."""

    def __init__(self, size: int = 8192) -> None:
        self._anchors: deque[tuple[int, float]] = deque(maxlen=size)  # (capture_ns, ts)

    def reset(self) -> None:
        """A new stream: its times start over."""
        self._anchors.clear()

    def mark(self, ts: float, capture_ns: int) -> None:
        """The frame at stream time `ts` was captured at `capture_ns`."""
        if self._anchors:
            last_ns, last_ts = self._anchors[-1]
            if ts < last_ts or capture_ns < last_ns:  # the stream or the clock jumped back
                self._anchors.clear()
            elif ts == last_ts:
                self._anchors.pop()
        self._anchors.append((capture_ns, ts))

    @property
    def empty(self) -> bool:
        """No anchor yet: nothing to map with."""
        return not self._anchors

    @property
    def latest_ns(self) -> int:
        """Capture time of the newest frame delivered (0: none yet)."""
        return self._anchors[-1][0] if self._anchors else 0

    def to_stream(self, capture_ns: int) -> float:
        """Stream time of capture time `capture_ns` (an empty clock: ValueError)."""
        anchors = self._anchors
        if not anchors:
            raise ValueError("no frame delivered yet: the capture clock is unknown")
        i = bisect.bisect_right(anchors, capture_ns, key=lambda a: a[0])
        ns, ts = anchors[max(i - 1, 0)]
        t = ts + (capture_ns - ns) / 1e9
        return min(t, anchors[i][1]) if 0 < i < len(anchors) else t

    def to_capture(self, ts: float) -> int:
        """Capture time of stream time `ts` (the inverse of `to_stream`)."""
        anchors = self._anchors
        if not anchors:
            raise ValueError("no frame delivered yet: the capture clock is unknown")
        i = bisect.bisect_right(anchors, ts, key=lambda a: a[1])
        ns, t0 = anchors[max(i - 1, 0)]
        capture = ns + round((ts - t0) * 1e9)
        return min(capture, anchors[i][0]) if 0 < i < len(anchors) else capture


class RingListener(Protocol):
    """Hears the ring's packets as they come (the clip cutter), with the ring's lock held."""

    def on_packet(self, packet: RingPacket) -> None:
        """A packet was demuxed (kept by the ring or not)."""

    def on_end(self, reason: str, finished: bool = False) -> None:
        """The source closed; `reason` says why (`finished`: a file read to its end)."""


class _Gop:
    __slots__ = ("key_ts", "nbytes", "packets")

    def __init__(self, key_ts: float) -> None:
        self.key_ts = key_ts
        self.packets = 0
        self.nbytes = 0


class PacketRing:
    """One camera's packets, bounded (see the module docstring); a `PacketTap`."""

    def __init__(
        self, camera_id: str, cfg: ClipsConfig, metrics: ClipMetrics | None = None
    ) -> None:
        self.camera_id = camera_id
        self.span_s = cfg.ring_s
        self.cap_bytes = int(cfg.ring_mib * 2**20)
        self.lock = threading.RLock()
        self.clock = CaptureClock()
        self.listener: RingListener | None = None
        self.template: StreamTemplate | None = None
        self.codec_problem = ""  # why this stream cannot be cut ("": it can)
        self.live = False  # between begin and end
        self.end_reason = ""  # why the source last closed
        self.finished = False  # it closed as a file read to its end
        self.starved = False  # dropping packets until the next keyframe
        self.bytes = 0
        self.dropped: dict[str, int] = {}  # packets let go early, by reason
        self._packets: deque[RingPacket] = deque()
        self._gops: deque[_Gop] = deque()
        self._tb = 0.0
        self._m = metrics

    # The PacketTap side (the camera's thread).

    def begin(self, stream: Any) -> None:
        """A new open: what the ring holds is from another stream and timeline; let it go."""
        try:
            template: StreamTemplate | None = StreamTemplate.of(stream)
            problem = ""
        except CodecError as exc:  # counted per clip asked for (outcome "codec")
            template, problem = None, str(exc)
            log.warning("camera %s: no clips: %s", self.camera_id, problem)
        with self.lock:
            if self.live and self.listener is not None:
                self.listener.on_end("the source reopened")
            self._packets.clear()
            self._gops.clear()
            self.bytes = 0
            self.clock.reset()
            self.template, self.codec_problem = template, problem
            self._tb = float(template.time_base) if template else 0.0
            self.live = True
            self.finished = False
            self.starved = False
            self._gauge(0.0)

    def packet(self, packet: Any) -> None:
        """Keep a demuxed packet (its bytes, not the FFmpeg buffer: it outlives the
        container) and pass it to the listener."""
        if self.template is None or packet.size == 0:  # no clips possible, or a flush packet
            return
        pts, dts = packet.pts, packet.dts
        t = dts if dts is not None else pts
        if t is None:
            with self.lock:
                self._drop("no_timestamp", 1)
            return
        tb = self._tb
        pts_ts = (pts if pts is not None else t) * tb
        entry = RingPacket(bytes(packet), pts, dts, t * tb, pts_ts, packet.is_keyframe)
        with self.lock:
            if self.clock.empty:  # until a frame is delivered, arrival time stands in
                self.clock.mark(entry.pts_ts, time.time_ns())
            self._add(entry)
            if self.listener is not None:
                self.listener.on_packet(entry)

    def frame(self, ts: float, capture_ns: int) -> None:
        """A frame delivered: one more point of the capture clock."""
        with self.lock:
            self.clock.mark(ts, capture_ns)

    def end(self, reason: str, finished: bool = False) -> None:
        """The source closed (`finished`: a file read to its end): open clips end. The
        packets stay until the next open, so a clip asked for meanwhile still gets its
        pre-roll."""
        with self.lock:
            if not self.live:
                return
            self.live = False
            self.end_reason = reason
            self.finished = finished
            if self.listener is not None:
                self.listener.on_end(reason, finished)

    # Reading (the caller holds `lock`).

    def start_index(self, want_ts: float) -> tuple[int, float] | None:
        """(index, keyframe time) of the last GOP whose keyframe shows at or before
        `want_ts`, or of the first GOP when all are later; None when no GOP is held."""
        if not self._gops:
            return None
        chosen, start, at = self._gops[0], 0, 0
        for gop in self._gops:
            if gop.key_ts > want_ts:
                break
            chosen, start = gop, at
            at += gop.packets
        return start, chosen.key_ts

    def packets_from(self, index: int) -> Iterator[RingPacket]:
        """The packets held from `index` on, in decode order."""
        return islice(self._packets, index, None)

    @property
    def seconds(self) -> float:
        """Stream time held, from the first keyframe to the newest packet."""
        if not self._gops or not self._packets:
            return 0.0
        return max(0.0, self._packets[-1].ts - self._gops[0].key_ts)

    @property
    def packet_count(self) -> int:
        """Packets held."""
        return len(self._packets)

    def first_key_ts(self) -> float | None:
        """Stream time of the oldest keyframe held (None: none)."""
        return self._gops[0].key_ts if self._gops else None

    # Bookkeeping.

    def _add(self, entry: RingPacket) -> None:
        if entry.key:
            if self.starved:
                self.starved = False
                log.info("camera %s: clip ring has a keyframe again", self.camera_id)
            self._gops.append(_Gop(entry.pts_ts))
        elif self.starved or not self._gops:
            # Nothing to decode it from: a stream joined mid-GOP, or a GOP let go.
            self._drop("no_keyframe", 1)
            return
        size = len(entry.data)
        gop = self._gops[-1]
        gop.packets += 1
        gop.nbytes += size
        self.bytes += size
        self._packets.append(entry)
        self._trim(entry.ts)
        self._gauge(self.seconds)

    def _trim(self, newest: float) -> None:
        gops = self._gops
        while len(gops) >= 2 and newest - gops[1].key_ts >= self.span_s:
            self._free_oldest()
        while self.bytes > self.cap_bytes and len(gops) >= 2:
            self._drop("cap", self._free_oldest())
        if self.bytes > self.cap_bytes:
            n = self._free_oldest()
            self.starved = True
            self._drop("no_keyframe", n)
            log.warning(
                "camera %s: clip ring: one GOP outgrew ring_mib (%.2f MiB); dropping packets "
                "until the next keyframe (the source's keyframe interval is too long)",
                self.camera_id,
                self.cap_bytes / 2**20,
            )

    def _free_oldest(self) -> int:
        gop = self._gops.popleft()
        for _ in range(gop.packets):
            self._packets.popleft()
        self.bytes -= gop.nbytes
        return gop.packets

    def _drop(self, reason: str, packets: int) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + packets
        if self._m is not None:
            self._m.dropped(reason, packets)

    def _gauge(self, seconds: float) -> None:
        if self._m is not None:
            self._m.ring_bytes.set(self.bytes)
            self._m.ring_seconds.set(seconds)
