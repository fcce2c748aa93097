"""cloud/api/track_checks.py and cloud/store/track_filter.py: what the cloud requires of a track
event, and the names and filters of track events."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from cloud_helpers import track_event
from strata.cloud.api.track_checks import check_event
from strata.cloud.store.track_filter import (
    TrackPageKey,
    TrackQuery,
    idempotency_key,
    parse_track_uid,
    parse_type,
    type_name,
)
from strata.shared.contracts import common_pb2, events_pb2

E = events_pb2.TrackEvent


def test_a_contract_event_passes() -> None:
    for kind, extra in (
        ("new", {}),
        ("end", {}),
        ("zone_entered", {"zone": "shop"}),
        ("dwell_exceeded", {"zone": "shop", "dwell_s": 3.0}),
        ("line_crossed", {"line": "door", "direction": events_pb2.CROSSING_DIRECTION_OUT}),
        ("stationary", {}),
    ):
        ev = track_event(3, kind=kind, **extra)
        assert check_event(ev, 65536) is None, kind
        assert ev.idempotency_key == f"door/1000-7/3/{kind}"


def _clear(field: str) -> Callable[[E], None]:
    return lambda ev: ev.ClearField(field)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (_clear("version"), "protocol_version"),
        (lambda ev: ev.version.CopyFrom(common_pb2.ProtocolVersion(major=9)), "protocol_version"),
        (_clear("idempotency_key"), "no_idempotency_key"),
        (_clear("camera_id"), "no_camera_id"),
        (_clear("track_uid"), "no_track_uid"),
        (lambda ev: setattr(ev, "track_uid", "seven"), "bad_track_uid"),
        (lambda ev: setattr(ev, "track_uid", "1000-8"), "bad_track_uid"),
        (lambda ev: setattr(ev, "type", 0), "bad_type"),
        (lambda ev: setattr(ev, "type", 99), "bad_type"),
        (_clear("sequence"), "no_sequence"),
        (_clear("capture_ns"), "no_capture_ns"),
        (_clear("after"), "no_after"),
        (lambda ev: setattr(ev, "track_sequence", 4), "bad_idempotency_key"),
        (lambda ev: setattr(ev, "idempotency_key", "door/x"), "bad_idempotency_key"),
        (lambda ev: setattr(ev, "rule", "r" * 300), "too_long"),
        (lambda ev: ev.path.points.add(x=1.0), "too_large"),
    ],
)
def test_a_bad_event_says_why(change: Callable[[E], None], code: str) -> None:
    ev = track_event(3)
    change(ev)
    limit = track_event(3).ByteSize() + 2 if code == "too_large" else 65536
    bad = check_event(ev, limit)
    assert bad is not None and bad.code == code, bad
    assert str(bad).startswith(f"{code}: ")


def test_rule_events_name_their_zone_or_line() -> None:
    zone_left = track_event(3, kind="zone_left")
    assert check_event(zone_left, 65536).code == "no_zone"  # type: ignore[union-attr]
    crossing = track_event(3, kind="line_crossed", direction=events_pb2.CROSSING_DIRECTION_IN)
    assert check_event(crossing, 65536).code == "no_line"  # type: ignore[union-attr]
    crossing = track_event(3, kind="line_crossed", line="door")
    assert check_event(crossing, 65536).code == "no_direction"  # type: ignore[union-attr]


def test_type_names_and_uids() -> None:
    assert type_name(events_pb2.TRACK_EVENT_TYPE_LINE_CROSSED) == "line_crossed"
    assert type_name(0) == type_name(99) == "unknown"
    assert parse_type("TRACK_EVENT_TYPE_DWELL_EXCEEDED") == parse_type(" Dwell_Exceeded ") == 7
    with pytest.raises(ValueError, match="known: new, update, end"):
        parse_type("crossed")
    assert parse_track_uid("1718000000123456789-42") == (1718000000123456789, 42)
    for bad in ("42", "-42", "a-1", "1-", "1-2-3"):
        with pytest.raises(ValueError, match="first_seen_ns"):
            parse_track_uid(bad)
    ev = track_event(2, kind="update")
    assert idempotency_key(ev) == "door/1000-7/2/update"


def test_filter_matches_what_it_names() -> None:
    ev = events_pb2.StoredTrackEvent(
        event=track_event(
            4,
            kind="line_crossed",
            line="entry",
            rule="count",
            direction=events_pb2.CROSSING_DIRECTION_IN,
        )
    )
    assert TrackQuery().matches(ev)
    assert TrackQuery(camera_id="door", types=(4,), line="entry", rule="count").matches(ev)
    assert TrackQuery(track_id=7, track_uid="1000-7", label="person").matches(ev)
    for miss in (
        TrackQuery(camera_id="yard"),
        TrackQuery(types=(1, 3)),
        TrackQuery(zone="entry"),
        TrackQuery(label="car"),
        TrackQuery(track_id=8),
        TrackQuery(start_ns=ev.event.capture_ns + 1),
        TrackQuery(end_ns=ev.event.capture_ns),
    ):
        assert not miss.matches(ev), miss


def test_page_tokens_round_trip_and_refuse_others() -> None:
    key = TrackPageKey(123, -5, 9)
    assert TrackPageKey.parse(key.token()) == key
    for bad in ("", "bm90LW91cnM=", "djE6MTox"):
        with pytest.raises(ValueError, match="malformed page_token"):
            TrackPageKey.parse(bad)
