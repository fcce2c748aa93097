"""Helpers of the outbox tests: a real mosquitto broker the test starts, a real HTTP
receiver on 127.0.0.1, a store filled with classified-crop events, a subscriber, and the
config and crops of a `strata cloud` daemon delivering to them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import paho.mqtt.client as paho
import pytest
from cloud_helpers import jpeg
from paho.mqtt.enums import CallbackAPIVersion
from strata.cloud.metrics import CloudMetrics
from strata.cloud.store.event_store import EventStore
from strata.cloud.store.registry import open_store
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc, common_pb2, current_version
from strata.shared.loopback import free_port
from strata.tools.bench.delivery_receivers import HookServer

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"


def crop_event(camera: str, i: int, track: int = 0, label: str = "red") -> analytics_pb2.Event:
    """A classified crop as the service stores it."""
    return analytics_pb2.Event(
        edge_id="edge-a",
        crop_id=f"{camera}-{i}",
        camera_id=camera,
        sequence=i,
        capture_ns=time.time_ns(),
        label=label,
        score=0.9,
        track_id=track,
        edge_detection=common_pb2.Detection(
            box=common_pb2.Box(x1=1, y1=2, x2=30, y2=40), score=0.8, label="person"
        ),
    )


def fill(store: EventStore, events: list[analytics_pb2.Event]) -> list[int]:
    """Store events (committed before it returns); their ids."""
    futures = [store.submit(ev) for ev in events]
    return [f.result(30).event.event_id for f in futures]


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `cond` until true; fail naming `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def sample(registry: Any, name: str, **labels: str) -> float:
    """A metric's value (0 when absent)."""
    value = registry.get_sample_value(name, labels)
    return float(value or 0.0)


# --- mosquitto ----------------------------------------------------------------------------


@dataclass
class Broker:
    """A mosquitto on 127.0.0.1:port with a config written here; users: {name: password}."""

    root: Path
    users: dict[str, str] = field(default_factory=dict)
    # Keep sessions and queued messages of persistent clients across a restart.
    persistent: bool = False
    # (ca, cert, key) PEM files: a TLS listener.
    tls: tuple[Path, Path, Path] | None = None
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Broker:
        if not Path(MOSQUITTO).exists():
            pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        lines = [
            f"listener {self.port} 127.0.0.1",
            "persistence true" if self.persistent else "persistence false",
            f"persistence_location {self.root}/",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            # Started as root, mosquitto would switch to its own user, who cannot read here.
            "user root" if os.geteuid() == 0 else "",
        ]
        if self.tls is not None:
            ca, cert, key = self.tls
            lines += [f"cafile {ca}", f"certfile {cert}", f"keyfile {key}"]
        if self.users:
            pw = self.root / "passwd"
            pw.write_text("")
            for user, password in self.users.items():
                subprocess.run(
                    [MOSQUITTO_PASSWD, "-b", str(pw), user, password], check=True, timeout=30
                )
            pw.chmod(0o600)
            lines += ["allow_anonymous false", f"password_file {pw}"]
        else:
            lines.append("allow_anonymous true")
        conf = self.root / "mosquitto.conf"
        conf.write_text("\n".join(lines) + "\n")
        log = (self.root / "mosquitto.log").open("ab")
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=log, stderr=log)
        wait_for(self._listening, 10, f"mosquitto on port {self.port}")
        return self

    def _listening(self) -> bool:
        import socket

        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                "mosquitto exited: " + (self.root / "mosquitto.log").read_text()[-2000:]
            )
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


