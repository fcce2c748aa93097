"""Real media for the clip tests: vtest re-encoded with a known GOP, frames told apart by
a checksum of their decoded planes (a stream copy decodes to the very same pixels)."""

from __future__ import annotations

import os
import subprocess
import zlib
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

FPS = 10
SIZE = (384, 288)
SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "rtsp_server.py"
SYSTEM_PY = "/usr/bin/python3"
# Constant bitrate (a camera's usual setting): bytes over a span follow its duration.
CBR = "vbv-maxrate=400:vbv-bufsize=200"


def encode_vtest(vtest: Path, dest: Path, codec: str, gop: int, frames: int = 200) -> Path:
    """`frames` frames of vtest at 384x288, 10 fps, a keyframe every `gop` frames exactly,
    at a constant bitrate."""
    import av
    from av.video.frame import PictureType

    options = {
        "libx264": {
            "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes=2:{CBR}:nal-hrd=cbr"
        },
        "libx265": {
            "x265-params": f"keyint={gop}:min-keyint={gop}:scenecut=0:open-gop=0:{CBR}:strict-cbr=1"
            ":log-level=error"
        },
    }.get(codec, {"g": str(gop)})
    fmt = "webm" if codec == "libvpx" else None
    with av.open(str(vtest)) as src, av.open(str(dest), "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=FPS)
        stream.width, stream.height = SIZE
        stream.pix_fmt = "yuv420p"
        stream.bit_rate = 400_000
        stream.options = {"preset": "veryfast", **options} if codec != "libvpx" else options
        for i, frame in enumerate(src.decode(video=0)):
            if i == frames:
                break
            small = frame.reformat(width=SIZE[0], height=SIZE[1], format="yuv420p")
            small.pts, small.time_base = i, Fraction(1, FPS)
            # vtest's own keyframes (every 10 frames) would be forced on the encoder.
            small.pict_type = PictureType.NONE
            out.mux(stream.encode(small))
        out.mux(stream.encode(None))
    return dest


def crc(frame: Any) -> int:
    """A checksum of a decoded PyAV frame's pixels (as the camera's `Frame.bgr()` has them)."""
    return zlib.crc32(frame.to_ndarray(format="bgr24", threads=1).tobytes())


@dataclass(frozen=True)
class Decoded:
    """A file's frames in display order: checksums, stream times, keyframe flags."""

    crcs: list[int]
    times: list[float]
    keys: list[bool]
    packet_bytes: int
    broken: str  # "" when the whole file decoded


def decode(path: Path) -> Decoded:
    """Every frame of `path` that decodes (a truncated file: up to where it breaks)."""
    import av

    crcs: list[int] = []
    times: list[float] = []
    keys: list[bool] = []
    size = 0
    broken = ""
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        try:
            for packet in c.demux(stream):
                size += packet.size
                for f in packet.decode():
                    crcs.append(crc(f))
                    times.append(float(f.pts * f.time_base))
                    keys.append(f.key_frame)
        except av.FFmpegError as exc:
            broken = str(exc)
    return Decoded(crcs, times, keys, size, broken)


def rtsp_missing() -> str:
    """Why the GStreamer RTSP server cannot run here ("" when it can)."""
    if not os.path.exists(SYSTEM_PY):
        return f"{SYSTEM_PY} not found"
    probe = subprocess.run(
        [
            SYSTEM_PY,
            "-c",
            "import gi; gi.require_version('GstRtspServer', '1.0'); "
            "from gi.repository import GstRtspServer",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return "" if probe.returncode == 0 else probe.stderr.strip().splitlines()[-1]


def start_rtsp(port: int, media: Path) -> subprocess.Popen[str]:
    """The real RTSP server serving `media` at rtsp://127.0.0.1:PORT/cam (READY awaited)."""
    cmd = [SYSTEM_PY, str(SERVER), "--port", str(port), "--name", "cam", "--file", str(media)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "READY", f"RTSP server did not start: {line!r}"
    return proc


def mp4_boxes(path: Path) -> list[str]:
    """The top-level box types of an MP4 file, in order (a fragmented one: ftyp, moov,
    then moof/mdat pairs)."""
    data = path.read_bytes()
    boxes: list[str] = []
    at = 0
    while at + 8 <= len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        kind = data[at + 4 : at + 8].decode("latin-1")
        if size == 1:  # a 64-bit size follows the type
            size = int.from_bytes(data[at + 8 : at + 16], "big")
        boxes.append(kind)
        if size < 8:
            break
        at += size
    return boxes


def codec_of(path: Path) -> str:
    """The codec name of a file's video stream."""
    import av

    with av.open(str(path)) as c:
        return str(c.streams.video[0].codec_context.name)


def write_clip(path: Path, images: list[np.ndarray], fps: int = 10) -> Path:
    """BGR `images` as an H.264 file at `fps` (a keyframe every 10 frames, near lossless)."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.height, stream.width = images[0].shape[:2]
        stream.pix_fmt = "yuv420p"
        stream.options = {"g": "10", "crf": "12", "preset": "veryfast"}
        for img in images:
            frame = av.VideoFrame.from_ndarray(img, format="bgr24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path
