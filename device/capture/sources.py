"""Video sources: files and RTSP streams through PyAV, and the synthetic clip.

Source strings:
  - a file path (anything FFmpeg demuxes: MP4, AVI, MKV, ...);
  - `rtsp://HOST:PORT/PATH` (RTSP over TCP, with open and read timeouts);
  - `synthetic://?frames=300&seed=1&width=640&height=480&fps=10&objects=4&realtime=0`
    (every parameter optional; realtime=1 paces frames at fps, like a camera).

`open_source` raises SourceError; `Source.frames()` raises it when a stream dies. A
`fatal` error (missing file, not a video) will not go away by retrying.

Decoding (device.source): in software, or on the host's hardware (`hwaccel`, chosen once
per camera by `DecoderChoice`, software when the host has none: never a failed camera);
at most `max_fps` frames a second are delivered (`RateGate`), and with `skip_frame` the
non-reference frames it would pass over are not decoded at all. With `skip_held`, the
non-reference frames the camera's cascade holds back whatever they show (`HeldAhead`) are
not decoded either: they are delivered in their place without pixels (`Frame.undecoded`).
These three live in device/capture/decoding.py.

Clips (device.clips): a `PacketTap` hears every packet demuxed, before it is decoded, and
the stream's parameters once per open; the camera's clip ring is one
(device/capture/packet_ring.py).
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from strata.shared.config.device import SourceConfig

from .decoding import SOFTWARE, DecoderChoice, HeldAhead, NonRefSkipper, RateGate, error_text
from .frames import Frame

log = logging.getLogger(__name__)

_STREAM_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://")
SYNTHETIC_SCHEME = "synthetic://"


class SourceError(RuntimeError):
    """A source cannot be opened or read; `fatal` ones are not worth retrying."""

    def __init__(self, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


def is_live(spec: str) -> bool:
    """True for network streams (they are reopened when they end or stall)."""
    return spec.startswith(_STREAM_SCHEMES)


def camera_name(spec: str) -> str:
    """A readable camera id derived from a source string."""
    if spec.startswith(SYNTHETIC_SCHEME):
        seed = parse_qs(urlsplit(spec).query).get("seed", ["0"])[0]
        return f"synthetic-{seed}"
    if is_live(spec):
        parts = urlsplit(spec)
        tail = parts.path.strip("/").replace("/", "-")
        return tail or (parts.hostname or "stream")
    return Path(spec).stem or "camera"


class SourceEvents(Protocol):
    """What a source reports to its camera (metrics): the decoder in use, frames skipped."""

    def decoder(self, kind: str) -> None:
        """The camera now decodes with `kind` ("software" or a hwaccel device type)."""

    def skipped(self, reason: str, frames: int) -> None:
        """`frames` source frames were not delivered: "max_fps" (decoded, passed over) or
        "not_decoded" (skip_frame); or delivered without pixels: "held" (skip_held)."""

    def lag(self, seconds: float) -> None:
        """A file played at its frame rate delivers its frames this far behind schedule."""


class PacketTap(Protocol):
    """What hears a source's compressed stream (the camera's clip ring), in this order:
    `begin` once per open, then `packet` for every packet demuxed and `frame` for every
    frame delivered, then `end` once, when the source is closed."""

    def begin(self, stream: Any) -> None:
        """The source opened `stream` (a PyAV video stream): its codec parameters."""

    def packet(self, packet: Any) -> None:
        """A packet demuxed (a PyAV packet), before it is decoded."""

    def frame(self, ts: float, capture_ns: int) -> None:
        """A frame delivered: its stream time and capture clock (the Frame's)."""

    def end(self, reason: str, finished: bool = False) -> None:
        """The source is closed; `reason` says why (its error, or that it ended);
        `finished`: a file read to its end (no error, nothing more to come)."""


class Source(abc.ABC):
    """Base: iterate decoded frames, then close."""

    live = False

    @abc.abstractmethod
    def frames(self) -> Iterator[Frame]:
        """Decoded frames until the source ends; SourceError when it dies."""

    def close(self) -> None:  # noqa: B027 - optional hook: most sources hold nothing
        """Release the container or generator."""


class AvSource(Source):
    """A file or network stream decoded by PyAV (FFmpeg)."""

    def __init__(
        self,
        spec: str,
        cfg: SourceConfig,
        choice: DecoderChoice | None = None,
        events: SourceEvents | None = None,
        tap: PacketTap | None = None,
        held: HeldAhead | None = None,
    ) -> None:
        self.spec = spec
        self.live = is_live(spec)
        self.read_timeout_s = cfg.read_timeout_s
        self.realtime = cfg.realtime and not self.live
        self.events = events
        if not self.live and not Path(spec).exists():
            raise SourceError(f"no such file: {spec}", fatal=True)
        if not self.live and Path(spec).is_dir():
            raise SourceError(f"is a folder, not a video file: {spec}", fatal=True)
        self.container: Any = self._open(cfg)
        self.stream = self.container.streams.video[0]
        # A v4l2m2m decoder of its own instead of the stream's (None: the stream's).
        self._decoder: Any = None
        self.kind = SOFTWARE
        choice = choice or DecoderChoice(camera_name(spec), cfg)
        kind = choice.resolve(self.stream.codec_context.name)
        if kind != SOFTWARE:
            self._use_hardware(kind, choice, cfg)
        if self.kind == SOFTWARE:
            configure_decoder(self.stream, cfg)
        if events is not None:
            events.decoder(self.kind)
        self._tb = float(self.stream.time_base) if self.stream.time_base else 0.0
        rate = self.stream.average_rate or self.stream.guessed_rate
        self._fps = float(rate) if rate else 0.0
        self._rate = RateGate(cfg.max_fps) if cfg.max_fps > 0 else None
        # Non-reference frames are skipped only where the source is faster than max_fps.
        self._skip = bool(
            self._rate is not None and cfg.skip_frame and (not self._fps or self._fps > cfg.max_fps)
        )
        self._held = held
        self._index = 0  # frames delivered in this pass
        self._paced_from = 0.0
        self.tap = tap
        self._end = "source closed"  # what the tap hears at close
        self._finished = False
        if tap is not None:
            tap.begin(self.stream)

    def _open(self, cfg: SourceConfig, hwaccel: Any = None) -> Any:
        import av

        spec = self.spec
        options: dict[str, str] = {}
        if spec.startswith(("rtsp://", "rtsps://")):
            options["rtsp_transport"] = "tcp"
        # FFmpeg's RTSP demuxer can hand out one held-back packet when a read times out
        # and then wait a whole timeout again; half the budget per read keeps a stall
        # noticed within read_timeout_s (measured: 2 x the per-read timeout).
        read_timeout = cfg.read_timeout_s / 2 if self.live else cfg.read_timeout_s
        try:
            container = av.open(
                spec,
                options=options,
                timeout=(cfg.open_timeout_s, read_timeout),
                hwaccel=hwaccel,
            )
        except av.error.ExitError:
            raise SourceError(
                f"cannot open {spec}: no answer within {cfg.open_timeout_s:g}s"
            ) from None
        except av.InvalidDataError as exc:
            raise SourceError(
                f"cannot open {spec}: not a readable video, truncated or another format "
                f"({error_text(exc)})",
                fatal=not self.live,
            ) from None
        except (av.FFmpegError, OSError) as exc:
            raise SourceError(
                f"cannot open {spec}: {error_text(exc)}", fatal=not self.live
            ) from None
        if not container.streams.video:
            container.close()
            raise SourceError(f"{spec} has no video stream", fatal=True)
        return container

    def _use_hardware(self, kind: str, choice: DecoderChoice, cfg: SourceConfig) -> None:
        """Decode on `kind`; on any failure stay in software (the camera never fails for it)."""
        import av

        codec = self.stream.codec_context.name
        try:
            if kind == "v4l2m2m":
                decoder = av.CodecContext.create(f"{codec}_v4l2m2m", "r")
                decoder.extradata = self.stream.codec_context.extradata
                decoder.open()
                self._decoder = decoder
            else:
                from av.codec.hwaccel import HWAccel

                # The device context is attached when the container is opened: again, on it.
                hw = HWAccel(kind, device=choice.device, allow_software_fallback=True)
                container = self._open(cfg, hw)
                if not container.streams.video[0].codec_context.is_hwaccel:
                    container.close()
                    raise ValueError(f"no {kind} decoder for {codec}")
                self.container.close()
                self.container = container
                self.stream = container.streams.video[0]
        except (av.FFmpegError, OSError, ValueError, NotImplementedError, SourceError) as exc:
            choice.give_up(error_text(exc))
            return
        self.kind = kind

    def frames(self) -> Iterator[Frame]:
        tap = self.tap
        try:
            for frame in self._decode():
                if tap is not None:
                    tap.frame(frame.ts, frame.capture_ns)
                yield frame
        except SourceError as exc:
            self._end = str(exc)
            raise
        self._end = "source ended"
        # A file read to its end has nothing more: not a lost stream (a live one's is).
        self._finished = not self.live

    def _decode(self) -> Iterator[Frame]:
        import av

        tap = self.tap
        decoded_n = 0  # frames out of the decoder (timestamps without pts count them)
        self._index = 0
        last_frame_t = time.monotonic()
        ctx = self.stream.codec_context if self._decoder is None else self._decoder
        rate = self._rate if self._skip else None
        skipper = (
            NonRefSkipper(ctx, rate, self._held, self._report)
            if rate is not None or self._held is not None
            else None
        )
        last: Any = None  # the last decoded frame: held frames not decoded take its size
        try:
            for packet in self.container.demux(self.stream):
                if tap is not None:
                    tap.packet(packet)
                if skipper is not None:
                    skipper.before(packet.pts, self._packet_ts(packet))
                try:
                    decoded = ctx.decode(packet)
                except av.InvalidDataError as exc:
                    # One bad packet is not a dead stream; the next key frame recovers.
                    log.warning("%s: skipped an undecodable packet: %s", self.spec, error_text(exc))
                    decoded = []
                now = time.monotonic()
                if not decoded:
                    if self.live and now - last_frame_t > self.read_timeout_s:
                        raise SourceError(
                            f"{self.spec}: no frame decoded in {self.read_timeout_s:g}s"
                        )
                    continue
                last_frame_t = now
                for f in decoded:
                    ts = self._ts(f, decoded_n)
                    decoded_n += 1
                    last = f
                    if skipper is not None:
                        # Held frames never decoded come before this one, in their place.
                        yield from self._undecoded(skipper.after(f.pts), f)
                    if (frame := self._deliver(ts, f)) is not None:
                        yield frame
        except av.error.ExitError:
            raise SourceError(f"{self.spec}: no data for {self.read_timeout_s:g}s") from None
        except (av.FFmpegError, OSError) as exc:
            raise SourceError(f"{self.spec}: read failed: {error_text(exc)}") from None
        if skipper is not None and last is not None:
            yield from self._undecoded(skipper.finish(), last)
        if decoded_n == 0 and not self.live:
            raise SourceError(f"{self.spec}: no frame could be decoded", fatal=True)

    def _undecoded(self, held: Sequence[int], beside: Any) -> Iterator[Frame]:
        """The held frames at these pts, never decoded, delivered without pixels (of the
        size of `beside`, a decoded frame next to them: sizes change only at key frames)."""
        for pts in held:
            size = (int(beside.width), int(beside.height))
            if (frame := self._deliver(pts * self._tb, None, size)) is not None:
                yield frame

    def _deliver(self, ts: float, av_frame: Any, size: tuple[int, int] = (0, 0)) -> Frame | None:
        """The frame at stream time `ts` as delivered (None: max_fps passes over it), paced
        when played at its rate; `av_frame` None: a held frame not decoded, of `size`."""
        if self._rate is not None and not self._rate.keep(ts):
            self._report("max_fps", 1)
            return None
        if self.realtime:
            if self._index == 0:
                self._paced_from = time.monotonic() - ts
            self._pace(self._paced_from + ts)
        if av_frame is None:
            frame = Frame.undecoded(self._index, ts, time.time_ns(), size)
        else:
            frame = Frame(self._index, ts, time.time_ns(), av_frame=av_frame)
        self._index += 1
        return frame

    def _pace(self, due: float) -> None:
        """Paced like a camera: a frame leaves at its due time (monotonic clock); a late
        one reports how late."""
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if self.events is not None:
            self.events.lag(max(0.0, -delay))

    def _report(self, reason: str, frames: int) -> None:
        if self.events is not None:
            self.events.skipped(reason, frames)

    def _packet_ts(self, packet: Any) -> float | None:
        """The stream time of a packet's frame, as `_ts` will give it (None: unknown)."""
        if packet.pts is None or not self._tb:
            return None
        return float(packet.pts * self._tb)

    def _ts(self, f: Any, index: int) -> float:
        if f.pts is not None and self._tb:
            return float(f.pts * self._tb)
        return index / self._fps if self._fps else float(index)

    def close(self) -> None:
        try:
            self.container.close()
        except Exception:  # closing a dead stream may raise; nothing to recover
            pass
        if self.tap is not None:
            tap, self.tap = self.tap, None
            tap.end(self._end, self._finished)


class SyntheticSource(Source):
    """The synthetic clip (strata.shared.synthetic) as a camera."""

    def __init__(self, spec: str, max_fps: float = 0.0, events: SourceEvents | None = None) -> None:
        from strata.shared.synthetic import SyntheticClip

        self._rate = RateGate(max_fps) if max_fps > 0 else None
        self.events = events

        query = parse_qs(urlsplit(spec).query)
        known = {"frames", "seed", "width", "height", "fps", "objects", "realtime", "noise"}
        unknown = set(query) - known
        if unknown:
            raise SourceError(
                f"{spec}: unknown parameter(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(known))}",
                fatal=True,
            )
        try:
            args = {k: float(v[0]) if k == "noise" else int(v[0]) for k, v in query.items()}
            self.realtime = bool(args.pop("realtime", 0))
            self.clip = SyntheticClip(**args)  # type: ignore[arg-type]
        except ValueError as exc:
            raise SourceError(f"{spec}: {exc}", fatal=True) from None

    def frames(self) -> Iterator[Frame]:
        start = time.monotonic()
        index = 0
        for i in range(len(self.clip)):
            if self.realtime:
                delay = start + i / self.clip.fps - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            ts = i / self.clip.fps
            if self._rate is not None and not self._rate.keep(ts):
                if self.events is not None:
                    self.events.skipped("max_fps", 1)
                continue
            image = self.clip.frame(i).image
            yield Frame(index, ts, time.time_ns(), bgr=image)
            index += 1


def configure_decoder(stream: Any, cfg: SourceConfig) -> None:
    """Decoder threading: PyAV's default (slice threads) unless decode_threads is set,
    then that many threads, frame and slice. The agent's other threads (gate, encoder)
    need the remaining cores, so frame threading is opt-in."""
    if cfg.decode_threads:
        stream.codec_context.thread_count = cfg.decode_threads
        stream.thread_type = "AUTO"


def open_source(
    spec: str,
    cfg: SourceConfig,
    choice: DecoderChoice | None = None,
    events: SourceEvents | None = None,
    tap: PacketTap | None = None,
    held: HeldAhead | None = None,
) -> Source:
    """Open a source string (see the module docstring); `choice` keeps a camera's decoder
    from one open to the next, `events` hears what the source reports, `tap` its packets
    (the synthetic clip has none), `held` what the camera will hold back (skip_held)."""
    if spec.startswith(SYNTHETIC_SCHEME):
        return SyntheticSource(spec, cfg.max_fps, events)
    return AvSource(spec, cfg, choice, events, tap, held if cfg.skip_held else None)


# Kinds of source error, as the camera's state metric labels them.
ERROR_KINDS = ("refused", "timeout", "unreachable", "not_found", "invalid", "ended", "other")


def error_kind(message: str) -> str:
    """A small fixed class for a SourceError's message (a metric label, not free text)."""
    m = message.lower()
    if "refused" in m:
        return "refused"
    if "no answer within" in m or "no data for" in m or "no frame decoded in" in m:
        return "timeout"
    if "unreachable" in m or "no route" in m or "not known" in m or "resolve" in m:
        return "unreachable"
    if "no such file" in m or "404" in m or "not found" in m:
        return "not_found"
    if "not a readable video" in m or "no video stream" in m or "could be decoded" in m:
        return "invalid"
    if "stream ended" in m:
        return "ended"
    return "other"
