"""Is a TrackEvent from an edge fit to store? One reason code and a sentence when it is not.

An INVALID ack is final (the edge drops the event), so only what the contract requires is
checked: what the store's columns, the idempotency key and the verdict's track need.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from google.protobuf.message import Message
from strata.shared.contracts import ProtocolVersionError, check_version, events_pb2

from ..store.track_filter import TYPES, idempotency_key, parse_track_uid

_ZONE_TYPES = frozenset(
    (
        events_pb2.TRACK_EVENT_TYPE_ZONE_ENTERED,
        events_pb2.TRACK_EVENT_TYPE_ZONE_LEFT,
        events_pb2.TRACK_EVENT_TYPE_DWELL_EXCEEDED,
    )
)
_KNOWN = frozenset(TYPES.values())
# Ids and names land in indexed columns and log lines: bounded.
MAX_TEXT = 256


@dataclass(frozen=True, slots=True)
class Invalid:
    """Why an event is refused: a reason code (metric label) and what to fix."""

    code: str
    detail: str

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


def check_text(
    msg: Message, required: tuple[str, ...], bounded: tuple[str, ...], prefix: str = ""
) -> Invalid | None:
    """The first of the `required` text fields that is empty (no_<field>), else the first of
    the `bounded` ones longer than MAX_TEXT (too_long); None when all are fine. `prefix`
    names where the fields are in the request ("info.")."""
    for field in required:
        if not getattr(msg, field):
            return Invalid(f"no_{field}", f"{prefix}{field} is empty")
    for field in bounded:
        if len(getattr(msg, field)) > MAX_TEXT:
            return Invalid("too_long", f"{prefix}{field} is longer than {MAX_TEXT} characters")
    return None


def check_track_uid(track_uid: str, track_id: int) -> Invalid | None:
    """None when `track_uid` parses and names `track_id`, else bad_track_uid."""
    try:
        _, uid_track = parse_track_uid(track_uid)
    except ValueError as exc:
        return Invalid("bad_track_uid", str(exc))
    if uid_track != track_id:
        return Invalid("bad_track_uid", f"track_uid {track_uid!r} names another track_id")
    return None


def check_appearance(ev: events_pb2.TrackEvent, dim: int) -> Invalid | None:
    """None when the event has no appearance or a well-formed one of `dim` values (0: any),
    else bad_appearance saying what is wrong."""
    if not ev.HasField("appearance"):
        return None
    a = ev.appearance
    if not a.model:
        return Invalid(
            "bad_appearance",
            "appearance.model is empty (embeddings of different models never compare)",
        )
    if len(a.model) > MAX_TEXT:
        return Invalid("bad_appearance", f"appearance.model is longer than {MAX_TEXT} characters")
    if a.dim == 0 or (dim and a.dim != dim):
        want = f"{dim}" if dim else "above 0"
        return Invalid(
            "bad_appearance",
            f"appearance.dim is {a.dim}; this cloud takes {want} values (cloud.identity.dim; "
            "the edge's appearance model must match)",
        )
    if len(a.float16) != 2 * a.dim:
        return Invalid(
            "bad_appearance",
            f"appearance.float16 is {len(a.float16)} bytes; dim {a.dim} needs {2 * a.dim} "
            "(2 bytes a value)",
        )
    values = np.frombuffer(a.float16, dtype="<f2")
    if not np.isfinite(values).all() or not values.any():
        return Invalid("bad_appearance", "appearance.float16 holds a NaN, an infinity or zeros")
    return None


def check_event(ev: events_pb2.TrackEvent, max_bytes: int, dim: int = 0) -> Invalid | None:
    """None when the event can be stored, else why not (`dim`: the embedding size the cloud
    takes, 0: any)."""
    try:
        check_version(ev.version)
    except ProtocolVersionError as exc:
        return Invalid("protocol_version", f"{exc} (TrackEvent.version)")
    size = ev.ByteSize()
    if size > max_bytes:
        return Invalid("too_large", f"event is {size} bytes; the limit is {max_bytes}")
    keys = ("idempotency_key", "camera_id", "track_uid")
    bad = check_text(ev, keys, (*keys, "edge_id", "rule", "zone", "line"))
    if bad is not None:
        return bad
    if ev.type not in _KNOWN:
        return Invalid("bad_type", f"type {ev.type} is not a known TrackEventType")
    bad = check_track_uid(ev.track_uid, ev.track_id)
    if bad is not None:
        return bad
    if ev.sequence == 0:
        return Invalid("no_sequence", "sequence is 0 (per camera, it starts above 0)")
    if ev.capture_ns <= 0:
        return Invalid("no_capture_ns", "capture_ns is not set")
    if not ev.HasField("after"):
        return Invalid("no_after", "after (the track's state after the event) is not set")
    bad = _rule_fields(ev)
    if bad is not None:
        return bad
    bad = check_appearance(ev, dim)
    if bad is not None:
        return bad
    want = idempotency_key(ev)
    if ev.idempotency_key != want:
        return Invalid(
            "bad_idempotency_key",
            f"key {ev.idempotency_key!r} is not camera/track_uid/track_sequence/type ({want!r})",
        )
    return None


def _rule_fields(ev: events_pb2.TrackEvent) -> Invalid | None:
    """What a rule event must name: its zone, or its line and direction."""
    if ev.type in _ZONE_TYPES and not ev.zone:
        return Invalid("no_zone", "a zone event has no zone")
    if ev.type == events_pb2.TRACK_EVENT_TYPE_LINE_CROSSED:
        if not ev.line:
            return Invalid("no_line", "line_crossed has no line")
        if ev.direction == events_pb2.CROSSING_DIRECTION_UNSPECIFIED:
            return Invalid("no_direction", "line_crossed has no direction")
    return None
