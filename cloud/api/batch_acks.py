"""The answer to one CropBatch: one ack per crop, per track event and per snapshot, sent
together.

Acks are set from the batcher's, the store's and the request threads in any order; the
UplinkResponse goes out when the last one is in, and the batch's place in the stream's
window is released then.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from strata.shared.contracts import analytics_pb2, current_version, events_pb2


class BatchAcks:
    """Collects a batch's acks; a second ack for the same item is ignored."""

    def __init__(
        self,
        crops: int,
        events: int,
        send: Callable[[analytics_pb2.UplinkResponse], None],
        release: Callable[[], None],
        snapshots: int = 0,
    ) -> None:
        self._acks: list[analytics_pb2.CropAck | None] = [None] * crops
        self._event_acks: list[events_pb2.TrackEventAck | None] = [None] * events
        self._snapshot_acks: list[events_pb2.SnapshotAck | None] = [None] * snapshots
        self._left = crops + events + snapshots
        self._lock = threading.Lock()
        self._send = send
        self._release = release

    def set(self, i: int, ack: analytics_pb2.CropAck) -> None:
        """The ack of crop i."""
        with self._lock:
            if self._acks[i] is not None:
                return
            self._acks[i] = ack
            self._left -= 1
            done = self._left == 0
        if done:
            self._finish()

    def set_event(self, j: int, ack: events_pb2.TrackEventAck) -> None:
        """The ack of track event j."""
        with self._lock:
            if self._event_acks[j] is not None:
                return
            self._event_acks[j] = ack
            self._left -= 1
            done = self._left == 0
        if done:
            self._finish()

    def set_snapshot(self, k: int, ack: events_pb2.SnapshotAck) -> None:
        """The ack of snapshot k."""
        with self._lock:
            if self._snapshot_acks[k] is not None:
                return
            self._snapshot_acks[k] = ack
            self._left -= 1
            done = self._left == 0
        if done:
            self._finish()

    def _finish(self) -> None:
        self._send(
            analytics_pb2.UplinkResponse(
                version=current_version(),
                acks=[a for a in self._acks if a is not None],
                event_acks=[a for a in self._event_acks if a is not None],
                snapshot_acks=[a for a in self._snapshot_acks if a is not None],
            )
        )
        self._release()
