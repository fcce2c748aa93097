"""cloud/event_rows.py: Event <-> row, and the QueryEvents SQL."""

from __future__ import annotations

from strata.cloud.event_rows import (
    COLUMNS,
    INSERT_COLUMNS,
    event_from_row,
    insert_row,
    placeholders,
    query_sql,
    stored_event,
)
from strata.cloud.event_store import EventQuery, PageKey
from strata.shared.contracts import analytics_pb2


def _event(**kw: object) -> analytics_pb2.Event:
    base: dict[str, object] = {
        "edge_id": "e", "crop_id": "c", "camera_id": "cam", "label": "car", "score": 0.75,
    }  # fmt: skip
    return analytics_pb2.Event(**{**base, **kw})  # type: ignore[arg-type]


def test_placeholders_match_the_insert_columns() -> None:
    n = len(INSERT_COLUMNS.split(","))
    assert placeholders("?") == ", ".join(["?"] * n)
    assert placeholders("%s").count("%s") == n


def test_uint64_survives_a_signed_column_both_ways() -> None:
    ev = _event(sequence=2**64 - 1, track_id=2**63, capture_ns=5, model_version=7)
    ev.edge_detection.label = "car"
    row = insert_row(ev)
    assert row[3] == -1 and row[10] == -(2**63)  # bit for bit into int64
    assert row[5] == 5  # timed by capture when known
    stored = stored_event(ev, 42, row)
    assert stored.event_id == 42 and stored.stored_ns == row[6]
    # A row of COLUMNS: event_id first, time_ns not among them.
    back = event_from_row((42, *row[:5], row[6], *row[7:]))
    assert len(COLUMNS.split(",")) == len(row)
    assert back == stored


def test_no_capture_time_means_stored_time_and_null_version() -> None:
    row = insert_row(_event())
    assert row[5] == row[6]  # time_ns falls back to stored_ns
    assert row[9] == b"" and row[11] is None
    back = event_from_row((1, *row[:5], row[6], *row[7:]))
    assert not back.HasField("model_version") and not back.HasField("edge_detection")


def test_query_sql_binds_every_bound_and_reads_one_more_row() -> None:
    q = EventQuery(camera_id="cam", label="car", start_ns=10, end_ns=20)
    sql, args = query_sql(q, PageKey(15, 3), 50, "?")
    assert sql.count("?") == len(args)
    assert args[:4] == [10, 20, "cam", "car"]
    assert 15 in args and 3 in args and args[-1] == 51  # one more: is there a next page?
    open_sql, open_args = query_sql(EventQuery(), None, 5, "%s")
    assert "camera_id = " not in open_sql and open_args[0] == 0 and open_args[-1] == 6
