"""`Outbox`: the configured sinks (cloud.sinks), each with its worker thread, started beside
the gRPC server and stopped before the store closes."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Sequence

from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.config.sinks import SinksConfig

from ..security import SecurityError
from .metrics import SinkMetrics
from .mqtt import MqttSink
from .sink import Sink
from .snapshots import SnapshotReader
from .webhook import WebhookSink
from .worker import SinkWorker, WorkerParts

log = logging.getLogger(__name__)


class SinkConfigError(SecurityError):
    """A sink cannot be built from its config (a secret file that cannot be read)."""


def replica_id() -> str:
    """This process's lease owner id: unique across replicas and restarts."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Outbox:
    """Every configured sink; start() and stop() them together."""

    def __init__(
        self,
        cfg: SinksConfig,
        store: CloudStoreConfig,
        metrics: SinkMetrics,
        tracked: Sequence[str],
    ) -> None:
        """`tracked`: the labels Home Assistant discovery announces (objects.track)."""
        sinks: list[Sink] = []
        try:
            # Each MQTT sink reads the snapshots it publishes on its own connection.
            sinks += [MqttSink(c, metrics, SnapshotReader(store), tracked) for c in cfg.mqtt]
            sinks += [WebhookSink(c, metrics) for c in cfg.webhooks]
        except ValueError as exc:
            raise SinkConfigError(str(exc)) from None
        parts = WorkerParts(store, cfg, metrics, replica_id())
        self.workers = [SinkWorker(s, parts) for s in sinks]

    def start(self) -> None:
        """Connect every sink and start delivering."""
        for w in self.workers:
            w.start()
        if self.workers:
            log.info("outbox: %s", ", ".join(w.sink.name for w in self.workers))

    def stop(self) -> None:
        """Stop every worker (leases are given back) and disconnect."""
        for w in self.workers:
            w.stop()
