"""Snapshot ids (events.proto `Snapshot.snapshot_id`): the one format edge and cloud share.

`"<camera_id>/<track_uid>/<kind>/<revision>"`, kind `best_crop` or `full_frame`: the same
snapshot always has the same id, whichever edge sends it, so a resend is a duplicate.
"""

from __future__ import annotations

from dataclasses import dataclass

from .contracts import events_pb2

KINDS: dict[str, int] = {
    "best_crop": events_pb2.SNAPSHOT_KIND_BEST_CROP,
    "full_frame": events_pb2.SNAPSHOT_KIND_FULL_FRAME,
}
_NAMES = {v: k for k, v in KINDS.items()}


def kind_name(kind: int) -> str:
    """`best_crop` / `full_frame`; `unknown` for UNSPECIFIED or a newer kind."""
    return _NAMES.get(kind, "unknown")


def parse_kind(text: str) -> int:
    """A kind from its short or full name, any case; ValueError naming the known ones."""
    key = text.strip().lower().removeprefix("snapshot_kind_")
    try:
        return KINDS[key]
    except KeyError:
        raise ValueError(f"unknown snapshot kind {text!r}; known: {', '.join(KINDS)}") from None


@dataclass(frozen=True, slots=True)
class SnapshotRef:
    """The parts of a snapshot id."""

    camera_id: str
    track_uid: str
    kind: int
    revision: int

    def __str__(self) -> str:
        return f"{self.camera_id}/{self.track_uid}/{kind_name(self.kind)}/{self.revision}"


def snapshot_id(camera_id: str, track_uid: str, kind: int, revision: int) -> str:
    """The id the contract gives a snapshot."""
    return str(SnapshotRef(camera_id, track_uid, kind, revision))


def parse_snapshot_id(text: str) -> SnapshotRef:
    """The parts of an id (a camera id may hold '/'); ValueError when it is not one."""
    head, sep, rev = text.rpartition("/")
    head, sep2, kind = head.rpartition("/")
    camera, sep3, uid = head.rpartition("/")
    if not (sep and sep2 and sep3 and camera and uid and rev.isdigit()) or kind not in KINDS:
        raise ValueError(
            f"snapshot id {text!r} is not '<camera_id>/<track_uid>/best_crop|full_frame/<revision>'"
        )
    return SnapshotRef(camera, uid, KINDS[kind], int(rev))


__all__ = ["KINDS", "SnapshotRef", "kind_name", "parse_kind", "parse_snapshot_id", "snapshot_id"]
