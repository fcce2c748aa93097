"""What happens to the frame socket's connections (a ZeroMQ socket monitor), counted.

Refusals ZeroMQ makes on the node's behalf never reach ingest as messages: a client whose
CURVE key is not allowed (EVENT_HANDSHAKE_FAILED_AUTH), a peer that does not speak ZMTP or
the configured mechanism (HANDSHAKE_FAILED_PROTOCOL / NO_DETAIL). They are counted here by
reason, with a rate-limited log line. A message part over ZMQ_MAXMSGSIZE makes libzmq drop
the connection unread; libzmq reports that only as a disconnect, so disconnects are counted
too (a peer closing normally counts the same).
"""

from __future__ import annotations

import logging
from typing import Any

import zmq
from strata.edge.metrics import EdgeMetrics
from strata.shared.logs import RateLimitedLog
from zmq.utils.monitor import recv_monitor_message

log = logging.getLogger(__name__)


class PeerMonitor:
    """Reads the monitor socket of the ROUTER; `poll()` handles what is waiting."""

    def __init__(self, sock: Any, metrics: EdgeMetrics) -> None:
        self.metrics = metrics
        self._reasons = {
            zmq.EVENT_HANDSHAKE_FAILED_AUTH: "auth",
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "handshake",
            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake",
        }
        self._events = {
            zmq.EVENT_HANDSHAKE_SUCCEEDED: "connected",
            zmq.EVENT_DISCONNECTED: "disconnected",
        }
        self.sock = sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_FAILED_AUTH
            | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
            | zmq.EVENT_HANDSHAKE_SUCCEEDED
            | zmq.EVENT_DISCONNECTED
        )
        self._owner = sock
        self._log = RateLimitedLog(log)
        self._info = RateLimitedLog(log, level=logging.INFO)

    def poll(self) -> None:
        """Count every event waiting on the monitor socket (never blocks)."""
        while True:
            try:
                msg = recv_monitor_message(self.sock, zmq.NOBLOCK)
            except zmq.Again:
                return
            event = msg["event"]
            reason = self._reasons.get(event)
            if reason is not None:
                self.metrics.peers_refused.labels(reason).inc()
                self._log.warn(
                    reason,
                    "refused a connection on %s (%s, code %s)",
                    msg["endpoint"].decode(errors="replace"),
                    "CURVE key not allowed" if reason == "auth" else "handshake failed",
                    msg["value"],
                )
                continue
            name = self._events.get(event)
            if name is not None:
                self.metrics.peer_events.labels(name).inc()
                if name == "disconnected":
                    self._info.warn(
                        name,
                        "a peer disconnected from %s (closed, or dropped by the node for a "
                        "message part over max_payload_mib)",
                        msg["endpoint"].decode(errors="replace"),
                    )

    def close(self) -> None:
        try:
            self._owner.disable_monitor()
        except Exception:  # the context may already be gone at shutdown
            pass
        self.sock.close(0)
