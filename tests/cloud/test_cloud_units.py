"""Unit tests: JPEG header parsing, the batch buffer, the store's schema and pages."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import cv2
import numpy as np
import pytest
from cloud_helpers import jpeg
from strata.cloud.classifier import BatchBuffer, Normalization
from strata.cloud.images import ImageLimits, InvalidImageError, decode, jpeg_size
from strata.cloud.metrics import CloudMetrics
from strata.cloud.sqlite_store import SQLiteStore
from strata.cloud.store import SCHEMA_VERSION, EventQuery, PageKey, StoreError
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import analytics_pb2, common_pb2

LIMITS = ImageLimits(4096, 4096, 16_000_000)


def test_jpeg_size_reads_the_frame_header() -> None:
    assert jpeg_size(jpeg((1, 2, 3), w=123, h=45)) == (123, 45)
    assert jpeg_size(b"\xff\xd8\xff\xda\x00\x02") is None  # scan before any frame header
    assert jpeg_size(b"GIF89a") is None
    assert jpeg_size(b"") is None


def test_decode_rejects_before_decoding() -> None:
    with pytest.raises(InvalidImageError) as err:
        decode(
            jpeg((0, 0, 0), w=64, h=64),
            common_pb2.ENCODING_JPEG,
            0,
            0,
            ImageLimits(32, 4096, 10**9),
            224,
        )
    assert err.value.reason == "too_large"
    with pytest.raises(InvalidImageError) as err:
        decode(b"x" * 10, common_pb2.ENCODING_UNSPECIFIED, 0, 0, LIMITS, 224)
    assert err.value.reason == "bad_encoding"
    with pytest.raises(InvalidImageError) as err:
        decode(b"", common_pb2.ENCODING_JPEG, 0, 0, LIMITS, 224)
    assert err.value.reason == "empty"


def test_large_jpeg_decodes_reduced() -> None:
    img = np.full((1000, 1600, 3), 200, np.uint8)
    ok, buf = cv2.imencode(".jpg", img)
    assert ok
    out = decode(bytes(buf), common_pb2.ENCODING_JPEG, 0, 0, LIMITS, 224)
    assert out.shape == (250, 400, 3)  # 1/4 scale still covers 224


def test_batch_buffer_matches_reference_normalization() -> None:
    norm = Normalization((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    buf = BatchBuffer(4, 8, norm)
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (8, 8, 3), np.uint8) for _ in range(3)]
    out = buf.fill(imgs)
    assert out.shape == (3, 3, 8, 8)
    for i, img in enumerate(imgs):
        rgb = img[:, :, ::-1].astype(np.float32) / 255.0
        want = ((rgb - np.array(norm.mean)) / np.array(norm.std)).transpose(2, 0, 1)
        np.testing.assert_allclose(out[i], want, atol=1e-5)
    bgr = BatchBuffer(1, 8, Normalization((0, 0, 0), (1, 1, 1), 1.0, rgb=False))
    np.testing.assert_array_equal(bgr.fill(imgs[:1])[0], imgs[0].transpose(2, 0, 1))


def event(i: int, camera: str = "cam", t: int = 0) -> analytics_pb2.Event:
    return analytics_pb2.Event(
        edge_id="e",
        crop_id=f"c{i}",
        camera_id=camera,
        sequence=2**64 - 1 - i,
        capture_ns=t or 1000 + i,
        label="car" if i % 2 else "person",
        score=0.5,
    )


def test_store_writes_dedups_pages_and_refuses_newer_schema(tmp_path: Path) -> None:
    cfg = CloudStoreConfig(path=str(tmp_path / "db" / "e.sqlite"), write_delay_ms=1.0)
    store = SQLiteStore(cfg, CloudMetrics())
    store.start()
    futs = [store.submit(event(i)) for i in range(25)] + [store.submit(event(3))]
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


def test_adaptive_close_waits_only_for_requests_that_can_come(tmp_path: Path) -> None:
    """One caller at a time: no queue delay; callers that overlap: the delay, batched."""
    import time

    from cloud_models import build_colour_classifier
    from strata.cloud.batcher import DynamicBatcher
    from strata.cloud.classifier import load_classifier
    from strata.cloud.metrics import CloudMetrics
    from strata.shared.config.cloud import CloudBatcherConfig, CloudModelConfig
    from strata.shared.metrics import sample

    model = build_colour_classifier(tmp_path / "c.onnx", size=32)
    clf = load_classifier(CloudModelConfig(path=str(model)), "")
    metrics = CloudMetrics()
    cfg = CloudBatcherConfig(max_batch=8, max_queue_delay_ms=2000)
    batcher = DynamicBatcher(clf, cfg, metrics)
    batcher.start()
    img = np.zeros((32, 32, 3), np.uint8)
    try:
        t0 = time.monotonic()
        for _ in range(3):
            batcher.submit(img).result(10)
        assert time.monotonic() - t0 < 1.5  # a fixed 2 s delay would take 6 s
        # Three in flight at once: callers overlap, so the delay applies again and they are
        # batched (the first may go alone, decided before the others arrived).
        futs = [batcher.submit(img) for _ in range(3)]
        for f in futs:
            f.result(10)
        t1 = time.monotonic()
        futs = [batcher.submit(img) for _ in range(3)]
        for f in futs:
            f.result(10)
        assert time.monotonic() - t1 >= 1.5  # waited for more, up to the 2 s delay
        reg = metrics.registry
        assert sample(reg, "strata_cloud_batch_size_sum") == 9
        assert sample(reg, "strata_cloud_batch_size_count") <= 6  # 3 alone, then batched
    finally:
        batcher.stop()
        clf.close()


def test_schema_1_store_migrates_to_track_ids(tmp_path: Path) -> None:
    from strata.cloud.sqlite_store import MIGRATIONS

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
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 3
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "events_track" in indexes
    conn.close()


def test_schema_2_store_migrates_to_model_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing file gains a nullable column: old events have no version, new ones do."""
    from strata.cloud.sqlite_store import MIGRATIONS

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
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.rsplit("\t", 1)[-1] for ln in lines] == [
        "track 3 x0", "model v0", "model v7", f"model v{2**32 - 1}",
    ]  # fmt: skip


def test_query_reads_a_store_file_without_an_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from strata.tools.cli import main

    path = tmp_path / "events.sqlite"
    store = SQLiteStore(CloudStoreConfig(path=str(path), write_delay_ms=1.0), CloudMetrics())
    store.start()
    for f in [store.submit(event(i)) for i in range(12)]:
        f.result(10)
    store.close()
    assert main(["cloud", "query", "--db", str(path), "--label", "car", "--limit", "4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split("\t")[3] for ln in lines] == ["car"] * 4
    assert [ln.split("\t")[5] for ln in lines] == ["e/c1", "e/c3", "e/c5", "e/c7"]
    assert main(["cloud", "query", "--db", str(tmp_path / "absent.sqlite")]) == 2
    assert "no such event store" in capsys.readouterr().err
    assert not (tmp_path / "absent.sqlite").exists()
