"""Clip rows (cloud/store/clip_rows.py) on both back ends: a schema 5 store migrates to 6 keeping
its data; a clip's chunks tile what is committed whatever order chunks come in; a clip is
found by each of its tracks; a uid on two cameras must be named with its camera."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from clip_helpers import chunk, info
from cloud_helpers import snapshot
from strata.cloud.metrics import CloudMetrics
from strata.cloud.store.postgres import MIGRATIONS as PG_MIGRATIONS
from strata.cloud.store.registry import (
    SCHEMA_VERSION,
    ClipLookupError,
    ClipQuery,
    EventStore,
    SnapshotQuery,
    open_store,
)
from strata.cloud.store.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import clips_pb2

C = clips_pb2


def old_store(where: Path | str) -> None:
    """A schema 5 store (tables up to snapshots) holding one snapshot row's worth of data."""
    pg = isinstance(where, str)
    migrations = PG_MIGRATIONS if pg else SQLITE_MIGRATIONS
    conn: psycopg.Connection | sqlite3.Connection = (  # type: ignore[type-arg]
        psycopg.connect(where, autocommit=True) if pg else sqlite3.connect(where)
    )
    for version in range(5):
        for statement in migrations[version]:
            conn.execute(statement)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (5)")
    conn.commit()
    conn.close()


def config(where: Path | str) -> CloudStoreConfig:
    if isinstance(where, str):
        return CloudStoreConfig(url=where, write_delay_ms=1.0, connect_timeout_s=5.0)
    return CloudStoreConfig(path=str(where), write_delay_ms=1.0)


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    if request.param == "sqlite":
        return tmp_path / "e.sqlite"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def store(where: Path | str) -> Iterator[EventStore]:
    s = open_store(config(where), CloudMetrics())
    s.start()
    yield s
    s.close()


def test_a_schema_5_store_migrates_to_clips(where: Path | str) -> None:
    assert SCHEMA_VERSION == 8
    old_store(where)
    s = open_store(config(where), CloudMetrics())
    s.start()
    try:
        s.submit_snapshot(snapshot(track=(1000, 7))).result(20)
        assert s.append_clip(chunk(b"abc", 0, 3, info(), last=True)).complete
        assert s.find_snapshot(SnapshotQuery(camera_id="door", track_uid="1000-7")) is not None
        assert s.count_clips() == 1
    finally:
        s.close()


def test_chunks_in_any_order_tile_the_committed_bytes(store: EventStore) -> None:
    data = random.Random(1).randbytes(40_000)
    ci = info()
    sizes = [1000, 3000, 7000, 500]
    rng = random.Random(2)
    committed = 0
    for _ in range(400):  # a device resending, skipping ahead and overlapping at random
        offset = max(0, committed + rng.randint(-5000, 3000))
        size = rng.choice(sizes)
        last = offset + size >= len(data)
        got = store.append_clip(chunk(data, offset, size, ci, last=last))
        if offset > committed:
            assert (got.status, got.committed) == (C.CLIP_CHUNK_STATUS_RETRY, committed)
        else:
            assert got.status == C.CLIP_CHUNK_STATUS_STORED
            assert got.committed == max(committed, min(len(data), offset + size))
        committed = got.committed
        if got.complete:
            break
    assert committed == len(data)
    pieces = store.clip_pieces(ci.clip_id, 0, 10_000)
    assert b"".join(p for _, p in pieces) == data
    offsets = [o for o, _ in pieces]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert all(a + len(p) == b for (a, p), b in zip(pieces, offsets[1:], strict=False))


def test_a_clip_is_found_by_each_track_and_a_shared_uid_needs_its_camera(
    store: EventStore,
) -> None:
    store.append_clip(chunk(b"a" * 10, 0, 10, info(tracks=("1-1", "2-2", "1000-7"))))
    store.append_clip(chunk(b"b" * 10, 0, 10, info(clip_id="yard/s/1", camera="yard")))
    for uid in ("1-1", "2-2", "1000-7"):
        found = store.find_clip(ClipQuery(camera_id="door", track_uid=uid))
        assert found is not None and found.info.clip_id == "door/s1/1" and not found.final
    with pytest.raises(ClipLookupError, match="several cameras"):
        store.find_clip(ClipQuery(track_uid="1000-7"))
    yard = store.find_clip(ClipQuery(camera_id="yard", track_uid="1000-7"))
    assert yard is not None and yard.committed_bytes == 10
    # The track list grows while the clip is open.
    store.append_clip(chunk(b"a" * 20, 0, 20, info(tracks=("1-1", "3-3"))))
    assert store.find_clip(ClipQuery(track_uid="3-3")) is not None
    with pytest.raises(ClipLookupError):
        store.find_clip(ClipQuery(clip_id="x/y/1", track_uid="1-1"))


def test_a_cut_back_last_chunk_keeps_the_prefix_and_without_the_flag_is_refused(
    store: EventStore,
) -> None:
    # Issue 39: the device sent an open clip's bytes as it grew, then cut the clip back to
    # a byte prefix (its track's end heard late). The cut falls inside a stored chunk.
    data = random.Random(3).randbytes(10_000)
    ci = info()
    for offset in range(0, 10_000, 3000):
        got = store.append_clip(chunk(data, offset, 3000, ci))
        assert got.status == C.CLIP_CHUNK_STATUS_STORED
    assert got.committed == 10_000
    cut = 4_500
    plain = chunk(data, cut, 0, ci, last=True)
    refused = store.append_clip(plain)
    assert (refused.status, refused.code) == (C.CLIP_CHUNK_STATUS_INVALID, "size_mismatch")
    back = chunk(data, cut, 0, ci, last=True)
    back.cut_back = True
    got = store.append_clip(back)
    assert (got.status, got.committed, got.complete, got.finished) == (
        C.CLIP_CHUNK_STATUS_STORED,
        cut,
        True,
        True,
    )
    assert got.cut == 10_000 - cut
    pieces = store.clip_pieces(ci.clip_id, 0, 100)
    assert b"".join(p for _, p in pieces) == data[:cut]
    assert [o for o, _ in pieces] == [0, 3000]
    found = store.find_clip(ClipQuery(clip_id=ci.clip_id))
    assert found is not None and found.final and found.committed_bytes == cut
    assert found.info.size_bytes == cut
    # Sent again (an ack lost): the clip is final, nothing changes.
    again = store.append_clip(back)
    assert (again.committed, again.complete, again.cut) == (cut, True, 0)
