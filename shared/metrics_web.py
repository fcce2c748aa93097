"""The /metrics HTTP server every tier runs: open on loopback, TLS and authentication off it.

Follows Prometheus' own exporters (exporter-toolkit's web.yml): `tls_server_config` for TLS
(mTLS with RequireAndVerifyClientCert) and `basic_auth_users` with bcrypt hashes, so the
scrape side is Prometheus' standard `scheme: https`, `tls_config` and `basic_auth`.
Invariant: a server bound off loopback either speaks TLS and authenticates every scrape, or
was told `allow_insecure`; anything else is refused before the port opens (as the cloud's
gRPC server refuses plaintext). A refused scrape gets 401 and is counted and logged.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import ipaddress
import logging
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import bcrypt
from prometheus_client import CollectorRegistry, Counter, make_wsgi_app

from .config.common import MetricsConfig, MetricsTlsConfig

log = logging.getLogger(__name__)

REALM = 'Basic realm="strata metrics"'
# A scraper that connects and says nothing must not hold a thread for ever.
REQUEST_TIMEOUT_S = 10.0
# Passwords already checked, so a 5 s scrape interval does not pay bcrypt (about 70 ms at cost
# 10) every time; bounded, and only digests of accepted user:password pairs are kept.
_CACHE_MAX = 64

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class MetricsSecurityError(ValueError):
    """A /metrics setting that cannot work or is unsafe (missing file, open bind)."""


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(cfg: MetricsConfig, section: str) -> None:
    """Refuse /metrics off loopback without TLS and authentication, unless allowed.

    `section` is where the config lives ("device.metrics"), so the message names the keys."""
    if is_loopback(cfg.host) or cfg.allow_insecure:
        return
    web = cfg.web
    if web.tls_server_config.enabled and web.authenticates:
        return
    lacking = " and ".join(
        what
        for what, ok in (
            (
                f"{section}.web.tls_server_config (cert_file, key_file)",
                web.tls_server_config.enabled,
            ),
            (f"{section}.web.basic_auth_users", web.authenticates),
        )
        if not ok
    )
    raise MetricsSecurityError(
        f"refusing to serve /metrics on {cfg.host}:{cfg.port} without TLS and authentication: "
        f"set {lacking}, bind {section}.host to 127.0.0.1, or set {section}.allow_insecure: true"
    )


def tls_context(cfg: MetricsTlsConfig) -> ssl.SSLContext | None:
    """The server's TLS context (TLS 1.2 at least, as exporter-toolkit), or None for plain."""
    if not cfg.enabled:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        if cfg.client_ca_file:
            ctx.load_verify_locations(cafile=cfg.client_ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise MetricsSecurityError(f"/metrics TLS: cannot load its files: {exc}") from exc
    if cfg.client_auth_type == "RequireAndVerifyClientCert":
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


@functools.cache
def _dummy_hash() -> bytes:
    return bcrypt.hashpw(b"strata-no-such-user", bcrypt.gensalt(rounds=10))


class BasicAuth:
    """Checks `Authorization: Basic` headers against bcrypt hashes; thread-safe."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = {u: h.encode() for u, h in users.items()}
        self._accepted: set[bytes] = set()
        self._lock = threading.Lock()

    def refusal(self, header: str) -> str | None:
        """None when the header proves a configured user, else why not."""
        scheme, _, encoded = header.partition(" ")
        if not header:
            return "no credentials"
        if scheme.lower() != "basic":
            return "not basic auth"
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return "malformed credentials"
        if not sep:
            return "malformed credentials"
        digest = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        with self._lock:
            if digest in self._accepted:
                return None
        hashed = self._users.get(user)
        # An unknown user is checked against a hash too, so it answers as slowly as a known one.
        ok = bcrypt.checkpw(password.encode(), hashed or _dummy_hash()) and hashed is not None
        if not ok:
            return "unknown user" if hashed is None else "wrong password"
        with self._lock:
            if len(self._accepted) >= _CACHE_MAX:
                self._accepted.clear()
            self._accepted.add(digest)
        return None


class _Handler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S

    def setup(self) -> None:
        super().setup()
        # The TLS handshake runs here, in the request's thread, never in the accepting one.
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a scrape every few seconds is not news."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A failed handshake or a client gone mid-answer: the client's problem, not a crash.
        log.debug("metrics: request from %s failed", client_address, exc_info=True)


class MetricsServer:
    """/metrics of one registry on cfg.host:cfg.port, with cfg.web's TLS and basic auth."""

    def __init__(self, registry: CollectorRegistry, cfg: MetricsConfig, section: str) -> None:
        check_bind(cfg, section)
        self.cfg = cfg
        self._context = tls_context(cfg.web.tls_server_config)
        users = cfg.web.basic_auth_users
        self._auth = BasicAuth(users) if users else None
        self.refused = Counter(
            "strata_metrics_scrapes_refused",
            "Requests to /metrics refused with 401, by reason.",
            ["reason"],
            registry=registry,
        )
        self._app: WsgiApp = make_wsgi_app(registry)
        self._httpd = self._bind()
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="metrics-http", daemon=True
        )

    def _bind(self) -> _Server:
        infos = socket.getaddrinfo(self.cfg.host, self.cfg.port, type=socket.SOCK_STREAM)

        class Server(_Server):
            address_family = infos[0][0]

        httpd = Server((self.cfg.host, self.cfg.port), _Handler)
        httpd.set_app(self._guarded)
        if self._context is not None:
            httpd.socket = self._context.wrap_socket(
                httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        return httpd

    def _guarded(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if self._auth is not None:
            reason = self._auth.refusal(environ.get("HTTP_AUTHORIZATION", ""))
            if reason is not None:
                self.refused.labels(reason).inc()
                log.warning("metrics: refused %s: %s", environ.get("REMOTE_ADDR", "?"), reason)
                start_response(
                    "401 Unauthorized",
                    [("WWW-Authenticate", REALM), ("Content-Type", "text/plain")],
                )
                return [b"401 Unauthorized\n"]
        return self._app(environ, start_response)

    @property
    def url(self) -> str:
        """Where the metrics are, for logs and tests."""
        scheme = "https" if self._context is not None else "http"
        host = f"[{self.cfg.host}]" if ":" in self.cfg.host else self.cfg.host
        return f"{scheme}://{host}:{self.port}/metrics"

    def start(self) -> None:
        self._thread.start()
        log.info(
            "metrics on %s (%s)",
            self.url,
            "basic auth" if self._auth is not None else "no auth",
        )

    def stop(self) -> None:
        """Stop serving and close the port."""
        self._httpd.shutdown()
        self._httpd.server_close()


def serve_or_exit(
    registry: CollectorRegistry, cfg: MetricsConfig, tier: str
) -> MetricsServer | None:
    """`serve` for a daemon's command line: an unsafe or unbindable /metrics ends the process
    with one line saying why (exit status 2), before the daemon starts work."""
    try:
        return serve(registry, cfg, f"{tier}.metrics")
    except (MetricsSecurityError, OSError) as exc:
        print(f"strata {tier}: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


def serve(registry: CollectorRegistry, cfg: MetricsConfig, section: str) -> MetricsServer | None:
    """Start /metrics as `cfg` says (port 0: off). MetricsSecurityError when it is unsafe or
    its TLS files cannot be read; OSError when the port cannot be bound."""
    if cfg.port == 0:
        return None
    server = MetricsServer(registry, cfg, section)
    server.start()
    return server
