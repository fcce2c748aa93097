"""What pages and JSON show: rows, tracks and counts turned into display records.

Plain values only (strings, numbers, lists), so the same record feeds a template (which
escapes every one of them), the JSON API and the live stream.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from strata.shared.config.rules import CameraRules
from strata.shared.contracts import analytics_pb2, events_pb2

from ..classify.verdicts import event_verdict, track_verdict
from ..store.event_rows import object_label
from ..store.track_filter import parse_track_uid, type_name
from .queries import CROP, SNAPSHOT_KINDS, CountRows, Row

_DIRECTIONS = {
    events_pb2.CROSSING_DIRECTION_IN: "in",
    events_pb2.CROSSING_DIRECTION_OUT: "out",
}


def iso(ns: int) -> str:
    """A nanosecond Unix time as ISO 8601 UTC with milliseconds ('' for 0)."""
    if not ns:
        return ""
    t = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def snapshot_url(camera: str, uid: str, kind: str) -> str:
    """Where a track's snapshot image is served."""
    return "/api/snapshot?" + urlencode({"camera": camera, "uid": uid, "kind": kind})


def clip_url(camera: str, uid: str) -> str:
    """Where a track's event clip is served (video/mp4, ranges)."""
    return "/api/clip?" + urlencode({"camera": camera, "uid": uid})


def track_url(camera: str, uid: str, at_ns: int = 0) -> str:
    """The detail page of a track; with `at_ns`, of its event captured then (the clip
    player starts there)."""
    query: dict[str, str | int] = {"camera": camera, "uid": uid}
    if at_ns:
        query["at"] = at_ns
    return "/track?" + urlencode(query)


@dataclass(frozen=True, slots=True)
class EventView:
    """One line of the events list (a classified crop or a track event)."""

    kind: str  # "crop" or "track"
    id: int
    type: str  # "crop" or the track event's type (`line_crossed`)
    camera: str
    label: str  # the edge detector's
    # The cloud's second opinion on `label`, with its evidence: "confirmed (minivan 0.81)"
    # (score None); for a crop stored before verdicts were, the classifier's label and score.
    verdict: str
    score: float | None
    zones: list[str]
    rules: list[str]
    time_ns: int
    time: str
    duration_s: float | None
    thumb: str
    url: str
    track_uid: str
    edge_id: str
    stored_ns: int

    def as_json(self) -> dict[str, Any]:
        """The record as the API returns it."""
        return {f: getattr(self, f) for f in self.__slots__}


def _thumb(camera: str, uid: str, kinds: set[int]) -> str:
    for name in ("crop", "frame"):
        if SNAPSHOT_KINDS[name] in kinds:
            return snapshot_url(camera, uid, name)
    return ""


def crop_view(ev: analytics_pb2.Event, uid: str, time_ns: int, kinds: set[int]) -> EventView:
    """A classified crop as a list line."""
    info = event_verdict(ev)
    return EventView(
        kind="crop",
        id=ev.event_id,
        type="crop",
        camera=ev.camera_id,
        label=object_label(ev),
        verdict=info.text if info is not None else ev.label,
        score=None if info is not None else round(ev.score, 4),
        zones=[],
        rules=[],
        time_ns=time_ns,
        time=iso(time_ns),
        duration_s=None,
        thumb=_thumb(ev.camera_id, uid, kinds),
        url=track_url(ev.camera_id, uid, time_ns) if uid else f"/crop?id={ev.event_id}",
        track_uid=uid,
        edge_id=ev.edge_id,
        stored_ns=ev.stored_ns,
    )


def verdict_text(ev: events_pb2.TrackEvent) -> tuple[str, float | None]:
    """The track's verdict as shown, and the score shown beside it (see EventView.verdict)."""
    info = track_verdict(ev)
    if info is not None:
        return info.text, None
    if ev.HasField("verdict"):
        return ev.verdict.label, round(ev.verdict.score, 4)
    return "", None


def rules_hit(ev: events_pb2.TrackEvent) -> list[str]:
    """The rule and line a rule event concerns, a crossing with its direction."""
    out = []
    if ev.rule:
        out.append(ev.rule)
    if ev.line:
        d = _DIRECTIONS.get(ev.direction, "")
        out.append(f"line {ev.line} {d}".strip())
    return out


