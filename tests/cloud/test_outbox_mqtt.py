"""The MQTT sink against a real mosquitto the tests start: events in order on
strata/events, Home Assistant discovery configs read back and checked against discovery's
schema, the last will on kill -9, a wrong password, and a broker outage that loses nothing."""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cloud_helpers import track_event
from outbox_helpers import (
    Broker,
    Subscriber,
    crop_event,
    fill,
    sample,
    started_broker,
    started_store,
    wait_for,
)
from strata.cloud.metrics import CloudMetrics
from strata.cloud.outbox.events import ObjectState, OutboxEvent
from strata.cloud.outbox.mqtt import MqttSink
from strata.cloud.outbox.sink import DeliveryError
from strata.cloud.outbox.worker import SinkWorker, WorkerParts
from strata.cloud.store.event_store import EventStore
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.config.sinks import MqttSinkConfig, SinksConfig
from tls_certs import make_pki

FAST = {"start": "all", "poll_s": 0.05, "lease_s": 5.0, "retry_s": 0.1, "max_retry_s": 0.5}

# Home Assistant's MQTT discovery schema for the entity types strata announces (sensor,
# image: homeassistant/components/mqtt/{sensor,image}.py and the entity/device schemas).
_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
HA_ENTITY = {
    "name", "unique_id", "availability_topic", "payload_available", "payload_not_available",
    "device", "origin", "icon", "json_attributes_topic", "json_attributes_template", "qos",
    "enabled_by_default", "entity_category", "encoding", "object_id", "default_entity_id",
}  # fmt: skip
HA_SCHEMA: dict[str, dict[str, set[str]]] = {
    "sensor": {
        "required": {"state_topic"},
        "one_of": set(),
        "allowed": HA_ENTITY
        | {
            "state_topic",
            "value_template",
            "state_class",
            "unit_of_measurement",
            "device_class",
            "expire_after",
            "force_update",
            "suggested_display_precision",
        },
    },
    "image": {
        "required": set(),
        "one_of": {"image_topic", "url_topic"},
        "allowed": HA_ENTITY
        | {"image_topic", "url_topic", "content_type", "image_encoding", "url_template"},
    },
}
HA_DEVICE = {"identifiers", "connections", "name", "manufacturer", "model", "sw_version",
             "hw_version", "suggested_area", "via_device", "configuration_url"}  # fmt: skip


def check_discovery(topic: str, config: dict[str, Any], prefix: str) -> str:
    """Fail unless `config` is a valid discovery config for its topic; its component."""
    m = re.match(r"^homeassistant/([a-z_]+)/([^/]+)/([^/]+)/config$", topic)
    assert m, topic
    component, node, obj = m.groups()
    assert _ID.match(node) and _ID.match(obj), topic
    schema = HA_SCHEMA[component]
    assert set(config) <= schema["allowed"], (topic, set(config) - schema["allowed"])
    assert schema["required"] <= set(config), topic
    if schema["one_of"]:
        assert len(schema["one_of"] & set(config)) == 1, topic
    for key in ("state_topic", "image_topic", "json_attributes_topic", "availability_topic"):
        if key in config:
            assert config[key].startswith(prefix + "/") and not set(config[key]) & {"+", "#"}
    assert config["availability_topic"] == f"{prefix}/available"
    assert config["payload_available"] == "online"
    assert config["payload_not_available"] == "offline"
    assert isinstance(config["unique_id"], str) and config["unique_id"]
    device = config["device"]
    assert set(device) <= HA_DEVICE and device["identifiers"] and device["name"], device
    if "state_class" in config:
        assert config["state_class"] in {"measurement", "total", "total_increasing"}
    if "content_type" in config:
        assert config["content_type"].startswith("image/")
    return component


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[EventStore, CloudStoreConfig]]:
    yield from started_store(tmp_path)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    yield from started_broker(tmp_path)


