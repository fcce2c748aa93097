"""Appearance embeddings stay in the cloud's store (issue 42): the events the outbox sends to a
real webhook receiver carry none, the stored copy of an event has none, and a track's
embedding goes with the track when retention removes it (SQLite and PostgreSQL)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from identity_helpers import DAY_NS, life, people, seen
from outbox_helpers import Receiver, started_store, wait_for
from strata.cloud.identity.service import NoAppearanceError, Searcher
from strata.cloud.metrics import CloudMetrics
from strata.cloud.outbox.webhook import WebhookSink
from strata.cloud.outbox.worker import SinkWorker, WorkerParts
from strata.cloud.store.event_store import EventStore
from strata.cloud.store.registry import open_store
from strata.cloud.store.retention import Pruner
from strata.shared.config.cloud import CloudRetentionConfig, CloudStoreConfig
from strata.shared.config.sinks import SinksConfig, WebhookSinkConfig

FAST = {"start": "all", "poll_s": 0.05, "lease_s": 30.0, "retry_s": 0.1, "max_retry_s": 0.3}


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[tuple[EventStore, CloudStoreConfig]]:
    yield from started_store(tmp_path)


def test_the_webhook_gets_events_without_their_embedding(
    sqlite_store: tuple[EventStore, CloudStoreConfig],
) -> None:
    s, cfg = sqlite_store
    v = seen(people(1)[0], 0.1, 1)
    events = life("left", (10**18, 1), 1, 10**9, 10**9 + 5, v)
    for ev in events:
        assert ev.HasField("appearance")
        s.submit_track(ev).result(20)
    metrics = CloudMetrics()
    rx = Receiver()
    sink = WebhookSinkConfig.model_validate({"url": rx.url, "cooldown_s": 0})
    parts = WorkerParts(cfg, SinksConfig.model_validate(FAST), metrics.sinks, "r1")
    w = SinkWorker(WebhookSink(sink, metrics.sinks), parts)
    w.start()
    try:
        wait_for(lambda: len(rx.posts) >= 2, 30, "both track events posted")
    finally:
        w.stop()
        rx.close()
    raw = v.astype("<f2").tobytes()
    for _headers, body in rx.posts:
        assert b"appearance" not in body.lower() and b"float16" not in body
        assert raw[:32] not in body and base64.b64encode(raw)[:32] not in body
    # What reads return (the outbox reads the same rows) has no embedding either.
    stored = s.select("SELECT event FROM track_events", ())
    assert len(stored) == 2 and all(raw[:32] not in bytes(r[0]) for r in stored)
    assert s.select("SELECT COUNT(*) FROM track_appearance", ())[0][0] == 1


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    if request.param == "sqlite":
        cfg = CloudStoreConfig(path=str(tmp_path / "e.sqlite"), write_delay_ms=1.0)
    else:
        url = request.getfixturevalue("pg_url")
        cfg = CloudStoreConfig(url=url, write_delay_ms=1.0, connect_timeout_s=5.0)
    s = open_store(cfg, CloudMetrics())
    s.start()
    yield s
    s.close()


def test_an_expired_track_takes_its_embedding_with_it(store: EventStore) -> None:
    p = people(2)
    now = 1_000 * DAY_NS
    old_start, new_start = now - 3 * DAY_NS, now - DAY_NS // 2
    old = life("left", (old_start, 1), 1, old_start / 1e9, old_start / 1e9 + 5, seen(p[0], 0.1, 1))
    new = life("left", (new_start, 2), 3, new_start / 1e9, new_start / 1e9 + 5, seen(p[1], 0.1, 2))
    for ev in old + new:
        store.submit_track(ev).result(20)
    searcher = Searcher(store, CloudMetrics())
    # -1: every track (two different people are not alike; the point here is retention).
    found, searched = searcher.search("left", new[0].track_uid, 5, -1.0, False)
    assert searched == 2 and [f.row.track_uid for f in found] == [old[0].track_uid]
    got = Pruner(store, CloudRetentionConfig(days=1), store.metrics, lambda: now).run_once()
    assert got.tracks == 1
    rows = store.select("SELECT track_uid FROM track_appearance", ())
    assert [r[0] for r in rows] == [new[0].track_uid]
    found, _ = searcher.search("left", new[0].track_uid, 5, -1.0, False)
    assert found == [], "the index forgets a track the store no longer has"
    with pytest.raises(NoAppearanceError):
        searcher.search("left", old[0].track_uid, 5, 0.0, False)
