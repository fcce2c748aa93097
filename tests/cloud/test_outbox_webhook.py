"""The webhook sink against a real HTTP receiver on 127.0.0.1: signed POSTs a receiver can
verify, a receiver answering 500 for a while loses nothing, filters and the cooldown, and a
receiver that hangs holds back no other sink."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from outbox_helpers import (
    Broker,
    Receiver,
    Subscriber,
    crop_event,
    fill,
    sample,
    started_store,
    wait_for,
)
from strata.cloud.metrics import CloudMetrics
from strata.cloud.outbox.events import ObjectState, OutboxEvent
from strata.cloud.outbox.filters import Cooldown, EventFilter
from strata.cloud.outbox.mqtt import MqttSink
from strata.cloud.outbox.signature import sign, verify
from strata.cloud.outbox.webhook import WebhookSink
from strata.cloud.outbox.worker import SinkWorker, WorkerParts
from strata.cloud.store.event_store import EventStore
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.config.sinks import (
    MqttSinkConfig,
    SinkFilterConfig,
    SinksConfig,
    WebhookSinkConfig,
)

FAST = {"start": "all", "poll_s": 0.05, "lease_s": 30.0, "retry_s": 0.1, "max_retry_s": 0.3}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[EventStore, CloudStoreConfig]]:
    yield from started_store(tmp_path)


def webhook_worker(store: CloudStoreConfig, metrics: CloudMetrics, **sink: Any) -> SinkWorker:
    cfg = WebhookSinkConfig.model_validate({"backoff_s": 0.05, "max_backoff_s": 0.2, **sink})
    parts = WorkerParts(store, SinksConfig.model_validate(FAST), metrics.sinks, "r1")
    w = SinkWorker(WebhookSink(cfg, metrics.sinks), parts)
    w.start()
    return w


def docs_verifier() -> Any:
    """The receiver's check exactly as docs/sinks.md prints it."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "sinks.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code, "docs/sinks.md lost its receiver snippet"
    scope: dict[str, Any] = {}
    exec(code.group(1), scope)
    return scope["verified"]


def test_a_receiver_failing_for_a_while_gets_everything_signed_and_in_order(
    tmp_path: Path, store: tuple[EventStore, CloudStoreConfig]
) -> None:
    s, cfg = store
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    failing_until = time.monotonic() + 2.0
    rx = Receiver(answer=lambda _n: 500 if time.monotonic() < failing_until else 200)
    metrics = CloudMetrics()
    w = webhook_worker(cfg, metrics, url=rx.url, secret_file=str(secret), cooldown_s=0)
    try:
        ids = fill(s, [crop_event(c, i, track=i + 1) for i in range(15) for c in ("a", "b")])
        wait_for(lambda: len(rx.posts) >= 30, 30, "30 accepted POSTs")
    finally:
        w.stop()
        rx.close()
    bodies = rx.bodies()
    got = [b["strata"]["stored_id"] for b in bodies]
    assert set(got) == set(ids), "lost events"
    keys: dict[int, str] = {}
    for b in bodies:  # duplicates only as the same event under the same key
        assert (
            keys.setdefault(b["strata"]["stored_id"], b["strata"]["idempotency_key"])
            == (b["strata"]["idempotency_key"])
        )
    for cam in ("a", "b"):
        seq = [b["strata"]["stored_id"] for b in bodies if b["after"]["camera"] == cam]
        assert [i for n, i in enumerate(seq) if i not in seq[:n]] == sorted(set(seq))
    verified = docs_verifier()
    for headers, body in rx.posts:
        assert verified(b"s3cret", body, headers["X-Strata-Signature"])
        assert not verified(b"other", body, headers["X-Strata-Signature"])
        assert not verified(b"s3cret", body + b" ", headers["X-Strata-Signature"])
        assert headers["Idempotency-Key"] == json.loads(body)["strata"]["idempotency_key"]
    assert rx.tries > 30
    assert sample(
        metrics.registry, "strata_cloud_sink_failed_total", sink="webhook", reason="http_500"
    )


def test_signature_round_trip_and_replay_window() -> None:
    body = b'{"type":"new"}'
    header = sign(b"k", body, 1_700_000_000)
    assert header.startswith("t=1700000000,v1=")
    assert verify(b"k", body, header, now=1_700_000_100)
    assert not verify(b"k", body + b" ", header, now=1_700_000_100)
    assert not verify(b"k", body, header, now=1_700_000_000 + 301)
    assert not verify(b"k", body, "garbage", now=1_700_000_000)