class Subscriber:
    """A paho client that records every message on `topics` (retained ones included)."""

    def __init__(
        self,
        port: int,
        topics: list[str],
        client_id: str = "",
        persistent: bool = False,
        login: tuple[str, str] | None = None,
    ) -> None:
        self.messages: list[tuple[str, bytes, bool]] = []
        self._lock = threading.Lock()
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id or f"test-{free_port()}",
            clean_session=not persistent,
        )
        self.client.reconnect_delay_set(1, 1)
        if login is not None:
            self.client.username_pw_set(*login)
        ready = threading.Event()

        def on_connect(c: paho.Client, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
            for t in topics:
                c.subscribe(t, qos=1)
            ready.set()

        def on_message(_c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
            with self._lock:
                self.messages.append((msg.topic, msg.payload, bool(msg.retain)))

        self.client.on_connect = on_connect
        self.client.on_message = on_message
        self.client.connect("127.0.0.1", port, 30)
        self.client.loop_start()
        assert ready.wait(10), "subscriber did not connect"
        time.sleep(0.2)  # the SUBACKs

    def on(self, topic: str) -> list[bytes]:
        with self._lock:
            return [p for t, p, _ in self.messages if t == topic]

    def events(self, topic: str) -> list[dict[str, Any]]:
        return [json.loads(p) for p in self.on(topic)]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


# --- an HTTP receiver ---------------------------------------------------------------------


class Receiver:
    """An HTTP server on 127.0.0.1 recording POSTs; `answer` decides each status."""

    def __init__(self, answer: Callable[[int], int] = lambda _n: 200, delay_s: float = 0.0):
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.tries = 0
        self.answer = answer
        self.delay_s = delay_s
        self._lock = threading.Lock()
        self._http = HookServer(self._post, "test-webhook")
        self.url = self._http.url

    def _post(self, headers: dict[str, str], body: bytes) -> int:
        with self._lock:
            n = self.tries
            self.tries += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        status = self.answer(n)
        if status == 200:
            with self._lock:
                self.posts.append((headers, body))
        return status

    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(b) for _, b in self.posts]

    def close(self) -> None:
        self._http.close()


# --- a `strata cloud` daemon -----------------------------------------------------------------


def daemon_config(
    tmp_path: Path, model: tuple[Path, Path], address: str, sinks: str, metrics_port: int = 0
) -> Path:
    """A config file for `strata cloud` on `address` over tmp_path's SQLite store, delivering
    to `sinks` (YAML lines under cloud.sinks, indented four spaces) with quick retries."""
    path = tmp_path / "strata.yaml"
    path.write_text(
        f"""
cloud:
  listen: "{address}"
  grace_s: 0.5
  model: {{path: "{model[0]}", labels_file: "{model[1]}"}}
  store: {{path: "{tmp_path / "events.sqlite"}", write_delay_ms: 1.0}}
  metrics: {{port: {metrics_port}}}
  sinks:
    start: all
    poll_s: 0.1
    retry_s: 0.2
    max_retry_s: 1
{sinks}
"""
    )
    return path


def send(address: str, first: int, n: int) -> None:
    """Uplink n crops (two cameras) and check they were stored."""
    crops = [
        analytics_pb2.Crop(
            crop_id=f"k{i}",
            edge_id="edge-1",
            camera_id=f"cam-{i % 2}",
            encoding=common_pb2.ENCODING_JPEG,
            image=jpeg((40 * (i % 5), 90, 200)),
            timing=common_pb2.Timing(capture_ns=time.time_ns()),
        )
        for i in range(first, first + n)
    ]
    with grpc.insecure_channel(address) as channel:
        stub = analytics_pb2_grpc.AnalyticsStub(channel)
        batch = analytics_pb2.CropBatch(version=current_version(), crops=crops)
        acks = [a for r in stub.Uplink(iter([batch]), timeout=60) for a in r.acks]
    assert [a.status for a in acks] == [analytics_pb2.CROP_STATUS_STORED] * n


# --- fixture bodies (a fixture yields from these) -------------------------------------------


def started_store(tmp_path: Path) -> Iterator[tuple[EventStore, CloudStoreConfig]]:
    """A started SQLite store under tmp_path and its config; closed at the end."""
    cfg = CloudStoreConfig(path=str(tmp_path / "events.sqlite"), write_delay_ms=1.0)
    s = open_store(cfg, CloudMetrics())
    s.start()
    yield s, cfg
    s.close()


def started_broker(tmp_path: Path) -> Iterator[Broker]:
    """A started mosquitto under tmp_path/mqtt; stopped at the end."""
    b = Broker(tmp_path / "mqtt").start()
    yield b
    b.stop()
