"""cloud/store/sqlite.py: writes, dedup, pages, schema checks and migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cloud_helpers import stored_event
from strata.cloud.metrics import CloudMetrics
from strata.cloud.store.event_store import SCHEMA_VERSION, EventQuery, PageKey, StoreError
from strata.cloud.store.sqlite import SQLiteStore
from strata.shared.cli.table import parse as parse_table
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import analytics_pb2


def test_store_writes_dedups_pages_and_refuses_newer_schema(tmp_path: Path) -> None:
    cfg = CloudStoreConfig(path=str(tmp_path / "db" / "e.sqlite"), write_delay_ms=1.0)
    store = SQLiteStore(cfg, CloudMetrics())
    store.start()
    futs = [store.submit(stored_event(i)) for i in range(25)] + [store.submit(stored_event(3))]
    results = [f.result(10) for f in futs]
    assert [r.duplicate for r in results] == [False] * 25 + [True]
    assert results[-1].event.event_id == results[3].event.event_id
    assert results[0].event.sequence == 2**64 - 1  # uint64 survives SQLite's int64
    seen: list[str] = []
    key: PageKey | None = None
    while True:
        page, key = store.query(EventQuery(camera_id="cam"), key, 10)
        seen += [e.crop_id for e in page]
        if key is None:
            break
    assert seen == [f"c{i}" for i in range(25)]
    cars, _ = store.query(EventQuery(label="car", start_ns=1005, end_ns=1010), None, 100)
    assert [e.crop_id for e in cars] == ["c5", "c7", "c9"]
    assert PageKey.parse(PageKey(5, 7).token()) == PageKey(5, 7)
    store.close()

    conn = sqlite3.connect(cfg.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"events_camera_time", "events_time", "events_label_time"} <= indexes
    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema version"):
        SQLiteStore(cfg, CloudMetrics())


def test_schema_1_store_migrates_to_track_ids(tmp_path: Path) -> None:
    from strata.cloud.store.sqlite import MIGRATIONS

    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    for statement in MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (1)")
    conn.execute(
        "INSERT INTO events (edge_id, crop_id, camera_id, sequence, capture_ns, time_ns, "
        "stored_ns, label, score, detection) VALUES ('e', 'old', 'cam', 1, 5, 5, 5, 'car', 0.5, '')"
    )
    conn.commit()
    conn.close()
    store = SQLiteStore(CloudStoreConfig(path=str(path), write_delay_ms=1.0), CloudMetrics())
    store.start()
    new = analytics_pb2.Event(
        edge_id="e", crop_id="new", camera_id="cam", capture_ns=6, label="car", track_id=2**63
    )
    assert store.submit(new).result(10).event.track_id == 2**63
    old = store.find("e", "old")
    assert old is not None and old.track_id == 0
    assert store.find("e", "new").track_id == 2**63  # type: ignore[union-attr]
    store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 8
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "events_track" in indexes
    conn.close()


def test_schema_2_store_migrates_to_model_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing file gains a nullable column: old events have no version, new ones do."""
    from strata.cloud.store.sqlite import MIGRATIONS

    path = tmp_path / "v2.sqlite"
    conn = sqlite3.connect(path)
    for statement in (*MIGRATIONS[0], *MIGRATIONS[1]):
        conn.execute(statement)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (2)")
    conn.execute(
        "INSERT INTO events (edge_id, crop_id, camera_id, sequence, capture_ns, time_ns, "
        "stored_ns, label, score, detection, track_id) "
        "VALUES ('e', 'old', 'cam', 1, 5, 5, 5, 'car', 0.5, '', 3)"
    )
    conn.commit()
    conn.close()
    store = SQLiteStore(CloudStoreConfig(path=str(path), write_delay_ms=1.0), CloudMetrics())
    store.start()
    try:
        for crop, version in (("v0", 0), ("v7", 7), ("v-max", 2**32 - 1)):
            ev = analytics_pb2.Event(
                edge_id="e", crop_id=crop, camera_id="cam", capture_ns=6, label="car",
                model_version=version,
            )  # fmt: skip
            assert store.submit(ev).result(10).event.model_version == version
        old = store.find("e", "old")
        assert old is not None and not old.HasField("model_version") and old.track_id == 3
        found = store.find("e", "v0")
        assert found is not None and found.HasField("model_version") and found.model_version == 0
        page, _ = store.query(EventQuery(camera_id="cam"), None, 10)
        got = {e.crop_id: (e.model_version if e.HasField("model_version") else None) for e in page}
        assert got == {"old": None, "v0": 0, "v7": 7, "v-max": 2**32 - 1}
    finally:
        store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    rows = conn.execute("SELECT crop_id, model_version FROM events ORDER BY event_id").fetchall()
    assert rows == [("old", None), ("v0", 0), ("v7", 7), ("v-max", 2**32 - 1)]
    conn.close()
    from strata.tools.cli import main

    assert main(["cloud", "query", "--db", str(path)]) == 0
    rows = parse_table(capsys.readouterr().out)
    assert [(r["TRACK"], r["MODEL"]) for r in rows] == [
        ("3 x0", ""), ("", "v0"), ("", "v7"), ("", f"v{2**32 - 1}"),
    ]  # fmt: skip
