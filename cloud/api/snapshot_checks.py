"""Is a Snapshot from an edge fit to store? One reason code and a sentence when it is not.

An INVALID ack is final (the edge drops the snapshot), so what is refused is what can never
become a stored JPEG: over the size limit, not a JPEG, a JPEG that does not decode, or
fields the key and the track need. A JPEG is decoded in full before it is accepted, so no
snapshot in the store fails to display.
"""

from __future__ import annotations

import numpy as np
from strata.shared.contracts import ProtocolVersionError, check_version, events_pb2
from strata.shared.imagecheck import ImageLimits, InvalidImageError, jpeg_size
from strata.shared.snapshot_ids import KINDS, snapshot_id

from .track_checks import Invalid, check_text, check_track_uid

_KNOWN = frozenset(KINDS.values())


def check_snapshot(
    snap: events_pb2.Snapshot, max_bytes: int, limits: ImageLimits
) -> Invalid | None:
    """None when the snapshot can be stored, else why not."""
    try:
        check_version(snap.version)
    except ProtocolVersionError as exc:
        return Invalid("protocol_version", f"{exc} (Snapshot.version)")
    size = len(snap.jpeg)
    if size > max_bytes:
        return Invalid(
            "too_large", f"snapshot JPEG is {size} bytes; cloud.snapshots.max_bytes is {max_bytes}"
        )
    keys = ("snapshot_id", "camera_id", "track_uid")
    bad = check_text(snap, keys, (*keys, "edge_id", "label"))
    if bad is not None:
        return bad
    if snap.kind not in _KNOWN:
        return Invalid("bad_kind", f"kind {snap.kind} is not a known SnapshotKind")
    bad = check_track_uid(snap.track_uid, snap.track_id)
    if bad is not None:
        return bad
    want = snapshot_id(snap.camera_id, snap.track_uid, snap.kind, snap.revision)
    if snap.snapshot_id != want:
        return Invalid(
            "bad_snapshot_id",
            f"id {snap.snapshot_id!r} is not camera/track_uid/kind/revision ({want!r})",
        )
    if snap.capture_ns <= 0:
        return Invalid("no_capture_ns", "capture_ns is not set")
    return _check_jpeg(snap, limits)


def _check_jpeg(snap: events_pb2.Snapshot, limits: ImageLimits) -> Invalid | None:
    import cv2

    if not snap.jpeg:
        return Invalid("empty", "the snapshot has no JPEG")
    found = jpeg_size(snap.jpeg)
    if found is None:
        return Invalid("not_jpeg", "the snapshot is not a JPEG (no frame header found)")
    w, h = found
    try:
        limits.check(w, h)
    except InvalidImageError as exc:
        return Invalid(exc.reason, str(exc))
    if (w, h) != (snap.width, snap.height):
        return Invalid(
            "jpeg_dimensions", f"JPEG is {w}x{h}; the snapshot says {snap.width}x{snap.height}"
        )
    # A cut-off JPEG still decodes (the rest grey): its end-of-image marker must be there.
    if not snap.jpeg.rstrip(b"\x00").endswith(b"\xff\xd9"):
        return Invalid("undecodable", f"the {w}x{h} JPEG is cut short (no end-of-image marker)")
    img = cv2.imdecode(np.frombuffer(snap.jpeg, np.uint8), cv2.IMREAD_COLOR)
    if img is None or img.shape[:2] != (h, w):
        return Invalid("undecodable", f"the {w}x{h} JPEG does not decode")
    return None
