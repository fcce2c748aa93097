"""Track snapshots as table rows (schema 5): the table, the keep-the-highest-revision write,
and the reads GetSnapshot and the MQTT sink need, shared by every SQL back end (only the
placeholder and the column types differ).

One row per (camera_id, track_uid, kind): a higher revision replaces the row (DELETE, then
INSERT: the new row gets a new stored_id, so id order stays commit order); an equal or
lower one changes nothing. The JPEG lives in the row, so every replica on a shared database
serves every snapshot. `meta` is the Snapshot as sent without its JPEG.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strata.shared.contracts import events_pb2
from strata.shared.snapshot_ids import parse_snapshot_id

from .track_filter import parse_track_uid

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


def _signed(u: int) -> int:
    # uint64 ids go into signed 64-bit columns bit for bit.
    return u - _U64 if u > _I64_MAX else u


def table_sql(ident: str, blob: str, big: str) -> str:
    """CREATE TABLE for a back end: its identity column, blob and 64-bit integer types."""
    return f"""CREATE TABLE snapshots (
        stored_id {ident},
        snapshot_id TEXT NOT NULL,
        camera_id TEXT NOT NULL,
        edge_id TEXT NOT NULL,
        track_id {big} NOT NULL,
        track_uid TEXT NOT NULL,
        kind INTEGER NOT NULL,
        revision {big} NOT NULL,
        label TEXT NOT NULL,
        capture_ns {big} NOT NULL,
        stored_ns {big} NOT NULL,
        jpeg_bytes {big} NOT NULL,
        meta {blob} NOT NULL,
        jpeg {blob} NOT NULL,
        CONSTRAINT snapshots_id UNIQUE (snapshot_id),
        CONSTRAINT snapshots_track UNIQUE (camera_id, track_uid, kind)
    )"""


# A uid without its camera (GetSnapshot by track_uid alone); a camera's latest of a kind
# (the console's camera view).
INDEXES = (
    "CREATE INDEX snapshots_uid ON snapshots (track_uid)",
    "CREATE INDEX snapshots_camera_kind_time ON snapshots (camera_id, kind, capture_ns)",
)

_COLUMNS = (
    "snapshot_id, camera_id, edge_id, track_id, track_uid, kind, revision, label, capture_ns, "
    "stored_ns, jpeg_bytes, meta, jpeg"
)
# What a read returns: stored_ns, meta, jpeg.
_READ = "stored_ns, meta, jpeg"


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """The outcome of one snapshot write. `duplicate`: nothing changed (this id, or a higher
    revision of the track's snapshot of this kind, `snapshot_id`, was stored before)."""

    snapshot_id: str
    stored_id: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class SnapshotRow:
    """A stored snapshot as GetSnapshot returns it (JPEG included)."""

    snapshot: events_pb2.Snapshot
    stored_ns: int


class SnapshotLookupError(ValueError):
    """A request that names no single track (ambiguous uid, malformed key)."""


# The cursor-returning `execute` of a back end's connection inside a transaction.
Run = Callable[[str, Any], Any]


def _row(snap: events_pb2.Snapshot, stored_ns: int) -> tuple[Any, ...]:
    meta = events_pb2.Snapshot()
    meta.CopyFrom(snap)
    meta.ClearField("jpeg")
    return (
        snap.snapshot_id,
        snap.camera_id,
        snap.edge_id,
        _signed(snap.track_id),
        snap.track_uid,
        int(snap.kind),
        snap.revision,
        snap.label,
        snap.capture_ns,
        stored_ns,
        len(snap.jpeg),
        meta.SerializeToString(),
        snap.jpeg,
    )


def write(run: Run, snap: events_pb2.Snapshot, ph: str) -> StoredSnapshot:
    """Store a checked snapshot (snapshot_checks) in the caller's transaction unless the
    track already has this or a higher revision of its kind. Replicas racing on one track
    serialise on its unique key: the loser sees the winner's row and tries again."""
    track = f"camera_id = {ph} AND track_uid = {ph} AND kind = {ph}"
    key = (snap.camera_id, snap.track_uid, int(snap.kind))
    insert = (
        f"INSERT INTO snapshots ({_COLUMNS}) VALUES ({', '.join([ph] * 13)}) "
        "ON CONFLICT DO NOTHING RETURNING stored_id"
    )
    # The id names its track, kind and revision (snapshot_checks), so a stored copy of this
    # id is the track's row: the revision test covers it.
    for _ in range(3):
        row = run(
            f"SELECT stored_id, snapshot_id, revision FROM snapshots WHERE {track}", key
        ).fetchone()
        if row is not None and int(row[2]) >= snap.revision:
            return StoredSnapshot(str(row[1]), int(row[0]), duplicate=True)
        if row is not None:
            run(f"DELETE FROM snapshots WHERE stored_id = {ph}", (row[0],))
        got = run(insert, _row(snap, time.time_ns())).fetchone()
        if got is not None:
            return StoredSnapshot(snap.snapshot_id, int(got[0]), duplicate=False)
    raise RuntimeError(f"snapshot {snap.snapshot_id}: the track's row kept changing under us")


def from_row(row: tuple[Any, ...]) -> SnapshotRow:
    """A SnapshotRow from (stored_ns, meta, jpeg)."""
    snap = events_pb2.Snapshot.FromString(bytes(row[1]))
    snap.jpeg = bytes(row[2])
    return SnapshotRow(snap, int(row[0]))


@dataclass(frozen=True, slots=True)
class SnapshotQuery:
    """Which snapshot: name the track by one of event_key, snapshot_id, track_uid (with
    camera_id, or alone when unique over cameras); kind 0: the best crop, or the kind the
    snapshot id names."""

    event_key: str = ""
    snapshot_id: str = ""
    camera_id: str = ""
    track_uid: str = ""
    kind: int = 0


Read = Callable[[str, Any], list[tuple[Any, ...]]]


def _track_of(q: SnapshotQuery, read: Read, ph: str) -> tuple[str, str, int]:
    """(camera_id, track_uid, kind) the query names; SnapshotLookupError when none or many."""
    named = [bool(q.event_key), bool(q.snapshot_id), bool(q.track_uid)]
    if sum(named) != 1:
        raise SnapshotLookupError("name exactly one of event_key, snapshot_id, track_uid")
    kind = q.kind or events_pb2.SNAPSHOT_KIND_BEST_CROP
    if q.snapshot_id:
        try:
            ref = parse_snapshot_id(q.snapshot_id)
        except ValueError as exc:
            raise SnapshotLookupError(str(exc)) from None
        return ref.camera_id, ref.track_uid, q.kind or ref.kind
    if q.event_key:
        rows = read(
            f"SELECT camera_id, track_uid FROM track_events WHERE idempotency_key = {ph}",
            (q.event_key,),
        )
        if not rows:
            raise LookupError(f"no stored track event has key {q.event_key!r}")
        return str(rows[0][0]), str(rows[0][1]), kind
    try:
        parse_track_uid(q.track_uid)
    except ValueError as exc:
        raise SnapshotLookupError(str(exc)) from None
    if q.camera_id:
        return q.camera_id, q.track_uid, kind
    cams = read(
        f"SELECT DISTINCT camera_id FROM snapshots WHERE track_uid = {ph} "
        f"UNION SELECT DISTINCT camera_id FROM track_events WHERE track_uid = {ph}",
        (q.track_uid, q.track_uid),
    )
    if len(cams) > 1:
        names = ", ".join(sorted(str(c[0]) for c in cams))
        raise SnapshotLookupError(f"track {q.track_uid} is on several cameras ({names}): name one")
    if not cams:
        raise LookupError(f"no stored track {q.track_uid}")
    return str(cams[0][0]), q.track_uid, kind


def find(q: SnapshotQuery, read: Read, ph: str) -> SnapshotRow | None:
    """The track's stored snapshot of the kind asked (None: none). SnapshotLookupError for
    a request that names no single track; LookupError when the event or track is unknown."""
    camera, uid, kind = _track_of(q, read, ph)
    rows = read(
        f"SELECT {_READ} FROM snapshots WHERE camera_id = {ph} AND track_uid = {ph} "
        f"AND kind = {ph}",
        (camera, uid, int(kind)),
    )
    return from_row(rows[0]) if rows else None


def latest_jpeg_sql(ph: str) -> str:
    """The JPEG of a track's snapshot of one kind (the MQTT sink's hook)."""
    return (
        f"SELECT snapshot_id, jpeg FROM snapshots WHERE camera_id = {ph} AND track_uid = {ph} "
        f"AND kind = {ph}"
    )
