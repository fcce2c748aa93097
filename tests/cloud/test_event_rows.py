"""cloud/store/event_rows.py: Event <-> row, and the QueryEvents SQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from strata.cloud.metrics import CloudMetrics
from strata.cloud.store.event_rows import (
    COLUMNS,
    INSERT_COLUMNS,
    event_from_row,
    insert_row,
    placeholders,
    query_sql,
    stored_event,
)
from strata.cloud.store.event_store import EventQuery, EventStore, PageKey
from strata.cloud.store.registry import open_store
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import analytics_pb2, common_pb2, events_pb2


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


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    if request.param == "sqlite":
        cfg = CloudStoreConfig(path=str(tmp_path / "e.sqlite"))
    else:  # a real server (tests/cloud/conftest.py starts one; skipped locally without it)
        url = request.getfixturevalue("pg_url")
        cfg = CloudStoreConfig(url=url, write_delay_ms=1.0, connect_timeout_s=5.0)
    s = open_store(cfg, CloudMetrics())
    s.start()
    yield s
    s.close()


def test_the_verdict_round_trips_and_labels_filter_on_the_detectors(store: EventStore) -> None:
    judged = _event(
        crop_id="v",
        capture_ns=10,
        label="minivan",
        score=0.81,
        edge_detection=common_pb2.Detection(label="car", score=0.6),
        model_version=2,
        verdict=events_pb2.VERDICT_CONFIRM,
        model="mobilenetv2_imagenet",
        support=0.86,
    )
    # Stored before verdicts were (schema 6): the classifier's label was the only one.
    legacy = _event(crop_id="old", capture_ns=11, label="car", score=0.9)
    person = _event(
        crop_id="p",
        capture_ns=12,
        label="suit",
        score=0.7,
        edge_detection=common_pb2.Detection(label="person", score=0.8),
        verdict=events_pb2.VERDICT_ABSTAIN,
        model="mobilenetv2_imagenet",
    )
    for ev in (judged, legacy, person):
        store.submit(ev).result(20)
    got, _ = store.query(EventQuery(camera_id="cam"), None, 10)
    by_crop = {e.crop_id: e for e in got}
    back = by_crop["v"]
    assert back.verdict == events_pb2.VERDICT_CONFIRM and back.model == "mobilenetv2_imagenet"
    assert back.support == pytest.approx(0.86) and back.model_version == 2
    assert (back.label, back.edge_detection.label) == ("minivan", "car")
    assert by_crop["p"].verdict == events_pb2.VERDICT_ABSTAIN
    # The legacy row reads without a verdict (NULL columns), as before.
    assert by_crop["old"].verdict == events_pb2.VERDICT_UNSPECIFIED
    cars, _ = store.query(EventQuery(camera_id="cam", label="car"), None, 10)
    assert sorted(e.crop_id for e in cars) == ["old", "v"]
    minivans, _ = store.query(EventQuery(camera_id="cam", label="minivan"), None, 10)
    assert minivans == []  # the classifier's evidence is not the object's label
    people, _ = store.query(EventQuery(camera_id="cam", label="person"), None, 10)
    assert [e.crop_id for e in people] == ["p"]
