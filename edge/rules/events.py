"""Rule results and how they become `TrackEvent` protobufs (protos/strata/v1/events.proto).

The engine records what fired as `Fired` (cheap, checkpointable); protobufs are built only
for events that go out. docs/events.md tells the contract.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.shared.contracts import current_version, events_pb2

T = events_pb2.TrackEventType
NEW = events_pb2.TRACK_EVENT_TYPE_NEW
UPDATE = events_pb2.TRACK_EVENT_TYPE_UPDATE
END = events_pb2.TRACK_EVENT_TYPE_END
LINE_CROSSED = events_pb2.TRACK_EVENT_TYPE_LINE_CROSSED
ZONE_ENTERED = events_pb2.TRACK_EVENT_TYPE_ZONE_ENTERED
ZONE_LEFT = events_pb2.TRACK_EVENT_TYPE_ZONE_LEFT
DWELL_EXCEEDED = events_pb2.TRACK_EVENT_TYPE_DWELL_EXCEEDED
STATIONARY = events_pb2.TRACK_EVENT_TYPE_STATIONARY
ACTIVE = events_pb2.TRACK_EVENT_TYPE_ACTIVE
IN = events_pb2.CROSSING_DIRECTION_IN
OUT = events_pb2.CROSSING_DIRECTION_OUT

_PREFIX = "TRACK_EVENT_TYPE_"


def type_name(kind: int) -> str:
    """`TRACK_EVENT_TYPE_LINE_CROSSED` -> "line_crossed" (keys, metrics, Frigate's JSON)."""
    return events_pb2.TrackEventType.Name(kind).removeprefix(_PREFIX).lower()  # type: ignore[arg-type]


def direction_name(direction: int) -> str:
    """CROSSING_DIRECTION_IN -> "in"."""
    return "in" if direction == IN else "out" if direction == OUT else ""


def track_uid(first_seen_ns: int, track_id: int) -> str:
    """Unique per camera forever, whichever edge runs it: "<first_seen_ns>-<track_id>"."""
    return f"{first_seen_ns}-{track_id}"


def idempotency_key(camera_id: str, uid: str, track_sequence: int, kind: int) -> str:
    """ "<camera_id>/<track_uid>/<track_sequence>/<type>": no edge in it (docs/events.md)."""
    return f"{camera_id}/{uid}/{track_sequence}/{type_name(kind)}"


@dataclass(frozen=True, slots=True)
class Fired:
    """One rule result of one track, before it becomes an event.

    `positions` / `observed_positions`: the positions it rests on and how many of them a
    detection gave (a crossing: the two ends of the step; a zone change: its inertia run).
    """

    kind: int
    rule: str = ""
    zone: str = ""
    line: str = ""
    direction: int = 0
    dwell_s: float = 0.0
    positions: int = 1
    observed_positions: int = 1
    # Capture time of the position that decided it (a crossing's far end).
    at_ns: int = 0

    def to_json(self) -> list[object]:
        """Compact JSON-able form (the checkpoint)."""
        return [
            self.kind,
            self.rule,
            self.zone,
            self.line,
            self.direction,
            self.dwell_s,
            self.positions,
            self.observed_positions,
            self.at_ns,
        ]

    @classmethod
    def from_json(cls, v: list[object]) -> Fired:
        """Inverse of to_json; ValueError on a malformed entry."""
        if not isinstance(v, list) or len(v) != 9:
            raise ValueError(f"bad rule result in checkpoint: {v!r}")
        k, rule, zone, line, d, dwell, pos, obs, at = v
        return cls(
            int(k),  # type: ignore[call-overload]
            str(rule),
            str(zone),
            str(line),
            int(d),  # type: ignore[call-overload]
            float(dwell),  # type: ignore[arg-type]
            int(pos),  # type: ignore[call-overload]
            int(obs),  # type: ignore[call-overload]
            int(at),  # type: ignore[call-overload]
        )


@dataclass(frozen=True, slots=True)
class EventHeader:
    """What every event of one emission shares: who, when, on which frame."""

    camera_id: str
    edge_id: str
    capture_ns: int
    frame_size: tuple[int, int]


def build_event(
    head: EventHeader,
    fired: Fired,
    ids: tuple[int, str, int, int],
    states: tuple[events_pb2.TrackState | None, events_pb2.TrackState],
    path: events_pb2.TrackPath,
) -> events_pb2.TrackEvent:
    """A TrackEvent; `ids` = (track id, track uid, camera sequence, track sequence)."""
    track_id, uid, sequence, track_seq = ids
    before, after = states
    ev = events_pb2.TrackEvent(
        version=current_version(),
        idempotency_key=idempotency_key(head.camera_id, uid, track_seq, fired.kind),
        type=fired.kind,  # type: ignore[arg-type]
        camera_id=head.camera_id,
        track_id=track_id,
        track_uid=uid,
        sequence=sequence,
        track_sequence=track_seq,
        capture_ns=head.capture_ns,
        edge_id=head.edge_id,
        frame_width=head.frame_size[0],
        frame_height=head.frame_size[1],
        after=after,
        rule=fired.rule,
        zone=fired.zone,
        line=fired.line,
        direction=fired.direction,  # type: ignore[arg-type]
        dwell_s=fired.dwell_s,
        observed=fired.observed_positions >= fired.positions,
        positions=fired.positions,
        observed_positions=fired.observed_positions,
        path=path,
    )
    if before is not None:
        ev.before.CopyFrom(before)
    return ev
