"""`strata bench delivery` (tools/bench/delivery.py): its checks on made-up receipts, and the
real thing at short durations (the three daemons on vtest, a real mosquitto stopped for
10 s, the webhook answering 500 for 5 s, a kill -9 of the cloud mid-delivery)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from strata.tools.bench.delivery import add_arguments, measure, summary
from strata.tools.bench.delivery_check import StoredEvent, check, latency
from strata.tools.bench.delivery_receivers import Receipt, receipt


def stored(n: int, cameras: tuple[str, ...] = ("a", "b")) -> list[StoredEvent]:
    return [
        StoredEvent("crops", i, f"k{i}", cameras[i % len(cameras)], 1_000 * i)
        for i in range(1, n + 1)
    ]


def got(s: StoredEvent, key: str = "", at: int = 0) -> Receipt:
    return Receipt(s.source, s.stored_id, key or s.key, s.camera_id, s.capture_ns, at)


def test_the_check_counts_loss_duplicates_wrong_keys_and_order() -> None:
    st = stored(6)
    v = check(st, [got(e) for e in st])
    assert v.ok and v.lost == 0 and v.duplicates == 0 and v.unique == 6
    # A duplicate under the same key is allowed; a lost event is not.
    v = check(st, [got(e) for e in st[:5]] + [got(st[2])])
    assert not v.ok and v.lost == 1 and v.duplicates == 1
    # The same event under another key.
    v = check(st, [got(e) for e in st[:5]] + [got(st[5], key="other")])
    assert not v.ok and v.wrong_key == 1 and v.lost == 0
    # Camera a's events are 2, 4, 6: 4 before 2 breaks its order, b's order does not matter.
    order = [st[3], st[1], st[5], st[0], st[2], st[4]]
    v = check(st, [got(e) for e in order])
    assert not v.ok and v.out_of_order == 1
    # The other camera interleaved in any way is fine; a duplicate out of order too.
    order = [st[1], st[0], st[3], st[2], st[5], st[4], st[1]]
    assert check(st, [got(e) for e in order]).ok
    # An event nobody stored.
    ghost = StoredEvent("crops", 99, "k99", "a", 0)
    v = check(st, [got(e) for e in st] + [got(ghost)])
    assert not v.ok and v.unknown == 1
    # Ids are per source: track event 1 is not crop 1.
    track = StoredEvent("track_events", 1, "t1", "a", 5)
    v = check([*st, track], [got(e) for e in st])
    assert v.lost == 1


def test_latency_counts_events_captured_and_received_inside_a_window() -> None:
    st = stored(4)
    s = 1_000_000_000
    receipts = [
        got(st[0], at=st[0].capture_ns + 5_000_000),  # 5 ms, inside the first 10 s
        got(st[1], at=st[1].capture_ns + 12 * s),  # received after that window
        got(st[2], at=st[2].capture_ns + 1_000_000),  # 1 ms
        got(st[0], at=st[0].capture_ns + 9 * s),  # a duplicate: the first receipt counts
    ]
    lat = latency(receipts, [(0, 10 * s)])
    assert lat.events == 2 and lat.p50_ms == 3.0 and lat.max_ms == 5.0
    assert latency(receipts, [(0, 10 * s), (1_500, 100 * s)]).events == 3
    assert latency(receipts, [(10 * s, 100 * s)]).events == 0
    assert latency(receipts, []).events == 3


def test_a_receipt_is_read_from_the_outbox_json() -> None:
    body = json.dumps(
        {
            "type": "new",
            "strata": {
                "idempotency_key": "e/cam/1/crop/c1",
                "camera_id": "cam",
                "stored_id": 7,
                "capture_ns": 123,
                "source": "crop",
            },
        }
    ).encode()
    r = receipt(body, 456)
    assert r == Receipt("crops", 7, "e/cam/1/crop/c1", "cam", 123, 456)
    assert receipt(b"not json", 1) is None
    assert receipt(b'{"strata": {}}', 1) is None


@pytest.mark.slow
@pytest.mark.timeout(170)
def test_outage_500s_and_kill_9_lose_nothing_end_to_end(tmp_path: Path, vtest_mp4: Path) -> None:
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(
        [
            "--warm-s", "10",
            "--broker-down-s", "10",
            "--cloud-down-s", "2",
            "--webhook-500-s", "5",
            "--calm-s", "5",
            "--lease-s", "3",
            "--max-retry-s", "2",
            "--kill-wait-s", "40",
            "--quiet-s", "3",
            "--drain-timeout-s", "60",
            "--clip", str(vtest_mp4),
            "--out", str(tmp_path / "out"),
        ]
    )  # fmt: skip
    doc = measure(args)
    print(summary(doc))
    assert doc["stored"]["total"] > 0 and doc["stored"]["track_events"] > 0, doc["notes"]
    assert doc["drained"], doc["receivers"]
    for name in ("mqtt", "webhook"):
        v = doc["receivers"][name]
        assert v["lost"] == 0, name
        assert v["wrong_key"] == 0 and v["unknown"] == 0, name
        assert v["out_of_order"] == 0, name
    assert doc["webhook_posts"]["answered_500"] > 0, "the webhook never failed"
    assert doc["mqtt_subscriber_connects"] >= 2, "the broker never went away"
    assert [ph["name"] for ph in doc["phases"]] == [
        "warm", "broker_down", "cloud_kill", "webhook_500", "calm", "drain",
    ]  # fmt: skip
    assert doc["capture_to_broker_ms"]["all_well"]["events"] > 0
    assert doc["ok"]
