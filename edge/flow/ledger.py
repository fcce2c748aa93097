"""What the node knows about each frame it was sent: pending, or settled with which status.

A frame is named by (session_id, camera_id, sequence). A frame the node holds (queued or
being detected) is PENDING: a resend of it gets QUEUED again. A settled frame is remembered
with its final status, so a resend whose final ack was lost gets that status again
(PROCESSED frames answer DUPLICATE). Settled records are bounded per stream (the oldest go
first); the agent's in-flight window is far smaller than that bound, so a frame can only be
forgotten long after its final ack left. Streams idle longer than `idle_s` with nothing
pending are forgotten entirely.

Thread-safe: the ingest thread checks and adds, the worker thread settles.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from strata.shared.contracts import frame_pb2

StreamKey = tuple[int, str]


class Seen(Enum):
    """What the ledger knows of a frame."""

    NEW = "new"
    PENDING = "pending"
    SETTLED = "settled"


@dataclass(frozen=True, slots=True)
class Lookup:
    """A check's answer: whether the frame is known, and its final status when settled."""

    seen: Seen
    status: int = frame_pb2.ACK_STATUS_UNSPECIFIED
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SettledRun:
    """Consecutive sequences of one stream settled with the same status and reason."""

    first: int
    last: int
    status: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SettledStream:
    """What a stream's settled frames were (oldest run first), for checkpoints."""

    session_id: int
    camera_id: str
    runs: tuple[SettledRun, ...]


@dataclass(slots=True)
class _Stream:
    pending: set[int] = field(default_factory=set)
    settled: OrderedDict[int, tuple[int, str]] = field(default_factory=OrderedDict)
    last_active: float = 0.0


class DeliveryLedger:
    """Pending and settled frames per (session, camera)."""

    def __init__(
        self,
        settled_per_stream: int = 4096,
        idle_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settled_per_stream = settled_per_stream
        self.idle_s = idle_s
        self._clock = clock
        self._streams: dict[StreamKey, _Stream] = {}
        self._lock = threading.Lock()
        self._next_sweep = 0.0

    def __len__(self) -> int:
        return len(self._streams)

    def lookup(self, key: StreamKey, sequence: int) -> Lookup:
        """What is known of one frame (no change)."""
        with self._lock:
            s = self._streams.get(key)
            if s is None:
                return Lookup(Seen.NEW)
            if sequence in s.pending:
                return Lookup(Seen.PENDING)
            done = s.settled.get(sequence)
            if done is not None:
                return Lookup(Seen.SETTLED, done[0], done[1])
            return Lookup(Seen.NEW)

    def is_new_stream(self, key: StreamKey) -> bool:
        """Nothing is known of this (session, camera) yet."""
        with self._lock:
            return key not in self._streams

    def add(self, key: StreamKey, sequence: int) -> None:
        """The node took the frame: pending until `settle`."""
        now = self._clock()
        with self._lock:
            s = self._streams.get(key)
            if s is None:
                s = self._streams[key] = _Stream()
            s.pending.add(sequence)
            s.last_active = now
            if now >= self._next_sweep:
                self._sweep(now)

    def withdraw(self, key: StreamKey, sequence: int) -> None:
        """The node could not hold an added frame after all: as if never seen."""
        with self._lock:
            s = self._streams.get(key)
            if s is not None:
                s.pending.discard(sequence)

    def settle(self, key: StreamKey, sequence: int, status: int, reason: str = "") -> None:
        """The frame's final status is known (and its ack about to leave)."""
        with self._lock:
            s = self._streams.get(key)
            if s is None:
                s = self._streams[key] = _Stream()
            s.pending.discard(sequence)
            s.settled[sequence] = (status, reason)
            s.last_active = self._clock()
            while len(s.settled) > self.settled_per_stream:
                s.settled.popitem(last=False)

    def pending(self, key: StreamKey) -> int:
        """Frames of a stream the node holds."""
        with self._lock:
            s = self._streams.get(key)
            return len(s.pending) if s else 0

    def forget_cameras(self, camera_ids: list[str]) -> None:
        """Drop the streams of cameras the node forgot (those with frames held stay)."""
        gone = set(camera_ids)
        with self._lock:
            for k in [k for k, s in self._streams.items() if k[1] in gone and not s.pending]:
                del self._streams[k]

    def snapshot(self, cameras: set[str] | None = None) -> list[SettledStream]:
        """The settled frames of every stream (or of these cameras'), as runs."""
        with self._lock:
            items = [
                (k, list(s.settled.items()))
                for k, s in self._streams.items()
                if cameras is None or k[1] in cameras
            ]
        out = []
        for (session, cam), settled in items:
            runs: list[SettledRun] = []
            for seq, (status, reason) in sorted(settled):
                r = runs[-1] if runs else None
                if r is not None and seq == r.last + 1 and (status, reason) == (r.status, r.reason):
                    runs[-1] = SettledRun(r.first, seq, status, reason)
                else:
                    runs.append(SettledRun(seq, seq, status, reason))
            if runs:
                out.append(SettledStream(session, cam, tuple(runs)))
        return out

    def restore(self, streams: list[SettledStream]) -> int:
        """Remember these settled frames (a checkpoint's, this node's or a failed peer's):
        a resend of one gets its final status again. Frames pending here stay pending.
        At most `settled_per_stream` of the newest per stream; returns the frames kept."""
        now = self._clock()
        n = 0
        with self._lock:
            for st in streams:
                s = self._streams.get((st.session_id, st.camera_id))
                if s is None:
                    s = self._streams[(st.session_id, st.camera_id)] = _Stream()
                s.last_active = now
                room = self.settled_per_stream
                seqs: list[tuple[int, tuple[int, str]]] = []
                for r in reversed(st.runs):  # newest first, so a huge run costs only `room`
                    for seq in range(r.last, max(r.first, r.last - room + 1) - 1, -1):
                        seqs.append((seq, (r.status, r.reason)))
                    room = self.settled_per_stream - len(seqs)
                    if room <= 0:
                        break
                for seq, done in sorted(seqs):
                    if seq not in s.pending:
                        s.settled[seq] = done
                        n += 1
                # Oldest first, as settle() keeps them, then the bound.
                s.settled = OrderedDict(sorted(s.settled.items()))
                while len(s.settled) > self.settled_per_stream:
                    s.settled.popitem(last=False)
        return n

    def _sweep(self, now: float) -> None:
        self._next_sweep = now + max(1.0, self.idle_s / 10)
        idle = [
            k
            for k, s in self._streams.items()
            if not s.pending and now - s.last_active > self.idle_s
        ]
        for k in idle:
            del self._streams[k]
