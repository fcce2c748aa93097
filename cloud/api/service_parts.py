"""What the Analytics service hands requests to (built by the server, shared by handlers)."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass

from ..classify.batcher import DynamicBatcher
from ..identity.service import Searcher
from ..store.event_store import EventStore
from .drops import Drops
from .watch import WatchHub


@dataclass(frozen=True, slots=True)
class ServiceParts:
    """What the service hands requests to: the batcher computes, the store persists, the hub
    fans out, `drops` counts what is refused, and blocking work runs on the executor."""

    batcher: DynamicBatcher
    store: EventStore
    hub: WatchHub
    drops: Drops
    executor: Executor
    # Search by example's index (shared with the console: one copy of the matrix); None:
    # the service makes its own.
    searcher: Searcher | None = None
