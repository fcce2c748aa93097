"""What the worker needs of a sink (MQTT, webhook): a filter and a blocking delivery."""

from __future__ import annotations

from typing import Protocol

from .events import OutboxEvent


class DeliveryError(RuntimeError):
    """The sink did not take the event; it stays undelivered and is sent again."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        # A short metric label: disconnected, timeout, http_503, refused, ...
        self.reason = reason


class Sink(Protocol):
    """One destination. Its worker thread alone calls deliver(), so a slow destination
    holds back only itself; deliver() must return or raise within its own timeouts."""

    name: str

    def start(self) -> None:
        """Connect (in the background; never raises for an unreachable destination)."""

    def skip_reason(self, ev: OutboxEvent) -> str | None:
        """None: deliver `ev`; else why this sink does not want it (counted, position moves)."""

    def deliver(self, ev: OutboxEvent) -> None:
        """Hand `ev` over and return once the destination accepted it. Raises DeliveryError."""

    def close(self) -> None:
        """Disconnect (saying goodbye where the protocol has one)."""
