"""How an Uplink item (a crop, a track event, a snapshot) is answered: the part the three
kinds share.

Each kind says how it names, counts and acks one of its items; this says when: INVALID (final,
with the reason; counted and logged) for bad input, RETRY with retry_after_ms when the store or
the batcher cannot take it now, and RETRY `internal` when a step raises, so a bug still answers
the item instead of hanging its batch. StoredItemAcks adds the hand-over of an item stored as it
came (a track event, a snapshot) and its STORED or DUPLICATE from the store's answer. Every item
of a batch gets exactly one ack (BatchAcks ignores a second).
"""

from __future__ import annotations

import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, Protocol, TypeVar

from ..metrics import CloudMetrics
from ..store.event_store import StoreBusyError
from .batch_acks import BatchAcks
from .drops import Drops

log = logging.getLogger(__name__)

UPLINK = "Uplink"


class Refusal(enum.Enum):
    """Why an item's ack is not STORED: bad for good, or not now."""

    INVALID = "invalid"
    RETRY = "retry"


class FromEdge(Protocol):
    """What every Uplink item carries: where it came from."""

    @property
    def edge_id(self) -> str: ...

    @property
    def camera_id(self) -> str: ...


ItemT = TypeVar("ItemT", bound=FromEdge)
GotT = TypeVar("GotT")


class ItemAcks(ABC, Generic[ItemT]):
    """Refuses the items of one kind; subclasses say what the kind's items and acks are."""

    what: str  # "track event": how log lines name an item
    code_prefix: str  # "event_": put before an INVALID item's drop code

    def __init__(self, drops: Drops, metrics: CloudMetrics, retry_ms: int) -> None:
        self.drops = drops
        self.metrics = metrics
        self.retry_ms = retry_ms

    @abstractmethod
    def key(self, item: ItemT) -> str:
        """The item's id, as its ack and the log name it."""

    @abstractmethod
    def ack(
        self,
        acks: BatchAcks,
        i: int,
        item: ItemT,
        refusal: Refusal,
        reason: str,
        after_ms: int = 0,
    ) -> None:
        """Set item i's ack in `acks`: INVALID, or RETRY after `after_ms`."""

    def count(self, item: ItemT, refusal: Refusal, code: str) -> None:
        """Count a refused item in the kind's own metrics (Drops counts every refusal)."""

    def invalid(self, i: int, item: ItemT, acks: BatchAcks, code: str, reason: str) -> None:
        """Refuse item i for good: counted, logged, acked INVALID with the reason."""
        self.count(item, Refusal.INVALID, code)
        self.drops(
            UPLINK,
            f"{self.code_prefix}{code}",
            f"{self.what} {self.key(item)!r} of camera {item.camera_id!r} from edge "
            f"{item.edge_id!r}: {reason}",
        )
        self.ack(acks, i, item, Refusal.INVALID, reason)

    def retry(
        self,
        i: int,
        item: ItemT,
        acks: BatchAcks,
        code: str,
        reason: str,
        after_ms: int | None = None,
    ) -> None:
        """Not now: counted, logged, acked RETRY with a hint (the service's unless given)."""
        self.count(item, Refusal.RETRY, code)
        self.drops(UPLINK, code, f"{self.what} {self.key(item)!r}: {reason}")
        wait = self.retry_ms if after_ms is None else after_ms
        self.ack(acks, i, item, Refusal.RETRY, reason, wait)

    def guarded(self, i: int, item: ItemT, acks: BatchAcks, step: Callable[[], None]) -> None:
        """Run one step of item i; a bug still answers it (RETRY) instead of hanging."""
        try:
            step()
        except Exception as exc:
            log.exception("uplink %s %s failed", self.what, self.key(item))
            self.retry(i, item, acks, "internal", f"internal: {exc}")


class StoredItemAcks(ItemAcks[ItemT], Generic[ItemT, GotT]):
    """Also hands items to the store's writer as they came and acks them from its answer."""

    @abstractmethod
    def ack_stored(self, acks: BatchAcks, i: int, item: ItemT, got: GotT) -> None:
        """Count the store's answer (STORED or DUPLICATE) and set item i's ack from it."""

    def submit(
        self, i: int, item: ItemT, acks: BatchAcks, submit: Callable[[ItemT], Future[GotT]]
    ) -> bool:
        """Hand item i to the store's writer, acked from its answer; False (acked RETRY)
        when the store is busy."""
        try:
            fut = submit(item)
        except StoreBusyError as exc:
            self.retry(i, item, acks, "store_busy", f"store_busy: {exc}")
            return False
        fut.add_done_callback(
            lambda f: self.guarded(i, item, acks, lambda: self._stored(i, item, acks, f))
        )
        return True

    def _stored(self, i: int, item: ItemT, acks: BatchAcks, fut: Future[GotT]) -> None:
        exc = fut.exception()
        if exc is not None:
            self.retry(i, item, acks, "store_error", f"store_error: {exc}")
            return
        got = fut.result()
        self.metrics.ok(UPLINK)  # before the ack: the batch's answer may go out with it
        self.ack_stored(acks, i, item, got)