def mqtt_worker(
    port: int,
    store: CloudStoreConfig,
    metrics: CloudMetrics,
    tracked: tuple[str, ...] | None = None,
    **sink: Any,
) -> SinkWorker:
    cfg = MqttSinkConfig.model_validate({"port": port, "keepalive_s": 5, **sink})
    parts = WorkerParts(store, SinksConfig.model_validate(FAST), metrics.sinks, "r1")
    w = SinkWorker(MqttSink(cfg, metrics.sinks, tracked=tracked), parts)
    w.start()
    return w


def test_events_arrive_in_order_and_home_assistant_discovers_each_camera(
    broker: Broker, store: tuple[EventStore, CloudStoreConfig]
) -> None:
    s, cfg = store
    sub = Subscriber(broker.port, ["strata/#"])
    metrics = CloudMetrics()
    w = mqtt_worker(broker.port, cfg, metrics)
    try:
        events = [crop_event(c, i, track=i % 2 + 1) for i in range(10) for c in ("door", "yard")]
        ids = fill(s, events)
        wait_for(lambda: len(sub.on("strata/events")) == 20, 20, "20 events on strata/events")
    finally:
        w.stop()
    got = sub.events("strata/events")
    assert sorted(e["strata"]["stored_id"] for e in got) == sorted(ids)
    for cam in ("door", "yard"):
        seq = [e["strata"]["stored_id"] for e in got if e["after"]["camera"] == cam]
        assert seq == sorted(seq) and len(seq) == 10
    first = got[0]
    assert first["type"] == "new" and first["before"] is None
    # The detector's label (issue 38); the classifier's top label is evidence beside it, and
    # a crop stored without a verdict has none (sub_label only for a confirmed one).
    assert first["after"]["label"] == "person" and first["after"]["sub_label"] is None
    assert first["after"]["verdict"] is None and first["strata"]["cloud_label"] == "red"
    assert first["after"]["box"] == [1.0, 2.0, 30.0, 40.0]
    assert len({e["strata"]["idempotency_key"] for e in got}) == 20
    assert sample(metrics.registry, "strata_cloud_sink_delivered_total", sink="mqtt") == 20
    sub.close()

    # A newcomer (Home Assistant starting later) reads everything retained back.
    late = Subscriber(broker.port, ["homeassistant/#", "strata/#"])
    wait_for(lambda: len(late.on("strata/available")) == 1, 10, "retained availability")
    assert late.on("strata/available") == [b"offline"]  # the sink said goodbye on stop
    configs = {t: json.loads(p) for t, p, r in late.messages if t.startswith("homeassistant/")}
    late.close()
    kinds: dict[str, set[str]] = {"door": set(), "yard": set()}
    unique_ids = set()
    for topic, config in configs.items():
        component = check_discovery(topic, config, "strata")
        cam = config["device"]["name"]
        kinds[cam].add(f"{component}:{config.get('state_topic') or config.get('image_topic')}")
        unique_ids.add(config["unique_id"])
    assert len(unique_ids) == len(configs)
    for cam, found in kinds.items():
        assert found == {
            f"sensor:strata/{cam}/event",
            f"sensor:strata/{cam}/person",  # the detector's label (issue 38)
            f"image:strata/{cam}/person/snapshot",
        }, cam
    last = {t: json.loads(p) for t, p, r in late.messages if t.endswith("/event") and r}
    assert last["strata/door/event"]["strata"]["stored_id"] == max(
        e["strata"]["stored_id"] for e in got if e["after"]["camera"] == "door"
    )


def lifecycle(n: int, track: str, label: str, zones: tuple[str, ...] = ()) -> OutboxEvent:
    after = ObjectState(track, "door", label, 0.9, 0.9, current_zones=zones)
    return OutboxEvent(
        "track_events", n, 0, 0, f"door/{track}/{n}/new", "new", "door", "e", after,
        track=track, lifecycle=True,
    )  # fmt: skip


