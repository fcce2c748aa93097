"""`MqttSink`: events to an MQTT broker in Frigate's topics, with Home Assistant discovery.

- `<prefix>/events`: every event, JSON (payload.py), at the configured QoS; delivered
  means the broker acked it (QoS 1/2), so a broker outage keeps the event in the store;
- `<prefix>/<camera>/event`: the camera's latest event, retained (the last-event sensor);
- `<prefix>/<camera>/<label>` and `<prefix>/<camera>/<zone>/<label>`: occupancy, retained;
- `<prefix>/<camera>/<label>/snapshot`: the latest snapshot JPEG (the track's best crop),
  retained, published with a track event that names a snapshot the sink has not published
  yet (the `snapshots` reader);
- `<prefix>/available`: `online` (retained) on connect, `offline` as the last will.

Home Assistant discovery announces a label's entities only when the label is tracked
(top-level `objects.track`, as cloud/outbox/tracked.py resolves it): an event of another
label (stored before the edge filtered it) still goes out, yet creates no entity.

paho runs the connection in its own thread and reconnects with backoff; a refused login
or an unreachable broker is one clear error line and a metric, never an exception; each
retry the broker refuses again says so (a warning, with the count), never as the
"Unspecified error" paho closes the refused socket with.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode
from strata.shared.config.sinks import MqttSinkConfig

from .discovery import DiscoveryConfig, Topics, camera_configs, label_configs
from .events import OutboxEvent
from .filters import EventFilter
from .metrics import SinkMetrics
from .occupancy import Occupancy
from .payload import event_bytes
from .sink import DeliveryError
from .snapshots import SnapshotJpeg, SnapshotReader

log = logging.getLogger(__name__)

# How long start() waits for the first answer, so a wrong password shows at start.
FIRST_CONNECT_WAIT_S = 3.0
# CONNACK reasons that mean the login itself was refused (MQTT 3.1.1 codes 4 and 5).
_AUTH_REASONS = ("bad user name or password", "not authorized")


class MqttSink:
    """Publishes to one broker."""

    def __init__(
        self,
        cfg: MqttSinkConfig,
        metrics: SinkMetrics,
        snapshots: SnapshotReader | None = None,
        tracked: Collection[str] | None = None,
    ) -> None:
        """`tracked`: the labels discovery announces; None: every label (a sink built
        outside `strata cloud`)."""
        self.cfg = cfg
        self.tracked = None if tracked is None else frozenset(tracked)
        self.name = cfg.name
        self.metrics = metrics
        self.snapshots = snapshots
        self.topics = Topics(cfg.prefix, cfg.discovery_prefix)
        self._filter = EventFilter(cfg.filter)
        self.occupancy = Occupancy()
        self._announced: set[tuple[str, str, str]] = set()
        # Snapshot topic -> the snapshot id the broker acked there (one per camera and label).
        self._snapshot_sent: dict[str, str] = {}
        self._answered = threading.Event()
        self._last_error = ""
        # The broker's refusal of the last connect ("" once connected): paho then closes
        # the socket with an unspecified reason, which must not stand in for the refusal.
        self._refused = ""
        self._refusals = 0
        self._connected = metrics.connected.labels(sink=cfg.name)
        self._connected.set(0)
        client_id = cfg.client_id or f"strata-{cfg.name}-{socket.gethostname()}-{os.getpid()}"
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv311
        )
        self.client.reconnect_delay_set(1, 30)
        self.client.will_set(self.topics.available, "offline", qos=1, retain=True)
        if cfg.username:
            password = None
            if cfg.password_file:
                try:
                    password = Path(cfg.password_file).read_text().strip()
                except OSError as exc:
                    raise ValueError(
                        f"sink {cfg.name}: cannot read password_file {cfg.password_file}: "
                        f"{exc.strerror}"
                    ) from None
            self.client.username_pw_set(cfg.username, password)
        if cfg.tls:
            self.client.tls_set(
                ca_certs=cfg.ca_file or None,
                certfile=cfg.cert_file or None,
                keyfile=cfg.key_file or None,
                cert_reqs=ssl.CERT_REQUIRED,
            )
            self.client.tls_insecure_set(cfg.tls_insecure)
        self.client.on_connect = self._on_connect
        self.client.on_connect_fail = self._on_connect_fail
        self.client.on_disconnect = self._on_disconnect

    @property
    def where(self) -> str:
        """host:port, for logs."""
        return f"{self.cfg.host}:{self.cfg.port}"

    # connection (paho's thread)

    def start(self) -> None:
        """Connect in the background; wait briefly so a refusal is logged at start."""
        self.client.connect_async(self.cfg.host, self.cfg.port, self.cfg.keepalive_s)
        self.client.loop_start()
        if not self._answered.wait(FIRST_CONNECT_WAIT_S):
            log.warning("sink %s: no answer yet from MQTT broker %s", self.name, self.where)

    def close(self) -> None:
        """Say offline (retained), disconnect, stop paho's thread."""
        if self.client.is_connected():
            info = self.client.publish(self.topics.available, "offline", qos=1, retain=True)
            try:
                info.wait_for_publish(2.0)
            except (RuntimeError, ValueError):
                pass
        self.client.disconnect()
        self.client.loop_stop()
        if self.snapshots is not None:
            self.snapshots.close()

    def _trouble(self, reason: str, text: str) -> None:
        self._connected.set(0)
        self.metrics.failed.labels(sink=self.name, reason=reason).inc()
        if text != self._last_error:  # one line per new trouble, not one per retry
            self._last_error = text
            log.error("sink %s: %s", self.name, text)
        self._answered.set()

    def _on_connect(
        self,
        client: paho.Client,
        _userdata: Any,
        _flags: Any,
        reason: ReasonCode,
        _props: Any,
    ) -> None:
        if reason.is_failure:
            why = str(reason).lower()
            kind = "auth" if why in _AUTH_REASONS else "refused"
            text = f"MQTT broker {self.where} refused the connection: {reason}"
            self._refusals = self._refusals + 1 if text == self._refused else 1
            self._refused = text
            if self._refusals > 1:
                # Said as an error once; each retry (backoff up to 30 s) says it again.
                log.warning(
                    "sink %s: %s (refused %d times so far)", self.name, text, self._refusals
                )
            self._trouble(kind, text)
            return
        self._last_error = ""
        self._refused, self._refusals = "", 0
        # The broker may have lost retained configs and snapshots: publish again.
        self._announced.clear()
        self._snapshot_sent.clear()
        client.publish(self.topics.available, "online", qos=1, retain=True)
        self._connected.set(1)
        log.info("sink %s: connected to MQTT broker %s", self.name, self.where)
        self._answered.set()

    def _on_connect_fail(self, _client: paho.Client, _userdata: Any) -> None:
        self._trouble("unreachable", f"cannot reach MQTT broker {self.where}")

    def _on_disconnect(
        self, _client: paho.Client, _userdata: Any, _flags: Any, reason: ReasonCode, _props: Any
    ) -> None:
        self._connected.set(0)
        if reason.is_failure and not self._refused:
            log.warning("sink %s: lost MQTT broker %s: %s", self.name, self.where, reason)

    # delivery (the worker's thread)

    def skip_reason(self, ev: OutboxEvent) -> str | None:
        """Filtered out by the config."""
        return None if self._filter(ev) else "filtered"

    def deliver(self, ev: OutboxEvent) -> None:
        """Publish the event and what follows from it; return when the broker acked it all."""
        if not self.client.is_connected():
            raise DeliveryError("disconnected", f"not connected to MQTT broker {self.where}")
        pending: list[paho.MQTTMessageInfo] = []
        if self.cfg.discovery:
            for d in self._discovery_for(ev):
                pending.append(self._publish(d.topic, d.body(), retain=True))
        body = event_bytes(ev)
        pending.append(self._publish(self.topics.events, body, qos=self.cfg.qos))
        if self.cfg.retain_event:
            pending.append(self._publish(self.topics.last_event(ev.camera_id), body, retain=True))
        for c in self.occupancy.apply(ev):
            topic = self.topics.count(c.camera, c.label, c.zone)
            pending.append(self._publish(topic, str(c.value).encode(), retain=True))
        snap = self._snapshot_for(ev)
        if snap is not None:
            pending.append(self._publish(snap[0], snap[1].jpeg, retain=True))
        self._wait(pending)
        if snap is not None:
            self._snapshot_sent[snap[0]] = snap[1].snapshot_id

    def _snapshot_for(self, ev: OutboxEvent) -> tuple[str, SnapshotJpeg] | None:
        """(topic, snapshot) to publish with `ev`: its track's, unless published already."""
        if self.snapshots is None:
            return None
        snap = self.snapshots(ev)
        if snap is None:
            return None
        topic = self.topics.snapshot(ev.camera_id, ev.label)
        if self._snapshot_sent.get(topic) == snap.snapshot_id:
            return None
        return topic, snap

    def _wait(self, pending: list[paho.MQTTMessageInfo]) -> None:
        """Return once the broker acked every message. Raises DeliveryError."""
        for info in pending:
            try:
                info.wait_for_publish(self.cfg.publish_timeout_s)
            except (RuntimeError, ValueError) as exc:
                raise DeliveryError("disconnected", str(exc)) from None
            if not info.is_published():
                raise DeliveryError(
                    "timeout",
                    f"MQTT broker {self.where} did not ack within {self.cfg.publish_timeout_s:g} s",
                )

    def _publish(
        self, topic: str, payload: bytes, qos: int = 1, retain: bool = False
    ) -> paho.MQTTMessageInfo:
        return self.client.publish(topic, payload, qos=qos, retain=retain)

    def _discovery_for(self, ev: OutboxEvent) -> list[DiscoveryConfig]:
        out: list[DiscoveryConfig] = []
        wanted = [(ev.camera_id, "", "")]
        if self.tracked is None or ev.label in self.tracked:
            wanted.append((ev.camera_id, ev.label, ""))
            wanted += [(ev.camera_id, ev.label, z) for z in ev.after.current_zones]
        for key in wanted:
            if key in self._announced:
                continue
            camera, label, zone = key
            out += camera_configs(self.topics, camera) if not label else []
            out += label_configs(self.topics, camera, label, zone) if label else []
            self._announced.add(key)
        return out
