"""Track events as table rows: the columns, row <-> StoredTrackEvent, the verdict join and the
QueryTrackEvents SQL, which every SQL back end shares (only the placeholder differs).

A row keeps the event's serialized proto (what reads return) beside the columns queries
filter on. The cloud's verdict on a track is the latest classified crop (events table) of the
same camera and tracker id captured from the track's first-seen time until the next track
that reused the id (a tracker restarted without its checkpoint reuses ids); it is joined on
reads, so a crop classified after the event was stored still shows.
"""

from __future__ import annotations

import time
from typing import Any

from strata.shared.contracts import events_pb2

from . import appearance_rows
from .track_filter import TrackPageKey, TrackQuery, parse_track_uid

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1

INSERT_COLUMNS = (
    "idempotency_key, camera_id, edge_id, track_id, track_uid, first_seen_ns, type, sequence, "
    "track_sequence, capture_ns, stored_ns, label, zone, line, rule, event"
)
# What a duplicate's ack and a read need back.
_STORED = "stored_id, stored_ns, event"


def _signed(u: int) -> int:
    # uint64 ids go into signed 64-bit columns bit for bit.
    return u - _U64 if u > _I64_MAX else u


def placeholders(ph: str) -> str:
    """The VALUES list of an insert of INSERT_COLUMNS with placeholder `ph`."""
    return ", ".join([ph] * len(INSERT_COLUMNS.split(",")))


def insert_sql(ph: str) -> str:
    """Insert one event unless its key is stored; returns its stored_id when it was new."""
    return (
        f"INSERT INTO track_events ({INSERT_COLUMNS}) VALUES ({placeholders(ph)}) "
        "ON CONFLICT (idempotency_key) DO NOTHING RETURNING stored_id"
    )


def find_sql(ph: str) -> str:
    """The stored copy of a key (a duplicate's ack)."""
    return f"SELECT {_STORED} FROM track_events WHERE idempotency_key = {ph}"


def insert_row(ev: events_pb2.TrackEvent) -> tuple[Any, ...]:
    """The values of INSERT_COLUMNS for a checked event (track_checks), stored now."""
    first_seen, _ = parse_track_uid(ev.track_uid)
    # The verdict and identity are the cloud's to set, on reads; the embedding is kept in
    # track_appearance only (appearance_rows), so no read of events can carry it out.
    ev = appearance_rows.without_appearance(ev)
    if ev.HasField("verdict") or ev.identity_id:
        ev = events_pb2.TrackEvent.FromString(ev.SerializeToString())
        ev.ClearField("verdict")
        ev.ClearField("identity_id")
    return (
        ev.idempotency_key,
        ev.camera_id,
        ev.edge_id,
        _signed(ev.track_id),
        ev.track_uid,
        _signed(first_seen),
        int(ev.type),
        _signed(ev.sequence),
        ev.track_sequence,
        ev.capture_ns,
        time.time_ns(),
        ev.after.label,
        ev.zone,
        ev.line,
        ev.rule,
        ev.SerializeToString(),
    )


def stored_from_insert(
    ev: events_pb2.TrackEvent, stored_id: int, row: tuple[Any, ...]
) -> events_pb2.StoredTrackEvent:
    """The event as its insert_row stored it (no verdict: that comes on reads)."""
    return events_pb2.StoredTrackEvent(
        event=events_pb2.TrackEvent.FromString(row[-1]), stored_id=stored_id, stored_ns=row[10]
    )


def stored_from_row(row: tuple[Any, ...]) -> events_pb2.StoredTrackEvent:
    """A StoredTrackEvent from (stored_id, stored_ns, event[, verdict columns..., identity])."""
    out = events_pb2.StoredTrackEvent(stored_id=int(row[0]), stored_ns=int(row[1]))
    out.event.ParseFromString(bytes(row[2]))
    if len(row) > 3 and row[3] is not None:
        v = out.event.verdict
        v.event_id, v.label, v.score = int(row[3]), str(row[4]), float(row[5])
        if row[6] is not None:
            v.model_version = int(row[6])
        if row[7] is not None:  # NULL: a crop stored before verdicts were (schema 7)
            v.verdict = int(row[7])  # type: ignore[assignment]
            v.model, v.support = str(row[8] or ""), float(row[9] or 0.0)
        # The crop's detector label; the track's own for a crop stored before schema 7.
        v.detector_label = str(row[10]) if row[10] is not None else out.event.after.label
    if len(row) > 11 and row[11]:
        out.event.identity_id = int(row[11])
    return out


def _verdict_id(t: str) -> str:
    """Scalar subquery: the event_id of track `t`'s latest classified crop (NULL: none)."""
    return (
        "(SELECT e.event_id FROM events e "
        f"WHERE {t}.track_id <> 0 AND e.camera_id = {t}.camera_id AND e.track_id = {t}.track_id "
        f"AND e.time_ns >= {t}.first_seen_ns AND e.time_ns < COALESCE("
        "(SELECT MIN(n.first_seen_ns) FROM track_events n WHERE n.camera_id = "
        f"{t}.camera_id AND n.track_id = {t}.track_id AND n.first_seen_ns > {t}.first_seen_ns), "
        f"{_I64_MAX}) ORDER BY e.time_ns DESC, e.event_id DESC LIMIT 1)"
    )


