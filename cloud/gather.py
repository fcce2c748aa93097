"""Take a batch from a queue: up to a size, or until a deadline, whichever comes first."""

from __future__ import annotations

import queue
import time
from typing import TypeVar

T = TypeVar("T")


def gather(
    q: queue.Queue[T], first: T, limit: int, close_at: float, wait_for: int | None = None
) -> list[T]:
    """`first` plus whatever else `q` yields before `close_at` (time.monotonic), at most `limit`.

    Items already waiting are taken without sleeping; only an empty queue waits, and only while
    fewer than `wait_for` items (default: `limit`) are gathered.
    """
    items = [first]
    enough = limit if wait_for is None else wait_for
    while len(items) < limit:
        try:
            items.append(q.get_nowait())
            continue
        except queue.Empty:
            pass
        if len(items) >= enough:
            break
        remaining = close_at - time.monotonic()
        if remaining <= 0:
            break
        try:
            items.append(q.get(timeout=remaining))
        except queue.Empty:
            break
    return items
