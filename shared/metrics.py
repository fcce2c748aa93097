"""Prometheus metrics: one registry per component, so components (and tests) never collide."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger(__name__)

# Latency buckets in seconds, from sub-millisecond gates to multi-second cloud round trips.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> int | None:
    """Expose `registry` on http://host:port/metrics; port 0 means off. Returns the port."""
    if port == 0:
        return None
    server, _thread = start_http_server(port, addr=host, registry=registry)
    bound = int(server.server_address[1])
    log.info("metrics on http://%s:%d/metrics", host, bound)
    return bound


def sample(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    """Current value of one sample (0.0 when absent): for tests, the CLI and the demo."""
    value = registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else float(value)
