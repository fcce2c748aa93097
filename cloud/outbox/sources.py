"""Where the outbox reads events: a table of the store's database, its rows as OutboxEvents.

A source names its table and columns; the ledger (ledger.py) writes the SQL around them, so
adding a table is adding a `TableSource`, never another copy of the delivery logic. Each
source keeps its own positions (its ids are its own), so a camera's classified crops and
its track events are each delivered in their own commit order.

`CROPS`: the classified-crop `Event` rows of the `events` table; `TRACK_EVENTS`: the track
lifecycle and rule events (issue 21) of the `track_events` table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strata.shared.contracts import events_pb2

from ..classify.verdicts import event_verdict, track_verdict
from ..store.event_rows import COLUMNS, event_from_row, object_label
from ..store.track_filter import type_name
from ..store.track_rows import stored_from_row
from .events import ObjectState, OutboxEvent


@dataclass(frozen=True, slots=True)
class TableSource:
    """One table the outbox delivers from. Queries read it as `FROM <table> AS e`."""

    # Key of this source's positions in the outbox tables (never rename a live one).
    name: str
    table: str
    # Row id: increasing in commit order (one writer per replica; gaps.py covers several).
    id_column: str
    camera_column: str
    # Wall-clock ns when the row was stored (the oldest undelivered event's age).
    stored_ns_column: str
    # SELECT list decode() reads; may refer to the row as `e`.
    columns: str
    decode: Callable[[tuple[Any, ...]], OutboxEvent]


def _secs(ns: int) -> float:
    return ns / 1e9


def crop_event(row: tuple[Any, ...]) -> OutboxEvent:
    """A classified crop as an event: `new` for a track's first crop, `update` after."""
    ev = event_from_row(row[:-1])
    earlier = bool(row[-1])
    det = ev.edge_detection
    tracked = ev.track_id != 0
    obj_id = f"{ev.edge_id}/{ev.track_id}" if tracked else f"{ev.edge_id}/{ev.crop_id}"
    box = None
    if ev.HasField("edge_detection") and det.HasField("box"):
        box = (det.box.x1, det.box.y1, det.box.x2, det.box.y2)
    t = _secs(ev.capture_ns or ev.stored_ns)
    verdict = event_verdict(ev)
    after = ObjectState(
        id=obj_id,
        camera=ev.camera_id,
        # The detector's label and score; the cloud's verdict beside them, never instead.
        label=object_label(ev),
        score=det.score if det.label else ev.score,
        top_score=det.score if det.label else ev.score,
        box=box,
        start_time=t,
        frame_time=t,
        sub_label=verdict.sub_label if verdict is not None else None,
        verdict=verdict,
    )
    extra: list[tuple[str, str | int | float | bool]] = [
        ("source", "crop"),
        ("event_id", ev.event_id),
        ("crop_id", ev.crop_id),
        ("sequence", ev.sequence),
        ("track_id", ev.track_id),
        ("edge_score", det.score),
        ("cloud_label", ev.label),
        ("cloud_score", ev.score),
    ]
    if ev.HasField("model_version"):
        extra.append(("model_version", ev.model_version))
    return OutboxEvent(
        source="crops",
        stored_id=ev.event_id,
        stored_ns=ev.stored_ns,
        capture_ns=ev.capture_ns,
        # What identifies a stored crop: the store keeps (edge, crop id) once.
        key=f"{ev.edge_id}/{ev.camera_id}/{ev.track_id}/crop/{ev.crop_id}",
        type="update" if earlier else "new",
        camera_id=ev.camera_id,
        edge_id=ev.edge_id,
        after=after,
        track=obj_id if tracked else "",
        extra=tuple(extra),
    )


# Whether the same track had a crop stored before this one (the events_track index).
_EARLIER = (
    "CASE WHEN e.track_id <> 0 AND EXISTS (SELECT 1 FROM events p WHERE "
    "p.edge_id = e.edge_id AND p.camera_id = e.camera_id AND p.track_id = e.track_id "
    "AND p.event_id < e.event_id) THEN 1 ELSE 0 END"
)

CROPS = TableSource(
    name="crops",
    table="events",
    id_column="event_id",
    camera_column="camera_id",
    stored_ns_column="stored_ns",
    columns=", ".join(f"e.{c.strip()}" for c in COLUMNS.split(",")) + f", {_EARLIER}",
    decode=crop_event,
)


def _state(
    ev: events_pb2.TrackEvent, s: events_pb2.TrackState, has_snapshot: bool = False
) -> ObjectState:
    box = (s.box.x1, s.box.y1, s.box.x2, s.box.y2) if s.HasField("box") else None
    verdict = track_verdict(ev)
    return ObjectState(
        id=ev.track_uid,
        camera=ev.camera_id,
        label=s.label,
        score=s.score,
        top_score=s.top_score,
        box=box,
        current_zones=tuple(s.current_zones),
        entered_zones=tuple(s.entered_zones),
        stationary=s.stationary,
        start_time=s.start_time,
        end_time=s.end_time or None,
        frame_time=s.frame_time,
        sub_label=verdict.sub_label if verdict is not None else None,
        verdict=verdict,
        has_snapshot=has_snapshot,
    )


_DIRECTIONS = {events_pb2.CROSSING_DIRECTION_IN: "in", events_pb2.CROSSING_DIRECTION_OUT: "out"}


def track_event(row: tuple[Any, ...]) -> OutboxEvent:
    """A track lifecycle or rule event (issue 21) under its own idempotency key."""
    stored = stored_from_row(row)
    ev = stored.event
    extra: list[tuple[str, str | int | float | bool]] = [
        ("source", "track"),
        ("track_id", ev.track_id),
        ("track_uid", ev.track_uid),
        ("sequence", ev.sequence),
        ("track_sequence", ev.track_sequence),
        ("observed", ev.observed),
        ("positions", ev.positions),
        ("observed_positions", ev.observed_positions),
        ("frame_width", ev.frame_width),
        ("frame_height", ev.frame_height),
    ]
    if ev.dwell_s:
        extra.append(("dwell_s", round(float(ev.dwell_s), 3)))
    return OutboxEvent(
        source="track_events",
        stored_id=stored.stored_id,
        stored_ns=stored.stored_ns,
        capture_ns=ev.capture_ns,
        key=ev.idempotency_key,
        type=type_name(ev.type),
        camera_id=ev.camera_id,
        edge_id=ev.edge_id,
        after=_state(ev, ev.after, bool(ev.crop_snapshot_id or ev.frame_snapshot_id)),
        before=_state(ev, ev.before) if ev.HasField("before") else None,
        track=ev.track_uid,
        rule=ev.rule,
        zone=ev.zone,
        line=ev.line,
        direction=_DIRECTIONS.get(ev.direction, ""),
        lifecycle=True,
        snapshot_id=ev.crop_snapshot_id,
        frame_snapshot_id=ev.frame_snapshot_id,
        extra=tuple(extra),
    )


# The verdict is joined on QueryTrackEvents reads; the outbox sends the edge's event as
# stored (no verdict: it comes with the crop's own event) to keep its per-event read one
# indexed lookup.
TRACK_EVENTS = TableSource(
    name="track_events",
    table="track_events",
    id_column="stored_id",
    camera_column="camera_id",
    stored_ns_column="stored_ns",
    columns="e.stored_id, e.stored_ns, e.event",
    decode=track_event,
)

# A new table of events is one more TableSource here: positions are per source.
SOURCES: tuple[TableSource, ...] = (CROPS, TRACK_EVENTS)
