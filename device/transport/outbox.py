"""Per-camera outbox: a bounded spool of frames waiting to go, and the in-flight window.

A frame is the agent's until a FINAL ack names it (PROCESSED, DUPLICATE, REJECTED, SHED):
only then is it freed. QUEUED frees nothing (it only shows the edge is alive and holds
it); BUSY puts the frame back, in sequence order, and holds the camera's sending for the
edge's retry_after_ms.

Frames get their sequence number when they enter, in order. At most `window` frames are
sent and not finally acked (the edge's credits set the window, never above the configured
one); the rest wait in the spool, which drops its OLDEST frames when it holds more than its
frame or byte bound. When the oldest in-flight frame has had no word from the edge for the
ack timeout, or the edge restarted, every in-flight frame goes back to the front of the
spool (go-back-N) and is resent marked `resent`; the edge answers what it already has.

Thread-safe: the producer (gate worker) calls `put`, the sender thread everything else.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Literal

from strata.shared.config.device import SenderConfig
from strata.shared.contracts import frame_pb2

from .diskspool import DiskSpool


@dataclass(slots=True)
class Outgoing:
    """A frame on its way: header, payload (any buffer, never copied) and send history."""

    header: frame_pb2.FrameHeader
    payload: Any
    nbytes: int
    # Last send, or the last word (QUEUED) from the edge about it.
    sent_at: float = 0.0
    sends: int = 0
    # Sends the edge may have taken (not answered BUSY): a resend of such a frame is
    # marked `resent`, so an edge without a record flags its result as a redelivery.
    maybe_taken: int = 0
    # Finally acked (or dropped) while waiting in the spool: skipped there.
    done: bool = False


@dataclass(frozen=True, slots=True)
class PutResult:
    """What `put` did: the sequence given, whether it waited, what overflowed (a
    sequence per frame dropped: a run of notices repeats its sequence)."""

    sequence: int
    waited: bool
    overflowed: tuple[int, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class OutboxLimits:
    """How much one camera's outbox holds: frames in flight (the window, until credits
    shrink it), and frames or bytes spooled behind them."""

    window: int
    max_frames: int
    max_bytes: int

    def __post_init__(self) -> None:
        if self.window < 1 or self.max_frames < 1 or self.max_bytes < 1:
            raise ValueError("window, max_frames and max_bytes must be positive")

    @classmethod
    def from_config(cls, cfg: SenderConfig) -> OutboxLimits:
        """The limits device.sender sets (spool_mb in MiB)."""
        return cls(cfg.window, cfg.spool_frames, int(cfg.spool_mb * 1024 * 1024))


class Outbox:
    """Spool plus in-flight window of one camera."""

    def __init__(
        self,
        camera_id: str,
        limits: OutboxLimits,
        first_sequence: int = 1,
        disk: DiskSpool | None = None,
        session_id: int = 0,
    ) -> None:
        self.camera_id = camera_id
        self.max_window = limits.window
        self.window = limits.window
        self.max_frames = limits.max_frames
        self.max_bytes = limits.max_bytes
        self.session_id = session_id
        self._next_seq = first_sequence
        self._spool: deque[Outgoing] = deque()
        self._spooled = 0
        self._spool_bytes = 0
        self._inflight: OrderedDict[int, Outgoing] = OrderedDict()
        # Header-only SKIPPED notices in flight: they take no credit (the edge holds no
        # pixels for them), so they do not count against the window.
        self._skips = 0
        # Every frame not yet finally acked, by sequence (spooled or in flight).
        self._items: dict[int, Outgoing] = {}
        self._lock = threading.Lock()
        self.hold_until = 0.0
        self.disk = disk
        self.restored = 0
        if disk is not None:
            # Frames a previous run never got acked go first, under their own sequences and
            # session (the edge may know them: they are resends).
            for header, payload in disk.load():
                item = Outgoing(header, payload, len(payload), maybe_taken=1)
                self._append(item)
                self._next_seq = max(self._next_seq, header.sequence + 1)
            self._trim()
            self.restored = self._spooled

    def _append(self, item: Outgoing) -> None:
        self._spool.append(item)
        self._spooled += 1
        self._spool_bytes += item.nbytes
        self._items[item.header.sequence] = item

    def put(self, header: frame_pb2.FrameHeader, payload: Any) -> PutResult:
        """Give the frame the next sequence and spool it; drop the oldest on overflow."""
        nbytes = memoryview(payload).nbytes
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            header.sequence = seq
            header.payload_size = nbytes
            if self.session_id and not header.session_id:
                header.session_id = self.session_id
            if self.disk is not None:
                self.disk.save(header, payload)
            # It waits when the window is already taken: the edge is slow, gone or not acking.
            waited = self._spooled + len(self._inflight) >= self.window
            self._append(Outgoing(header, payload, nbytes))
            dropped = self._trim()
        return PutResult(seq, waited, dropped)

    def _drop(self, item: Outgoing) -> None:
        item.done = True
        self._spooled -= 1
        self._spool_bytes -= item.nbytes
        self._items.pop(item.header.sequence, None)
        if self.disk is not None:
            self.disk.remove(item.header.sequence)

    def _pop_live(self, newest: bool = False) -> Outgoing | None:
        while self._spool:
            item = self._spool.pop() if newest else self._spool.popleft()
            if not item.done:
                return item
        return None

    def _trim(self, limit: int | None = None, newest: bool = False) -> tuple[int, ...]:
        dropped: list[int] = []
        frames = self.max_frames if limit is None else min(limit, self.max_frames)
        # Keep at least the newest frame, even if it alone exceeds the byte bound.
        while self._spooled > max(1, frames) or (
            self._spooled > 1 and self._spool_bytes > self.max_bytes
        ):
            old = self._pop_live(newest)
            if old is None:
                break
            self._drop(old)
            # One entry per frame: a run of dropped frames' notices (earlier_skipped) is
            # as many frames as it tells, all under its one sequence.
            dropped.extend([old.header.sequence] * (1 + len(old.header.earlier_skipped)))
        return tuple(dropped)

    def limit_waiting(self, limit: int, policy: Literal["oldest", "newest"]) -> tuple[int, ...]:
        """Drop spooled frames beyond `limit` by `policy`; returns their sequences."""
        with self._lock:
            if self._spooled <= limit:
                return ()
            return self._trim(limit, newest=policy == "newest")

    def take(self, now: float) -> Outgoing | None:
        """The next frame to send, if the window has room and the edge is not holding us
        off (BUSY); it moves into the window, marked `resent` when sent before."""
        with self._lock:
            if now < self.hold_until:
                return None
            item = self._pop_live()
            if item is None:
                return None
            skip = _is_skip(item)
            if not skip and len(self._inflight) - self._skips >= self.window:
                self._spool.appendleft(item)
                return None
            self._skips += skip
            self._spooled -= 1
            self._spool_bytes -= item.nbytes
            item.header.resent = item.maybe_taken > 0
            item.sent_at = now
            item.sends += 1
            item.maybe_taken += 1
            self._inflight[item.header.sequence] = item
            return item

    def _back(self, items: list[Outgoing]) -> None:
        """Put in-flight frames back at the front of the spool, in sequence order."""
        for item in sorted(items, key=lambda i: i.header.sequence, reverse=True):
            self._spool.appendleft(item)
            self._spooled += 1
            self._spool_bytes += item.nbytes

    def _left_flight(self, item: Outgoing) -> None:
        self._skips -= _is_skip(item)

    def unsend(self, item: Outgoing) -> None:
        """A `take`n frame could not be sent: back to the front of the spool."""
        with self._lock:
            if self._inflight.pop(item.header.sequence, None) is None:
                return
            self._left_flight(item)
            item.sends -= 1
            item.maybe_taken -= 1
            self._back([item])

    def ack(self, sequence: int) -> Outgoing | None:
        """Free a finally acked frame; None when it is not held (a late duplicate ack)."""
        with self._lock:
            item = self._items.pop(sequence, None)
            if item is None:
                return None
            if self._inflight.pop(sequence, None) is not None:
                self._left_flight(item)
            else:
                # Acked while waiting for a resend: skip it there.
                item.done = True
                self._spooled -= 1
                self._spool_bytes -= item.nbytes
        if self.disk is not None:
            self.disk.remove(sequence)
        return item

    def queued(self, sequence: int, now: float) -> bool:
        """The edge holds the frame (QUEUED): it is alive; the ack timeout starts again."""
        with self._lock:
            item = self._inflight.get(sequence)
            if item is None:
                return False
            item.sent_at = now
            # Everything sent before it is older news; move it to the end of the
            # timeout order so the oldest-first check stays right.
            self._inflight.move_to_end(sequence)
            return True

    def busy(self, sequence: int, now: float, retry_after_s: float) -> bool:
        """The edge did not take the frame: back to the spool; hold off `retry_after_s`."""
        with self._lock:
            item = self._inflight.pop(sequence, None)
            if item is None:
                return False
            self._left_flight(item)
            item.maybe_taken -= 1
            self._back([item])
            self.hold_until = max(self.hold_until, now + retry_after_s)
            return True

    def set_window(self, credits: int) -> None:
        """The edge's credit for this camera (never above the configured window)."""
        if credits > 0:
            self.window = max(1, min(self.max_window, credits))

    def expire(self, now: float, timeout: float) -> tuple[int, tuple[int, ...]]:
        """Go back N when the oldest in-flight frame has had no word for `timeout`.

        Returns how many frames were put back and which spooled ones overflowed.
        """
        with self._lock:
            if not self._inflight:
                return 0, ()
            oldest = min(i.sent_at for i in self._inflight.values())
            if now - oldest < timeout:
                return 0, ()
            return self._go_back()

    def resend_all(self) -> tuple[int, tuple[int, ...]]:
        """The edge restarted: everything in flight goes back to be resent."""
        with self._lock:
            return self._go_back()

    def _go_back(self) -> tuple[int, tuple[int, ...]]:
        back = list(self._inflight.values())
        self._inflight.clear()
        self._skips = 0
        self._back(back)
        return len(back), self._trim()

    @property
    def spooled(self) -> int:
        """Frames waiting to be sent."""
        return self._spooled

    @property
    def inflight(self) -> int:
        """Frames sent and not yet finally acked."""
        return len(self._inflight)

    @property
    def pending(self) -> int:
        """Messages not yet finally acked, spooled or in flight."""
        with self._lock:
            return self._spooled + len(self._inflight)

    def pending_frames(self) -> int:
        """Source frames those messages stand for (a run of notices: the frames it tells)."""
        with self._lock:
            return sum(1 + len(i.header.earlier_skipped) for i in self._items.values())


def _is_skip(item: Outgoing) -> bool:
    return item.header.kind == frame_pb2.FRAME_KIND_SKIPPED