def duration_s(ev: events_pb2.TrackEvent) -> float | None:
    """How long the track had lived at this event (its whole life for an end event)."""
    a = ev.after
    if a.end_time and a.start_time:
        return round(a.end_time - a.start_time, 3)
    try:
        first, _ = parse_track_uid(ev.track_uid)
    except ValueError:
        return None
    return round(max(0, ev.capture_ns - first) / 1e9, 3)


def track_view(stored: events_pb2.StoredTrackEvent, kinds: set[int]) -> EventView:
    """A stored track event as a list line."""
    ev = stored.event
    verdict, score = verdict_text(ev)
    zones = [ev.zone] if ev.zone else list(ev.after.current_zones)
    return EventView(
        kind="track",
        id=stored.stored_id,
        type=type_name(ev.type),
        camera=ev.camera_id,
        label=ev.after.label,
        verdict=verdict,
        score=score,
        zones=zones,
        rules=rules_hit(ev),
        time_ns=ev.capture_ns,
        time=iso(ev.capture_ns),
        duration_s=duration_s(ev),
        thumb=_thumb(ev.camera_id, ev.track_uid, kinds),
        url=track_url(ev.camera_id, ev.track_uid, ev.capture_ns),
        track_uid=ev.track_uid,
        edge_id=ev.edge_id,
        stored_ns=stored.stored_ns,
    )


def row_view(row: Row, snapshots: dict[tuple[str, str], set[int]]) -> EventView:
    """A list row as a line, with the snapshot kinds its track has."""
    kinds = snapshots.get((row.camera, row.track_uid), set())
    if row.kind == CROP:
        assert row.crop is not None
        return crop_view(row.crop, row.track_uid, row.time_ns, kinds)
    assert row.track is not None
    return track_view(row.track, kinds)


# the detail page


@dataclass(frozen=True, slots=True)
class Shape:
    """A rule's geometry in frame pixels, for the SVG."""

    name: str
    points: str  # "x,y x,y ..." for an SVG polygon or polyline


@dataclass(frozen=True, slots=True)
class Box:
    """A box in frame pixels."""

    x: float
    y: float
    w: float
    h: float


@dataclass(frozen=True, slots=True)
class Drawing:
    """What the detail page draws: the frame (snapshot or blank), the track's path and box,
    and the camera's zones and lines from the config."""

    width: int
    height: int
    background: str  # a snapshot URL, or '' for a blank frame
    path: str  # "x,y x,y ..." in pixels, oldest first
    path_points: int
    box: Box | None
    zones: list[Shape] = field(default_factory=list)
    lines: list[Shape] = field(default_factory=list)
    last: tuple[float, float] | None = None  # the path's latest position