def _ev(camera: str = "door", label: str = "person", **kw: Any) -> OutboxEvent:
    after = ObjectState("t1", camera, label, 0.9, 0.9, current_zones=kw.pop("zones", ()))
    fields: dict[str, Any] = {"type": "update", "track": "t1", "key": "k1", **kw}
    return OutboxEvent(
        "track_events", 1, 0, 0, camera_id=camera, edge_id="e", after=after, **fields
    )


def test_filters_pass_only_what_every_list_allows() -> None:
    f = EventFilter(SinkFilterConfig(cameras=["door"], labels=["person"], zones=["porch"]))
    assert f(_ev(zones=("porch",)))
    assert not f(_ev(zones=("yard",)))
    assert not f(_ev(camera="yard", zones=("porch",)))
    assert not f(_ev(label="car", zones=("porch",)))
    assert f(_ev(zone="porch", type="zone_entered"))
    assert EventFilter(SinkFilterConfig(types=["end"]))(_ev(type="end"))
    assert not EventFilter(SinkFilterConfig(rules=["r1"]))(_ev(rule="r2"))


def test_cooldown_holds_a_lingering_track_not_new_tracks_or_ends() -> None:
    now = [0.0]
    c = Cooldown(1.0, clock=lambda: now[0])
    first = _ev(key="a")
    assert c.check(first) is None
    c.sent(first)
    assert c.check(first) == "duplicate"
    assert c.check(_ev(key="b")) == "cooldown"
    assert c.check(_ev(key="c", type="end")) is None
    assert c.check(_ev(key="d", track="t2")) is None
    assert c.check(_ev(key="e", track="")) is None  # untracked: no cooldown
    now[0] = 1.5
    assert c.check(_ev(key="f")) is None


def test_cooldown_skips_are_counted(store: tuple[EventStore, CloudStoreConfig]) -> None:
    s, cfg = store
    rx = Receiver()
    metrics = CloudMetrics()
    w = webhook_worker(cfg, metrics, url=rx.url, cooldown_s=60)
    try:
        fill(s, [crop_event("door", i, track=7) for i in range(5)])
        wait_for(
            lambda: sample(metrics.registry, "strata_cloud_sink_skipped_total", sink="webhook",
                           reason="cooldown") == 3,
            20,
            "3 updates held by the cooldown",
        )  # fmt: skip
    finally:
        w.stop()
        rx.close()
    assert [b["type"] for b in rx.bodies()] == ["new", "update"]


def test_a_hanging_receiver_holds_back_no_other_sink(
    tmp_path: Path, store: tuple[EventStore, CloudStoreConfig]
) -> None:
    s, cfg = store
    hanging = Receiver(delay_s=5.0)
    fine = Receiver()
    broker = Broker(tmp_path / "mqtt").start()
    sub = Subscriber(broker.port, ["strata/events"])
    metrics = CloudMetrics()
    sinks = SinksConfig.model_validate(FAST)
    parts = WorkerParts(cfg, sinks, metrics.sinks, "r1")
    slow_cfg = WebhookSinkConfig(name="slow", url=hanging.url, timeout_s=1.0, attempts=1)
    fine_cfg = WebhookSinkConfig(name="fine", url=fine.url, cooldown_s=0)
    workers = [
        SinkWorker(WebhookSink(slow_cfg, metrics.sinks), parts),
        SinkWorker(WebhookSink(fine_cfg, metrics.sinks), parts),
        SinkWorker(MqttSink(MqttSinkConfig(port=broker.port), metrics.sinks), parts),
    ]
    for w in workers:
        w.start()
    try:
        t0 = time.monotonic()
        fill(s, [crop_event("door", i) for i in range(20)])
        wait_for(lambda: len(fine.posts) == 20, 10, "the good webhook")
        wait_for(lambda: len(sub.on("strata/events")) == 20, 10, "the broker")
        assert time.monotonic() - t0 < 5.0
        wait_for(
            lambda: sample(metrics.registry, "strata_cloud_sink_failed_total", sink="slow",
                           reason="timeout") >= 1,
            10,
            "the hanging receiver's timeout counted",
        )  # fmt: skip
    finally:
        for w in workers:
            w.stop()
        sub.close()
        broker.stop()
        hanging.close()
        fine.close()
