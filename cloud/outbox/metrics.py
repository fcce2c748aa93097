"""Metrics of the event sinks, one label per sink (registered with the cloud's own)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from strata.shared.metrics import LATENCY_BUCKETS

# Capture -> accepted by the sink spans seconds to hours (an outage's backlog).
DELIVERY_BUCKETS = (*LATENCY_BUCKETS, 30.0, 60.0, 300.0, 1800.0, 7200.0)


class SinkMetrics:
    """strata_cloud_sink_*{sink}."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.delivered = Counter(
            "strata_cloud_sink_delivered",
            "Events the sink accepted (broker ack, 2xx answer).",
            ["sink"],
            registry=r,
        )
        self.failed = Counter(
            "strata_cloud_sink_failed",
            "Failed delivery attempts, by reason (the event is kept and sent again).",
            ["sink", "reason"],
            registry=r,
        )
        self.skipped = Counter(
            "strata_cloud_sink_skipped",
            "Events not sent on purpose, by reason (filtered, cooldown, duplicate).",
            ["sink", "reason"],
            registry=r,
        )
        self.dropped = Counter(
            "strata_cloud_sink_dropped",
            "Undelivered events given up because the backlog passed cloud.sinks.max_backlog.",
            ["sink"],
            registry=r,
        )
        self.backlog = Gauge(
            "strata_cloud_sink_backlog",
            "Stored events the sink has not delivered yet (all replicas).",
            ["sink"],
            registry=r,
        )
        self.oldest_age = Gauge(
            "strata_cloud_sink_oldest_undelivered_seconds",
            "Age of the oldest stored event the sink has not delivered (0: none).",
            ["sink"],
            registry=r,
        )
        self.connected = Gauge(
            "strata_cloud_sink_connected",
            "1 while the sink's broker or endpoint answers, else 0.",
            ["sink"],
            registry=r,
        )
        self.latency = Histogram(
            "strata_cloud_sink_delivery_seconds",
            "From the event's capture (or storing) to its acceptance by the sink.",
            ["sink"],
            buckets=DELIVERY_BUCKETS,
            registry=r,
        )
