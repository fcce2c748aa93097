"""Who may use the console: the bind rules (as gRPC's), TLS, and the token or session cookie.

Invariant: a console bound off loopback speaks TLS and asks every request for the token (a
`Authorization: Bearer TOKEN` header, or the session cookie a login with the token set),
unless `cloud.http.allow_insecure` says otherwise; anything else is refused before the port
opens. The session cookie is an expiry signed with the token (HMAC), so every replica that
shares the token accepts it and changing the token ends every session.
"""

from __future__ import annotations

import hashlib
import hmac
import ssl
import time
from dataclasses import dataclass

from strata.shared.config.cloud import CloudConfig, CloudTlsConfig

from ..security import SecurityError, is_loopback, split_listen

COOKIE = "strata_session"


@dataclass(frozen=True, slots=True)
class ConsoleSecurity:
    """What the console needs to serve safely, read and checked before anything binds."""

    listen: str
    ssl_context: ssl.SSLContext | None
    token: str | None
    session_s: float

    @property
    def tls(self) -> bool:
        """Whether the console speaks TLS."""
        return self.ssl_context is not None


def _tls_files(cfg: CloudConfig) -> CloudTlsConfig:
    own = cfg.http.tls
    return own if own.cert_file or own.key_file else cfg.tls


def ssl_context(tls: CloudTlsConfig) -> ssl.SSLContext | None:
    """The server's TLS context (TLS 1.2 at least; mTLS with client_ca_file), None for plain."""
    if not tls.cert_file and not tls.key_file:
        return None
    if not (tls.cert_file and tls.key_file):
        raise SecurityError("cloud.http.tls needs both cert_file and key_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
        if tls.client_ca_file:
            ctx.load_verify_locations(cafile=tls.client_ca_file)
            ctx.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise SecurityError(f"console TLS: cannot load its files: {exc}") from exc
    return ctx


def _token(cfg: CloudConfig) -> str | None:
    path = cfg.http.token_file or cfg.auth.token_file
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise SecurityError(f"cannot read console token file {path}: {exc.strerror}") from exc
    if not token:
        raise SecurityError(f"console token file {path} is empty")
    return token


def console_security(cfg: CloudConfig) -> ConsoleSecurity | None:
    """The console's checked settings (None: cloud.http.enabled is off). Raises SecurityError
    for a setting that cannot work or is unsafe: off loopback without TLS or without a token."""
    http = cfg.http
    if not http.enabled:
        return None
    host, _ = split_listen(http.listen)
    ctx = ssl_context(_tls_files(cfg))
    token = _token(cfg)
    if not is_loopback(host) and not http.allow_insecure and (ctx is None or token is None):
        lacking = " and ".join(
            what
            for what, ok in (
                ("cloud.http.tls (or cloud.tls) cert_file and key_file", ctx is not None),
                ("cloud.http.token_file (or cloud.auth.token_file)", token is not None),
            )
            if not ok
        )
        raise SecurityError(
            f"refusing to serve the console on {http.listen} without TLS and a token: set "
            f"{lacking}, listen on 127.0.0.1, or set cloud.http.allow_insecure: true"
        )
    return ConsoleSecurity(http.listen, ctx, token, http.session_hours * 3600.0)


class Gate:
    """Checks a request's bearer header or session cookie against the token; no token: open."""

    def __init__(self, token: str | None, session_s: float) -> None:
        self._token = token
        self._bearer = f"Bearer {token}".encode() if token else b""
        self.session_s = session_s

    @property
    def open(self) -> bool:
        """True when no token is configured (loopback, or allow_insecure)."""
        return self._token is None

    def _sign(self, expiry: str) -> str:
        assert self._token is not None
        msg = f"strata-console-session:{expiry}".encode()
        return hmac.new(self._token.encode(), msg, hashlib.sha256).hexdigest()

    def refusal(self, authorization: str, cookie: str) -> str | None:
        """None when the request may pass, else why not (for the log and the metric)."""
        if self._token is None:
            return None
        if authorization:
            if hmac.compare_digest(authorization.encode(), self._bearer):
                return None
            return "wrong bearer token"
        if cookie:
            expiry, _, mac = cookie.partition(".")
            if not expiry.isdigit() or not hmac.compare_digest(mac, self._sign(expiry)):
                return "bad session cookie"
            if int(expiry) < time.time():
                return "session expired"
            return None
        return "no token or session"

    def check_login(self, token: str) -> bool:
        """Whether a login form's token is the configured one."""
        return self._token is not None and hmac.compare_digest(
            token.strip().encode(), self._token.encode()
        )

    def session(self, now: float | None = None) -> str:
        """A fresh session cookie value: its expiry and that expiry signed with the token."""
        expiry = str(int((time.time() if now is None else now) + self.session_s))
        return f"{expiry}.{self._sign(expiry)}"
