"""What a QueryTrackEvents / WatchTrackEvents caller asks for, and the names of track events.

A track event's type travels as an enum and is written in idempotency keys, metrics and the
CLI by its short lower-case name (`TRACK_EVENT_TYPE_LINE_CROSSED` -> `line_crossed`, as in
docs/events.md). A track's uid is `"<first_seen_ns>-<track_id>"`: its first-seen time is what
tells the crops of this track from those of an earlier track that had the same tracker id.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from strata.shared.contracts import events_pb2

_PREFIX = "TRACK_EVENT_TYPE_"
# Known types by short name (`new`, `line_crossed`, ...), UNSPECIFIED left out.
TYPES: dict[str, int] = {
    name.removeprefix(_PREFIX).lower(): value
    for name, value in events_pb2.TrackEventType.items()
    if value != events_pb2.TRACK_EVENT_TYPE_UNSPECIFIED
}
_NAMES = {v: k for k, v in TYPES.items()}


def type_name(value: int) -> str:
    """The short name of a type (`line_crossed`); `unknown` for UNSPECIFIED or a newer one."""
    return _NAMES.get(value, "unknown")


def parse_type(text: str) -> int:
    """A type from its short or full name, any case; ValueError naming the known ones."""
    key = text.strip().lower().removeprefix(_PREFIX.lower())
    try:
        return TYPES[key]
    except KeyError:
        raise ValueError(f"unknown track event type {text!r}; known: {', '.join(TYPES)}") from None


def parse_track_uid(uid: str) -> tuple[int, int]:
    """(first_seen_ns, track_id) of a `"<first_seen_ns>-<track_id>"` uid; ValueError if not one."""
    first, sep, track = uid.partition("-")
    if not sep or not first.isdigit() or not track.isdigit():
        raise ValueError(f"track_uid {uid!r} is not '<first_seen_ns>-<track_id>'")
    return int(first), int(track)


def idempotency_key(ev: events_pb2.TrackEvent) -> str:
    """The key the contract gives an event: camera/track_uid/track_sequence/type."""
    return f"{ev.camera_id}/{ev.track_uid}/{ev.track_sequence}/{type_name(ev.type)}"


@dataclass(frozen=True, slots=True)
class TrackQuery:
    """A QueryTrackEvents / WatchTrackEvents filter; empty, zero and () mean any.

    `label` is the edge's label of the track (`after.label`); `zone`, `line` and `rule` match
    the event's own fields (rule events), not the zones a lifecycle event's track is in.
    Times bound the capture time (watches have none).
    """

    camera_id: str = ""
    label: str = ""
    start_ns: int = 0
    end_ns: int = 0
    types: tuple[int, ...] = ()
    zone: str = ""
    line: str = ""
    rule: str = ""
    track_id: int = 0
    track_uid: str = ""
    # The tracks of one cross-camera identity (issue 42); 0: any. Queries only: a watch
    # cannot know it yet (the linker assigns it after the events are stored).
    identity_id: int = 0

    def matches(self, stored: events_pb2.StoredTrackEvent) -> bool:
        """Whether a stored event passes this filter (the watch's test; SQL does the query's)."""
        ev = stored.event
        return (
            (not self.camera_id or ev.camera_id == self.camera_id)
            and (not self.label or ev.after.label == self.label)
            and ev.capture_ns >= self.start_ns
            and (not self.end_ns or ev.capture_ns < self.end_ns)
            and (not self.types or ev.type in self.types)
            and (not self.zone or ev.zone == self.zone)
            and (not self.line or ev.line == self.line)
            and (not self.rule or ev.rule == self.rule)
            and (not self.track_id or ev.track_id == self.track_id)
            and (not self.track_uid or ev.track_uid == self.track_uid)
            and (not self.identity_id or ev.identity_id == self.identity_id)
        )


@dataclass(frozen=True, slots=True)
class TrackPageKey:
    """Where a page of track events ends: they are ordered by (capture_ns, sequence, stored_id),
    so one camera's events come in the order its edge emitted them."""

    time_ns: int
    sequence: int
    stored_id: int

    def token(self) -> str:
        """The opaque page token for this position."""
        raw = f"t1:{self.time_ns}:{self.sequence}:{self.stored_id}"
        return base64.urlsafe_b64encode(raw.encode()).decode()

    @classmethod
    def parse(cls, token: str) -> TrackPageKey:
        """Decode a token; ValueError when it is not one of ours."""
        try:
            tag, t, s, i = base64.urlsafe_b64decode(token.encode()).decode().split(":")
            if tag != "t1":
                raise ValueError(tag)
            return cls(int(t), int(s), int(i))
        except Exception as exc:
            raise ValueError(f"malformed page_token {token!r}") from exc