def _points(pts: list[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)


def rule_shapes(rules: CameraRules | None, w: int, h: int) -> tuple[list[Shape], list[Shape]]:
    """A camera's zones and lines in pixels of a w x h frame."""
    if rules is None:
        return [], []
    sx, sy = (w / rules.frame_size[0], h / rules.frame_size[1]) if rules.frame_size else (w, h)

    def scaled(points: list[tuple[float, float]]) -> str:
        return _points([(x * sx, y * sy) for x, y in points])

    zones = [Shape(z.name, scaled(z.points)) for z in rules.zones]
    lines = [Shape(ln.name, scaled(ln.points)) for ln in rules.lines]
    return zones, lines


def drawing(
    events: list[events_pb2.StoredTrackEvent], rules: CameraRules | None, background: str
) -> Drawing:
    """The detail drawing of a track from its stored events (the longest path wins)."""
    last = events[-1].event
    w, h = int(last.frame_width) or 640, int(last.frame_height) or 480
    best = max(events, key=lambda s: (len(s.event.path.points), s.event.capture_ns)).event
    pts = [(p.x * w, p.y * h) for p in best.path.points]
    path = _points(pts)
    b = last.after.box
    box = Box(b.x1, b.y1, b.x2 - b.x1, b.y2 - b.y1) if b.x2 > b.x1 and b.y2 > b.y1 else None
    zones, lines = rule_shapes(rules, w, h)
    last_pt = (round(pts[-1][0], 1), round(pts[-1][1], 1)) if pts else None
    return Drawing(w, h, background, path, len(pts), box, zones, lines, last=last_pt)


@dataclass(frozen=True, slots=True)
class Timing:
    """A stored item's way from capture to storage, in milliseconds."""

    what: str
    capture: str
    stored: str
    capture_to_store_ms: float | None


def timing(what: str, capture_ns: int, stored_ns: int) -> Timing:
    """The timing of one stored item."""
    ms = round((stored_ns - capture_ns) / 1e6, 1) if capture_ns and stored_ns else None
    return Timing(what, iso(capture_ns), iso(stored_ns), ms)


# counts

PERIODS = ("hour", "today", "day", "week")
_MINUTE = 60 * 10**9
_HOUR = 3600 * 10**9
_DAY = 24 * _HOUR


def window(period: str, now_ns: int) -> tuple[int, int, int]:
    """(start_ns, end_ns, bucket_ns) of a period: the last hour (per minute), today (UTC,
    hourly), the last day (hourly) or the last week (daily)."""
    if period == "hour":
        end = now_ns - now_ns % _MINUTE + _MINUTE
        return end - _HOUR, end, _MINUTE
    if period == "today":
        start = now_ns - now_ns % _DAY
        return start, start + _DAY, _HOUR
    if period == "day":
        end = now_ns - now_ns % _HOUR + _HOUR
        return end - _DAY, end, _HOUR
    if period == "week":
        end = now_ns - now_ns % _DAY + _DAY
        return end - 7 * _DAY, end, _DAY
    raise ValueError(f"unknown period {period!r}; known: {', '.join(PERIODS)}")


@dataclass(frozen=True, slots=True)
class Bar:
    """One bucket of a chart that counted something: a bar in a CHART_W x CHART_H box."""

    x: float
    y: float
    w: float
    h: float
    count: int
    title: str  # the bucket's start and its count, shown on hover


@dataclass(frozen=True, slots=True)
class Series:
    """Counts of one (camera, what, name, direction, label) per bucket, and its chart."""

    camera: str
    what: str  # objects, zone, line
    name: str
    direction: str
    label: str
    counts: list[int]
    total: int
    chart: list[Bar]  # the buckets that counted something
    peak: int  # the largest bucket, the chart's full height

    def as_json(self) -> dict[str, Any]:
        """The record as the API returns it (without the chart)."""
        return {f: getattr(self, f) for f in self.__slots__ if f != "chart"}


CHART_W, CHART_H = 360, 48


def _chart(counts: list[int], start_ns: int, bucket_ns: int) -> list[Bar]:
    top = max(counts) or 1
    step = CHART_W / max(1, len(counts))
    return [
        Bar(
            x=round(i * step + step * 0.1, 1),
            y=round(CHART_H - c * CHART_H / top, 1),
            w=round(step * 0.8, 1),
            h=round(c * CHART_H / top, 1),
            count=c,
            title=f"{iso(start_ns + i * bucket_ns)}: {c}",
        )
        for i, c in enumerate(counts)
        if c
    ]


def series(rows: CountRows, start_ns: int, bucket_ns: int, buckets: int) -> list[Series]:
    """The counts of counts() as one series per key, sorted by camera, what, name, label."""
    acc: dict[tuple[str, str, str, str, str], list[int]] = {}

    def add(key: tuple[str, str, str, str, str], bucket: int, n: int) -> None:
        if 0 <= bucket < buckets:
            acc.setdefault(key, [0] * buckets)[bucket] += n

    for cam, _zone, label, b, n in rows.objects:
        add((str(cam), "objects", "", "", str(label)), int(b), int(n))
    for cam, zone, label, b, n in rows.zones:
        add((str(cam), "zone", str(zone), "", str(label)), int(b), int(n))
    ev = events_pb2.TrackEvent()
    for cam, line, label, capture_ns, body in rows.crossings:
        ev.ParseFromString(bytes(body))
        d = _DIRECTIONS.get(ev.direction, "")
        add(
            (str(cam), "line", str(line), d, str(label)),
            (int(capture_ns) - start_ns) // bucket_ns,
            1,
        )
    return [
        Series(*key, counts=c, total=sum(c), chart=_chart(c, start_ns, bucket_ns), peak=max(c))
        for key, c in sorted(acc.items())
    ]
