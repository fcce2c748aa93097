"""A SUB socket on edges' result PUB sockets, read on its own thread.

The demo, the fleet and overload benchmarks and the delivery fault test all count what the
edges publish; they differ only in what they keep of each result (`on_result`). An edge with
`edge.curve` on admits only subscribers whose public key is in its clients folder: pass
`curve` (the subscriber's key pair and the edge's public key).
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from strata.shared.contracts import frame_pb2
from strata.shared.curve import ClientKeys, connect_curve
from strata.shared.wire import is_events_topic

log = logging.getLogger(__name__)


class ResultSubscriber(ABC):
    """Subscribes to every camera's results on `publishers` and hands each one, parsed,
    to `on_result` under `self.lock`. Subclasses set their own state before calling
    `super().__init__`, which starts the thread unless `start=False`."""

    def __init__(
        self,
        publishers: Sequence[str],
        *,
        reconnect_ms: int = 10,
        start: bool = True,
        name: str = "results",
        curve: ClientKeys | None = None,
    ) -> None:
        import zmq

        self._ctx: Any = zmq.Context()
        self._sock: Any = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        # A test or bench must see every result: no high-water mark on the reading side.
        self._sock.setsockopt(zmq.RCVHWM, 0)
        # Back at once after an edge restart on the same address.
        self._sock.setsockopt(zmq.RECONNECT_IVL, reconnect_ms)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        if curve is not None:  # the edges' edge.curve is on: this key must be in clients_dir
            connect_curve(self._sock, curve.secret_key, curve.server_key)
        for address in publishers:
            self._sock.connect(address)
        self.lock = threading.Lock()
        self.malformed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        if start:
            self._thread.start()

    def start(self) -> None:
        """Start receiving (when built with `start=False`)."""
        if not self._thread.is_alive():
            self._thread.start()

    @abstractmethod
    def on_result(self, msg: frame_pb2.FrameDetections, received_ns: int) -> None:
        """Keep what the subclass needs of one result (called with `self.lock` held; `msg`
        is reused for the next result, so copy what must outlive the call)."""

    def _run(self) -> None:
        import zmq

        msg = frame_pb2.FrameDetections()
        while not self._stop.is_set():
            if not self._sock.poll(50):
                continue
            while True:  # drain what is queued before polling again
                try:
                    parts = self._sock.recv_multipart(flags=zmq.NOBLOCK)
                except zmq.Again:
                    break
                if is_events_topic(parts[0]):  # track events: not a frame's result
                    continue
                now_ns = time.time_ns()
                try:
                    # [topic (camera id + NUL), FrameDetections]: the message is the last part.
                    msg.ParseFromString(parts[-1])
                except Exception as exc:  # a foreign publisher on the port: count, go on
                    self.malformed += 1
                    log.warning("a results message did not parse (%s); skipped", exc)
                    continue
                with self.lock:
                    self.on_result(msg, now_ns)

    def close(self) -> None:
        """Stop the thread and close the socket."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        self._sock.close(0)
        self._ctx.term()