def test_discovery_announces_only_tracked_labels() -> None:
    # No broker needed: what the sink would announce with each event.
    sink = MqttSink(MqttSinkConfig(), CloudMetrics().sinks, tracked=("person", "car"))
    first = [d.topic for d in sink._discovery_for(lifecycle(1, "t1", "skis", ("porch",)))]
    assert first == ["homeassistant/sensor/strata_strata_door/last_event/config"]
    assert sink._discovery_for(lifecycle(2, "t2", "not_person")) == []
    person = [d.topic for d in sink._discovery_for(lifecycle(3, "t3", "person", ("porch",)))]
    assert person == [
        "homeassistant/sensor/strata_strata_door/person_count/config",
        "homeassistant/image/strata_strata_door/person_snapshot/config",
        "homeassistant/sensor/strata_strata_door/porch_person_count/config",
    ]
    # Without a tracked list (a sink built outside `strata cloud`) every label is announced.
    every = MqttSink(MqttSinkConfig(), CloudMetrics().sinks)
    assert len(every._discovery_for(lifecycle(1, "t1", "skis"))) == 3


def test_home_assistant_discovers_tracked_labels_only(broker: Broker) -> None:
    sink = MqttSink(
        MqttSinkConfig(port=broker.port, keepalive_s=5), CloudMetrics().sinks, tracked=("person",)
    )
    sink.start()
    try:
        sink.deliver(lifecycle(1, "t1", "skis"))  # stored before the edge filtered it
        sink.deliver(lifecycle(2, "t2", "person", ("porch",)))
    finally:
        sink.close()
    late = Subscriber(broker.port, ["homeassistant/#", "strata/#"])
    wait_for(lambda: len(late.on("strata/available")) == 1, 10, "retained availability")
    configs = {t: json.loads(p) for t, p, r in late.messages if t.startswith("homeassistant/")}
    late.close()
    for topic, config in configs.items():
        check_discovery(topic, config, "strata")
    assert sorted(c["name"] for c in configs.values()) == [
        "Last event", "person count", "person snapshot", "porch person count",
    ]  # fmt: skip


def test_occupancy_counts_follow_lifecycle_events(broker: Broker) -> None:
    sub = Subscriber(broker.port, ["strata/#"])
    metrics = CloudMetrics()
    sink = MqttSink(MqttSinkConfig(port=broker.port, discovery=False), metrics.sinks)
    sink.start()

    def ev(n: int, track: str, kind: str, zones: tuple[str, ...]) -> OutboxEvent:
        after = ObjectState(track, "door", "person", 0.9, 0.9, current_zones=zones)
        return OutboxEvent(
            "track_events", n, 0, 0, f"door/{track}/{n}/{kind}", kind, "door", "e",
            after, track=track, lifecycle=True,
        )  # fmt: skip

    try:
        sink.deliver(ev(1, "t1", "new", ()))
        sink.deliver(ev(2, "t2", "new", ("porch",)))
        sink.deliver(ev(3, "t1", "update", ("porch",)))
        sink.deliver(ev(4, "t2", "end", ("porch",)))
        wait_for(lambda: len(sub.on("strata/door/porch/person")) >= 3, 10, "zone counts")
    finally:
        sink.close()
        sub.close()
    assert sub.on("strata/door/person") == [b"1", b"2", b"1"]
    assert sub.on("strata/door/porch/person") == [b"1", b"2", b"1"]


