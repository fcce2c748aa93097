"""The clip tests' source material: the start of an H.264 file, stream-copied (its own
packets, never re-encoded), plain or as the fragmented MP4 the device cuts."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

FRAGMENTED = {"movflags": "frag_keyframe+empty_moov+default_base_moof"}


def first_seconds(
    src: Path,
    dest: Path | BinaryIO,
    seconds: float,
    fragmented: bool = False,
    inclusive: bool = False,
) -> Path | BinaryIO:
    """Packets of `src` shown before `seconds` (at or before it when `inclusive`) into
    `dest`; `fragmented`: fragmented MP4 (a file object always gets MP4)."""
    import av

    options = FRAGMENTED if fragmented else {}
    target = str(dest) if isinstance(dest, Path) else dest
    fmt = None if isinstance(dest, Path) and not fragmented else "mp4"
    with av.open(str(src)) as inp, av.open(target, "w", format=fmt, options=options) as out:
        vin = inp.streams.video[0]
        vout = out.add_stream_from_template(vin)
        for packet in inp.demux(vin):
            if packet.dts is None:
                continue
            if packet.pts is not None:
                t = float(packet.pts * vin.time_base)
                if t > seconds or (t == seconds and not inclusive):
                    break
            packet.stream = vout
            out.mux(packet)
    return dest
