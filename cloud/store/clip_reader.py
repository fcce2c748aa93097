"""A stored clip's bytes as an async stream of bounded pieces (GetClip, the console).

The bytes are read from the store a few chunk rows at a time on the executor, never the
whole clip at once, and cut into pieces of at most `piece` bytes, so a 64 MB clip costs
a few chunks of memory however it is served.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from dataclasses import dataclass

from .event_store import EventStore

# Chunk rows read per store round trip (a row is one uploaded chunk, at most a gRPC message).
ROWS_PER_READ = 2


class ClipGoneError(LookupError):
    """The clip's bytes went (retention) while they were being read."""


@dataclass(frozen=True, slots=True)
class ClipSpan:
    """Bytes [start, end) of a clip, served in pieces of at most `piece` bytes."""

    clip_id: str
    start: int
    end: int
    piece: int


async def clip_bytes(
    store: EventStore, executor: Executor, span: ClipSpan
) -> AsyncIterator[tuple[int, bytes]]:
    """(offset, bytes) pieces covering the span in order. Raises ClipGoneError, StoreError."""
    loop = asyncio.get_running_loop()
    pos = span.start
    while pos < span.end:
        rows = await loop.run_in_executor(
            executor, store.clip_pieces, span.clip_id, pos, ROWS_PER_READ
        )
        if not rows:
            raise ClipGoneError(f"clip {span.clip_id} has no bytes at {pos} (pruned?)")
        for offset, data in rows:
            if offset > pos:
                raise ClipGoneError(f"clip {span.clip_id} has no bytes at {pos} (pruned?)")
            view = memoryview(data)[pos - offset : min(len(data), span.end - offset)]
            for lo in range(0, len(view), span.piece):
                part = bytes(view[lo : lo + span.piece])
                yield pos, part
                pos += len(part)
            if pos >= span.end:
                return
