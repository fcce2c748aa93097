"""The console's reads: read-only SQL on the event store's own tables, newest first.

Every value a user typed travels as a bound parameter (the back end's placeholder); only
column names and fixed fragments are ever put into the SQL text. Pages are keyset-paged:
classified crops (events) and track events (track_events) are merged newest first by
(time, kind, id), and a page's cursor is the last row's position, so a deep page costs what
the first one does (each table's time index, no OFFSET).
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any, Protocol

from strata.shared.contracts import analytics_pb2, events_pb2

from ..store import event_rows, track_rows
from ..store.event_store import EventStore, StoreError
from ..store.track_filter import TYPES, TrackQuery

# Rows of one instant are ordered crops before track events (descending kind), then by id.
CROP, TRACK = 1, 0
SNAPSHOT_KINDS = {"crop": 1, "frame": 2}  # events.proto SnapshotKind
_TRACK_COLUMNS = (
    "stored_id, stored_ns, event, camera_id, track_id, track_uid, first_seen_ns, capture_ns, "
    "sequence"
)
# Line crossings read for one counts chart at most (their direction lives in the event body).
MAX_CROSSINGS = 100_000
_SNAPSHOT_RECHECK_S = 30.0


class Reader(Protocol):
    """What the console reads through: one SELECT, and the driver's placeholder."""

    placeholder: str

    def rows(self, sql: str, args: Any) -> list[tuple[Any, ...]]:
        """Rows of one SELECT; StoreError on failure."""


class StoreReader:
    """A Reader over an open EventStore's reader connections (SQLite or PostgreSQL)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.placeholder = store.placeholder

    def rows(self, sql: str, args: Any) -> list[tuple[Any, ...]]:
        """Rows of one SELECT on the store's own reader connection for this thread."""
        return self.store._read(sql, args)


@dataclass(frozen=True, slots=True)
class EventFilter:
    """The list's filters; empty and zero mean any. `kind` is "crop" or a track event type
    (`line_crossed`); zone, line and rule name a rule event's own fields, so they keep
    classified crops out."""

    camera: str = ""
    label: str = ""
    zone: str = ""
    line: str = ""
    rule: str = ""
    kind: str = ""
    start_ns: int = 0
    end_ns: int = 0

    def __post_init__(self) -> None:
        if self.kind and self.kind != "crop" and self.kind not in TYPES:
            known = ", ".join(["crop", *TYPES])
            raise ValueError(f"unknown type {self.kind!r}; known: {known}")
        if self.start_ns < 0 or self.end_ns < 0:
            raise ValueError("times must not be negative")

    @property
    def wants_crops(self) -> bool:
        """Whether classified crops can pass this filter."""
        return self.kind in ("", "crop") and not (self.zone or self.line or self.rule)

    @property
    def wants_tracks(self) -> bool:
        """Whether track events can pass this filter."""
        return self.kind != "crop"

    def track_types(self) -> tuple[int, ...]:
        """The track event types wanted (() for any)."""
        return (TYPES[self.kind],) if self.kind and self.kind != "crop" else ()

    def track_query(self) -> TrackQuery:
        """The track-event filter of this list filter: the list's query and the live feed's
        hub filter alike."""
        return TrackQuery(
            camera_id=self.camera,
            label=self.label,
            start_ns=self.start_ns,
            end_ns=self.end_ns,
            types=self.track_types(),
            zone=self.zone,
            line=self.line,
            rule=self.rule,
        )


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a page ends: the last row's (time, kind, id); the next page is what is older."""

    time_ns: int
    kind: int
    row_id: int

    def token(self) -> str:
        """The opaque token of this position."""
        raw = f"c1:{self.time_ns}:{self.kind}:{self.row_id}"
        return base64.urlsafe_b64encode(raw.encode()).decode()

    @classmethod
    def parse(cls, token: str) -> Cursor:
        """Decode a token; ValueError when it is not one of ours."""
        try:
            tag, t, k, i = base64.urlsafe_b64decode(token.encode()).decode().split(":")
            if tag != "c1" or int(k) not in (CROP, TRACK):
                raise ValueError(tag)
            return cls(int(t), int(k), int(i))
        except Exception as exc:
            raise ValueError("malformed page cursor") from exc


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the list: a classified crop or a stored track event. `track_uid` is the
    crop's track (empty when untracked or its track events are not stored)."""

    kind: int
    time_ns: int
    row_id: int
    crop: analytics_pb2.Event | None = None
    track: events_pb2.StoredTrackEvent | None = None
    track_uid: str = ""

    @property
    def camera(self) -> str:
        """The row's camera."""
        if self.crop is not None:
            return self.crop.camera_id
        assert self.track is not None
        return self.track.event.camera_id

    @property
    def cursor(self) -> Cursor:
        """This row's position."""
        return Cursor(self.time_ns, self.kind, self.row_id)


