"""Helpers of the clip tests: a real fragmented MP4 cut from data/vtest.mp4 by stream copy
(as the device cuts clips), chunks of it as a device sends them, and a PyAV decode check."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from clip_testkit import first_seconds
from strata.shared.contracts import clips_pb2, current_version

VTEST = Path(__file__).resolve().parents[2] / "data" / "vtest.mp4"
C = clips_pb2


def make_clip(seconds: float = 2.0) -> bytes:
    """The first `seconds` of vtest.mp4, stream-copied into fragmented MP4 (no re-encode)."""
    out = io.BytesIO()
    first_seconds(VTEST, out, seconds, fragmented=True, inclusive=True)
    return out.getvalue()


def info(
    clip_id: str = "door/s1/1",
    camera: str = "door",
    tracks: tuple[str, ...] = ("1000-7",),
    **fields: Any,
) -> clips_pb2.ClipInfo:
    """A ClipInfo (open unless fields say final)."""
    return C.ClipInfo(
        clip_id=clip_id,
        camera_id=camera,
        agent_id="dev-1",
        track_uids=list(tracks),
        start_ns=fields.pop("start_ns", 1_000),
        codec="h264",
        width=768,
        height=576,
        **fields,
    )


def chunk(
    data: bytes,
    offset: int,
    size: int,
    clip: clips_pb2.ClipInfo,
    last: bool = False,
    span_ns: int = 2_000_000_000,
) -> clips_pb2.ClipChunk:
    """Bytes [offset, offset + size) of `data`; `last` makes the info final (complete, its
    end `span_ns` after its start)."""
    ci = C.ClipInfo()
    ci.CopyFrom(clip)
    part = data[offset : offset + size]
    if last:
        ci.final, ci.outcome, ci.size_bytes = True, C.CLIP_OUTCOME_COMPLETE, offset + len(part)
        ci.end_ns = ci.start_ns + span_ns
    return C.ClipChunk(version=current_version(), info=ci, offset=offset, data=part, last=last)


def chunks(
    data: bytes, size: int, clip: clips_pb2.ClipInfo, span_ns: int = 2_000_000_000
) -> list[clips_pb2.ClipChunk]:
    """The whole clip in chunks of `size`, the last one final (`span_ns` long)."""
    offsets = list(range(0, len(data), size))
    return [chunk(data, o, size, clip, o == offsets[-1], span_ns) for o in offsets]


def frames(data: bytes | Path) -> int:
    """Frames PyAV decodes from the clip, from its first frame."""
    import av

    src = io.BytesIO(data) if isinstance(data, bytes) else str(data)
    with av.open(src) as f:
        return sum(1 for _ in f.decode(video=0))
