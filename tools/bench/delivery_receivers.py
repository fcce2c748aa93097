"""The two receivers of `strata bench delivery`: an MQTT subscriber and a webhook endpoint,
each recording every event it is given as a `Receipt`, with the wall-clock time it came.

- `MqttRecorder`: a paho client on `<prefix>/events` at QoS 1 with a persistent session
  (clean_session off, a fixed client id), so the broker keeps what it acked to the cloud
  for it while it reconnects after a broker restart; it reconnects every second.
- `WebhookRecorder`: an HTTP server on 127.0.0.1 that records every POST and answers 200,
  or 500 while `fail_until` (a monotonic time) lies ahead; only 2xx answers are deliveries.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

# The outbox's JSON names its table as "crop" or "track" (cloud/outbox/sources.py).
SOURCE_NAMES = {"crop": "crops", "track": "track_events"}


@dataclass(frozen=True, slots=True)
class Receipt:
    """One event as a receiver got it (a duplicate is another Receipt)."""

    source: str
    stored_id: int
    key: str
    camera_id: str
    capture_ns: int
    received_ns: int


def receipt(body: bytes, received_ns: int) -> Receipt | None:
    """The Receipt of an outbox JSON body; None when it is not one."""
    try:
        doc = json.loads(body)
        s = doc["strata"]
        return Receipt(
            source=SOURCE_NAMES.get(str(s.get("source", "")), str(s.get("source", ""))),
            stored_id=int(s["stored_id"]),
            key=str(s["idempotency_key"]),
            camera_id=str(s["camera_id"]),
            capture_ns=int(s.get("capture_ns") or 0),
            received_ns=received_ns,
        )
    except (ValueError, KeyError, TypeError):
        return None


class _Log:
    """Receipts in arrival order, and the bodies that were not events (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._got: list[Receipt] = []
        self.malformed = 0

    def add(self, body: bytes) -> None:
        now = time.time_ns()
        r = receipt(body, now)
        with self._lock:
            if r is None:
                self.malformed += 1
            else:
                self._got.append(r)

    def receipts(self) -> list[Receipt]:
        with self._lock:
            return list(self._got)

    def __len__(self) -> int:
        with self._lock:
            return len(self._got)


class MqttRecorder:
    """Records every message on `<prefix>/events`."""

    def __init__(self, port: int, client_id: str, prefix: str = "strata") -> None:
        self.log = _Log()
        self.topic = f"{prefix}/events"
        self.connects = 0
        self._ready = threading.Event()
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False
        )
        self.client.reconnect_delay_set(1, 1)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, 30)
        self.client.loop_start()
        if not self._ready.wait(10):
            self.close()
            raise RuntimeError(f"the MQTT subscriber did not connect to 127.0.0.1:{port}")

    def _on_connect(self, c: paho.Client, _u: Any, _f: Any, rc: Any, _p: Any) -> None:
        if rc.is_failure:
            return
        self.connects += 1
        c.subscribe(self.topic, qos=1)
        self._ready.set()

    def _on_message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        if msg.topic == self.topic:
            self.log.add(bytes(msg.payload))

    def receipts(self) -> list[Receipt]:
        """Every event received, in arrival order."""
        return self.log.receipts()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class HookServer:
    """An HTTP server on 127.0.0.1 (a free port: `url`) that hands every POST's headers and
    body to `on_post` and answers the status it returns, with no body."""

    def __init__(self, on_post: Callable[[dict[str, str], bytes], int], name: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(on_post(dict(self.headers.items()), body))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class WebhookRecorder:
    """An HTTP endpoint on 127.0.0.1 recording POSTs; 500 while `fail_until` lies ahead."""

    def __init__(self) -> None:
        self.log = _Log()
        self.tries = 0
        self.refused = 0
        self.fail_until = 0.0
        self._lock = threading.Lock()
        self._http = HookServer(self._post, "bench-webhook")
        self.url = self._http.url

    def _post(self, _headers: dict[str, str], body: bytes) -> int:
        failing = time.monotonic() < self.fail_until
        with self._lock:
            self.tries += 1
            self.refused += failing
        if not failing:
            self.log.add(body)  # before the answer: the sink sends the next after it
        return 500 if failing else 200

    def fail_for(self, seconds: float) -> None:
        """Answer 500 to every POST for `seconds` from now."""
        self.fail_until = time.monotonic() + seconds

    def receipts(self) -> list[Receipt]:
        """Every event accepted (answered 200), in arrival order."""
        return self.log.receipts()

    def close(self) -> None:
        self._http.close()