def _before(cursor: Cursor | None, kind: int, time_col: str, id_col: str, ph: str) -> Any:
    """The keyset condition "older than the cursor" for a table whose rows are all `kind`."""
    if cursor is None:
        return None
    if kind == cursor.kind:
        # The leading bound makes it one range of the time index, read in order; with the
        # OR alone SQLite reads two ranges and sorts every older row to keep 50.
        return (
            f"{time_col} <= {ph} AND ({time_col} < {ph} OR ({time_col} = {ph} "
            f"AND {id_col} < {ph}))",
            [cursor.time_ns, cursor.time_ns, cursor.time_ns, cursor.row_id],
        )
    op = "<=" if kind < cursor.kind else "<"
    return f"{time_col} {op} {ph}", [cursor.time_ns]


# The track a crop belongs to: its camera's latest track with that tracker id first seen
# before the crop (ids are reused after a tracker restart).
_CROP_UID = (
    "(SELECT t.track_uid FROM track_events t WHERE events.track_id <> 0 AND "
    "t.camera_id = events.camera_id AND t.track_id = events.track_id AND "
    "t.first_seen_ns <= events.time_ns ORDER BY t.first_seen_ns DESC LIMIT 1)"
)


class ConsoleQueries:
    """The console's SELECTs, each a method returning typed rows. Blocking: call them from
    the executor, never on the event loop."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.ph = reader.placeholder
        self._no_snapshots_until = 0.0

    # the list

    def crops(self, f: EventFilter, cursor: Cursor | None, limit: int) -> list[Row]:
        """Up to `limit` classified crops, newest first, older than `cursor`."""
        ph = self.ph
        where = [f"time_ns >= {ph}"]
        args: list[object] = [f.start_ns]
        if f.end_ns:
            where.append(f"time_ns < {ph}")
            args.append(f.end_ns)
        if f.camera:
            where.append(f"camera_id = {ph}")
            args.append(f.camera)
        if f.label:
            where.append(event_rows.label_filter(ph))
            args += [f.label, f.label]
        older = _before(cursor, CROP, "time_ns", "event_id", ph)
        if older is not None:
            where.append(older[0])
            args += older[1]
        args.append(limit)
        sql = (
            f"SELECT {event_rows.COLUMNS}, time_ns, {_CROP_UID} FROM events "
            f"WHERE {' AND '.join(where)} ORDER BY time_ns DESC, event_id DESC LIMIT {ph}"
        )
        out = []
        for r in self.reader.rows(sql, args):
            ev = event_rows.event_from_row(r[:-2])
            out.append(Row(CROP, int(r[-2]), ev.event_id, crop=ev, track_uid=str(r[-1] or "")))
        return out

    def tracks(self, f: EventFilter, cursor: Cursor | None, limit: int) -> list[Row]:
        """Up to `limit` track events, newest first, older than `cursor`, verdicts joined."""
        ph = self.ph
        where, args = track_rows.filter_terms(f.track_query(), ph)
        older = _before(cursor, TRACK, "capture_ns", "stored_id", ph)
        if older is not None:
            where.append(older[0])
            args += older[1]
        args.append(limit)
        inner = (
            f"SELECT {_TRACK_COLUMNS} FROM track_events WHERE {' AND '.join(where)} "
            f"ORDER BY capture_ns DESC, stored_id DESC LIMIT {ph}"
        )
        sql = track_rows.with_verdicts(inner, "m.capture_ns DESC, m.stored_id DESC")
        out = []
        for r in self.reader.rows(sql, args):
            stored = track_rows.stored_from_row(r[: track_rows.STORED_COLUMNS])
            out.append(
                Row(
                    TRACK,
                    int(r[track_rows.STORED_COLUMNS]),
                    stored.stored_id,
                    track=stored,
                    track_uid=stored.event.track_uid,
                )
            )
        return out

    def page(
        self, f: EventFilter, cursor: Cursor | None, limit: int
    ) -> tuple[list[Row], Cursor | None]:
        """One page of the merged list, newest first, and the cursor of the next (None: last)."""
        rows: list[Row] = []
        if f.wants_crops:
            rows += self.crops(f, cursor, limit + 1)
        if f.wants_tracks:
            rows += self.tracks(f, cursor, limit + 1)
        rows.sort(key=lambda r: (r.time_ns, r.kind, r.row_id), reverse=True)
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, rows[-1].cursor if more and rows else None

    # snapshots (schema 5; absent before it: every lookup says none)

    def _snapshot_rows(self, sql: str, args: list[object]) -> list[tuple[Any, ...]]:
        if time.monotonic() < self._no_snapshots_until:
            return []
        try:
            return self.reader.rows(sql, args)
        except StoreError:
            # No snapshots table (a store older than schema 5): look again later, as a
            # migration by another replica may add it.
            self._no_snapshots_until = time.monotonic() + _SNAPSHOT_RECHECK_S
            return []

    def snapshot_kinds(self, keys: set[tuple[str, str]]) -> dict[tuple[str, str], set[int]]:
        """Which snapshot kinds each (camera, track_uid) has."""
        out: dict[tuple[str, str], set[int]] = {}
        uids = sorted({uid for _, uid in keys if uid})
        for i in range(0, len(uids), 200):
            part = uids[i : i + 200]
            sql = (
                "SELECT camera_id, track_uid, kind FROM snapshots WHERE track_uid IN "
                f"({', '.join([self.ph] * len(part))})"
            )
            for cam, uid, kind in self._snapshot_rows(sql, list(part)):
                if (cam, uid) in keys:
                    out.setdefault((cam, uid), set()).add(int(kind))
        return out

    def snapshot(self, camera: str, uid: str, kind: int) -> tuple[bytes, int] | None:
        """A track's snapshot JPEG of a kind and when it was stored, or None."""
        ph = self.ph
        sql = (
            f"SELECT jpeg, stored_ns FROM snapshots WHERE camera_id = {ph} AND "
            f"track_uid = {ph} AND kind = {ph}"
        )
        rows = self._snapshot_rows(sql, [camera, uid, kind])
        return (bytes(rows[0][0]), int(rows[0][1])) if rows else None

    def latest_frame_snapshot(self, camera: str) -> str:
        """The track uid of a camera's latest full-frame snapshot ('' for none)."""
        ph = self.ph
        sql = (
            f"SELECT track_uid FROM snapshots WHERE camera_id = {ph} AND kind = {ph} "
            f"ORDER BY capture_ns DESC LIMIT {ph}"
        )
        rows = self._snapshot_rows(sql, [camera, SNAPSHOT_KINDS["frame"], 1])
        return str(rows[0][0]) if rows else ""

    # detail

    def crop(self, event_id: int) -> Row | None:
        """One classified crop by id, with its track's uid."""
        ph = self.ph
        sql = f"SELECT {event_rows.COLUMNS}, time_ns, {_CROP_UID} FROM events WHERE event_id = {ph}"
        rows = self.reader.rows(sql, [event_id])
        if not rows:
            return None
        ev = event_rows.event_from_row(rows[0][:-2])
        return Row(CROP, int(rows[0][-2]), ev.event_id, crop=ev, track_uid=str(rows[0][-1] or ""))

    # cameras and counts

    def cameras(self) -> dict[str, dict[str, int]]:
        """Per camera seen in the store: crops, track events, tracks and the last times."""
        out: dict[str, dict[str, int]] = {}
        for cam, n, last in self.reader.rows(
            "SELECT camera_id, COUNT(*), MAX(time_ns) FROM events GROUP BY camera_id", []
        ):
            out.setdefault(str(cam), {}).update(crops=int(n), last_crop_ns=int(last or 0))
        for cam, n, tracks, last in self.reader.rows(
            "SELECT camera_id, COUNT(*), COUNT(DISTINCT track_uid), MAX(capture_ns) "
            "FROM track_events GROUP BY camera_id",
            [],
        ):
            out.setdefault(str(cam), {}).update(
                track_events=int(n), tracks=int(tracks), last_track_ns=int(last or 0)
            )
        return out

    def counts(self, start_ns: int, end_ns: int, bucket_ns: int, camera: str = "") -> CountRows:
        """Objects (new tracks), zone entries and line crossings (with direction) per camera,
        name and label in buckets of `bucket_ns` from `start_ns`."""
        ph = self.ph
        where = f"capture_ns >= {ph} AND capture_ns < {ph} AND type = {ph}"
        base: list[object] = [start_ns, end_ns]
        if camera:
            where += f" AND camera_id = {ph}"
        cam_args: list[object] = [camera] if camera else []
        grouped = (
            f"SELECT camera_id, zone, label, (capture_ns - {ph}) / {ph} AS b, COUNT(*) "
            f"FROM track_events WHERE {where} GROUP BY camera_id, zone, label, b"
        )
        objects = self.reader.rows(grouped, [start_ns, bucket_ns, *base, TYPES["new"], *cam_args])
        zones = self.reader.rows(
            grouped, [start_ns, bucket_ns, *base, TYPES["zone_entered"], *cam_args]
        )
        crossings = self.reader.rows(
            f"SELECT camera_id, line, label, capture_ns, event FROM track_events WHERE {where} "
            f"ORDER BY capture_ns LIMIT {ph}",
            [*base, TYPES["line_crossed"], *cam_args, MAX_CROSSINGS + 1],
        )
        return CountRows(objects, zones, crossings[:MAX_CROSSINGS], len(crossings) > MAX_CROSSINGS)


@dataclass(frozen=True, slots=True)
class CountRows:
    """What counts() read: grouped (camera, zone, label, bucket, n) rows of new tracks and of
    zone entries, line crossings one by one, and whether the crossings were cut short."""

    objects: list[tuple[Any, ...]]
    zones: list[tuple[Any, ...]]
    crossings: list[tuple[Any, ...]]
    truncated: bool