def test_stored_track_events_go_out_with_their_keys_and_make_the_counts(
    broker: Broker, store: tuple[EventStore, CloudStoreConfig]
) -> None:
    s, cfg = store
    sub = Subscriber(broker.port, ["strata/#"])
    metrics = CloudMetrics()
    w = mqtt_worker(broker.port, cfg, metrics)
    a, b = (1_000, 1), (2_000, 2)
    track = [
        track_event(1, track=a, track_sequence=0),
        track_event(2, track=b, track_sequence=0),
        track_event(3, track=a, kind="zone_entered", track_sequence=1, zone="porch",
                    rule="porch-entry"),
        track_event(4, track=b, kind="end", track_sequence=1),
        track_event(5, track=a, kind="end", track_sequence=2),
    ]  # fmt: skip
    for ev in (track[2], track[4]):
        ev.after.current_zones.append("porch")
    try:
        for ev in track:
            s.submit_track(ev).result(30)
        fill(s, [crop_event("door", 0, track=1)])
        wait_for(lambda: len(sub.on("strata/events")) == 6, 20, "5 track events and a crop")
        wait_for(lambda: sub.on("strata/door/person")[-1:] == [b"0"], 10, "the counts")
    finally:
        w.stop()
        sub.close()
    got = [e for e in sub.events("strata/events") if e["strata"]["source"] == "track"]
    assert [e["strata"]["idempotency_key"] for e in got] == [ev.idempotency_key for ev in track]
    assert [e["type"] for e in got] == ["new", "new", "zone_entered", "end", "end"]
    assert got[2]["strata"]["zone"] == "porch" and got[2]["strata"]["rule"] == "porch-entry"
    assert got[2]["after"]["current_zones"] == ["porch"] and got[2]["after"]["id"] == "1000-1"
    assert sub.on("strata/door/person") == [b"1", b"2", b"1", b"0"]
    assert sub.on("strata/door/porch/person") == [b"1", b"0"]


def test_wrong_password_is_one_clear_error_and_a_metric_never_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    b = Broker(tmp_path / "auth", users={"strata": "right"}).start()
    try:
        wrong, right = tmp_path / "wrong.txt", tmp_path / "right.txt"
        wrong.write_text("nope\n")
        right.write_text("right\n")
        metrics = CloudMetrics()
        bad = MqttSink(
            MqttSinkConfig(name="bad", port=b.port, username="strata", password_file=str(wrong)),
            metrics.sinks,
        )
        with caplog.at_level(logging.ERROR, logger="strata.cloud.outbox.mqtt"):
            bad.start()  # returns: the error is a log line, not an exception
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "refused the connection" in errors[0], errors
        assert "not authorized" in errors[0].lower() or "password" in errors[0].lower()
        assert sample(metrics.registry, "strata_cloud_sink_failed_total", sink="bad", reason="auth")
        assert sample(metrics.registry, "strata_cloud_sink_connected", sink="bad") == 0
        with pytest.raises(DeliveryError) as exc:
            bad.deliver(
                OutboxEvent(
                    "crops", 1, 0, 0, "k", "new", "c", "e", ObjectState("i", "c", "x", 1, 1)
                )
            )
        assert exc.value.reason == "disconnected"
        bad.close()

        good = MqttSink(
            MqttSinkConfig(name="good", port=b.port, username="strata", password_file=str(right)),
            metrics.sinks,
        )
        good.start()
        assert sample(metrics.registry, "strata_cloud_sink_connected", sink="good") == 1
        good.close()
    finally:
        b.stop()


def test_a_refused_password_is_repeated_as_a_refusal_on_every_retry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 39: the refusal was said once, then each retry logged "lost MQTT broker:
    Unspecified error" (paho closing the refused socket)."""
    b = Broker(tmp_path / "auth", users={"strata": "right"}).start()
    try:
        wrong = tmp_path / "wrong.txt"
        wrong.write_text("nope\n")
        metrics = CloudMetrics()
        cfg = MqttSinkConfig(name="bad", port=b.port, username="strata", password_file=str(wrong))
        bad = MqttSink(cfg, metrics.sinks)
        with caplog.at_level(logging.WARNING, logger="strata.cloud.outbox.mqtt"):
            bad.start()
            deadline = time.monotonic() + 15
            refusals = {"sink": "bad", "reason": "auth"}
            while sample(metrics.registry, "strata_cloud_sink_failed_total", **refusals) < 3:
                assert time.monotonic() < deadline, "paho did not retry"
                time.sleep(0.1)
            bad.close()
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) >= 3, lines
        assert all("refused the connection: Not authorized" in line for line in lines), lines
        assert "refused 3 times so far" in lines[2]
        assert [r.levelno for r in caplog.records][:1] == [logging.ERROR]
    finally:
        b.stop()


