"""Events as table rows: the column list, row <-> Event, and the QueryEvents SQL, which every
SQL back end shares (only the placeholder differs)."""

from __future__ import annotations

import time
from typing import Any

from strata.shared.contracts import analytics_pb2

from .event_store import EventQuery, PageKey
from .track_filter import parse_track_uid

# `label` and `score` are the classifier's evidence (its top label); `detector_label` is the
# object's label (the edge detector's), what label filters match; NULL for events stored
# before schema 7, whose filters keep matching `label`.
COLUMNS = (
    "event_id, edge_id, crop_id, camera_id, sequence, capture_ns, stored_ns, label, score, "
    "detection, track_id, model_version, verdict, model, support, detector_label"
)
INSERT_COLUMNS = (
    "edge_id, crop_id, camera_id, sequence, capture_ns, time_ns, stored_ns, label, score, "
    "detection, track_id, model_version, verdict, model, support, detector_label"
)
# Schema 7 (both back ends): the second opinion beside the classifier's evidence.
MIGRATION_7 = (
    "ALTER TABLE events ADD COLUMN verdict INTEGER",
    "ALTER TABLE events ADD COLUMN model TEXT",
    "ALTER TABLE events ADD COLUMN support REAL",
    "ALTER TABLE events ADD COLUMN detector_label TEXT",
    "CREATE INDEX events_detector_label_time ON events (detector_label, time_ns, event_id)",
)


def label_filter(ph: str) -> str:
    """The WHERE term of a label filter (two arguments, both the label): the detector's
    label, or the classifier's for events stored before schema 7."""
    return f"(detector_label = {ph} OR (detector_label IS NULL AND label = {ph}))"


def object_label(ev: analytics_pb2.Event) -> str:
    """The object's label: the edge detector's (the classifier's for an event without one)."""
    return ev.edge_detection.label or ev.label


def placeholders(ph: str) -> str:
    """The VALUES list of an insert of INSERT_COLUMNS with placeholder `ph`."""
    return ", ".join([ph] * len(INSERT_COLUMNS.split(",")))


_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


def _signed(u: int) -> int:
    # uint64 sequences go into signed 64-bit columns bit for bit.
    return u - _U64 if u > _I64_MAX else u


def _unsigned(i: int) -> int:
    return i + _U64 if i < 0 else i


def event_from_row(row: tuple[Any, ...]) -> analytics_pb2.Event:
    """An Event from a row of COLUMNS."""
    (
        event_id,
        edge_id,
        crop_id,
        camera_id,
        seq,
        capture_ns,
        stored_ns,
        label,
        score,
        det,
        track,
        version,
        verdict,
        model,
        support,
        _detector_label,  # edge_detection.label, as a column for filters
    ) = row
    ev = analytics_pb2.Event(
        event_id=int(event_id),
        edge_id=str(edge_id),
        crop_id=str(crop_id),
        camera_id=str(camera_id),
        sequence=_unsigned(int(seq)),
        capture_ns=int(capture_ns),
        stored_ns=int(stored_ns),
        label=str(label),
        score=float(score),
        track_id=_unsigned(int(track)),
    )
    if det:
        ev.edge_detection.ParseFromString(bytes(det))
    if version is not None:  # NULL: stored before the classifier's version was recorded
        ev.model_version = int(version)
    if verdict is not None:  # NULL: stored before verdicts were (schema 7)
        ev.verdict = int(verdict)  # type: ignore[assignment]
        ev.model = str(model or "")
        ev.support = float(support or 0.0)
    return ev


def insert_row(ev: analytics_pb2.Event) -> tuple[Any, ...]:
    """The values of INSERT_COLUMNS for a new event; stored now, timed by capture if known."""
    stored_ns = time.time_ns()
    return (
        ev.edge_id,
        ev.crop_id,
        ev.camera_id,
        _signed(ev.sequence),
        ev.capture_ns,
        ev.capture_ns or stored_ns,
        stored_ns,
        ev.label,
        ev.score,
        ev.edge_detection.SerializeToString() if ev.HasField("edge_detection") else b"",
        _signed(ev.track_id),
        ev.model_version if ev.HasField("model_version") else None,
        int(ev.verdict),
        ev.model,
        ev.support,
        object_label(ev),
    )