# Schema 4 (both back ends create the table their own way, then these): the orders and
# filters of query_sql, the verdict's lookups (events by camera and tracker id; the next track
# that reused an id), and the tracks view.
INDEXES = (
    "CREATE INDEX track_events_time ON track_events (capture_ns, sequence, stored_id)",
    "CREATE INDEX track_events_camera_time "
    "ON track_events (camera_id, capture_ns, sequence, stored_id)",
    "CREATE INDEX track_events_track ON track_events (camera_id, track_uid, track_sequence)",
    "CREATE INDEX track_events_track_id ON track_events (camera_id, track_id, first_seen_ns)",
    "CREATE INDEX track_events_type_time ON track_events (type, capture_ns)",
    "CREATE INDEX track_events_label_time ON track_events (label, capture_ns)",
    "CREATE INDEX track_events_zone_time ON track_events (zone, capture_ns)",
    "CREATE INDEX track_events_line_time ON track_events (line, capture_ns)",
    "CREATE INDEX track_events_rule_time ON track_events (rule, capture_ns)",
    "CREATE INDEX events_camera_track ON events (camera_id, track_id, time_ns)",
)

# One row per track (a migration creates it): for people reading the database with SQL.
TRACKS_VIEW = (
    "CREATE VIEW tracks AS SELECT t.camera_id, t.track_uid, t.track_id, t.first_seen_ns, "
    f"t.last_capture_ns, t.end_capture_ns, t.events, {_verdict_id('t')} AS verdict_event_id "
    "FROM (SELECT camera_id, track_uid, track_id, MIN(first_seen_ns) AS first_seen_ns, "
    "MAX(capture_ns) AS last_capture_ns, "
    f"MAX(CASE WHEN type = {events_pb2.TRACK_EVENT_TYPE_END} THEN capture_ns END) "
    "AS end_capture_ns, COUNT(*) AS events "
    "FROM track_events GROUP BY camera_id, track_uid, track_id) AS t"
)


# How many leading columns of a with_verdicts row stored_from_row reads (capture_ns and
# sequence follow).
STORED_COLUMNS = 12


def with_verdicts(inner: str, order: str) -> str:
    """Rows of `inner` (track_events rows with _PAGE_COLUMNS) as stored_from_row reads them,
    then capture_ns and sequence, in `order`; the verdict of each row's track joined."""
    return (
        "SELECT m.stored_id, m.stored_ns, m.event, v.event_id, v.label, v.score, "
        "v.model_version, v.verdict, v.model, v.support, v.detector_label, "
        "(SELECT a.identity_id FROM track_appearance a WHERE a.camera_id = m.camera_id "
        "AND a.track_uid = m.track_uid), m.capture_ns, m.sequence FROM "
        f"(SELECT p.*, {_verdict_id('p')} AS verdict_id FROM ({inner}) AS p) AS m "
        f"LEFT JOIN events v ON v.event_id = m.verdict_id ORDER BY {order}"
    )


_PAGE_COLUMNS = (
    "stored_id, stored_ns, event, camera_id, track_id, track_uid, first_seen_ns, capture_ns, "
    "sequence"
)
_ORDER = "capture_ns, sequence, stored_id"


def by_ids_sql(ph: str, n: int) -> str:
    """The events with these stored ids (a commit announced them), verdicts joined."""
    inner = f"SELECT {_PAGE_COLUMNS} FROM track_events WHERE stored_id IN ({', '.join([ph] * n)})"
    return with_verdicts(inner, "m.stored_id")


def query_sql(
    q: TrackQuery, after: TrackPageKey | None, limit: int, ph: str
) -> tuple[str, list[object]]:
    """SELECT of one page plus one row (to know whether more follow), in (capture_ns,
    sequence, stored_id) order, verdicts joined."""
    where, args = filter_terms(q, ph)
    if after is not None:
        where.append(f"({_ORDER}) > ({ph}, {ph}, {ph})")
        args += [after.time_ns, _signed(after.sequence), after.stored_id]
    args.append(limit + 1)
    inner = (
        f"SELECT {_PAGE_COLUMNS} FROM track_events WHERE {' AND '.join(where)} "
        f"ORDER BY {_ORDER} LIMIT {ph}"
    )
    return with_verdicts(inner, "m.capture_ns, m.sequence, m.stored_id"), args


def filter_terms(q: TrackQuery, ph: str) -> tuple[list[str], list[object]]:
    """The WHERE terms on track_events that `q` asks for (to be ANDed), and their arguments
    in placeholder order."""
    where = [f"capture_ns >= {ph}"]
    args: list[object] = [q.start_ns]
    if q.end_ns:
        where.append(f"capture_ns < {ph}")
        args.append(q.end_ns)
    for column, value in (
        ("camera_id", q.camera_id),
        ("label", q.label),
        ("zone", q.zone),
        ("line", q.line),
        ("rule", q.rule),
        ("track_uid", q.track_uid),
    ):
        if value:
            where.append(f"{column} = {ph}")
            args.append(value)
    if q.track_id:
        where.append(f"track_id = {ph}")
        args.append(_signed(q.track_id))
    if q.types:
        where.append(f"type IN ({', '.join([ph] * len(q.types))})")
        args += [int(t) for t in q.types]
    if q.identity_id:
        where.append(
            "(camera_id, track_uid) IN (SELECT camera_id, track_uid FROM track_appearance "
            f"WHERE identity_id = {ph})"
        )
        args.append(_signed(q.identity_id))
    return where, args


def page(
    rows: list[tuple[Any, ...]], limit: int
) -> tuple[list[events_pb2.StoredTrackEvent], TrackPageKey | None]:
    """The events of query_sql's rows, and the key of the next page (None: this is the last)."""
    more = len(rows) > limit
    rows = rows[:limit]
    events = [stored_from_row(r) for r in rows]
    key = None
    if more:
        last = rows[-1]
        key = TrackPageKey(int(last[-2]), int(last[-1]), int(last[0]))
    return events, key
