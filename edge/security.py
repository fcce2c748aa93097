"""Who may reach the node's two ZeroMQ sockets: frames in (ROUTER) and results out (PUB).

Invariant: a socket bound off loopback is a CURVE server, or the config said
`edge.allow_insecure`; anything else is refused before either socket binds (as the cloud's
gRPC server refuses plaintext). With `edge.curve` set, both sockets take the node's key pair
and admit only the public keys in `edge.curve.clients_dir` (agents and subscribers alike);
a subscriber refused there is counted (`strata_edge_peers_refused_total{reason="subscriber"}`)
and logged, the frame socket's refusals by its peer monitor (strata.edge.ingest.peers).
"""

from __future__ import annotations

import logging
from typing import Any

from strata.edge.metrics import EdgeMetrics
from strata.shared.config.edge import EdgeConfig
from strata.shared.curve import serve_curve
from strata.shared.logs import RateLimitedLog
from strata.shared.metrics_web import is_loopback

log = logging.getLogger(__name__)

# ZAP domains: the authenticator learns from them which socket a handshake was for.
FRAMES_DOMAIN = "frames"
RESULTS_DOMAIN = "results"
# Transports that never leave the host.
_LOCAL_TRANSPORTS = ("ipc://", "inproc://")


class EdgeSecurityError(ValueError):
    """A socket the node must not open as configured (plaintext off loopback)."""


def is_local(address: str) -> bool:
    """True when a ZeroMQ bind address only accepts peers on this host: tcp:// on a
    loopback address or localhost, ipc://, inproc://. A wildcard (*, 0.0.0.0), an interface
    name or a multicast transport is not."""
    if address.startswith(_LOCAL_TRANSPORTS):
        return True
    scheme, sep, rest = address.partition("://")
    if not sep or scheme != "tcp":
        return False
    host = rest.rpartition(":")[0]
    return is_loopback(host.strip("[]"))


def check_binds(cfg: EdgeConfig) -> None:
    """Refuse plaintext sockets off loopback unless `edge.allow_insecure`; one line naming
    the sockets and the options that fix it."""
    if cfg.curve.secret_key or cfg.allow_insecure:
        return
    open_ = [
        f"{address} (edge.{key})"
        for key, address in (("listen", cfg.listen), ("publish", cfg.publish))
        if not is_local(address)
    ]
    if open_:
        raise EdgeSecurityError(
            f"refusing to serve plaintext ZeroMQ on {' and '.join(open_)}: set "
            "edge.curve.secret_key and clients_dir, bind to 127.0.0.1, or set "
            "edge.allow_insecure: true"
        )


class _SubscriberRefusals:
    """Counts and logs (rate-limited) subscribers whose key is not allowed; runs on the
    authenticator's thread."""

    def __init__(self, metrics: EdgeMetrics) -> None:
        self._metrics = metrics
        self._log = RateLimitedLog(log)

    def __call__(self, domain: str) -> None:
        if domain != RESULTS_DOMAIN:
            return  # the frame socket's monitor counts its own refusals
        self._metrics.peers_refused.labels("subscriber").inc()
        self._log.warn(
            "subscriber", "refused a results subscriber: its CURVE key is not in clients_dir"
        )


def secure(ctx: Any, router: Any, pub: Any, cfg: EdgeConfig, metrics: EdgeMetrics) -> Any:
    """Make both sockets CURVE servers when `edge.curve` is set (before they bind); returns
    the started authenticator, or None when CURVE is off."""
    if not cfg.curve.secret_key:
        return None
    return serve_curve(
        ctx,
        {FRAMES_DOMAIN: router, RESULTS_DOMAIN: pub},
        cfg.curve.secret_key,
        cfg.curve.clients_dir,
        _SubscriberRefusals(metrics),
    )
