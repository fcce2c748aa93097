"""Is a ClipChunk from a device fit to store? One reason code and a sentence when it is not.

Only what needs no stored state is checked here (the offset against what is committed is
clip_rows'): the version, the ids the rows are keyed by, the size cap, and a final chunk's
info agreeing with the chunk. An INVALID ack is final: sending the same again cannot help.
"""

from __future__ import annotations

from strata.shared.contracts import ProtocolVersionError, check_version, clips_pb2

from ..store.track_filter import parse_track_uid
from .track_checks import Invalid, check_text

# Tracks one clip may name (overlapping tracks of a camera share a clip).
MAX_TRACKS = 1000
_OUTCOMES = frozenset(clips_pb2.ClipOutcome.values())


def _ids(info: clips_pb2.ClipInfo) -> Invalid | None:
    keys = ("clip_id", "camera_id")
    bad = check_text(info, keys, (*keys, "agent_id", "codec"), "info.")
    if bad is not None:
        return bad
    if not info.clip_id.startswith(info.camera_id + "/"):
        return Invalid("bad_clip_id", f"clip id {info.clip_id!r} is not <camera_id>/<session>/<n>")
    if len(info.track_uids) > MAX_TRACKS:
        return Invalid("too_many_tracks", f"the clip names over {MAX_TRACKS} tracks")
    for uid in info.track_uids:
        try:
            parse_track_uid(uid)
        except ValueError as exc:
            return Invalid("bad_track_uid", str(exc))
    return None


def check_chunk(chunk: clips_pb2.ClipChunk, max_bytes: int) -> Invalid | None:
    """None when the chunk can go to the store, else why not."""
    try:
        check_version(chunk.version)
    except ProtocolVersionError as exc:
        return Invalid("protocol_version", f"{exc} (ClipChunk.version)")
    bad = _ids(chunk.info)
    if bad is not None:
        return bad
    info = chunk.info
    end = chunk.offset + len(chunk.data)
    if end > max_bytes:
        return Invalid(
            "too_large", f"the clip reaches {end} bytes; cloud.clips.max_bytes is {max_bytes}"
        )
    if chunk.last != info.final:
        return Invalid("final", "info.final must be set on the last chunk, and only there")
    if chunk.cut_back and not chunk.last:
        return Invalid("cut_back", "cut_back is set on the last chunk only (with the final info)")
    if chunk.last and info.size_bytes != end:
        return Invalid(
            "size_mismatch", f"info.size_bytes is {info.size_bytes}; the last chunk ends at {end}"
        )
    if info.outcome not in _OUTCOMES:
        return Invalid("bad_outcome", f"outcome {info.outcome} is not a known ClipOutcome")
    if chunk.last and info.outcome == clips_pb2.CLIP_OUTCOME_UNSPECIFIED:
        return Invalid("bad_outcome", "a final clip must say how it ended (outcome)")
    return None
