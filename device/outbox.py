"""Per-camera outbox: a bounded spool of frames waiting to go, and the in-flight window.

Frames get their sequence number when they enter, in order. At most `window` frames are
sent and unacked; the rest wait in the spool, which drops its OLDEST frames when it holds
more than its frame or byte bound. When the oldest in-flight frame has waited longer than
the ack timeout, every in-flight frame goes back to the front of the spool (go-back-N): on
one ZeroMQ connection frames are lost as a suffix, so resending from the oldest unacked
frame keeps delivery in order, and the edge discards what it already has by sequence.

Thread-safe: the producer (gate worker) calls `put`, the sender thread everything else.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from strata.shared.contracts import frame_pb2

from .diskspool import DiskSpool


@dataclass(slots=True)
class Outgoing:
    """A frame on its way: header, payload (any buffer, never copied) and send history."""

    header: frame_pb2.FrameHeader
    payload: Any
    nbytes: int
    sent_at: float = 0.0
    sends: int = 0


@dataclass(frozen=True, slots=True)
class PutResult:
    """What `put` did: the sequence given, whether it waited, what overflowed."""

    sequence: int
    waited: bool
    overflowed: tuple[int, ...] = field(default=())


class Outbox:
    """Spool plus in-flight window of one camera."""

    def __init__(
        self,
        camera_id: str,
        window: int,
        max_frames: int,
        max_bytes: int,
        first_sequence: int = 1,
        disk: DiskSpool | None = None,
    ) -> None:
        if window < 1 or max_frames < 1 or max_bytes < 1:
            raise ValueError("window, max_frames and max_bytes must be positive")
        self.camera_id = camera_id
        self.window = window
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self._next_seq = first_sequence
        self._spool: deque[Outgoing] = deque()
        self._spool_bytes = 0
        self._inflight: OrderedDict[int, Outgoing] = OrderedDict()
        self._lock = threading.Lock()
        self.disk = disk
        self.restored = 0
        if disk is not None:
            # Frames a previous run never got acked go first, under their own sequences.
            for header, payload in disk.load():
                self._spool.append(Outgoing(header, payload, len(payload)))
                self._spool_bytes += len(payload)
                self._next_seq = max(self._next_seq, header.sequence + 1)
            self._trim()
            self.restored = len(self._spool)

    def put(self, header: frame_pb2.FrameHeader, payload: Any) -> PutResult:
        """Give the frame the next sequence and spool it; drop the oldest on overflow."""
        nbytes = memoryview(payload).nbytes
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            header.sequence = seq
            header.payload_size = nbytes
            if self.disk is not None:
                self.disk.save(header, payload)
            # It waits when the window is already taken: the edge is slow, gone or not acking.
            waited = len(self._spool) + len(self._inflight) >= self.window
            self._spool.append(Outgoing(header, payload, nbytes))
            self._spool_bytes += nbytes
            dropped = self._trim()
        return PutResult(seq, waited, dropped)

    def _trim(self) -> tuple[int, ...]:
        dropped: list[int] = []
        # Keep at least the newest frame, even if it alone exceeds the byte bound.
        while len(self._spool) > 1 and (
            len(self._spool) > self.max_frames or self._spool_bytes > self.max_bytes
        ):
            old = self._spool.popleft()
            self._spool_bytes -= old.nbytes
            dropped.append(old.header.sequence)
            if self.disk is not None:
                self.disk.remove(old.header.sequence)
        return tuple(dropped)

    def take(self, now: float) -> Outgoing | None:
        """The next frame to send, if the window has room; it moves into the window."""
        with self._lock:
            if not self._spool or len(self._inflight) >= self.window:
                return None
            item = self._spool.popleft()
            self._spool_bytes -= item.nbytes
            item.sent_at = now
            item.sends += 1
            self._inflight[item.header.sequence] = item
            return item

    def unsend(self, item: Outgoing) -> None:
        """A `take`n frame could not be sent: back to the front of the spool."""
        with self._lock:
            if self._inflight.pop(item.header.sequence, None) is None:
                return
            item.sends -= 1
            self._spool.appendleft(item)
            self._spool_bytes += item.nbytes

    def ack(self, sequence: int) -> Outgoing | None:
        """Free an acked frame; None when it was not in flight (a late duplicate ack)."""
        with self._lock:
            item = self._inflight.pop(sequence, None)
        if item is not None and self.disk is not None:
            self.disk.remove(sequence)
        return item

    def expire(self, now: float, timeout: float) -> tuple[int, tuple[int, ...]]:
        """Go back N when the oldest in-flight frame is older than `timeout`.

        Returns how many frames were put back and which spooled ones overflowed.
        """
        with self._lock:
            if not self._inflight:
                return 0, ()
            oldest = next(iter(self._inflight.values()))
            if now - oldest.sent_at < timeout:
                return 0, ()
            back = list(self._inflight.values())
            self._inflight.clear()
            for item in reversed(back):
                self._spool.appendleft(item)
                self._spool_bytes += item.nbytes
            return len(back), self._trim()

    @property
    def spooled(self) -> int:
        """Frames waiting to be sent."""
        return len(self._spool)

    @property
    def inflight(self) -> int:
        """Frames sent and not yet acked."""
        return len(self._inflight)

    @property
    def pending(self) -> int:
        """Frames not yet acked, spooled or in flight."""
        with self._lock:
            return len(self._spool) + len(self._inflight)