def stored_event(
    ev: analytics_pb2.Event, event_id: int, row: tuple[Any, ...]
) -> analytics_pb2.Event:
    """The event as stored: its new id and the stored_ns of its insert_row."""
    out = analytics_pb2.Event()
    out.CopyFrom(ev)
    out.event_id = event_id
    out.stored_ns = int(row[6])
    return out


def query_sql(
    q: EventQuery, after: PageKey | None, limit: int, ph: str
) -> tuple[str, list[object]]:
    """SELECT of one page plus one row (to know whether more follow); `ph` is the placeholder.

    Rows are COLUMNS, the track's event count (1 ungrouped), then time_ns, in (time_ns,
    event_id) order.
    """
    where = [f"time_ns >= {ph}"]
    args: list[object] = [q.start_ns]
    if q.end_ns:
        where.append(f"time_ns < {ph}")
        args.append(q.end_ns)
    if q.camera_id:
        where.append(f"camera_id = {ph}")
        args.append(q.camera_id)
    if q.label:
        where.append(label_filter(ph))
        args += [q.label, q.label]
    if q.track_id:
        where.append(f"track_id = {ph}")
        args.append(_signed(q.track_id))
    if q.track_uid:
        # That track's crops: its tracker id, from its first-seen time until a later track
        # of the same camera reused the id.
        first_seen, track_id = parse_track_uid(q.track_uid)
        where.append(
            f"track_id = {ph} AND time_ns >= {ph} AND time_ns < COALESCE((SELECT "
            "MIN(n.first_seen_ns) FROM track_events n WHERE n.camera_id = events.camera_id "
            f"AND n.track_id = events.track_id AND n.first_seen_ns > {ph}), {_I64_MAX})"
        )
        args += [_signed(track_id), first_seen, first_seen]
    page_after: list[str] = []
    page_args: list[object] = []
    if after is not None:
        page_after = [f"(time_ns, event_id) > ({ph}, {ph})"]
        page_args = [after.time_ns, after.event_id]
    if not q.group_by_track:
        where += page_after
        args += page_args
        args.append(limit + 1)
        sql = (
            f"SELECT {COLUMNS}, 1, time_ns FROM events WHERE {' AND '.join(where)} "
            f"ORDER BY time_ns, event_id LIMIT {ph}"
        )
        return sql, args
    # Grouped: each tracked object's latest event in range, with how many it has; an
    # untracked event (track_id 0) is its own group. Pages go by the chosen rows' order.
    grouped = (
        f"SELECT {COLUMNS}, time_ns, "
        "CASE WHEN track_id = 0 THEN 1 ELSE COUNT(*) OVER w END AS n, "
        "CASE WHEN track_id = 0 THEN 1 ELSE ROW_NUMBER() OVER "
        "(PARTITION BY edge_id, camera_id, track_id ORDER BY time_ns DESC, event_id DESC) "
        f"END AS rn FROM events WHERE {' AND '.join(where)} "
        "WINDOW w AS (PARTITION BY edge_id, camera_id, track_id)"
    )
    outer = ["rn = 1", *page_after]
    args += page_args
    args.append(limit + 1)
    sql = (
        f"SELECT {COLUMNS}, n, time_ns FROM ({grouped}) AS g WHERE {' AND '.join(outer)} "
        f"ORDER BY time_ns, event_id LIMIT {ph}"
    )
    return sql, args


def page(
    rows: list[tuple[Any, ...]], limit: int, grouped: bool = False
) -> tuple[list[analytics_pb2.Event], PageKey | None]:
    """The events of query_sql's rows, and the key of the next page (None: this is the last)."""
    more = len(rows) > limit
    rows = rows[:limit]
    events = [event_from_row(r[:-2]) for r in rows]
    if grouped:
        for ev, r in zip(events, rows, strict=True):
            if ev.track_id:
                ev.track_events = int(r[-2])
    key = PageKey(int(rows[-1][-1]), int(rows[-1][0])) if more else None
    return events, key
