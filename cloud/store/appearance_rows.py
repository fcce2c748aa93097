"""Track appearances as table rows (issue 42): one row per track with its re-identification
embedding and cross-camera identity, the SQL every back end shares.

The embedding arrives on a track's lifecycle events (TrackEvent.appearance, float16). It is
kept here only: the copy of the event stored in track_events has it cleared, so nothing that
reads events (queries, watches, the outbox's MQTT and webhooks) can carry it out. A later
event of the track replaces the embedding when it averages at least as many crops. The
row goes when its track does (retention), and `identity_id` (0: not linked) is the smallest
appearance_id of the tracks linked into one identity (cloud/identity).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from strata.shared.contracts import events_pb2

from .snapshot_rows import Run
from .track_filter import parse_track_uid

COLUMNS = (
    "camera_id, track_uid, label, model, dim, samples, embedding, first_seen_ns, "
    "last_seen_ns, updated_ns"
)
# What readers (linker, index) get, in this order.
READ_COLUMNS = (
    "appearance_id, camera_id, track_uid, label, model, dim, samples, embedding, "
    "first_seen_ns, last_seen_ns, identity_id, updated_ns"
)


def table_sql(pk: str, blob: str, integer: str) -> str:
    """CREATE TABLE track_appearance with the back end's id, bytes and 64-bit types."""
    return f"""CREATE TABLE track_appearance (
        appearance_id {pk},
        camera_id TEXT NOT NULL,
        track_uid TEXT NOT NULL,
        label TEXT NOT NULL,
        model TEXT NOT NULL,
        dim {integer} NOT NULL,
        samples {integer} NOT NULL,
        embedding {blob} NOT NULL,
        first_seen_ns {integer} NOT NULL,
        last_seen_ns {integer} NOT NULL,
        updated_ns {integer} NOT NULL,
        identity_id {integer} NOT NULL DEFAULT 0,
        CONSTRAINT track_appearance_track UNIQUE (camera_id, track_uid)
    )"""


INDEXES = (
    "CREATE INDEX track_appearance_identity ON track_appearance (identity_id, first_seen_ns)",
    "CREATE INDEX track_appearance_last ON track_appearance (last_seen_ns)",
    "CREATE INDEX track_appearance_updated ON track_appearance (updated_ns, appearance_id)",
)


def upsert_sql(ph: str) -> str:
    """Insert a track's appearance, or update its row: the later last_seen_ns, and the
    embedding that averages more crops (a tie: the newer)."""
    values = ", ".join([ph] * len(COLUMNS.split(",")))
    newer = "excluded.samples >= track_appearance.samples"
    keep = {
        c: f"CASE WHEN {newer} THEN excluded.{c} ELSE track_appearance.{c} END"
        for c in ("model", "dim", "samples", "embedding")
    }
    sets = ", ".join(f"{c} = {e}" for c, e in keep.items())
    return (
        f"INSERT INTO track_appearance ({COLUMNS}) VALUES ({values}) "
        f"ON CONFLICT (camera_id, track_uid) DO UPDATE SET {sets}, "
        "label = excluded.label, updated_ns = excluded.updated_ns, last_seen_ns = CASE WHEN "
        "excluded.last_seen_ns > track_appearance.last_seen_ns THEN excluded.last_seen_ns "
        "ELSE track_appearance.last_seen_ns END"
    )


def seen_ns(ev: events_pb2.TrackEvent) -> int:
    """When the track was last seen as of this event: an end event's end time, else the
    event's capture time."""
    if ev.type == events_pb2.TRACK_EVENT_TYPE_END and ev.after.end_time > 0:
        return round(ev.after.end_time * 1e9)
    return ev.capture_ns


def upsert_row(ev: events_pb2.TrackEvent) -> tuple[Any, ...]:
    """The values of COLUMNS for a checked event that carries an appearance."""
    first_seen, _ = parse_track_uid(ev.track_uid)
    a = ev.appearance
    return (
        ev.camera_id,
        ev.track_uid,
        ev.after.label,
        a.model,
        int(a.dim),
        max(1, int(a.samples)),
        bytes(a.float16),
        first_seen,
        max(first_seen, seen_ns(ev)),
        time.time_ns(),
    )


def write(run: Run, ev: events_pb2.TrackEvent, ph: str) -> None:
    """Keep the event's appearance (in the transaction that stores the event)."""
    if ev.HasField("appearance") and ev.appearance.dim:
        run(upsert_sql(ph), upsert_row(ev))


def without_appearance(ev: events_pb2.TrackEvent) -> events_pb2.TrackEvent:
    """The event as track_events stores it: no embedding (copied only when it has one)."""
    if not ev.HasField("appearance"):
        return ev
    out = events_pb2.TrackEvent()
    out.CopyFrom(ev)
    out.ClearField("appearance")
    return out


@dataclass(frozen=True, slots=True)
class AppearanceRow:
    """One track's stored appearance."""

    appearance_id: int
    camera_id: str
    track_uid: str
    label: str
    model: str
    vector: np.ndarray  # float32, L2-normalised
    samples: int
    first_seen_ns: int
    last_seen_ns: int
    identity_id: int


def vector(blob: bytes, dim: int) -> np.ndarray:
    """The float32, L2-normalised vector of a stored float16 embedding."""
    v = np.frombuffer(bytes(blob), dtype="<f2", count=dim).astype(np.float32)
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def from_row(r: tuple[Any, ...]) -> AppearanceRow:
    """An AppearanceRow from READ_COLUMNS."""
    return AppearanceRow(
        appearance_id=int(r[0]),
        camera_id=str(r[1]),
        track_uid=str(r[2]),
        label=str(r[3]),
        model=str(r[4]),
        vector=vector(r[7], int(r[5])),
        samples=int(r[6]),
        first_seen_ns=int(r[8]),
        last_seen_ns=int(r[9]),
        identity_id=int(r[10]),
    )


def seen_since_sql(ph: str) -> str:
    """Appearances of tracks last seen at or after a time (parameter), oldest first."""
    return (
        f"SELECT {READ_COLUMNS} FROM track_appearance WHERE last_seen_ns >= {ph} "
        "ORDER BY first_seen_ns, appearance_id"
    )


def updated_since_sql(ph: str) -> str:
    """Appearances written after a (updated_ns, appearance_id) position, in that order;
    parameters: updated_ns, appearance_id, limit."""
    return (
        f"SELECT {READ_COLUMNS} FROM track_appearance WHERE (updated_ns, appearance_id) > "
        f"({ph}, {ph}) ORDER BY updated_ns, appearance_id LIMIT {ph}"
    )


def one_sql(ph: str) -> str:
    """One track's appearance: parameters camera_id, track_uid."""
    return (
        f"SELECT {READ_COLUMNS} FROM track_appearance WHERE camera_id = {ph} AND track_uid = {ph}"
    )


def by_ids_sql(ph: str, n: int) -> str:
    """Appearances by appearance_id."""
    return (
        f"SELECT {READ_COLUMNS} FROM track_appearance "
        f"WHERE appearance_id IN ({', '.join([ph] * n)})"
    )


def set_identity_sql(ph: str) -> str:
    """Give a track an identity: parameters identity_id, appearance_id."""
    return f"UPDATE track_appearance SET identity_id = {ph} WHERE appearance_id = {ph}"


def delete_sql(ph: str) -> str:
    """Forget a track's appearance: parameters camera_id, track_uid."""
    return f"DELETE FROM track_appearance WHERE camera_id = {ph} AND track_uid = {ph}"
