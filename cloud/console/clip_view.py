"""A track's event clip as the detail page shows it: whether it plays, its state in words
(how it ended and why, or still uploading) and where the player starts.

The player starts at the event the page was opened for: its capture time minus the clip's
first frame's (ClipInfo.start_ns), both on the camera's capture clock, so the offset is the
media time of the event in a clip whose timestamps start at zero (the device rebases them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strata.shared.contracts import clips_pb2

from ..store.clip_rows import ClipRow
from .views import clip_url, iso

C = clips_pb2

# (state, words) of each final outcome: the state is the contract's name, the words say
# what the person watching gets.
_OUTCOMES: dict[int, tuple[str, str]] = {
    C.CLIP_OUTCOME_COMPLETE: ("complete", "complete"),
    C.CLIP_OUTCOME_CUT_SHORT: (
        "cut_short",
        "cut short: the device stopped or crashed mid-clip (plays up to its last fragment)",
    ),
    C.CLIP_OUTCOME_DISCONNECTED: (
        "disconnected",
        "disconnected: the camera's stream closed mid-clip (what was written plays)",
    ),
    C.CLIP_OUTCOME_ENDED: (
        "ended",
        "ended: the file ended before the clip's end (what was written plays)",
    ),
    C.CLIP_OUTCOME_NO_KEYFRAME: (
        "no_keyframe",
        "no keyframe: none came before the clip's end, so there is no video",
    ),
    C.CLIP_OUTCOME_CODEC: (
        "codec",
        "codec: the camera's codec cannot be copied into MP4, so there is no video",
    ),
    C.CLIP_OUTCOME_ERROR: ("error", "error: writing the clip failed on the device"),
}
UPLOADING = ("uploading", "still uploading")
UNKNOWN = ("unknown", "final, without an outcome")


def seek_s(info: clips_pb2.ClipInfo, at_ns: int) -> float | None:
    """Seconds into the clip of capture time `at_ns`, within the clip (None: no moment or
    the clip's start is unknown)."""
    if not at_ns or not info.start_ns:
        return None
    s = max(0.0, (at_ns - info.start_ns) / 1e9)
    if info.final and info.end_ns > info.start_ns:
        s = min(s, (info.end_ns - info.start_ns) / 1e9)
    return round(s, 3)


@dataclass(frozen=True, slots=True)
class ClipView:
    """A track's clip on its detail page and in its JSON.

    `url` is '' when there is nothing to play (no bytes yet, or an outcome without video);
    `src` is `url` with the media fragment (#t=) that starts the player at `seek_s`."""

    clip_id: str
    url: str
    src: str
    state: str  # complete, ended, cut_short, disconnected, no_keyframe, codec, error, uploading
    words: str
    final: bool
    reason: str
    notes: list[str]
    start_ns: int
    end_ns: int
    start: str  # ISO 8601 UTC of start_ns ('' when unknown)
    end: str  # ... of end_ns ('' while open)
    committed_bytes: int
    size_bytes: int
    seek_s: float | None

    def as_json(self) -> dict[str, Any]:
        """The record as the API returns it."""
        return {f: getattr(self, f) for f in self.__slots__}


def clip_view(row: ClipRow, camera: str, uid: str, at_ns: int) -> ClipView:
    """The view of a stored clip, the player set to start at capture time `at_ns` (0: at
    the clip's start)."""
    info = row.info
    state, words = _OUTCOMES.get(info.outcome, UNKNOWN) if info.final else UPLOADING
    url = clip_url(camera, uid) if row.committed_bytes else ""
    seek = seek_s(info, at_ns) if url else None
    return ClipView(
        clip_id=info.clip_id,
        url=url,
        src=f"{url}#t={seek:.3f}" if url and seek else url,
        state=state,
        words=words,
        final=info.final,
        reason=info.reason,
        notes=list(info.notes),
        start_ns=info.start_ns,
        end_ns=info.end_ns,
        start=iso(info.start_ns),
        end=iso(info.end_ns),
        committed_bytes=row.committed_bytes,
        size_bytes=info.size_bytes,
        seek_s=seek,
    )