def test_tls_with_a_password_and_a_broker_it_cannot_trust(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pki = make_pki(tmp_path)
    b = Broker(
        tmp_path / "tls", users={"strata": "pw"}, tls=(pki.ca, pki.server_cert, pki.server_key)
    ).start()
    try:
        pw = tmp_path / "pw.txt"
        pw.write_text("pw")
        metrics = CloudMetrics()
        tls = {"port": b.port, "tls": True, "username": "strata", "password_file": str(pw)}
        good = MqttSink(MqttSinkConfig(name="good", ca_file=str(pki.ca), **tls), metrics.sinks)
        good.start()
        assert sample(metrics.registry, "strata_cloud_sink_connected", sink="good") == 1
        good.deliver(
            OutboxEvent("crops", 1, 0, 0, "k", "new", "c", "e", ObjectState("i", "c", "x", 1, 1))
        )
        good.close()

        (tmp_path / "other").mkdir()
        other = make_pki(tmp_path / "other")  # a CA that did not sign the broker's certificate
        bad = MqttSink(MqttSinkConfig(name="bad", ca_file=str(other.ca), **tls), metrics.sinks)
        with caplog.at_level(logging.ERROR, logger="strata.cloud.outbox.mqtt"):
            bad.start()
        assert any("cannot reach MQTT broker" in r.getMessage() for r in caplog.records)
        assert sample(metrics.registry, "strata_cloud_sink_failed_total", sink="bad",
                      reason="unreachable")  # fmt: skip
        assert sample(metrics.registry, "strata_cloud_sink_connected", sink="bad") == 0
        bad.close()
    finally:
        b.stop()


CHILD = textwrap.dedent(
    """
    import sys, time
    from strata.cloud.metrics import CloudMetrics
    from strata.cloud.outbox.mqtt import MqttSink
    from strata.shared.config.sinks import MqttSinkConfig
    sink = MqttSink(MqttSinkConfig(port=int(sys.argv[1]), keepalive_s=5), CloudMetrics().sinks)
    sink.start()
    print("connected", flush=True)
    time.sleep(60)
    """
)


def test_the_last_will_says_offline_when_the_cloud_is_killed(broker: Broker) -> None:
    sub = Subscriber(broker.port, ["strata/available"])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(broker.port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "connected"
        wait_for(lambda: sub.on("strata/available") == [b"online"], 10, "online")
        child.send_signal(signal.SIGKILL)
        wait_for(lambda: sub.on("strata/available")[-1:] == [b"offline"], 15, "the last will")
    finally:
        child.kill()
        child.wait(10)
        sub.close()


def test_a_broker_outage_loses_nothing(
    tmp_path: Path, store: tuple[EventStore, CloudStoreConfig]
) -> None:
    s, cfg = store
    b = Broker(tmp_path / "outage", persistent=True).start()
    # A persistent session: the broker keeps what arrives while the subscriber reconnects.
    sub = Subscriber(b.port, ["strata/events"], client_id="ha-test", persistent=True)
    metrics = CloudMetrics()
    w = mqtt_worker(b.port, cfg, metrics)
    try:
        ids = fill(s, [crop_event("door", i) for i in range(10)])
        wait_for(lambda: len(sub.on("strata/events")) == 10, 20, "events before the outage")
        b.stop()
        ids += fill(s, [crop_event("door", i) for i in range(10, 30)])
        time.sleep(1.5)
        wait_for(
            lambda: sample(metrics.registry, "strata_cloud_sink_backlog", sink="mqtt") == 20,
            10,
            "a backlog of 20 while the broker is down",
        )
        b.start()
        wait_for(lambda: len(sub.on("strata/events")) >= 30, 60, "every event after the outage")
    finally:
        w.stop()
        sub.close()
        b.stop()
    got = [e["strata"]["stored_id"] for e in sub.events("strata/events")]
    assert set(got) == set(ids)
    # Duplicates only as the same event (same key), and the order kept.
    assert [i for n, i in enumerate(got) if i not in got[:n]] == sorted(set(got))
