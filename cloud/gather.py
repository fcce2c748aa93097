"""Take a batch from a queue: up to a size, or until a deadline, whichever comes first."""

from __future__ import annotations

import queue
import time
from typing import TypeVar

T = TypeVar("T")


def gather(q: queue.Queue[T], first: T, limit: int, close_at: float) -> list[T]:
    """`first` plus whatever else `q` yields before `close_at` (time.monotonic), at most `limit`.

    Items already waiting are taken without sleeping; only an empty queue waits.
    """
    items = [first]
    while len(items) < limit:
        try:
            items.append(q.get_nowait())
            continue
        except queue.Empty:
            pass
        remaining = close_at - time.monotonic()
        if remaining <= 0:
            break
        try:
            items.append(q.get(timeout=remaining))
        except queue.Empty:
            break
    return items
