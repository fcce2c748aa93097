"""Video sources: files and RTSP streams through PyAV, and the synthetic clip.

Source strings:
  - a file path (anything FFmpeg demuxes: MP4, AVI, MKV, ...);
  - `rtsp://HOST:PORT/PATH` (RTSP over TCP, with open and read timeouts);
  - `synthetic://?frames=300&seed=1&width=640&height=480&fps=10&objects=4&realtime=0`
    (every parameter optional; realtime=1 paces frames at fps, like a camera).

`open_source` raises SourceError; `Source.frames()` raises it when a stream dies. A
`fatal` error (missing file, not a video) will not go away by retrying.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from strata.shared.config.device import SourceConfig

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

    def __init__(self, spec: str, cfg: SourceConfig) -> None:
        import av

        self.spec = spec
        self.live = is_live(spec)
        self.read_timeout_s = cfg.read_timeout_s
        self.realtime = cfg.realtime and not self.live
        options: dict[str, str] = {}
        if spec.startswith(("rtsp://", "rtsps://")):
            options["rtsp_transport"] = "tcp"
        if not self.live and not Path(spec).exists():
            raise SourceError(f"no such file: {spec}", fatal=True)
        if not self.live and Path(spec).is_dir():
            raise SourceError(f"is a folder, not a video file: {spec}", fatal=True)
        # FFmpeg's RTSP demuxer can hand out one held-back packet when a read times out
        # and then wait a whole timeout again; half the budget per read keeps a stall
        # noticed within read_timeout_s (measured: 2 x the per-read timeout).
        read_timeout = cfg.read_timeout_s / 2 if self.live else cfg.read_timeout_s
        try:
            self.container: Any = av.open(
                spec, options=options, timeout=(cfg.open_timeout_s, read_timeout)
            )
        except av.error.ExitError:
            raise SourceError(
                f"cannot open {spec}: no answer within {cfg.open_timeout_s:g}s"
            ) from None
        except av.InvalidDataError as exc:
            raise SourceError(
                f"cannot open {spec}: not a readable video, truncated or another format "
                f"({_why(exc)})",
                fatal=not self.live,
            ) from None
        except (av.FFmpegError, OSError) as exc:
            raise SourceError(f"cannot open {spec}: {_why(exc)}", fatal=not self.live) from None
        if not self.container.streams.video:
            self.container.close()
            raise SourceError(f"{spec} has no video stream", fatal=True)
        self.stream = self.container.streams.video[0]
        configure_decoder(self.stream, cfg)
        self._tb = float(self.stream.time_base) if self.stream.time_base else 0.0
        rate = self.stream.average_rate or self.stream.guessed_rate
        self._fps = float(rate) if rate else 0.0

    def frames(self) -> Iterator[Frame]:
        import av

        index = 0
        last_frame_t = time.monotonic()
        paced_from = last_frame_t
        try:
            for packet in self.container.demux(self.stream):
                try:
                    decoded = packet.decode()
                except av.InvalidDataError as exc:
                    # One bad packet is not a dead stream; the next key frame recovers.
                    log.warning("%s: skipped an undecodable packet: %s", self.spec, _why(exc))
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
                    ts = self._ts(f, index)
                    if self.realtime:
                        # Paced like a camera: frame k leaves at start + its timestamp.
                        if index == 0:
                            paced_from = now - ts
                        delay = paced_from + ts - time.monotonic()
                        if delay > 0:
                            time.sleep(delay)
                    yield Frame(index, ts, time.time_ns(), av_frame=f)
                    index += 1
        except av.error.ExitError:
            raise SourceError(f"{self.spec}: no data for {self.read_timeout_s:g}s") from None
        except (av.FFmpegError, OSError) as exc:
            raise SourceError(f"{self.spec}: read failed: {_why(exc)}") from None
        if index == 0 and not self.live:
            raise SourceError(f"{self.spec}: no frame could be decoded", fatal=True)

    def _ts(self, f: Any, index: int) -> float:
        if f.pts is not None and self._tb:
            return float(f.pts * self._tb)
        return index / self._fps if self._fps else float(index)

    def close(self) -> None:
        try:
            self.container.close()
        except Exception:  # closing a dead stream may raise; nothing to recover
            pass


class SyntheticSource(Source):
    """The synthetic clip (strata.shared.synthetic) as a camera."""

    def __init__(self, spec: str) -> None:
        from strata.shared.synthetic import SyntheticClip

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
        for i in range(len(self.clip)):
            if self.realtime:
                delay = start + i / self.clip.fps - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            image = self.clip.frame(i).image
            yield Frame(i, i / self.clip.fps, time.time_ns(), bgr=image)


def configure_decoder(stream: Any, cfg: SourceConfig) -> None:
    """Decoder threading: PyAV's default (slice threads) unless decode_threads is set,
    then that many threads, frame and slice. The agent's other threads (gate, encoder)
    need the remaining cores, so frame threading is opt-in."""
    if cfg.decode_threads:
        stream.codec_context.thread_count = cfg.decode_threads
        stream.thread_type = "AUTO"


def open_source(spec: str, cfg: SourceConfig) -> Source:
    """Open a source string (see the module docstring)."""
    if spec.startswith(SYNTHETIC_SCHEME):
        return SyntheticSource(spec)
    return AvSource(spec, cfg)


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


def _why(exc: BaseException) -> str:
    # PyAV's messages repeat the path; the strerror part is what a user needs.
    return str(getattr(exc, "strerror", None) or exc)
